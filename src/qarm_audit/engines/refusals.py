"""What the engine refuses outside the arm line: a declaration as a whole, before it builds any
layer, and a layer of a kind the arm line does not cover (an embedding) declared with a scheme
the engine does not take there."""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import Declaration, Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..resolve.resolver import Membership
from .profile import DeclarationError, LayerError, Profile


def _holds(error: DeclarationError, declaration: Declaration) -> bool:
    if error.producer is not None and (declaration.method or "") not in error.producer:
        return False
    if error.sparsity is not None and error.sparsity != bool(declaration.sparsity_targets):
        return False
    if error.declared_strategy is None and error.static_activations is None:
        return True
    return any(
        (error.declared_strategy is None or scheme.weight_strategy in error.declared_strategy)
        and (
            error.static_activations is None
            or error.static_activations == scheme.static_activations
        )
        for scheme in declaration.schemes.values()
    )


def declaration_refusals(profile: Profile, declaration: Declaration) -> list[Finding]:
    """``engine-refuses-declaration`` for each of the profile's declaration errors that holds."""
    out = []
    for error in profile.declaration_errors:
        if not _holds(error, declaration):
            continue
        what = (
            f"a sparsity_config with targets {list(declaration.sparsity_targets)[:5]}"
            if error.sparsity
            else "this declaration"
        )
        cite = f" ({error.source})" if error.source else ""
        out.append(
            finding(
                "engine-refuses-declaration",
                f"{declaration.source} declares {what}; {profile.label} refuses it before "
                f'building any layer: "{error.text}"{cite}',
            )
        )
    return out


def _loads(error: LayerError, scheme: Scheme) -> bool:
    return (
        (error.loads_family is None or scheme.family in error.loads_family)
        and (error.loads_weight_only is None or scheme.weight_only == error.loads_weight_only)
        and (error.loads_strategy is None or (scheme.weight_strategy or "") in error.loads_strategy)
    )


def layer_refusals(
    profile: Profile,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
) -> list[Finding]:
    """``no-arm`` for each module whose engine layer the profile's layer errors refuse."""
    out = []
    for error in profile.layer_errors:
        for info in modules.values():
            membership = memberships.get(info.name)
            if info.layer_kind not in error.layer_kind or membership is None:
                continue
            scheme = declaration.schemes.get(membership.bucket)
            if scheme is None or not membership.declared_quantized:
                continue
            if error.producer is not None and scheme.producer not in error.producer:
                continue
            if _loads(error, scheme):
                continue
            cite = f" ({error.source})" if error.source else ""
            text = error.error.replace("{scheme}", scheme.describe())
            layer = info.layer_class or info.layer_kind
            out.append(
                finding(
                    "no-arm",
                    f"{info.name} is declared {membership.bucket} ({scheme.declared_arm}); engine "
                    f"profile {profile.label} has no arm for its {layer}"
                    f': {error.reason}; it raises at load: "{text}"{cite}',
                    module=info.name,
                    tensor=info.weight.name if info.weight else "",
                )
            )
    return out
