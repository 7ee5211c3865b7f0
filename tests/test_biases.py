"""A bias shipped where config.json builds none is said (``bias-not-configured``); the
engine's words come from its profile. Real layouts never show one: test_architectures audits
the 125 layouts transformers saves (83 with ``attention_bias: false``) with no such warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import H, llama, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def _audit(root: Path, config: dict[str, Any], biased: tuple[str, ...], **extra: Any) -> Report:
    tensors = {**llama(2), **extra}
    for n in range(2):
        for proj in biased:
            group = "self_attn" if proj in ATTENTION else "mlp"
            tensors[f"model.layers.{n}.{group}.{proj}.bias"] = ("BF16", (H,))
    documents = {
        "config.json": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **config}
    }
    return audit(str(write_checkpoint(root, {"model.safetensors": tensors}, documents)))


def _said(report: Report) -> list[str]:
    return [w.message for w in report.warnings if w.code == "bias-not-configured"]


def test_attention_biases_the_config_has_none_for(tmp_path: Path) -> None:
    report = _audit(tmp_path / "a", {"attention_bias": False}, ATTENTION)
    assert report.verdict == "warnings"
    [message] = _said(report)
    assert message == (
        "config.json's attention_bias is false and 8 decoder modules ship a bias "
        "(model.layers.0.self_attn.k_proj.bias): the model it configures has no bias there, so "
        "a nonzero one is lost at load; vllm v0.34.0: its AutoWeightsLoader, which most models "
        "load through, ignores any unexpected .bias (as GPTQ exporters write zero ones), so the "
        "bias is dropped without a word"
    )


def test_mlp_biases_the_config_has_none_for(tmp_path: Path) -> None:
    report = _audit(tmp_path / "m", {"mlp_bias": False}, ("down_proj",))
    [message] = _said(report)
    assert message.startswith(
        "config.json's mlp_bias is false and 2 decoder modules ship a bias "
        "(model.layers.0.mlp.down_proj.bias)"
    )


def test_biases_the_config_builds(tmp_path: Path) -> None:
    assert _said(_audit(tmp_path / "t", {"attention_bias": True}, ATTENTION)) == []
    assert _said(_audit(tmp_path / "u", {}, ATTENTION)) == []  # no flag: nothing to compare
    # Llama's other switches: bias (every projection), qkv_bias (q, k and v only)
    assert _said(_audit(tmp_path / "b", {"attention_bias": False, "bias": True}, ATTENTION)) == []
    [message] = _said(
        _audit(tmp_path / "q", {"attention_bias": False, "qkv_bias": True}, ATTENTION)
    )
    assert "2 decoder modules ship a bias (model.layers.0.self_attn.o_proj.bias)" in message


def test_a_vision_tower_keeps_its_own_biases(tmp_path: Path) -> None:
    tower = {
        "vision_tower.encoder.layers.0.self_attn.q_proj.weight": ("BF16", (H, H)),
        "vision_tower.encoder.layers.0.self_attn.q_proj.bias": ("BF16", (H,)),
    }
    report = _audit(tmp_path / "v", {"attention_bias": False}, (), **tower)
    assert _said(report) == []
