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
from collections.abc import Mapping

from ..declarations import CompressedTensorsRules, Declaration
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from .matchers import FirstMatch
from .resolver import EXCLUDED, UNLISTED, Membership

LINEAR_MRO = ("Linear", "Module")
EMBEDDING_MRO = ("Embedding", "Module")
QUANTIZABLE = frozenset({"linear", "fused", "lm_head", "experts", "embedding"})
"""Layer kinds transformers builds as ``nn.Linear`` / ``nn.Embedding`` (``lm_head`` is an
``nn.Linear``; llm-compressor unfuses experts into ``nn.Linear``s): since compressed-tensors
0.18 only those (and attention, for the KV cache) get a scheme; a matched norm, convolution or
router gets nothing, silently."""


def producer_classes(info: ModuleInfo) -> tuple[str, ...]:
    """The module's class and its bases in transformers, as far as a class target can tell."""
    kind = info.layer_kind or info.kind
    if kind == "router":
        # transformers 5 builds routers as their own nn.Module (Qwen3MoeTopKRouter), except
        # gates kept as nn.Linear (Qwen3-Next's shared_expert_gate)
        return LINEAR_MRO if info.leaf != "gate" else ("TopKRouter", "Module")
    if kind == "embedding":
        return EMBEDDING_MRO
    if kind in QUANTIZABLE:
        return LINEAR_MRO
    if kind == "norm":
        return ("RMSNorm", "Module")
    if kind == "conv":
        return ("Conv2d", "Module")
    return ("Module",)


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


def producer_view(
    declaration: Declaration, modules: Mapping[str, ModuleInfo]
) -> dict[str, Membership] | None:
    """Each module as the producer's library resolves it; None where no producer view is
    modelled (ModelOpt writes its lists from its own module names: the literal reading)."""
    if declaration.bnb is not None:
        from .producer_bnb import bnb_producer_view  # builds on this module's classes

        return bnb_producer_view(declaration.bnb, modules)
    rules = declaration.compressed_tensors
    if rules is None:
        return None
    view = _CompressedTensorsProducer(rules)
    return {name: view.resolve(info) for name, info in modules.items()}


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

    def _ignored(self, name: str, classes: tuple[str, ...]) -> str | None:
        if name in self.ignore_names:
            return name
        if classes not in self.class_ignored:
            names = self.ignore_names
            self.class_ignored[classes] = next((c for c in sorted(classes) if c in names), None)
        cls = self.class_ignored[classes]
        if cls is not None:
            return cls
        i = self.ignore_first.first(name)
        return self.ignore_regex[i] if i is not None else None

    def resolve(self, info: ModuleInfo) -> Membership:
        if info.name.startswith("mtp.") or ".mtp." in info.name:
            # transformers drops MTP blocks on load: the producer never matched them
            return Membership(UNLISTED, "none")
        classes = producer_classes(info)
        matched = self._target(info.name, classes)
        if matched is None:
            return Membership(UNLISTED, "none")
        ignored = self._ignored(info.name, classes)
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

    def _target(self, name: str, classes: tuple[str, ...]) -> tuple[str, str] | None:
        """Name matches first (the exact name, then ``re:`` targets in sorted order), then
        class matches in sorted order: compressed-tensors' ``match_targets``."""
        if name in self.rules.targets:
            return name, "exact"
        j = self.regex_first.first(name)
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
    producer: Mapping[str, Membership],
    engine: Mapping[str, Membership],
    modules: Mapping[str, ModuleInfo],
    producer_label: str,
    engine_label: str,
) -> list[Finding]:
    """One warning per engine layer whose modules the producer and the engine resolve
    differently (another scheme, or quantized on one side only)."""
    by_layer: dict[str, list[str]] = {}
    unquantized = (EXCLUDED, UNLISTED)
    for name, info in modules.items():
        ours, engines = producer[name].bucket, engine[name].bucket
        # one scheme on both sides, or unquantized on both (excluded or unlisted alike)
        if ours == engines or (ours in unquantized and engines in unquantized):
            continue
        by_layer.setdefault(info.engine_name, []).append(name)
    out = []
    for layer, names in sorted(by_layer.items()):
        name = names[0]
        mine, theirs = producer[name], engine[name]
        more = f" (and {len(names) - 1} more of this layer)" if len(names) > 1 else ""
        out.append(
            finding(
                "producer-engine-disagree",
                f"{name}{more}: {producer_label} resolves it {_say(mine)}; {engine_label} "
                f"resolves its layer {layer} {_say(theirs)}",
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
