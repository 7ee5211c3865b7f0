"""Declarations the engine refuses as a whole, before it builds any layer."""

from __future__ import annotations

from ..declarations import Declaration
from ..findings import Finding, finding
from .profile import DeclarationError, Profile


def _holds(error: DeclarationError, declaration: Declaration) -> bool:
    if error.producer is not None and (declaration.method or "") not in error.producer:
        return False
    return error.sparsity is None or error.sparsity == bool(declaration.sparsity_targets)


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
