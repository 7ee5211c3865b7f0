"""Nothing unread passes: a checkpoint whose tensors were not read is never clean, and weight
files beside the shards read are named (a second layout is refused)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import write_checkpoint
from qarm_audit import audit
from qarm_audit.sources.checkpoint import INDEX_FILE

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


def test_an_index_naming_no_shard_while_shards_exist_names_both(tmp_path: Path, run: Any) -> None:
    """An index whose weight_map is {} next to a BF16 shard: 0 tensors in 0 shards, and the
    report named the shard as an unread weight file but not the index that left it out."""
    folder = write_checkpoint(
        tmp_path / "empty", {"model-00001-of-00001.safetensors": W}, DOCUMENTS
    )
    (folder / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    report = audit(str(folder))
    assert sorted(r.code for r in report.refusals) == ["index-disagrees", "weights-unread"]
    (disagrees,) = [r for r in report.refusals if r.code == "index-disagrees"]
    assert INDEX_FILE in disagrees.message and "names no shard" in disagrees.message
    assert disagrees.tensor == "model-00001-of-00001.safetensors"
    assert run("audit", folder).exit_code == 1


def test_a_shard_the_index_does_not_name_is_refused_by_name(tmp_path: Path, run: Any) -> None:
    """A top-level shard the index leaves out (an index written without it, or one name of a
    shard's only tensor deleted from weight_map) was only a weight-files-unread warning, exit
    0: vLLM and transformers load the index's shards, and its tensors are never loaded."""
    shards = {
        "model-00001-of-00002.safetensors": W,
        "model-00002-of-00002.safetensors": {"lm_head.weight": ("BF16", (16, 16))},
    }
    documents = {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"]})}
    folder = write_checkpoint(tmp_path / "left-out", shards, documents)
    index = json.loads((folder / INDEX_FILE).read_text())
    del index["weight_map"]["lm_head.weight"]
    index["metadata"]["total_size"] -= 2 * 16 * 16
    (folder / INDEX_FILE).write_text(json.dumps(index))
    report = audit(str(folder))
    assert [(r.code, r.tensor) for r in report.refusals] == [
        ("index-disagrees", "model-00002-of-00002.safetensors")
    ]
    assert "does not name it" in report.refusals[0].message
    assert [w.code for w in report.warnings] == []  # not also an unread weight file
    result = run("audit", folder, "-f", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["refusals"][0]["code"] == "index-disagrees"


def test_another_layout_beside_an_index_is_named_not_refused(tmp_path: Path) -> None:
    """Safetensors files beside an index that are no shard of its series are another layout
    (Mistral's consolidated.safetensors, a variant's shards, an adapter): transformers and
    vLLM's default loader follow the index, so they are listed as unread, as before."""
    shards = {
        "model-00001-of-00002.safetensors": W,
        "model-00002-of-00002.safetensors": {"lm_head.weight": ("BF16", (16, 16))},
    }
    documents = {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"]})}
    folder = write_checkpoint(tmp_path / "other", shards, documents)
    others = ["consolidated.safetensors", "model.fp16-00001-of-00001.safetensors"]
    for name in [*others, "model-00001-of-00003.safetensors"]:
        write_checkpoint(folder, {name: W}, index=False)
    report = audit(str(folder))
    # a shard of another count is no shard of this index's series either
    assert [r.code for r in report.refusals] == []
    (unread,) = [w for w in report.warnings if w.code == "weight-files-unread"]
    assert all(name in unread.message for name in others)


GPTQ = Path(__file__).parent.parent / "fixtures" / "producers" / "gptqmodel-gptq-w4g32-llama"


def _gptq_declared_only_beside(tmp_path: Path) -> Path:
    """gptqmodel's checkpoint as AutoGPTQ used to ship it: config.json declaring nothing, the
    declaration in quantize_config.json alone."""
    folder = tmp_path / "gptq-side"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((GPTQ / "model.safetensors").read_bytes())
    config = json.loads((GPTQ / "config.json").read_text())
    config.pop("quantization_config")
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "quantize_config.json").write_text((GPTQ / "quantize_config.json").read_text())
    return folder


def test_a_side_declaration_is_named_where_config_json_declares_nothing(tmp_path: Path) -> None:
    report = audit(str(_gptq_declared_only_beside(tmp_path)))
    assert {r.code for r in report.refusals} == {"unquantized-ships-quantized"}
    (note,) = [n for n in report.notes if n.code == "side-declaration-unread"]
    assert note.tensor == "quantize_config.json"
    assert "--quantization gptq or awq or moe_wna16" in note.message


def test_a_side_declaration_beside_a_declaring_config_json_is_not_named(tmp_path: Path) -> None:
    assert (GPTQ / "quantize_config.json").is_file()  # gptqmodel writes both
    assert "side-declaration-unread" not in {n.code for n in audit(str(GPTQ)).notes}
