"""Resolve every module to its declared scheme, and record the rule that decided.

Pure: module names in, memberships out. The semantics are the engines' (vLLM's, where the
engines differ): ModelOpt excludes in three stages (exact with fused shards, raw substring,
whole-name wildcard), MIXED_PRECISION lookup strategies in a fixed order, compressed-tensors
``re:`` targets with start-anchored ``re.match``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import NamedTuple, TypeAlias, cast

from ..declarations import Declaration, ModelOptRules, Scheme
from ..findings import Finding, finding
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo, engine_layers
from .matchers import SubstringSet, WildcardSet


class Membership(NamedTuple):
    """How one module was resolved. A tuple: a MoE resolves hundreds of thousands of these."""

    bucket: str
    """A scheme name, or ``excluded`` / ``unlisted``."""
    how: str
    """exact, fused, prefix, experts, regex, class, substring, wildcard, component (a
    bitsandbytes skip entry equal to one part of the name), dynamic (a GPTQ ``dynamic``
    pattern), not-listed (a GPTQ layer ``modules_in_block_to_quantize`` does not name), none;
    or, where the
    engine's layer takes no quant method whatever the declaration says, no-quant-config (a
    layer built without one, such as a router) or not-a-linear (a norm, a convolution)."""
    rule: str = ""
    """The entry, pattern or target that decided."""

    @property
    def declared_quantized(self) -> bool:
        return self.bucket not in (EXCLUDED, UNLISTED)


bucket_of = itemgetter(0)
"""A :class:`Membership`'s bucket, taken by place: some passes read a MoE's quarter million."""


INFERRED_CLASS = {
    "linear": "linear",
    "fused": "linear",
    "router": "linear",
    "experts": "linear",
    "embedding": "vocabparallelembedding",
}
"""The engine class a module kind stands for where the layer tree names none; vLLM matches
class targets as a case-insensitive substring of the class (``Linear`` in
``QKVParallelLinear``, not in ``ParallelLMHead``)."""


def engine_class(info: ModuleInfo) -> str | None:
    """The lower-cased class a class target is tested against, or None for no class."""
    if info.layer_kind == "other":
        # a container (LlamaAttention) or another class the engine never asks for a quant
        # method: vLLM tests class targets on its Linear and MoE layers only
        return None
    if info.layer_kind == "experts":
        # vLLM adds the MoE layer to what a Linear target names (get_moe_method)
        return "linear"
    if info.layer_class:
        return info.layer_class.lower()
    return INFERRED_CLASS.get(info.layer_kind or info.kind)


EXCLUDED = "excluded"
UNLISTED = "unlisted"
UNLISTED_MEMBERSHIP = Membership(UNLISTED, "none")
"""A module no declaration entry names: shared, since most unlisted modules are alike."""
NOT_QUANTIZABLE = frozenset({"norm", "conv", "transform"})
"""Layer kinds no quant method applies to in the engines (only Linear and MoE layers)."""


def declared_scheme(declaration: Declaration, membership: Membership | None) -> Scheme | None:
    """The scheme a module is declared quantized with, else None (unlisted, excluded)."""
    if membership is None or not membership.declared_quantized:
        return None
    return declaration.schemes.get(membership.bucket)


def layer_override(info: ModuleInfo) -> Membership | None:
    """The engine builds this layer with no quant method, whatever the declaration says."""
    if info.layer_kind in NOT_QUANTIZABLE:
        return Membership(UNLISTED, "not-a-linear", info.layer_class or info.layer_kind)
    if not info.quant_config:
        return Membership(UNLISTED, "no-quant-config", info.layer_class or info.layer_kind)
    return None


INHERITED = frozenset({"prefix", "experts-parent"})
"""Memberships a container inherits from its listed children: a declaration-level bucket,
not a layer the engine builds with a quant method (the seed's ``linear_attn`` containers)."""


Overrides: TypeAlias = dict[tuple[str, bool, str], Membership | None]
"""A layer's override per (layer kind, quant config, class): :func:`engine_membership`'s memo."""


def engine_membership(
    membership: Membership,
    info: ModuleInfo,
    overrides: Overrides | None = None,
) -> Membership:
    """The membership the engine acts on: ``membership`` unless the engine builds the layer
    with no quant method (:func:`layer_override`). ``overrides``: the override per (layer
    kind, quant config, class), for a layer's many members (it depends on nothing else)."""
    if membership.bucket in (EXCLUDED, UNLISTED) or membership.how in INHERITED:
        return membership
    if overrides is None:
        return layer_override(info) or membership
    key = (info.layer_kind, info.quant_config, info.layer_class)
    if key not in overrides:
        overrides[key] = layer_override(info)
    return overrides[key] or membership


_NAME, _RULE = attrgetter("name"), attrgetter("rule")
_ENGINE_NAME, _FIRST = attrgetter("engine_name"), itemgetter(0)
_OVERRIDE_KEY = attrgetter("layer_kind", "quant_config", "layer_class")
"""What :func:`layer_override` depends on."""


def is_fused_layer(members: list[ModuleInfo]) -> bool:
    """Whether an engine layer's members are the shards of one fused layer (``qkv_proj``)."""
    return len(members) > 1 and bool(members[0].fused_shards)


@dataclass
class Resolution:
    memberships: dict[str, Membership] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    """Declared entries (MIXED keys, exact CT targets) that name no shipped module."""


def resolve_modelopt(
    rules: ModelOptRules, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """``tree`` is the layer tree the modules were annotated with (None: the generic one)."""
    return _ModelOpt(rules, modules, tree is None or tree.has_mapper, tree).run()


def experts_disagree(
    engine_name: str, members: list[ModuleInfo], memberships: Mapping[str, Membership]
) -> Finding | None:
    """One scheme per MoE layer: the engine decides the whole experts layer once."""
    if not engine_name.endswith(".experts") or len(members) < 2:
        return None
    if len(set(map(bucket_of, map(memberships.__getitem__, map(_NAME, members))))) < 2:
        return None
    buckets: dict[str, list[str]] = {}
    for m in members:
        buckets.setdefault(memberships[m.name].bucket, []).append(m.name)
    if len(buckets) < 2:
        return None
    first = memberships[members[0].name].bucket
    detail = ", ".join(f"{b} on {len(names)} (e.g. {names[0]})" for b, names in buckets.items())
    return finding(
        "experts-disagree",
        f"{engine_name} is one engine layer, decided once from its first expert ({first}), but "
        f"its experts are declared {detail}",
        module=engine_name,
    )


def experts_disagreements(
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    decisions: Sequence[int],
    decided: Mapping[int, Membership],
) -> list[Finding]:
    """:func:`experts_disagree` of every experts layer, looked at only where its modules'
    buckets differ. ``decisions`` numbers each module's decision, in module order, and
    ``decided`` is each number's membership: what ``memberships`` holds for every module of
    an experts layer (a fused layer, decided again, is never one). A MoE's quarter million
    experts make a few distinct (layer, decision) pairs, found for all layers at once in C."""
    infos = modules.values()
    pairs = dict.fromkeys(zip(map(_ENGINE_NAME, infos), decisions, strict=True))
    # the experts layers of several decisions, in the order of their first module
    buckets: dict[str, set[str]] = {
        layer: set()
        for layer, count in Counter(map(_FIRST, pairs)).items()
        if count > 1 and layer.endswith(".experts")
    }
    if not buckets:
        return []
    for layer, number in pairs:
        held = buckets.get(layer)
        if held is not None:
            held.add(decided[number].bucket)
    mixed: dict[str, list[ModuleInfo]] = {
        layer: [] for layer, held in buckets.items() if len(held) > 1
    }
    if mixed:  # each mixed layer's experts, in one pass over them
        for info in infos:
            if info.engine_name in mixed:
                mixed[info.engine_name].append(info)
    found = (experts_disagree(layer, members, memberships) for layer, members in mixed.items())
    return [f for f in found if f is not None]


def _language_model_aliases(name: str) -> list[str]:
    """vLLM tries ``language_model.model.`` and ``model.language_model.`` for each other."""
    out = [name]
    if name.endswith(".lm_head") or name == "lm_head":
        out.append("lm_head")
    if "language_model." not in name:
        return out
    for a, b in (
        ("language_model.model.", "model.language_model."),
        ("model.language_model.", "language_model.model."),
    ):
        if name.startswith(a):
            out.append(b + name[len(a) :])
    return out


class _Excludes:
    """ModelOpt ``exclude_modules`` / ``ignore`` as vLLM applies them to the engine's name."""

    def __init__(self, entries: tuple[str, ...], split_star: bool = True) -> None:
        expanded: list[str] = []
        self.origin: dict[str, str] = {}
        """Expanded entry -> the entry as written, so provenance quotes the declaration."""
        self.everything = "" in entries
        """vLLM's substring stage finds the empty entry inside every name."""
        for entry in entries:
            # vLLM's mapper splits "X*" (no dot before the star) into "X" and "X.*"; only
            # model classes that have a mapper run it
            if split_star and entry.endswith("*") and not entry.endswith(".*") and len(entry) > 1:
                for part in (entry[:-1], entry[:-1] + ".*"):
                    expanded.append(part)
                    self.origin.setdefault(part, entry)
            expanded.append(entry)
            self.origin[entry] = entry
        self.entries = entries
        self.exact = set(expanded)
        self.experts = [e for e in expanded if "experts" in e]
        self.substring = SubstringSet(expanded)
        self.wildcard = WildcardSet([e for e in entries if any(c in e for c in "*?[")])

    def check(self, engine_name: str, shards: tuple[str, ...]) -> tuple[str, str] | None:
        """``(how, entry)`` when excluded; raises nothing: shard disagreement is the caller's."""
        if engine_name in self.exact:
            written = self.origin[engine_name]
            return ("exact" if written == engine_name else "wildcard"), written
        if ".experts" in engine_name:
            for entry in self.experts:
                if engine_name in entry:
                    return "exact", entry
        wildcard = self.wildcard.first(engine_name)
        if wildcard is not None:
            return "wildcard", wildcard
        # vLLM also tries the name without "language_model."; an entry inside that suffix is
        # inside the whole name too, so one pass decides both.
        substring = self.substring.first(engine_name)
        if substring is not None:
            return "substring", self.origin.get(substring, substring)
        if self.everything:
            return "substring", ""
        return None


class _ModelOpt:
    def __init__(
        self,
        rules: ModelOptRules,
        modules: Mapping[str, ModuleInfo],
        split_star: bool = True,
        tree: LayerTree | None = None,
    ) -> None:
        self.rules = rules
        self.modules = modules
        self.path = tree.engine_path if tree is not None and tree.rename else None
        """The engine's name for a checkpoint layer: an exclude written in the engine's own
        naming (``language_model.lm_head`` for a checkpoint's ``lm_head``) names it there."""
        self.excludes = _Excludes(rules.excludes, split_star)
        self.layers = rules.layers
        self.out = Resolution()
        self.key_path = None
        """``path`` where a ``quantized_layers`` key may be in the engine's naming: where some
        key names no checkpoint module or layer (vLLM maps any other key to the engine name
        of the module it names, so only such a key can name a layer by its engine name)."""
        if self.layers is not None:
            rest = [k for k in self.layers if k not in modules] if self.path else []
            if rest and not {info.engine_name for info in modules.values()}.issuperset(rest):
                self.key_path = self.path

    def run(self) -> Resolution:
        groups = engine_layers(self.modules)
        for engine_name, members in groups.items():
            self._resolve_group(engine_name, members)
        if self.layers is not None:
            # the keys naming no module found in C first (usually none): only those can be
            # left once the rules the memberships used are taken out, in map order
            left = self.layers.keys() - self.modules.keys()
            if left:
                left -= set(map(_RULE, self.out.memberships.values()))
                left -= groups.keys()
            unmatched = [k for k in self.layers if k in left] if left else []
            if unmatched and self.path is not None:
                # a key in the engine's own naming names the module it is the engine name of
                path = self.path
                engine = {path(name) for name in self.modules} | {path(g) for g in groups}
                unmatched = [k for k in unmatched if k not in engine]
            self.out.unmatched = unmatched
        return self.out

    def _resolve_group(self, engine_name: str, members: list[ModuleInfo]) -> None:
        excluded = self._excluded(engine_name, members)
        once = None
        # each member's name and its own key's algorithm, looked up once for both steps
        names: list[str] = []
        direct: list[str | None] = []
        if excluded is None and self.layers is not None and len(members) > 1:
            names = list(map(_NAME, members))
            direct = list(map(self.layers.get, names))
            once = self._mixed_layer(engine_name, names, direct)
        memberships = self.out.memberships
        if excluded is not None:
            memberships.update(dict.fromkeys([m.name for m in members], excluded))
        elif once is not None:
            if not self._all_listed_alike(once, members, names, direct):
                self._members_of_layer(once, engine_name, members)
        else:
            for info in members:
                chosen = (
                    self._single(info) if self.layers is None else self._mixed(info, engine_name)
                )
                memberships[info.name] = engine_membership(chosen, info)
        self._after_group(engine_name, members, excluded)

    def _members_of_layer(
        self, once: Membership, engine_name: str, members: list[ModuleInfo]
    ) -> None:
        """The members of a layer decided ``once`` for all of them: a module listed by its own
        name, for the layer's algorithm, keeps that provenance."""
        listed = cast("dict[str, str]", self.layers).get
        memberships = self.out.memberships
        overrides: Overrides = {}
        for info in members:
            name = info.name
            algo = listed(name)
            own = Membership(algo, "exact", name) if algo is not None else None
            if own is None:
                own = self._mixed(info, engine_name)
            agrees = own.how == "exact" and own.bucket == once.bucket
            memberships[name] = engine_membership(own if agrees else once, info, overrides)

    def _all_listed_alike(
        self,
        once: Membership,
        members: list[ModuleInfo],
        names: list[str],
        direct: list[str | None],
    ) -> bool:
        """What :meth:`_members_of_layer` decides, built in C, for a layer whose members are
        all listed by their own names (``names``, listed for ``direct``) for the layer's
        algorithm and built alike by the engine (a MoE layer's thousand experts, the common
        case): each keeps its exact membership, or all take the engine's override. False,
        having done nothing, for any other layer."""
        if once.bucket in (EXCLUDED, UNLISTED):
            return False
        if set(direct) != {once.bucket}:
            return False
        kinds = set(map(_OVERRIDE_KEY, members))
        if len(kinds) != 1:
            return False
        override = layer_override(members[0])
        memberships = self.out.memberships
        if override is not None:
            memberships.update(dict.fromkeys(names, override))
        else:
            fields = zip(repeat(once.bucket), repeat("exact"), names)
            built = map(tuple.__new__, repeat(Membership), fields)
            memberships.update(zip(names, built, strict=True))
        return True

    def _after_group(
        self, engine_name: str, members: list[ModuleInfo], excluded: Membership | None
    ) -> None:
        """The findings of one layer, once every member has its membership."""
        mixed = experts_disagree(engine_name, members, self.out.memberships)
        if mixed is not None:
            self.out.findings.append(mixed)
        if excluded is None and is_fused_layer(members):
            buckets = {self.out.memberships[m.name].bucket for m in members}
            if len(buckets) > 1:
                detail = ", ".join(
                    f"{m.leaf}={self.out.memberships[m.name].bucket}" for m in members
                )
                self.out.findings.append(
                    finding(
                        "fused-shards-disagree",
                        f"{engine_name} is loaded from {len(members)} shards declared {detail}; "
                        "engines require one precision per fused module",
                        module=engine_name,
                    )
                )

    def _excluded(self, engine_name: str, members: list[ModuleInfo]) -> Membership | None:
        if not self.rules.excludes:
            return None
        hit = self.excludes.check(engine_name, ())
        engine = self.path(engine_name) if self.path else engine_name
        if (hit is None or hit[0] == "substring") and engine != engine_name:
            # vLLM tests its own layer name, against entries mapped as the names are: an entry
            # in either naming names the layer
            hit = self.excludes.check(engine, ()) or hit
        if hit is None and is_fused_layer(members):
            exact = self.excludes.exact
            listed = [
                m
                for m in members
                if m.name in exact or (self.path is not None and self.path(m.name) in exact)
            ]
            if listed and len(listed) == len(members):
                hit = ("exact", listed[0].name)
            elif listed:
                self.out.findings.append(
                    finding(
                        "fused-shards-disagree",
                        f"{engine_name}: shards {[m.leaf for m in listed]} are excluded and "
                        f"{[m.leaf for m in members if m not in listed]} are not",
                        module=engine_name,
                    )
                )
        if hit is None:
            return None
        how, entry = hit
        if how == "substring":
            self.out.findings.append(
                finding(
                    "substring-exclude",
                    f"{engine_name} is excluded only because {entry!r} occurs inside its name "
                    "(vLLM's raw-substring stage); no exact or wildcard entry covers it"
                    if entry
                    else f"{engine_name} is excluded only because the exclude list holds an "
                    "empty entry, which vLLM's raw-substring stage finds inside every name",
                    module=engine_name,
                )
            )
        return Membership(EXCLUDED, how, entry)

    def _single(self, info: ModuleInfo) -> Membership:
        if info.kind == "linear" and self.rules.default_scheme is not None:
            return Membership(self.rules.default_scheme.name, "class", "Linear")
        return UNLISTED_MEMBERSHIP

    def _mixed_layer(
        self, engine_name: str, names: list[str], direct: list[str | None]
    ) -> Membership | None:
        """vLLM's one MIXED_PRECISION lookup for a layer it builds from several checkpoint
        modules (``names``, each listed for ``direct`` by its own name, or None; a fused
        linear, an experts layer), by the layer's own name: the name itself,
        then the modules listed by their own names (one algorithm among them decides for all,
        unlisted ones included), then the first key under the layer's name or, for experts, its
        parent's. None: decide module by module, which names a disagreement (two algorithms
        listed: vLLM raises for a fused layer and misloads an experts layer)."""
        layers = self.layers
        assert layers is not None
        how = "experts" if engine_name.endswith(".experts") else "fused"
        for candidate in self._names(engine_name):
            if candidate in layers:
                return Membership(layers[candidate], how, candidate)
        if None not in direct:  # the common case: every expert or shard listed by its name
            listed, algos = names, set(cast("list[str]", direct))
        else:
            listed = [
                key
                for key in (
                    next((k for k in self._names(name) if k in layers), None) for name in names
                )
                if key is not None
            ]
            algos = {layers[key] for key in listed}
        if len(algos) > 1:
            return None
        if algos:
            return Membership(algos.pop(), how, listed[0])
        if how == "experts":
            for candidate in self._names(engine_name):
                key = self._first_child(candidate)
                if key is not None:
                    return Membership(layers[key], "experts", key)
            # vLLM's last resort for an experts layer: the first key under its parent
            for parent in self._own_names(engine_name[: -len(".experts")]):
                key = self._first_child(parent)
                if key is not None:
                    return Membership(layers[key], "experts-parent", key)
        return None

    def _mixed(self, info: ModuleInfo, engine_name: str) -> Membership:
        layers = self.layers
        assert layers is not None
        listed = layers.get(info.name)  # the common case, before any alias is built
        if listed is not None:
            return Membership(listed, "exact", info.name)
        names = self._names(info.name)
        for candidate in names:
            if candidate in layers:
                return Membership(layers[candidate], "exact", candidate)
        if engine_name != info.name:
            for candidate in self._names(engine_name):
                if candidate in layers:
                    how = "experts" if engine_name.endswith(".experts") else "fused"
                    return Membership(layers[candidate], how, candidate)
        for candidate in names:
            key = self._first_child(candidate)
            if key is not None:
                return Membership(layers[key], "prefix", key)
        if engine_name.endswith(".experts"):
            for parent in self._own_names(engine_name[: -len(".experts")]):
                key = self._first_child(parent)
                if key is not None:
                    return Membership(layers[key], "experts-parent", key)
        return UNLISTED_MEMBERSHIP

    def _own_names(self, name: str) -> list[str]:
        """A layer's checkpoint name and, where the model renames it, the engine's own."""
        engine = self.key_path(name) if self.key_path is not None else name
        return [name] if engine == name else [name, engine]

    def _names(self, name: str) -> list[str]:
        """The names a ``quantized_layers`` key may give a layer: as the checkpoint names it
        (the producer's naming) and, where the model renames it, as the engine does (a key
        written after the model's mapper: vLLM maps the keys and its layer names alike), each
        with vLLM's ``language_model`` and ``lm_head`` aliases."""
        out = _language_model_aliases(name)
        if self.key_path is not None:
            engine = self.key_path(name)
            if engine != name:
                out += _language_model_aliases(engine)
        return out

    @cached_property
    def order(self) -> dict[str, int]:
        """Each ``quantized_layers`` key's place in the map, built at the first prefix lookup."""
        return {key: i for i, key in enumerate(cast("dict[str, str]", self.layers))}

    @cached_property
    def sorted_keys(self) -> list[str]:
        return sorted(cast("dict[str, str]", self.layers))

    def _first_child(self, name: str) -> str | None:
        """vLLM's strategy 3: the first key, in map order, under ``name + '.'``."""
        prefix = name + "."
        lo = bisect.bisect_left(self.sorted_keys, prefix)
        hi = bisect.bisect_left(self.sorted_keys, prefix[:-1] + "/")  # "/" sorts right after "."
        if lo >= hi:
            return None
        children = self.sorted_keys[lo:hi]
        first = min(children, key=self.order.__getitem__)
        assert self.layers is not None
        algos = sorted({self.layers[k] for k in children})
        if len(algos) > 1:
            self.out.findings.append(
                finding(
                    "prefix-children-disagree",
                    f"{name} takes {self.layers[first]} from its first listed child {first}, but "
                    f"its listed children declare {algos}",
                    module=name,
                )
            )
        return first
