"""The producer's view: the same declaration resolved as the library that wrote it does.

compressed-tensors (llm-compressor's writer, and transformers' loader) assigns schemes with
``apply_quantization_config`` on the transformers module tree: checkpoint names, no fused
layers, class targets equal to a class name in the module's MRO (``Linear`` reaches
``lm_head``), class names honoured in ``ignore``, among several matching targets the exact
name first, then ``re:`` targets in sorted order, then class names; and only ``nn.Linear`` /
``nn.Embedding`` modules get a scheme. The engine view (``resolver.py``) follows vLLM on its
own layer tree. Where the two disagree on a module, the author meant one thing and the engine
will do another: :func:`disagreements` names both answers. docs/semantics.md gives sources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import ne

from ..declarations import CompressedTensorsRules, Declaration
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from .matchers import FirstMatch
from .producer_bnb import bnb_producer_view
from .producer_classes import EMBEDDING_MRO, LINEAR_MRO, producer_classes
from .resolver import EXCLUDED, UNLISTED, Membership, bucket_of


def producer_cannot_compile(declaration: Declaration, engine_label: str) -> Finding | None:
    """A ``re:`` entry compressed-tensors cannot compile, where the engine can: the producer's
    ``apply_quantization_config`` matches with Python's ``re`` and raises on it, so no
    producer view exists; vLLM compiles it with the ``regex`` module (a flag group in mid
    pattern, ``.*(?i)_PROJ$``)."""
    rules = declaration.compressed_tensors
    if rules is None:
        return None
    for entry in (*rules.targets, *rules.ignore):
        # Only a group can hold what the regex module reads and Python's re refuses; any other
        # pattern Python's re refuses, the engine view refuses by name as well.
        if not entry.startswith("re:") or "(?" not in entry:
            continue
        try:
            re.compile(entry[3:])
        except re.error as exc:
            return finding(
                "producer-engine-disagree",
                f"compressed-tensors cannot compile {entry!r} ({exc}): its "
                "apply_quantization_config raises on it, so it cannot have applied this "
                f"declaration as written; {engine_label} compiles it with the regex module, "
                "where a flag group applies from where it stands to the end of its group, "
                "and resolves every module by that reading",
            )
    return None


def producer_modelled(declaration: Declaration) -> bool:
    """Whether a producer's view is modelled for the declaration's family: bitsandbytes'
    (transformers) and compressed-tensors'. ModelOpt writes its lists from its own module
    names: the literal reading."""
    return declaration.bnb is not None or declaration.compressed_tensors is not None


def producer_view(
    declaration: Declaration, modules: Mapping[str, ModuleInfo]
) -> dict[str, Membership] | None:
    """Each module as the producer's library resolves it; None where no producer view is
    modelled (:func:`producer_modelled`), or none can be taken."""
    if declaration.bnb is not None:
        return bnb_producer_view(declaration.bnb, modules)
    rules = declaration.compressed_tensors
    if rules is None:
        return None
    view = _CompressedTensorsProducer(rules)
    return view.resolve_all(modules)


def producer_matches(
    targets: tuple[str, ...], ignore: tuple[str, ...], modules: Mapping[str, ModuleInfo]
) -> list[str]:
    """The modules compressed-tensors' matcher reaches with ``targets`` less ``ignore`` on the
    transformers tree (as for a quantization group): what a transform was applied to."""
    rules = CompressedTensorsRules(targets=dict.fromkeys(targets, _MATCHED), ignore=ignore)
    view = _CompressedTensorsProducer(rules).resolve_all(modules)
    return [name for name, membership in view.items() if membership.bucket == _MATCHED]


_MATCHED = "matched"


class _CompressedTensorsProducer:
    def __init__(self, rules: CompressedTensorsRules) -> None:
        self.rules = rules
        ordered = sorted(rules.targets, key=lambda t: (t.startswith("re:"), t))
        self.regex = [t for t in ordered if t.startswith("re:")]
        self.regex_first = FirstMatch([t[3:] for t in self.regex], "targets")
        self.ignore_names = {i for i in rules.ignore if not i.startswith("re:")}
        self.ignore_regex = [i for i in rules.ignore if i.startswith("re:")]
        self.ignore_first = FirstMatch([i[3:] for i in self.ignore_regex], "ignore")
        self.class_ignored: dict[tuple[str, ...], str | None] = {}
        self.made: dict[tuple[str, str], Membership] = {}
        """One membership per target and way it matched: a MoE's experts share one."""
        self.class_target: dict[tuple[str, ...], str | None] = {}
        """The first class, in sorted order, that the ignore list or the targets name: per set
        of classes (a checkpoint has a handful), not per module."""

    def _ignored(self, exact: str | None, i: int | None, classes: tuple[str, ...]) -> str | None:
        if exact is not None:
            return exact
        cls = self._class_ignored(classes)
        if cls is not None:
            return cls
        return self.ignore_regex[i] if i is not None else None

    def _class_ignored(self, classes: tuple[str, ...]) -> str | None:
        """The first of ``classes``, in sorted order, that the ignore list names."""
        if classes not in self.class_ignored:
            names = self.ignore_names
            self.class_ignored[classes] = next((c for c in sorted(classes) if c in names), None)
        return self.class_ignored[classes]

    def resolve_all(self, modules: Mapping[str, ModuleInfo]) -> dict[str, Membership]:
        """:meth:`resolve` of every module, decided once per distinct combination of what
        decides it (the target and ignore pattern each name matches first, exact entries
        naming it, its classes, an MTP block); module by module where a pattern refuses
        some name, which raises the refusal the producer's order meets first."""
        names = list(modules)
        targeted = self.regex_first.firsts(names)
        ignored = self.ignore_first.firsts(names) if targeted is not None else None
        if targeted is None or ignored is None:
            return {name: self.resolve(info) for name, info in modules.items()}
        none = [None] * len(names)
        # each column worked out name by name only where some name can hold it (found in C)
        mtp = (
            [n.startswith("mtp.") or ".mtp." in n for n in names]
            if any(map(str.__contains__, names, repeat("mtp.")))
            else [False] * len(names)
        )
        targets, ignores = self.rules.targets, self.ignore_names
        exact_target = (
            [n if n in targets else None for n in names]
            if not targets.keys().isdisjoint(names)
            else none
        )
        exact_ignore = (
            [n if n in ignores else None for n in names] if not ignores.isdisjoint(names) else none
        )
        classes = list(map(producer_classes, modules.values()))
        keys = list(zip(mtp, exact_target, targeted, exact_ignore, ignored, classes, strict=True))
        made = {key: self._decide(*key) for key in dict.fromkeys(keys)}
        return dict(zip(names, map(made.__getitem__, keys), strict=True))

    def resolve(self, info: ModuleInfo) -> Membership:
        """One module, each pattern asked only where compressed-tensors asks it (so a pattern
        that refuses the name is met exactly where the producer would meet it)."""
        name = info.name
        classes = producer_classes(info)
        if name.startswith("mtp.") or ".mtp." in name:
            return self._decide(True, None, None, None, None, classes)
        exact = name if name in self.rules.targets else None
        j = self.regex_first.first(name) if exact is None else None
        if self._target(exact, j, classes) is None:
            return Membership(UNLISTED, "none")
        exact_ignore = name if name in self.ignore_names else None
        i = None
        if exact_ignore is None and self._class_ignored(classes) is None:
            i = self.ignore_first.first(name)
        return self._decide(False, exact, j, exact_ignore, i, classes)

    def _decide(
        self,
        mtp: bool,
        exact_target: str | None,
        j: int | None,
        exact_ignore: str | None,
        i: int | None,
        classes: tuple[str, ...],
    ) -> Membership:
        """A module's membership from what decides it: an MTP block (never matched), the
        target naming it exactly, the ``re:`` target ``j`` it matches first, the ignore entry
        naming it exactly, the ``re:`` ignore ``i`` it matches first, its classes."""
        if mtp:
            # transformers drops MTP blocks on load: the producer never matched them
            return Membership(UNLISTED, "none")
        matched = self._target(exact_target, j, classes)
        if matched is None:
            return Membership(UNLISTED, "none")
        ignored = self._ignored(exact_ignore, i, classes)
        if ignored is not None:
            how = "regex" if ignored.startswith("re:") else "exact"
            return Membership(EXCLUDED, how, ignored)
        if classes not in (LINEAR_MRO, EMBEDDING_MRO):
            return Membership(UNLISTED, "not-a-linear", classes[0])
        found = self.made.get(matched)
        if found is None:
            target, how = matched
            found = self.made[matched] = Membership(self.rules.targets[target], how, target)
        return found

    def _target(
        self, exact: str | None, j: int | None, classes: tuple[str, ...]
    ) -> tuple[str, str] | None:
        """Name matches first (the exact name, then ``re:`` targets in sorted order, ``j``
        the first that matches), then class matches in sorted order: compressed-tensors'
        ``match_targets``."""
        if exact is not None:
            return exact, "exact"
        if j is not None:
            return self.regex[j], "regex"
        if classes not in self.class_target:
            targets = self.rules.targets
            self.class_target[classes] = next((c for c in sorted(classes) if c in targets), None)
        cls = self.class_target[classes]
        if cls is not None:
            return cls, "class"
        return None


def disagreements(
    producer: Sequence[Membership],
    engine: Mapping[str, Membership],
    modules: Mapping[str, ModuleInfo],
    producer_label: str,
    engine_label: str,
) -> list[Finding]:
    """One warning per engine layer whose modules the producer (``producer``: each module's
    membership, in module order) and the engine resolve differently (another scheme, or
    quantized on one side only)."""
    by_layer: dict[str, list[tuple[str, Membership]]] = {}
    unquantized = (EXCLUDED, UNLISTED)
    names = list(modules)
    # the modules whose buckets differ found in C: a MoE has a quarter million, most agree;
    # the engine's view read in its own order where that is the modules' (the resolver's is),
    # which a quarter million lookups would cost four times over
    in_order = engine.values() if list(engine) == names else map(engine.__getitem__, names)
    engine_buckets = map(bucket_of, in_order)
    differ = compress(
        zip(names, producer, strict=True), map(ne, map(bucket_of, producer), engine_buckets)
    )
    for name, mine in differ:
        # unquantized on both sides (excluded or unlisted alike) is no disagreement
        if mine.bucket in unquantized and engine[name].bucket in unquantized:
            continue
        by_layer.setdefault(modules[name].engine_name, []).append((name, mine))
    out = []
    for layer, differing in sorted(by_layer.items()):
        name, mine = differing[0]
        more = f" (and {len(differing) - 1} more of this layer)" if len(differing) > 1 else ""
        out.append(
            finding(
                "producer-engine-disagree",
                f"{name}{more}: {producer_label} resolves it {_say(mine)}; {engine_label} "
                f"resolves its layer {layer} {_say(engine[name])}",
                module=layer,
            )
        )
    return out


def _say(membership: Membership) -> str:
    rule = f" {membership.rule!r}" if membership.rule else ""
    if membership.bucket == EXCLUDED:
        return f"excluded ({membership.how}{rule})"
    if membership.bucket == UNLISTED:
        return f"unquantized ({membership.how}{rule})"
    return f"{membership.bucket} ({membership.how}{rule})"
