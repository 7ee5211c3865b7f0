"""``--probe-scalars``: read the few scale tensors that decide numerics, and nothing else.

A plain audit reads headers only. With the probe, the audit also reads the bytes of the scalar
and tiny scale tensors (global scales, activation scales, per-tensor weight scales, KV-cache
scales), never more than :data:`BOUND` elements of any one tensor, through the source's
``read_bytes(file, start, length)`` (seek on local files; a manifest has no bytes, and the report
says so). Values are decoded here with ``struct``; no tensor library is involved.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..findings import Finding, finding
from ..modules.inventory import SHARD_TO_FUSED, ModuleInfo
from ..report.model import ProbeInfo, ScalarRow
from ..sources.checkpoint import Checkpoint, TensorEntry

BOUND = 64
"""Most elements read from any one tensor: a scalar, or a per-head KV scale."""

PROBED = (
    "weight_scale_2",
    "weight_global_scale",
    "input_scale",
    "input_global_scale",
    "output_scale",
    "weight_scale",
    "k_scale",
    "v_scale",
    "q_scale",
    "kv_scale",
    "prob_scale",
)
"""Operands whose values are probed."""

PER_TENSOR_ONLY = frozenset({"weight_scale"})
"""Probed only as a single element: per-channel and per-block weight scales may be zero for an
all-zero row or block, so only the per-tensor form is a scalar that decides a whole module."""

ACTIVATION = frozenset({"input_scale", "input_global_scale"})
"""Scales engines reduce over routed experts (vLLM keeps the maximum per layer)."""

PARTNER_OPERANDS = ("weight_scale_2", "weight_global_scale", "input_scale", "input_global_scale")
"""Scales fused partners must share: the global scale an engine keeps one of, and the
activation scale of their common input. A per-tensor FP8 ``weight_scale`` is not compared:
engines requantize fused FP8 shards to the largest, which is exact up to rounding."""

EXPERT_FUSED = {"w1": "w13", "w3": "w13"}
"""Mixtral-style routed experts: w1 and w3 load into one w13 module."""


def _f32(data: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def _f16(data: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(data) // 2}e", data))


def _bf16(data: bytes) -> list[float]:
    halves = struct.unpack(f"<{len(data) // 2}H", data)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]


def _e4m3_value(byte: int) -> float:
    """OCP FP8 E4M3 (``float8_e4m3fn``): bias 7, no infinities, S.1111.111 is NaN."""
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0**-9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


E4M3 = tuple(_e4m3_value(b) for b in range(256))


def _e4m3(data: bytes) -> list[float]:
    return [E4M3[b] for b in data]


DECODERS: dict[str, tuple[int, Callable[[bytes], list[float]]]] = {
    "F32": (4, _f32),
    "F16": (2, _f16),
    "BF16": (2, _bf16),
    "F8_E4M3": (1, _e4m3),
}
"""dtype -> (bytes per element, decoder)."""


def decode(dtype: str, data: bytes) -> list[float]:
    """Little-endian values of a safetensors dtype qarm decodes; KeyError for any other."""
    width, decoder = DECODERS[dtype]
    if len(data) % width:
        raise ValueError(f"{len(data)} bytes is not a whole number of {dtype} elements")
    return decoder(data)


def _f32_round(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _f16_round(value: float) -> float:
    return float(struct.unpack("<e", struct.pack("<e", value))[0])


def _bf16_round(value: float) -> float:
    """Round to nearest even, as a BF16 writer does."""
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return _bf16(struct.pack("<H", bits & 0xFFFF))[0]


ROUND: dict[str, Callable[[float], float]] = {
    "F32": _f32_round,
    "F16": _f16_round,
    "BF16": _bf16_round,
}


def value_text(value: float, dtype: str) -> str:
    """The shortest decimal that reads back to the same value in ``dtype``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    rounding = ROUND.get(dtype)
    if rounding is None:
        return repr(value)  # an FP8 value is a short dyadic fraction: exact as written
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        try:
            if rounding(float(text)) == value:
                return text
        except (OverflowError, struct.error):
            continue
    return repr(value)


def _numel(entry: TensorEntry) -> int:
    n = 1
    for d in entry.shape:
        n *= d
    return n


def _status(values: list[float]) -> str:
    if any(math.isnan(v) or math.isinf(v) for v in values):
        return "nonfinite"
    if any(v < 0 for v in values):
        return "negative"
    if any(v == 0 for v in values):
        return "zero"
    return "ok"


@dataclass(frozen=True)
class _Candidate:
    module: ModuleInfo
    operand: str
    entry: TensorEntry
    file: str
    start: int


def _candidates(
    checkpoint: Checkpoint, modules: Mapping[str, ModuleInfo]
) -> tuple[list[_Candidate], list[ScalarRow]]:
    """Tensors to read, in file order, and the rows of those that will not be read."""
    where = {
        entry.name: (shard.file, 8 + shard.header_length)
        for shard in checkpoint.shards
        for entry in shard.tensors
    }
    read: list[_Candidate] = []
    skipped: list[ScalarRow] = []
    for info in modules.values():
        for operand in PROBED:
            entry = info.operands.get(operand)
            if entry is None:
                continue
            numel = _numel(entry)
            if operand in PER_TENSOR_ONLY and numel != 1:
                continue  # a per-channel or per-block weight scale: not a scalar
            note = None
            if numel > BOUND:
                note = f"{numel} elements, above the {BOUND}-element bound"
            elif numel == 0:
                note = "no elements"
            elif entry.dtype not in DECODERS:
                note = f"{entry.dtype} is not decoded (F32, F16, BF16, F8_E4M3 are)"
            if note is not None:
                skipped.append(_row(entry, "skipped", note=note))
                continue
            file, base = where[entry.name]
            read.append(_Candidate(info, operand, entry, file, base + entry.begin))
    read.sort(key=lambda c: (c.file, c.start))
    return read, skipped


def _row(
    entry: TensorEntry, status: str, values: Iterable[str] = (), note: str | None = None
) -> ScalarRow:
    return ScalarRow(
        tensor=entry.name,
        dtype=entry.dtype,
        shape=list(entry.shape),
        status=status,
        values=list(values),
        note=note,
    )


def _shown(values: list[float], dtype: str) -> str:
    if len(values) == 1:
        return value_text(values[0], dtype)
    head = ", ".join(value_text(v, dtype) for v in values[:8])
    return f"[{head}{', ...' if len(values) > 8 else ''}]"


def probe_scalars(
    checkpoint: Checkpoint,
    modules: Mapping[str, ModuleInfo],
    *,
    names: Iterable[str] | None = None,
) -> tuple[ProbeInfo, list[Finding]]:
    """Read and judge every probed scale tensor (or only those in ``names``)."""
    read, skipped = _candidates(checkpoint, modules)
    if names is not None:
        wanted = set(names)
        read = [c for c in read if c.entry.name in wanted]
        skipped = [r for r in skipped if r.tensor in wanted]
    reader = checkpoint.read_bytes
    if reader is None:
        reason = (
            "a manifest holds headers only: there are no tensor bytes to read"
            if checkpoint.origin.kind == "manifest"
            else f"the {checkpoint.origin.kind} source provides no tensor-byte reads"
        )
        rows = sorted(
            [*skipped, *(_row(c.entry, "not-read") for c in read)], key=lambda r: r.tensor
        )
        note = finding(
            "scales-not-read",
            f"{len(read) + len(skipped)} scale tensors were not checked: {reason}",
        )
        info = ProbeInfo(
            available=False,
            reason=reason,
            bound=BOUND,
            candidates=len(read) + len(skipped),
            tensors_read=0,
            bytes_read=0,
            flagged=0,
            scalars=rows,
        )
        return info, [note] if rows else []
    values: dict[str, list[float]] = {}
    rows = list(skipped)
    findings: list[Finding] = []
    total = 0
    for c in read:
        width = DECODERS[c.entry.dtype][0]
        length = c.entry.end - c.entry.begin
        if length > BOUND * width:  # the layout check makes this impossible; never read more
            raise AssertionError(f"{c.entry.name}: {length} bytes is above the probe bound")
        data = reader(c.file, c.start, length)
        total += len(data)
        decoded = decode(c.entry.dtype, data)
        values[c.entry.name] = decoded
        status = _status(decoded)
        rows.append(_row(c.entry, status, (value_text(v, c.entry.dtype) for v in decoded)))
    findings.extend(_value_findings(read, values))
    findings.extend(_partner_findings(read, values))
    rows.sort(key=lambda r: r.tensor)
    info = ProbeInfo(
        available=True,
        reason=None,
        bound=BOUND,
        candidates=len(read) + len(skipped),
        tensors_read=len(read),
        bytes_read=total,
        flagged=sum(1 for r in rows if r.status in ("zero", "negative", "nonfinite")),
        scalars=rows,
    )
    return info, findings


def _is_expert(info: ModuleInfo) -> bool:
    return info.engine_name != info.name and info.engine_name.endswith(".experts")


def _value_findings(read: list[_Candidate], values: Mapping[str, list[float]]) -> list[Finding]:
    out: list[Finding] = []
    # activation scales of routed experts: vLLM keeps the maximum over a layer's experts
    siblings: dict[tuple[str, str, str], list[_Candidate]] = defaultdict(list)
    for c in read:
        if c.operand in ACTIVATION and _is_expert(c.module):
            siblings[(c.module.engine_name, c.module.leaf, c.operand)].append(c)
    masked: set[str] = set()
    for group in siblings.values():
        if any(_status(values[c.entry.name]) == "ok" for c in group):
            masked.update(c.entry.name for c in group)
    for c in read:
        decoded = values[c.entry.name]
        status = _status(decoded)
        if status == "ok":
            continue
        entry = c.entry
        shown = f"{entry.name} ({entry.dtype} {list(entry.shape)}) = {_shown(decoded, entry.dtype)}"
        if status == "nonfinite":
            out.append(
                finding(
                    "scale-nonfinite",
                    f"{shown}: every output of {c.module.name} that reads it is NaN or infinite",
                    module=c.module.name,
                    tensor=entry.name,
                )
            )
        elif status == "negative":
            out.append(
                finding(
                    "scale-negative",
                    f"{shown}: a scale is an amax over a positive range; a negative one flips "
                    "signs (corrupt bytes, or another dtype than declared)",
                    module=c.module.name,
                    tensor=entry.name,
                )
            )
        elif entry.name in masked:
            out.append(
                finding(
                    "expert-scale-zero",
                    f"{shown}, while sibling experts' are not (typically an expert calibration "
                    f"routed no token to); engines that keep the maximum over "
                    f"{c.module.engine_name} mask it, an engine that reads it per expert "
                    "divides by zero",
                    module=c.module.name,
                    tensor=entry.name,
                )
            )
        else:
            out.append(
                finding(
                    "scale-zero",
                    f"{shown}: {_zero_effect(c.operand)}",
                    module=c.module.name,
                    tensor=entry.name,
                )
            )
    return out


def _zero_effect(operand: str) -> str:
    if operand in ACTIVATION:
        return "static activation quantization divides by it (inf/NaN activations)"
    if operand in ("k_scale", "v_scale", "q_scale", "kv_scale", "prob_scale"):
        return "the quantized KV cache divides by it (inf/NaN in attention)"
    return "every dequantized weight it multiplies is zero: the module computes zeros, silently"


def _partner_key(info: ModuleInfo) -> tuple[str, str] | None:
    parent, _, leaf = info.name.rpartition(".")
    fused = SHARD_TO_FUSED.get(leaf)
    if fused is None and _is_expert(info):
        fused = EXPERT_FUSED.get(leaf)
    if fused is None:
        return None
    return parent, fused


def _partner_findings(read: list[_Candidate], values: Mapping[str, list[float]]) -> list[Finding]:
    groups: dict[tuple[str, str, str], list[_Candidate]] = defaultdict(list)
    for c in read:
        key = _partner_key(c.module)
        if key is None or c.operand not in PARTNER_OPERANDS or _numel(c.entry) != 1:
            continue
        decoded = values[c.entry.name]
        if _status(decoded) in ("ok", "zero"):
            groups[(*key, c.operand)].append(c)
    out: list[Finding] = []
    for (parent, fused, operand), members in sorted(groups.items()):
        if len(members) < 2 or len({values[m.entry.name][0] for m in members}) == 1:
            continue
        members.sort(key=lambda m: m.module.name)
        shown = ", ".join(
            f"{m.module.leaf}={value_text(values[m.entry.name][0], m.entry.dtype)}" for m in members
        )
        engine = f"{parent}.{fused}" if parent else fused
        what = (
            "they quantize one shared input, so the scales should be equal"
            if operand in ACTIVATION
            else "an engine that loads them into one fused module keeps one global scale, and "
            "the other shards are dequantized with it"
        )
        out.append(
            finding(
                "fused-scales-differ",
                f"{engine}: {operand} differs across fused partners ({shown}); {what}",
                module=engine,
                tensor=members[0].entry.name,
            )
        )
    return out
