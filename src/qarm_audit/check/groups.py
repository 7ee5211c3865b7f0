"""A layer whose input is no multiple of its scheme's group.

The producers write the last group partial, as a whole one; the engines' layers take whole
groups only, and raise or allocate ``in // group`` groups (one fewer than shipped). What each
engine does is in its profile (``load_errors`` of code ``operand-shape`` whose message holds
:data:`PARTIAL_GROUP`), per release.
"""

from __future__ import annotations

from ..declarations import Scheme
from ..findings import Finding, finding

PARTIAL_GROUP = "the producer writes the last group partial, as a whole one"


def partial_group(module: str, inner: int, scheme: Scheme, tensor: str) -> Finding | None:
    """``operand-shape`` for ``module`` when ``inner`` (its input size) is no multiple of the
    scheme's group, else None."""
    group = scheme.group_size
    if not group or group < 0 or inner % group == 0:
        return None
    return finding(
        "operand-shape",
        f"{module} has in={inner}, not a multiple of {scheme.name}'s group of {group}: "
        f"{PARTIAL_GROUP}",
        module=module,
        tensor=tensor,
    )
