"""``--probe-scalars``: decoders, value findings, the read bound, and headers-only without it."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import MANIFESTS, bf16, f16, f32, llama, modelopt_file, write_checkpoint
from qarm_audit import audit
from qarm_audit.check.probe import BOUND, decode, value_text
from qarm_audit.errors import ExitCode, FetchError, SourceSpecError
from qarm_audit.sources import open_source
from qarm_audit.sources.local import LocalBytes

# --- decoders --------------------------------------------------------------------------------


def test_f32_and_f16_decode_as_numpy_does() -> None:
    common = [0.0, -0.0, 1.0, -2.5, math.inf, -math.inf, 0.1, 65504.0]
    for dtype, width, npdtype, values in (
        ("F32", 4, "<f4", [*common, 1e-8, 3.4e38]),
        ("F16", 2, "<f2", [*common, 6e-8]),
    ):
        raw = np.array(values, dtype=npdtype).tobytes()
        got = decode(dtype, raw)
        want = np.frombuffer(raw, dtype=npdtype).astype(np.float64).tolist()
        assert got == want and len(raw) == width * len(values)
    nan = decode("F32", np.array([np.nan], dtype="<f4").tobytes())
    assert math.isnan(nan[0])


def test_bf16_decodes_its_bit_patterns() -> None:
    raw = struct.pack("<6H", 0x3F80, 0xC020, 0x7F80, 0xFF80, 0x0000, 0x3B80)
    got = decode("BF16", raw)
    assert got == [1.0, -2.5, math.inf, -math.inf, 0.0, 2.0**-8]
    assert math.isnan(decode("BF16", struct.pack("<H", 0x7FC0))[0])
    # the test writer rounds to nearest even, as the probe's text form assumes
    assert decode("BF16", bf16(1.0, 448.0, 0.00390625)) == [1.0, 448.0, 0.00390625]


def test_e4m3_decodes_the_ocp_fn_format() -> None:
    table = {
        0x00: 0.0,
        0x38: 1.0,
        0x40: 2.0,
        0x7E: 448.0,
        0xFE: -448.0,
        0x01: 2.0**-9,  # smallest subnormal
        0x07: 7 * 2.0**-9,
        0x08: 2.0**-6,  # smallest normal
        0x3C: 1.5,
    }
    for byte, value in table.items():
        assert decode("F8_E4M3", bytes([byte])) == [value], hex(byte)
    assert math.copysign(1.0, decode("F8_E4M3", b"\x80")[0]) == -1.0
    assert [math.isnan(v) for v in decode("F8_E4M3", b"\x7f\xff")] == [True, True]
    positives = decode("F8_E4M3", bytes(range(0x7F)))
    assert positives == sorted(positives) and len(set(positives)) == 0x7F  # no inf, no gap


def test_values_read_back_in_their_own_dtype() -> None:
    assert value_text(decode("F32", f32(0.1))[0], "F32") == "0.1"
    assert value_text(448.0, "F32") == "448"
    assert value_text(decode("BF16", bf16(0.1))[0], "BF16") == "0.1"
    assert value_text(decode("F16", f16(0.1))[0], "F16") == "0.1"
    assert value_text(2.0**-9, "F8_E4M3") == "0.001953125"
    assert [value_text(v, "F32") for v in (math.nan, math.inf, -math.inf)] == [
        "nan",
        "inf",
        "-inf",
    ]


# --- a tiny NVFP4 checkpoint with real scale values -------------------------------------------

E4M3_ONE = 0x38


def nvfp4(module: str, out: int, inp: int, ws2: float = 0.5, act: float = 2.0) -> dict[str, Any]:
    return {
        f"{module}.weight": ("U8", (out, inp // 2)),
        f"{module}.weight_scale": (
            "F8_E4M3",
            (out, inp // 16),
            bytes([E4M3_ONE]) * (out * inp // 16),
        ),
        f"{module}.weight_scale_2": ("F32", (), f32(ws2)),
        f"{module}.input_scale": ("F32", (), f32(act)),
    }


def checkpoint(
    root: Path, values: dict[str, bytes] | None = None, extra: dict[str, Any] | None = None
) -> Path:
    tensors = llama(layers=1, spell=nvfp4)
    for name, data in (values or {}).items():
        dtype, shape, *_ = tensors[name]
        tensors[name] = (dtype, shape, data)
    tensors.update(extra or {})
    return write_checkpoint(
        root,
        {"model.safetensors": tensors},
        {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"])},
    )


L0 = "model.layers.0"


PROBE_CODES = {
    "scale-zero",
    "scale-negative",
    "scale-nonfinite",
    "expert-scale-zero",
    "fused-scales-differ",
    "scales-not-read",
}


def probe_codes(report) -> list[str]:
    found = [f.code for f in [*report.refusals, *report.warnings, *report.notes]]
    return sorted(c for c in found if c in PROBE_CODES)


def test_a_healthy_checkpoint_reads_every_scalar_and_nothing_else(tmp_path: Path) -> None:
    report = audit(str(checkpoint(tmp_path / "c")), probe_scalars=True)
    assert report.refusals == [] and probe_codes(report) == []
    probe = report.probe
    assert probe is not None and probe.available
    # 7 projections x (weight_scale_2 + input_scale); the block weight_scale is not a scalar
    assert (probe.candidates, probe.tensors_read, probe.bytes_read, probe.flagged) == (
        14,
        14,
        56,
        0,
    )
    assert {r.status for r in probe.scalars} == {"ok"}
    row = next(r for r in probe.scalars if r.tensor == f"{L0}.mlp.up_proj.weight_scale_2")
    assert (row.values, row.dtype, row.shape) == (["0.5"], "F32", [])


def test_without_the_flag_nothing_is_read(tmp_path: Path) -> None:
    report = audit(str(checkpoint(tmp_path / "c", {f"{L0}.mlp.up_proj.weight_scale_2": f32(0.0)})))
    assert report.probe is None
    assert report.refusals == []  # the zero is invisible to a header-only audit


def test_a_zero_global_scale_is_refused_by_name(tmp_path: Path) -> None:
    tensor = f"{L0}.mlp.down_proj.weight_scale_2"
    report = audit(str(checkpoint(tmp_path / "c", {tensor: f32(0.0)})), probe_scalars=True)
    (refusal,) = report.refusals
    assert (refusal.code, refusal.module, refusal.tensor) == (
        "scale-zero",
        f"{L0}.mlp.down_proj",
        tensor,
    )
    assert "= 0" in refusal.message and "computes zeros" in refusal.message
    assert report.probe.flagged == 1


def test_nan_inf_and_negative_scales_are_refused(tmp_path: Path) -> None:
    values = {
        f"{L0}.self_attn.o_proj.input_scale": f32(math.nan),
        f"{L0}.mlp.down_proj.weight_scale_2": f32(math.inf),
        f"{L0}.mlp.down_proj.input_scale": f32(-2.0),
    }
    report = audit(str(checkpoint(tmp_path / "c", values)), probe_scalars=True)
    got = {(r.code, r.tensor) for r in report.refusals}
    assert got == {
        ("scale-nonfinite", f"{L0}.self_attn.o_proj.input_scale"),
        ("scale-nonfinite", f"{L0}.mlp.down_proj.weight_scale_2"),
        ("scale-negative", f"{L0}.mlp.down_proj.input_scale"),
    }
    by_tensor = {r.tensor: r for r in report.probe.scalars}
    assert by_tensor[f"{L0}.self_attn.o_proj.input_scale"].values == ["nan"]
    assert by_tensor[f"{L0}.mlp.down_proj.weight_scale_2"].values == ["inf"]


def test_kv_scales_in_bf16_f16_and_fp8_are_decoded(tmp_path: Path) -> None:
    extra = {
        f"{L0}.self_attn.k_scale": ("BF16", (), bf16(0.0)),
        f"{L0}.self_attn.v_scale": ("F16", (), f16(0.25)),
        f"{L0}.self_attn.q_scale": ("F8_E4M3", (), bytes([0x7F])),
    }
    report = audit(str(checkpoint(tmp_path / "c", extra=extra)), probe_scalars=True)
    got = {r.tensor: r.code for r in report.refusals}
    assert got == {
        f"{L0}.self_attn.k_scale": "scale-zero",
        f"{L0}.self_attn.q_scale": "scale-nonfinite",
    }
    assert "KV cache divides by it" in next(
        r.message for r in report.refusals if r.code == "scale-zero"
    )
    rows = {r.tensor: r.values for r in report.probe.scalars}
    assert rows[f"{L0}.self_attn.v_scale"] == ["0.25"]
    assert report.probe.bytes_read == 56 + 2 + 2 + 1


def test_fused_partners_with_different_global_scales_warn_with_both_values(tmp_path: Path) -> None:
    values = {
        f"{L0}.mlp.gate_proj.weight_scale_2": f32(0.5),
        f"{L0}.mlp.up_proj.weight_scale_2": f32(0.25),
        f"{L0}.self_attn.k_proj.input_scale": f32(3.0),
    }
    report = audit(str(checkpoint(tmp_path / "c", values)), probe_scalars=True)
    assert report.refusals == []
    warnings = {w.module: w for w in report.warnings if w.code == "fused-scales-differ"}
    assert set(warnings) == {f"{L0}.mlp.gate_up_proj", f"{L0}.self_attn.qkv_proj"}
    assert "weight_scale_2 differs" in warnings[f"{L0}.mlp.gate_up_proj"].message
    assert "gate_proj=0.5, up_proj=0.25" in warnings[f"{L0}.mlp.gate_up_proj"].message
    assert "k_proj=3, q_proj=2, v_proj=2" in warnings[f"{L0}.self_attn.qkv_proj"].message


def test_fp8_per_tensor_weight_scales_may_differ_across_qkv(tmp_path: Path) -> None:
    def fp8(module: str, out: int, inp: int) -> dict[str, Any]:
        scale = 0.01 if module.endswith("k_proj") else 0.02
        return {
            f"{module}.weight": ("F8_E4M3", (out, inp)),
            f"{module}.weight_scale": ("F32", (), f32(scale)),
            f"{module}.input_scale": ("F32", (), f32(1.0)),
        }

    root = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": llama(layers=1, spell=fp8)},
        {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"])},
    )
    report = audit(str(root), probe_scalars=True)
    assert report.refusals == [] and probe_codes(report) == []
    assert report.probe.tensors_read == 14  # per-tensor weight_scale is probed, and may differ


def test_per_channel_scales_are_not_probed_and_the_bound_holds(tmp_path: Path) -> None:
    extra = {
        f"{L0}.self_attn.k_scale": ("F32", (BOUND + 1,), f32(*[0.0] * (BOUND + 1))),
        f"{L0}.self_attn.v_scale": ("F32", (BOUND,), f32(*[1.0] * BOUND)),
    }
    report = audit(str(checkpoint(tmp_path / "c", extra=extra)), probe_scalars=True)
    rows = {r.tensor: r for r in report.probe.scalars}
    assert rows[f"{L0}.self_attn.k_scale"].status == "skipped"
    assert "above the 64-element bound" in rows[f"{L0}.self_attn.k_scale"].note
    assert rows[f"{L0}.self_attn.v_scale"].status == "ok"
    assert f"{L0}.mlp.up_proj.weight_scale" not in rows  # an F8 block scale is no scalar
    assert report.probe.bytes_read == 56 + 4 * BOUND
    assert report.refusals == []  # the zeros past the bound were never read


def moe(root: Path, zeros: list[int]) -> Path:
    tensors: dict[str, Any] = {}
    for e in range(3):
        act = 0.0 if e in zeros else 2.0
        tensors.update(nvfp4(f"{L0}.mlp.experts.{e}.gate_proj", 64, 64, act=act))
    return write_checkpoint(
        root, {"model.safetensors": tensors}, {"hf_quant_config.json": modelopt_file("NVFP4")}
    )


def test_a_zero_expert_activation_scale_is_a_warning_when_siblings_mask_it(tmp_path: Path) -> None:
    report = audit(str(moe(tmp_path / "a", [1])), probe_scalars=True)
    assert [r.code for r in report.refusals] == []
    (warning,) = [w for w in report.warnings if w.code == "expert-scale-zero"]
    assert warning.tensor == f"{L0}.mlp.experts.1.gate_proj.input_scale"
    every = audit(str(moe(tmp_path / "b", [0, 1, 2])), probe_scalars=True)
    assert [r.code for r in every.refusals] == ["scale-zero"] * 3


def test_a_manifest_says_it_has_no_bytes_and_is_not_an_error(run) -> None:
    manifest = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
    report = audit(str(manifest), probe_scalars=True)
    probe = report.probe
    assert probe is not None and not probe.available
    assert "manifest holds headers only" in probe.reason
    # 401 input_scale + 193 weight_scale_2 + 208 per-tensor FP8 weight_scale
    assert (probe.candidates, probe.tensors_read, probe.bytes_read) == (802, 0, 0)
    assert {r.status for r in probe.scalars} == {"not-read"}
    assert [n.code for n in report.notes if "some-gpus" not in n.code] == ["scales-not-read"]
    result = run("audit", manifest, "--probe-scalars", "-f", "markdown")
    assert result.exit_code == ExitCode.CLEAN
    assert "**Scalar probe**: nothing read (a manifest holds headers only" in result.stdout


def test_cli_reports_the_bytes_read_and_refuses(tmp_path: Path, run) -> None:
    root = checkpoint(tmp_path / "c", {f"{L0}.mlp.up_proj.weight_scale_2": f32(0.0)})
    result = run("audit", root, "--probe-scalars", "-f", "json")
    assert result.exit_code == ExitCode.FINDINGS
    report = json.loads(result.stdout)
    assert report["probe"]["bytes_read"] == 56
    assert [r["code"] for r in report["refusals"]] == ["scale-zero"]
    table = run("audit", root, "--probe-scalars")
    assert "scalar probe: 14 scale tensors read, 56 bytes" in table.stdout
    assert "zero: model.layers.0.mlp.up_proj.weight_scale_2 = 0" in table.stdout
    plain = json.loads(run("audit", root, "-f", "json").stdout)
    assert plain["probe"] is None and plain["refusals"] == []


# --- what is read, measured at the file ---------------------------------------------------------


class _Spied:
    """A file handle that logs every read as (file, offset, bytes)."""

    def __init__(self, handle: Any, name: str, log: list[tuple[str, int, int]]) -> None:
        self._handle, self._name, self._log = handle, name, log

    def read(self, n: int = -1) -> bytes:
        at = self._handle.tell()
        data = self._handle.read(n)
        self._log.append((self._name, at, len(data)))
        return data

    def __enter__(self) -> _Spied:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    log: list[tuple[str, int, int]] = []
    real = Path.open

    def spied(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real(self, mode, *args, **kwargs)
        return _Spied(handle, self.name, log) if self.suffix == ".safetensors" else handle

    monkeypatch.setattr(Path, "open", spied)
    return log


def _header_ends(root: Path) -> dict[str, int]:
    checkpoint = open_source(str(root))
    return {s.file.rpartition("/")[2]: 8 + s.header_length for s in checkpoint.shards}


@pytest.mark.parametrize("shape", ["folder", "lone file", "tiny lone file"])
def test_without_the_flag_no_byte_past_a_header_is_read(
    tmp_path: Path, reads: list[tuple[str, int, int]], shape: str
) -> None:
    if shape == "tiny lone file":  # a header shorter than the 200 bytes a manifest sniff reads
        root = write_checkpoint(
            tmp_path / "c", {"model.safetensors": {"x.input_scale": ("F32", (), f32(1.0))}}
        )
    else:
        root = checkpoint(tmp_path / "c")
    ends = _header_ends(root)
    reads.clear()
    audit(str(root) if shape == "folder" else str(root / "model.safetensors"))
    assert reads, "the spy saw nothing"
    assert all(at + n <= ends[file] for file, at, n in reads), (reads, ends)


def test_with_the_flag_exactly_the_reported_bytes_are_read_past_headers(
    tmp_path: Path, reads: list[tuple[str, int, int]]
) -> None:
    root = checkpoint(tmp_path / "c")
    ends = _header_ends(root)
    reads.clear()
    report = audit(str(root), probe_scalars=True)
    data = [(file, at, n) for file, at, n in reads if at + n > ends[file]]
    assert all(at >= ends[file] and n <= 4 * BOUND for file, at, n in data)
    assert sum(n for _, _, n in data) == report.probe.bytes_read == 56
    assert len(data) == report.probe.tensors_read


def test_local_reads_are_bounded_to_the_checkpoint(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "c")
    read = open_source(str(root)).read_bytes
    assert isinstance(read, LocalBytes)
    assert len(read("model.safetensors", 0, 8)) == 8
    with pytest.raises(SourceSpecError):
        read("../elsewhere.safetensors", 0, 8)
    with pytest.raises(SourceSpecError):
        read("model.safetensors", 0, 10**9)
    size = (root / "model.safetensors").stat().st_size
    with pytest.raises(FetchError):
        read("model.safetensors", size - 2, 4)
    assert open_source(str(MANIFESTS / "seed-mtp-w4a16.manifest.json")).read_bytes is None
