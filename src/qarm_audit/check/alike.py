"""Modules alike but for their names, grouped once after the cross-check.

A MoE ships hundreds of thousands of modules that differ only by their names (every expert
projection of a layer: the same operands, dtypes and shapes, resolved the same way). The arm
line, the buckets and the notes decide once per group and count its members, instead of
deciding again per module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..modules.inventory import ModuleInfo, layout_of
from ..resolve.resolver import Membership
from .spelling import Spelling


@dataclass(slots=True)
class Alike:
    """Modules with one layout, kind, bucket and resolution path (so one shipped spelling)."""

    membership: Membership
    """The first member's; ``rule`` may differ between members, bucket and how do not."""
    members: list[ModuleInfo] = field(default_factory=list)
    spelling: Spelling | None = None
    """Set by the cross-check; None for modules that ship only KV-cache scales."""

    @property
    def example(self) -> ModuleInfo:
        return self.members[0]


def group_alike(
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    spellings: Mapping[str, Spelling] | None = None,
) -> list[Alike]:
    """Groups in the order of their first member; members in module order. ``spellings``, when
    the cross-check has run already, gives each group its spelling."""
    groups: dict[tuple[object, ...], Alike] = {}
    members = zip(modules.values(), map(memberships.__getitem__, modules), strict=True)
    for info, membership in members:
        # layout_key and the bucket and how by position, inline: once per module of a MoE
        key = (info.layout or layout_of(info.operands), info.kind, membership[0], membership[1])
        group = groups.get(key)
        if group is None:
            group = groups[key] = Alike(membership)
        group.members.append(info)
    out = list(groups.values())
    if spellings is not None:
        for group in out:
            group.spelling = spellings.get(group.example.name)
    return out
