"""What the engine refuses or ignores outside the arm line: a declaration as a whole, before it
builds any layer; a layer of a kind the arm line does not cover (an embedding) declared with a
scheme the engine does not take there; an operand a model's weight loader renames away from its
parameter; config groups it drops; transforms it does not apply. The declared KV cache is
:mod:`.kv_cache`'s."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress
from operator import attrgetter

from ..declarations import CompressedTensorsRules, Declaration, Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..resolve.producer import producer_matches
from ..resolve.resolver import Membership, declared_scheme
from .entries import DeclarationError, GroupSkipped, LayerError, LoaderDrop, cite
from .profile import Profile


def _scheme_holds(error: DeclarationError, scheme: Scheme) -> bool:
    group = scheme.group_size if scheme.group_size is not None else -1
    return (
        (error.declared_family is None or scheme.family in error.declared_family)
        and (error.declared_strategy is None or scheme.weight_strategy in error.declared_strategy)
        and (
            error.static_activations is None
            or error.static_activations == scheme.static_activations
        )
        and (error.declared_bits_not is None or scheme.weight_bits not in error.declared_bits_not)
        and (
            error.declared_symmetric is None or scheme.weight_symmetric == error.declared_symmetric
        )
        and (error.declared_group_size_not is None or group not in error.declared_group_size_not)
        and (error.act_order is None or scheme.act_order == error.act_order)
        and (error.weightless is None or (scheme.weight_bits is None) == error.weightless)
    )


def _holding(error: DeclarationError, declaration: Declaration) -> Scheme | bool | None:
    """False where the error does not hold; else the first declared scheme it holds for
    (None where it holds for the declaration as a whole)."""
    if error.producer is not None and (declaration.method or "") not in error.producer:
        return False
    if error.sparsity is not None and error.sparsity != bool(declaration.sparsity_targets):
        return False
    per_scheme = (
        error.declared_family,
        error.declared_strategy,
        error.static_activations,
        error.declared_bits_not,
        error.declared_symmetric,
        error.declared_group_size_not,
        error.act_order,
        error.weightless,
    )
    if all(condition is None for condition in per_scheme):
        return None
    return next((s for s in declaration.schemes.values() if _scheme_holds(error, s)), False)


def _text(error: DeclarationError, scheme: Scheme | None) -> str:
    if scheme is None or "{" not in error.text:
        return error.text
    group = scheme.group_size if scheme.group_size is not None else -1
    return (
        error.text.replace("{bits}", str(scheme.weight_bits))
        .replace("{sym}", str(scheme.weight_symmetric))
        .replace("{group_size}", str(group))
        .replace("{actorder}", repr(scheme.actorder))
    )


def declaration_refusals(profile: Profile, declaration: Declaration) -> list[Finding]:
    """``engine-refuses-declaration`` for each of the profile's declaration errors that holds."""
    out = []
    for error in profile.declaration_errors:
        held = _holding(error, declaration)
        if held is False:
            continue
        scheme = held if isinstance(held, Scheme) else None
        what = "this declaration"
        if error.sparsity:
            what = f"a sparsity_config with targets {list(declaration.sparsity_targets)[:5]}"
        elif scheme is not None and error.weightless:
            what = f"config group {scheme.name!r} with no weights"
        elif scheme is not None and "{" in error.text:
            what = scheme.name
        cited = cite(error.source)
        out.append(
            finding(
                "engine-refuses-declaration",
                f"{declaration.source} declares {what}; {profile.label} refuses it "
                f'{error.stage}: "{_text(error, scheme)}"{cited}',
            )
        )
    return out


def _loads(error: LayerError, scheme: Scheme) -> bool:
    return (
        (error.loads_family is None or scheme.family in error.loads_family)
        and (error.loads_weight_only is None or scheme.weight_only == error.loads_weight_only)
        and (error.loads_strategy is None or (scheme.weight_strategy or "") in error.loads_strategy)
    )


_LAYER_KIND = attrgetter("layer_kind")


def layer_refusals(
    profile: Profile,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
) -> list[Finding]:
    """``no-arm`` for each module whose engine layer the profile's layer errors refuse."""
    out = []
    infos = list(modules.values()) if profile.layer_errors else []
    for error in profile.layer_errors:
        # the few layers of the error's kinds found in C: a MoE has a quarter million modules
        kinds = frozenset(error.layer_kind)
        for info in compress(infos, map(kinds.__contains__, map(_LAYER_KIND, infos))):
            membership = memberships.get(info.name)
            if membership is None:
                continue
            scheme = declared_scheme(declaration, membership)
            if scheme is None:
                continue
            if error.producer is not None and scheme.producer not in error.producer:
                continue
            if _loads(error, scheme):
                continue
            cited = cite(error.source)
            text = error.error.replace("{scheme}", scheme.describe())
            layer = info.layer_class or info.layer_kind
            out.append(
                finding(
                    "no-arm",
                    f"{info.name} is declared {membership.bucket} ({scheme.declared_arm}); engine "
                    f"profile {profile.label} has no arm for its {layer}"
                    f': {error.reason}; it raises at load: "{text}"{cited}',
                    module=info.name,
                    tensor=info.weight.name if info.weight else "",
                )
            )
    return out


def loader_drops(
    profile: Profile,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    architecture: str,
) -> list[Finding]:
    """``operand-unloaded`` per declared scheme whose modules ship an operand the model class's
    weight loader renames away from the parameter the quant method registers."""
    out = []
    for drop in profile.loader_drops:
        if architecture not in drop.architecture or (
            drop.config_format is not None and declaration.config_format not in drop.config_format
        ):
            continue
        shipping: dict[str, list[ModuleInfo]] = {}
        for info in modules.values():
            if drop.operand not in info.operands or (
                drop.module_contains is not None
                and not any(part in info.name for part in drop.module_contains)
            ):
                continue
            membership = memberships.get(info.name)
            scheme = declared_scheme(declaration, membership)
            if scheme is None or not _drop_holds(drop, scheme):
                continue
            assert membership is not None
            shipping.setdefault(membership.bucket, []).append(info)
        for bucket, infos in sorted(shipping.items()):
            first = infos[0]
            cited = cite(drop.source)
            out.append(
                finding(
                    "operand-unloaded",
                    f"{bucket}: {len(infos)} modules ship {drop.operand}, and {profile.label}'s "
                    f"{architecture} weight loader renames it to {drop.renamed_to}: "
                    f"{drop.reason}{cited}",
                    module=first.name,
                    tensor=first.operands[drop.operand].name,
                )
            )
    return out


def _drop_holds(drop: LoaderDrop, scheme: Scheme) -> bool:
    return (
        scheme.producer in drop.producer
        and (drop.declared_family is None or scheme.family in drop.declared_family)
        and (drop.declared_strategy is None or scheme.weight_strategy in drop.declared_strategy)
    )


def skipped_groups(
    profile: Profile, declaration: Declaration
) -> dict[str, tuple[str, GroupSkipped]]:
    """Config group -> (its only target, the profile's entry) for each group the engine drops
    before matching any layer."""
    rules = declaration.rules
    if not isinstance(rules, CompressedTensorsRules):
        return {}
    out: dict[str, tuple[str, GroupSkipped]] = {}
    for skipped in profile.groups_skipped:
        if (declaration.method or "") not in skipped.producer:
            continue
        for name, targets in rules.groups:
            if len(targets) == 1 and targets[0].endswith(skipped.target_suffix):
                out.setdefault(name, (targets[0], skipped))
    return out


def group_skipped_warnings(
    profile: Profile, declaration: Declaration, skipped: Mapping[str, tuple[str, GroupSkipped]]
) -> list[Finding]:
    """``config-group-skipped`` for each group of :func:`skipped_groups`."""
    out = []
    for name, (target, entry) in skipped.items():
        cited = cite(entry.source)
        out.append(
            finding(
                "config-group-skipped",
                f"{declaration.source}: config group {name!r} targets only {target!r}; "
                f"{profile.label} {entry.note.replace('{target}', target)}{cited}",
            )
        )
    return out


def transforms_unapplied(
    profile: Profile, declaration: Declaration, modules: Mapping[str, ModuleInfo]
) -> list[Finding]:
    """``transform-not-applied`` where the declaration rotates activations at run time and the
    engine does not: it reads no ``transform_config``, or the transform reaches (in the
    producer's view) a layer the engine applies none on (vLLM's routed experts, LM head)."""
    transforms = declaration.online_transforms
    if not transforms:
        return []
    if not profile.reads_transform_config:
        said = ", ".join(f"{t.scheme} at {t.location}" for t in transforms)
        return [
            finding(
                "transform-not-applied",
                f"{declaration.source}: transform_config applies transforms at run time "
                f"({said}); {profile.label} reads no transform_config, so the weights, written "
                "for rotated activations, meet unrotated ones and the model computes wrong "
                "numbers without a word",
            )
        ]
    kinds = profile.transform_layer_kinds
    if kinds is None:
        return []
    out = []
    for transform in transforms:
        if transform.location not in ("input", "output"):
            continue  # attention transforms (k_cache, q_attn) are not modelled
        by_layer: dict[str, list[ModuleInfo]] = {}
        for name in producer_matches(transform.targets, transform.ignore, modules):
            info = modules[name]
            if info.layer_kind not in kinds or not info.quant_config:
                by_layer.setdefault(info.engine_name, []).append(info)
        for layer, members in by_layer.items():
            kind = members[0].layer_class or members[0].layer_kind
            more = f" and {len(members) - 1} more" if len(members) > 1 else ""
            out.append(
                finding(
                    "transform-not-applied",
                    f"{layer}: {declaration.source}'s transform {transform.scheme} at "
                    f"{transform.location} rotates {members[0].name}{more} at run time; "
                    f"{profile.label} applies online transforms only on the Linear layers it "
                    f"builds with the quant config, not on its {kind}: the weights, written for "
                    "rotated activations, meet unrotated ones and the layer computes wrong "
                    "numbers without a word",
                    module=layer,
                )
            )
    return out
