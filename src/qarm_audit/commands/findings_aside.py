"""The producer's view and the completeness check, worked out in a forked copy of the process
while the audit resolves the modules.

Once the modules are grouped, the layer tree built and every ``re:`` entry matched, the
producer's view (each module as the library that wrote a compressed-tensors or bitsandbytes
declaration resolves it) and the completeness check depend only on what is built by then: on a
MoE of a quarter million modules the two take half a second. Where a producer's view is
modelled, a copy of the process (``sources/aside.py``) works them out on another CPU while the
process resolves the modules, groups them alike, cross-checks them and writes the rows, and
the process takes what the copy sent where it wants it. The completeness check alone, a sixth
of a second, does not repay what the copy costs the process (each page the two share is copied
on its first write). Nothing the process does meanwhile changes a module. Nothing reported
depends on the copy: it sends what the same work gives here (the report sorts every finding),
and what it has not sent (it could not be made, died, its work raised, or, past the first
part, it has not got there yet) the process works out itself, meeting any error the work
raises.

The producer's view is sent as the few memberships it holds and each module's place among
them, in module order: a quarter million memberships take longer to pickle and unpickle than
the comparison with the engine's view that needs them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, NamedTuple, cast

from ..check.completeness import completeness_refusals
from ..declarations import Declaration
from ..findings import Finding
from ..layers import ModelConfig
from ..modules.inventory import ModuleInfo
from ..resolve.producer import producer_cannot_compile, producer_modelled, producer_view
from ..resolve.resolver import Membership
from ..sources.aside import Aside

ASIDE_MIN_MODULES = 25_000
"""Fewer modules are worked out in less time than a copy takes to start, and than the pages
the process then writes cost it (each one the copy shares is copied on the first write)."""


class ProducerView(NamedTuple):
    """What the producer's library makes of the declaration."""

    unreadable: Finding | None
    """Where it cannot have applied the declaration as written (so no view exists)."""
    memberships: tuple[tuple[Membership, ...], array[int]] | None
    """The distinct memberships, and each module's place among them, in module order; None
    where no producer view is modelled (or it is unreadable)."""

    def per_module(self) -> list[Membership] | None:
        """Each module's membership, in module order."""
        if self.memberships is None:
            return None
        distinct, places = self.memberships
        return list(map(distinct.__getitem__, places))


def producer_part(
    declaration: Declaration, modules: Mapping[str, ModuleInfo], engine_label: str
) -> ProducerView:
    unreadable = producer_cannot_compile(declaration, engine_label)
    if unreadable is not None:
        return ProducerView(unreadable, None)
    view = producer_view(declaration, modules)
    if view is None:
        return ProducerView(None, None)
    if list(view) != list(modules):  # the places are read in module order
        raise AssertionError("the producer's view is not in module order")
    return ProducerView(None, _places(view.values()))


def _places(memberships: Iterable[Membership]) -> tuple[tuple[Membership, ...], array[int]]:
    every = list(memberships)
    distinct = tuple(dict.fromkeys(every))
    place = {membership: number for number, membership in enumerate(distinct)}
    return distinct, array("L", map(place.__getitem__, every))


class FindingsAside:
    """Started once the names are matched, before the resolver runs; :meth:`take` where the
    audit wants what it worked out; :meth:`close` when the audit ends. ``complete``: the
    completeness check is worked out here already (while another copy matched the names)."""

    def __init__(
        self,
        declaration: Declaration,
        modules: Mapping[str, ModuleInfo],
        model_config: ModelConfig,
        engine_label: str,
        *,
        complete: bool = False,
    ) -> None:
        parts: list[Callable[[], Any]] = [
            partial(producer_part, declaration, modules, engine_label)
        ]
        if not complete:
            parts.append(partial(completeness_refusals, modules, model_config))
        self._parts = parts
        # without a producer's view the completeness check alone does not repay the copy's tax
        viewed = producer_modelled(declaration)
        self._aside: Aside[Any] | None = (
            Aside(lambda: (part() for part in parts))
            if viewed and len(modules) >= ASIDE_MIN_MODULES
            else None
        )

    def take(self) -> tuple[ProducerView, list[Finding]]:
        """The producer's view, and the completeness check's findings (none where it was
        worked out here already). The first part as the copy sends it (waited for); a later
        part as sent where the copy has sent it by now, else worked out here and the copy
        stopped: the process does not wait for what it works out sooner itself."""
        got: list[Any] = []
        for place, part in enumerate(self._parts):
            aside = self._aside
            value = aside.next() if aside is not None and (place == 0 or aside.ready()) else None
            if value is None:
                self.close()
                value = part()
            got.append(value)
        self.close()
        completeness: list[Finding] = got[1] if len(got) > 1 else []
        return cast(ProducerView, got[0]), completeness

    def close(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None
