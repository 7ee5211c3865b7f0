"""Stage 4, resolve: every module to its declared scheme, with the rule that decided.

Takes a declaration and the modules; gives a ``Membership`` per module (bucket, how, rule)
and the resolution findings (fused shards declared apart, substring-only excludes, ...).
"""

from .formats import resolve

__all__ = ["resolve"]
