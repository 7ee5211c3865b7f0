"""The engine's own words for a finding it raises at load (``load_errors`` of a profile)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..declarations import Declaration
from ..findings import Finding, finding
from ..modules.inventory import FUSED_SHARDS, ModuleInfo, engine_layers
from ..resolve.resolver import EXCLUDED, UNLISTED, Membership
from .profile import Profile


def quote_load_errors(
    profile: Profile,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    findings: Iterable[Finding],
) -> list[Finding]:
    """Each finding the engine would raise at load, with the engine's own wording appended."""
    if not profile.load_errors:
        return list(findings)
    by_engine: dict[str, list[ModuleInfo]] = {}  # built on the first quote: most audits have none
    codes = {q.code for q in profile.load_errors}
    quantized = declaration.method is not None  # the engine then takes a quant config
    out = []
    for f in findings:
        # The resolver names a shard disagreement about exclusion with the word "excluded"
        # (and a compressed-tensors one lists the ignored shards as "excluded"); a layer left
        # with no scheme because some shard matched no target is "unlisted", any other
        # disagreement "scheme". (A MIXED_PRECISION layer with one listed algorithm takes it for
        # every shard: the resolver raises no disagreement there.)
        if f.code in codes and not by_engine:
            by_engine = engine_layers(modules)
        members = by_engine.get(f.module, [])
        algos = sorted(
            {
                memberships[m.name].bucket.upper()
                for m in members
                if memberships[m.name].bucket not in (EXCLUDED, UNLISTED)
            }
        )
        unlisted = bool(members) and all(memberships[m.name].bucket == UNLISTED for m in members)
        cause = "exclude" if "excluded" in f.message else "unlisted" if unlisted else "scheme"
        membership = memberships.get(f.module)
        scheme = declaration.schemes.get(membership.bucket) if membership is not None else None
        family = scheme.family if scheme is not None else ""
        quote = next(
            (
                q
                for q in profile.load_errors
                if q.code == f.code
                and (q.producer is None or (declaration.method or "") in q.producer)
                and (q.cause is None or q.cause == cause)
                and (q.family is None or family in q.family)
                and (q.says is None or q.says in f.message)
                and (q.quantized is None or q.quantized == quantized)
            ),
            None,
        )
        if quote is None:
            out.append(f)
            continue
        leaf = f.module.rpartition(".")[2]
        values = {
            "{module}": f.module,
            "{algos}": "{" + ", ".join(repr(a) for a in algos) + "}",
            "{shards}": repr(list(FUSED_SHARDS.get(leaf, ()))),
            **_shape_values(f.tensor, modules),
        }
        extra = ""
        if quote.text:
            text = quote.text
            for key, value in values.items():
                text = text.replace(key, value)
            extra += f'; {profile.label} raises at load: "{text}"'
        if quote.note:
            note = quote.note
            for key, value in values.items():
                note = note.replace(key, value)
            extra += f"; {profile.label}: {note}"
        out.append(finding(f.code, f.message + extra, module=f.module, tensor=f.tensor))
    return out


def _shape_values(tensor: str, modules: Mapping[str, ModuleInfo]) -> dict[str, str]:
    """``{shape}`` (``(8,)``) and ``{torch_size}`` (``torch.Size([8])``) of the finding's
    tensor, as the engine prints them; none where the finding names no shipped tensor."""
    module, _, operand = tensor.rpartition(".")
    info = modules.get(module)
    entry = info.operands.get(operand) if info is not None else None
    if entry is None:
        return {}
    shape = tuple(entry.shape)
    return {"{shape}": repr(shape), "{torch_size}": f"torch.Size({list(shape)})"}
