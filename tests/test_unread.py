"""Nothing unread passes: a checkpoint whose tensors were not read is never clean, and weight
files beside the shards read are named (a second layout is refused)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import write_checkpoint
from qarm_audit import audit

PRODUCER = Path(__file__).parent.parent / "fixtures" / "producers" / "modelopt-nvfp4"
DOCUMENTS = {
    name: (PRODUCER / name).read_text() for name in ("config.json", "hf_quant_config.json")
}
W = {"model.layers.0.mlp.down_proj.weight": ("BF16", (16, 16))}


def _codes(folder: Path) -> dict[str, list[str]]:
    report = audit(str(folder))
    return {
        "refusals": [r.code for r in report.refusals],
        "warnings": [w.code for w in report.warnings if w.code != "declared-arm-differs"],
    }


def test_a_folder_with_only_a_bin_file_is_refused_and_names_it(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "bin", {}, DOCUMENTS)
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 16)
    report = audit(str(folder))
    assert [r.code for r in report.refusals] == ["weights-unread"]
    assert "pytorch_model.bin" in report.refusals[0].message


def test_a_declaration_with_no_weights_at_all_is_refused(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "bare", {}, DOCUMENTS)
    assert _codes(folder)["refusals"] == ["weights-unread"]


def test_the_only_shard_in_a_subfolder_is_named(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "sub", {"original/model.safetensors": W}, DOCUMENTS)
    report = audit(str(folder))
    assert [r.code for r in report.refusals] == ["weights-unread"]
    assert "original/model.safetensors" in report.refusals[0].message


def test_a_shard_whose_header_holds_no_tensor_is_refused(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "empty", {"model.safetensors": {}}, DOCUMENTS)
    assert _codes(folder)["refusals"] == ["weights-unread"]


def test_a_single_file_beside_an_index_is_a_second_layout(tmp_path: Path) -> None:
    shards = {
        "model-00001-of-00002.safetensors": W,
        "model-00002-of-00002.safetensors": {"lm_head.weight": ("BF16", (16, 16))},
    }
    documents = {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"]})}
    folder = write_checkpoint(tmp_path / "two", shards, documents)
    write_checkpoint(folder, {"model.safetensors": W}, index=False)
    assert _codes(folder) == {"refusals": ["second-layout"], "warnings": []}


def test_a_bin_file_beside_the_shards_read_is_a_warning(tmp_path: Path) -> None:
    documents = {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"]})}
    folder = write_checkpoint(tmp_path / "both", {"model.safetensors": W}, documents)
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 16)
    assert _codes(folder) == {"refusals": [], "warnings": ["weight-files-unread"]}
