"""compressed-tensors ``config_groups`` / ``ignore`` membership, as vLLM's
``CompressedTensorsConfig`` decides it on its own layer tree: ``ignore`` first (exact names, then
``re:`` patterns), then ``targets`` (the exact name or the first ``re:`` target in declaration
order, whichever comes first; else a class target), one decision for a fused layer's shards,
and the engine's override for a layer it builds without a quant method."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import count
from operator import attrgetter
from typing import Any

from ..declarations import CompressedTensorsRules
from ..findings import finding
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo, engine_layers
from .matchers import FirstMatch
from .regex_module import regex_module_form
from .resolver import (
    EXCLUDED,
    UNLISTED_MEMBERSHIP,
    Membership,
    Overrides,
    Resolution,
    engine_class,
    engine_membership,
    experts_disagree,
    experts_disagreements,
    is_fused_layer,
)

_DECISION_KEY = attrgetter("layer_kind", "quant_config", "layer_class", "kind")
"""What a decision depends on beyond the name: the engine's override (``layer_override``) and
the class a class target is tested against (:func:`engine_class`)."""


def resolve_compressed_tensors(
    rules: CompressedTensorsRules,
    modules: Mapping[str, ModuleInfo],
    tree: LayerTree | None = None,
) -> Resolution:
    return CompressedTensorsResolver(rules, modules, tree).run()


def engine_regex(
    rules: CompressedTensorsRules, pattern_module: str = "re"
) -> tuple[list[str], list[str]]:
    """The ``ignore`` and ``targets`` ``re:`` entries, in declaration order, as the engine
    compiles them: vLLM compiles them with the ``regex`` module from some release on, and
    reads them as that module does (:func:`regex_module_form`)."""
    form: Callable[[str], str] = regex_module_form if pattern_module == "regex" else str
    return (
        [form(i[3:]) for i in rules.ignore if i.startswith("re:")],
        [form(t[3:]) for t in rules.targets if t.startswith("re:")],
    )


def _fused_layers(modules: Mapping[str, ModuleInfo]) -> dict[str, ModuleInfo]:
    """The modules of every engine layer that a fused module's engine name names (the fused
    shards, and any module of that very name), in inventory order."""
    fused = {info.engine_name for info in modules.values() if info.fused_shards}
    return {name: info for name, info in modules.items() if info.engine_name in fused}


class CompressedTensorsResolver:
    """vLLM's ``CompressedTensorsConfig``: each engine layer's ``ignore`` and ``targets``."""

    def __init__(
        self,
        rules: CompressedTensorsRules,
        modules: Mapping[str, ModuleInfo],
        tree: LayerTree | None = None,
    ) -> None:
        self.rules = rules
        self.modules = modules
        self.out = Resolution()
        self.path = tree.engine_path if tree is not None and tree.rename else None
        """The engine's name for a checkpoint layer: vLLM tests ``re:`` entries on its own
        layer names, and exact entries after mapping them the same way."""
        ignore_names = [i for i in rules.ignore if not i.startswith("re:")]
        self.ignore_exact = set(ignore_names)
        self.ignore_regex_src = [i[3:] for i in rules.ignore if i.startswith("re:")]
        ignore_regex, target_regex = engine_regex(rules, tree.pattern_module if tree else "re")
        self.ignore_regex = FirstMatch(ignore_regex, "ignore")
        targets = list(rules.targets)
        self.target_exact = {t: i for i, t in enumerate(targets) if not t.startswith("re:")}
        self.regex_targets = [(i, t) for i, t in enumerate(targets) if t.startswith("re:")]
        self.target_regex = FirstMatch(target_regex, "targets")
        self.targets = targets
        self.made: dict[tuple[int, str], Membership] = {}
        """One membership per target and way it matched (a MoE's experts share one)."""
        self.ignored_by: dict[int, Membership] = {}
        """One membership per ignore pattern."""

    def run(self) -> Resolution:
        at_once = self._at_once()
        if at_once is None:
            self._one_by_one()
        else:
            # every module's own decision; then each fused layer's one decision for its shards
            self.out.memberships, decisions, decided = at_once
            for engine_name, members in engine_layers(_fused_layers(self.modules)).items():
                if is_fused_layer(members):
                    self._fused(engine_name, members)
            self.out.findings.extend(
                experts_disagreements(self.modules, self.out.memberships, decisions, decided)
            )
        self.out.unmatched = [t for t in self.target_exact if "." in t and t not in self.modules]
        return self.out

    def _one_by_one(self) -> None:
        """Each engine layer in turn, each module in turn, as the engine meets them."""
        memberships = self.out.memberships
        for engine_name, members in engine_layers(self.modules).items():
            if is_fused_layer(members):
                self._fused(engine_name, members)
            else:
                overrides: Overrides = {}
                for info in members:
                    own = self._ignored(info.name) or self._target(info)
                    memberships[info.name] = engine_membership(own, info, overrides)
            mixed = experts_disagree(engine_name, members, memberships)
            if mixed is not None:
                self.out.findings.append(mixed)

    def _fused(self, engine_name: str, members: list[ModuleInfo]) -> None:
        """vLLM's one decision for a fused layer: ignore by the fused name or by every shard
        (some shards only: it raises); then a target naming the fused layer, else a target
        for every shard (the first shard's decides), else the layer's class."""
        own = {m.name: self._ignored(m.name) or self._target(m) for m in members}
        ignored = self._ignored(engine_name)
        shards_ignored = [own[m.name].bucket == EXCLUDED for m in members]
        if ignored is None and all(shards_ignored):
            ignored = own[members[0].name]
        if ignored is not None:
            for info in members:
                self.out.memberships[info.name] = ignored
            return
        if any(shards_ignored):
            decided = own  # vLLM refuses the layer: "Found different quantization schemes"
        else:
            named = self.target_of_name(engine_name)
            if named is not None:
                # the declaration names the engine's layer itself: one answer, no disagreement
                own = dict.fromkeys(own, named)
            whole = (
                named
                or self._shards_target(members)
                or self._class_target(members[0])
                or UNLISTED_MEMBERSHIP
            )
            decided = dict.fromkeys(own, whole)
        for info in members:
            self.out.memberships[info.name] = engine_membership(decided[info.name], info)
        if len({m.bucket for m in own.values()}) > 1:
            detail = ", ".join(f"{m.leaf}={own[m.name].bucket}" for m in members)
            engine = self.out.memberships[members[0].name]
            outcome = (
                "vLLM refuses a layer whose shards are ignored unevenly"
                if any(shards_ignored)
                else f"vLLM builds one layer and resolves every shard {engine.bucket} "
                f"({engine.how}{' ' + repr(engine.rule) if engine.rule else ''})"
            )
            self.out.findings.append(
                finding(
                    "fused-shards-disagree",
                    f"{engine_name} is loaded from shards declared {detail}; {outcome}",
                    module=engine_name,
                )
            )

    def _shards_target(self, members: list[ModuleInfo]) -> Membership | None:
        """Every shard's name matches a target: the first shard's target decides."""
        firsts = [self.target_of_name(m.name) for m in members]
        if any(f is None for f in firsts):
            return None
        first = firsts[0]
        assert first is not None
        return Membership(first.bucket, "fused", first.rule)

    def _class_target(self, info: ModuleInfo) -> Membership | None:
        cls = engine_class(info)
        if cls is None:
            return None
        for target in self.targets:
            if not target.startswith("re:") and "." not in target and target.lower() in cls:
                return Membership(self.rules.targets[target], "class", target)
        return None

    def _at_once(self) -> tuple[dict[str, Membership], list[int], dict[int, Membership]] | None:
        """Each module's own decision (:meth:`_ignored`, else :meth:`_target`, then the
        engine's override), made once per distinct combination of what decides it: the
        ignore and target each name matches first, exact entries naming it, and its layer's
        kind and class. Returned with each module's decision by number, in module order, and
        each number's membership. None where some name meets a refusing pattern: then module by
        module, which raises the refusal the engine's order meets first."""
        names = list(self.modules)
        infos = list(self.modules.values())
        engines = list(map(self.path, names)) if self.path else names
        ignored = self.ignore_regex.firsts(engines)
        targeted = self.target_regex.firsts(engines) if ignored is not None else None
        if ignored is None or targeted is None:
            return None
        exact = self.ignore_exact
        exact_ignore = (
            [
                n if n in exact else e if e in exact else None
                for n, e in zip(names, engines, strict=True)
            ]
            if exact
            else [None] * len(names)
        )
        get = self.target_exact.get
        exact_target = (
            list(map(get, names, map(get, engines))) if self.target_exact else [None] * len(names)
        )
        kinds = map(_DECISION_KEY, infos)
        keys = zip(exact_ignore, ignored, exact_target, targeted, kinds, strict=True)
        # each distinct key hashed once: numbered by its first module, then looked up by number
        numbered: dict[tuple[Any, ...], int] = {}
        numbers = list(map(numbered.setdefault, keys, count()))
        example = dict(zip(numbers, infos, strict=True))  # a module of each key's kind
        made: dict[int, Membership] = {}
        for (rule, i, exact_index, j, _), number in numbered.items():
            info = example[number]
            own = (
                Membership(EXCLUDED, "exact", rule)
                if rule is not None
                else self._ignored_by(i)
                if i is not None
                else self._target_of(exact_index, j, info)
            )
            made[number] = engine_membership(own, info)
        return dict(zip(names, map(made.__getitem__, numbers), strict=True)), numbers, made

    def _ignored(self, name: str) -> Membership | None:
        engine = self.path(name) if self.path else name
        if name in self.ignore_exact or engine in self.ignore_exact:
            return Membership(EXCLUDED, "exact", name if name in self.ignore_exact else engine)
        i = self.ignore_regex.first(engine)
        return self._ignored_by(i) if i is not None else None

    def _ignored_by(self, i: int) -> Membership:
        """The membership of a module ignore pattern ``i`` matches first."""
        found = self.ignored_by.get(i)
        if found is None:
            rule = "re:" + self.ignore_regex_src[i]
            found = self.ignored_by[i] = Membership(EXCLUDED, "regex", rule)
        return found

    def target_of_name(self, name: str) -> Membership | None:
        """A target naming ``name`` exactly or by ``re:``, as the fused layer's own name."""
        engine = self.path(name) if self.path else name
        exact = self.target_exact.get(name, self.target_exact.get(engine))
        best = self._first_target(exact, self.target_regex.first(engine))
        if best is None:
            return None
        target = self.targets[best[0]]
        return Membership(self.rules.targets[target], "fused", target)

    def _target(self, info: ModuleInfo) -> Membership:
        engine = self.path(info.name) if self.path else info.name
        exact = self.target_exact.get(info.name, self.target_exact.get(engine))
        return self._target_of(exact, self.target_regex.first(engine), info)

    def _target_of(self, exact: int | None, j: int | None, info: ModuleInfo) -> Membership:
        """The target that decides: :meth:`_first_target`, else a class."""
        best = self._first_target(exact, j)
        if best is None:
            return self._class_target(info) or UNLISTED_MEMBERSHIP
        found = self.made.get(best)
        if found is None:
            target = self.targets[best[0]]
            found = self.made[best] = Membership(self.rules.targets[target], best[1], target)
        return found

    def _first_target(self, exact: int | None, j: int | None) -> tuple[int, str] | None:
        """(place among the targets, how) of the exact entry ``exact`` (its place) or the
        ``re:`` target ``j`` matches first, whichever comes first in the declaration."""
        best: tuple[int, str] | None = None
        if exact is not None:
            best = (exact, "exact")
        if j is not None and (best is None or self.regex_targets[j][0] < best[0]):
            best = (self.regex_targets[j][0], "regex")
        return best
