"""Findings: every verdict the audit gives, with a stable code and one sentence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    REFUSAL = "refusal"
    """The checkpoint must not be loaded as declared: an engine would run it silently wrong."""
    WARNING = "warning"
    """Worth a look; loads as declared."""
    INFO = "info"
    """Recorded for the reader; never fails a run."""

    @property
    def rank(self) -> int:
        return {"refusal": 2, "warning": 1, "info": 0}[self.value]


CODES: dict[str, tuple[Severity, str]] = {
    # cross-check of shipped tensor names against the declaration
    "spelling-mismatch": (
        Severity.REFUSAL,
        "a module ships another scheme's operand spelling than the one it is declared",
    ),
    "unquantized-ships-quantized": (
        Severity.REFUSAL,
        "a module declared unquantized (unlisted or excluded) ships quantization operands",
    ),
    "quantized-ships-unquantized": (
        Severity.REFUSAL,
        "a module declared quantized ships only a plain weight",
    ),
    "unclassified-operand": (
        Severity.REFUSAL,
        "a tensor looks like a quantization operand of no family qarm knows",
    ),
    "declared-module-missing": (
        Severity.REFUSAL,
        "a module named by the declaration ships no tensor at all",
    ),
    "fused-shards-disagree": (
        Severity.REFUSAL,
        "the shards of one fused module (q/k/v, gate/up) are declared differently",
    ),
    "experts-disagree": (
        Severity.REFUSAL,
        "the experts of one MoE layer are declared differently; the engine decides the layer once",
    ),
    "offline-cache": (
        Severity.INFO,
        "the audit was read from the Hub cache (HF_HUB_OFFLINE), not from the Hub",
    ),
    "side-declaration-unread": (
        Severity.INFO,
        "config.json declares nothing and an AutoGPTQ/AutoAWQ quantize_config.json sits beside it",
    ),
    "gpu-detected": (
        Severity.INFO,
        "no --gpu was given and the machine's GPU was detected and used",
    ),
    "engine-installed": (
        Severity.INFO,
        "the engine is installed where qarm runs and its release's profile was used",
    ),
    "engine-release-not-modelled": (
        Severity.INFO,
        "the engine installed where qarm runs is not the release the arm line is for",
    ),
    "architecture-not-modelled": (
        Severity.INFO,
        "the engine's layer tree is not modelled for this architecture: generic rules were used",
    ),
    "awq-version-unread": (
        Severity.WARNING,
        "an AWQ declaration names a kernel layout other than GEMM's, and vLLM reads no version",
    ),
    "producer-engine-disagree": (
        Severity.WARNING,
        "the producer's library and the engine resolve a module of the declaration differently",
    ),
    "operand-missing": (Severity.REFUSAL, "an operand the declared scheme requires is not shipped"),
    "index-disagrees": (
        Severity.REFUSAL,
        "the index and the shard headers disagree by name (a name, or a shard, one side lacks)",
    ),
    "index-total-size": (
        Severity.REFUSAL,
        "the index's metadata.total_size is not the sum of tensor bytes",
    ),
    "weights-unread": (
        Severity.REFUSAL,
        "a checkpoint was audited and no tensor of it was read",
    ),
    "second-layout": (
        Severity.REFUSAL,
        "a single-file model.safetensors sits unread beside an index's shards",
    ),
    "weight-files-unread": (
        Severity.WARNING,
        "weight files qarm does not read sit beside the shards it read",
    ),
    "operands-unchecked": (
        Severity.WARNING,
        "a declared scheme has modules and qarm knows no operand contract for it",
    ),
    "config-sizes-unread": (
        Severity.WARNING,
        "config.json gives no usable model size a shape check needs; that check did not run",
    ),
    "operand-unexpected": (
        Severity.REFUSAL,
        "a module declared quantized ships a tensor its scheme's producer does not write",
    ),
    "operand-dtype": (Severity.REFUSAL, "an operand's dtype contradicts the declared scheme"),
    "operand-shape": (Severity.REFUSAL, "an operand's shape contradicts the declared scheme"),
    "experts-incomplete": (
        Severity.REFUSAL,
        "a MoE layer lacks a routed expert, or a projection of one, that config.json counts",
    ),
    "layers-incomplete": (
        Severity.REFUSAL,
        "a decoder layer between the first and the last (or that num_hidden_layers counts) "
        "ships no tensor",
    ),
    "block-shape-indivisible": (
        Severity.REFUSAL,
        "a block-FP8 fused or MoE layer's shard size is no multiple of the weight block",
    ),
    "no-arm": (Severity.REFUSAL, "the engine profile has no arm for the declared algorithm"),
    "declaration-unreadable": (
        Severity.REFUSAL,
        "a quantization is declared in a form qarm cannot read, so nothing was resolved",
    ),
    "engine-refuses-declaration": (
        Severity.REFUSAL,
        "the engine refuses the declaration itself at load, before building any layer",
    ),
    "declared-arm-differs": (
        Severity.WARNING,
        "the engine profile executes another arm than the one declared",
    ),
    "no-arm-on-some-gpus": (
        Severity.INFO,
        "with no GPU given or detected, the engine has no arm for a scheme on part of the "
        "GPU range",
    ),
    "arm-unknown": (
        Severity.WARNING,
        "the engine profile does not model what the engine runs for a declared scheme: "
        "nothing vouches that it loads",
    ),
    "arm-unknown-on-some-gpus": (
        Severity.INFO,
        "with no GPU given or detected, the engine profile does not model what the engine runs "
        "for a declared scheme on part of the GPU range",
    ),
    "arm-differs-on-some-gpus": (
        Severity.INFO,
        "with no GPU given or detected, the engine executes another arm than the declared one "
        "on part of the GPU range",
    ),
    # declarations
    "declaration-disagreement": (
        Severity.WARNING,
        "config.json and hf_quant_config.json declare different things",
    ),
    "stale-declaration": (
        Severity.WARNING,
        "a second declaration file of another family sits beside the one that wins",
    ),
    "unknown-keys": (
        Severity.INFO,
        "a declaration carries keys qarm does not interpret; they are kept and listed",
    ),
    "lowercase-algo": (Severity.INFO, "a ModelOpt algorithm is written in lower case"),
    "substring-exclude": (
        Severity.WARNING,
        "a module is excluded only by vLLM's raw-substring stage",
    ),
    "prefix-children-disagree": (
        Severity.WARNING,
        "a container resolved by prefix scan has listed children of several algorithms",
    ),
    "target-unmatched": (
        Severity.WARNING,
        "a compressed-tensors target or ModelOpt layer entry matches no module",
    ),
    "transform-not-applied": (
        Severity.REFUSAL,
        "the engine never applies an online transform the weights were written for",
    ),
    "config-group-skipped": (
        Severity.WARNING,
        "the engine drops a compressed-tensors config group before matching any layer",
    ),
    # what the config builds
    "bias-not-configured": (
        Severity.WARNING,
        "decoder projections ship a bias where config.json's attention_bias or mlp_bias is false",
    ),
    "layer-modules-differ": (
        Severity.WARNING,
        "one layer lacks modules that other layers of its kind ship beside the same modules",
    ),
    # KV cache
    "kv-scales-missing": (
        Severity.WARNING,
        "a quantized KV cache is declared and no k/v scale is shipped",
    ),
    "kv-scale-shape": (
        Severity.REFUSAL,
        "a KV-cache scale is not the scalar (or per-KV-head vector) the engine loads",
    ),
    "kv-k-scale-missing": (
        Severity.REFUSAL,
        "an attention layer ships a v_scale and no k_scale; the engine's KV-cache method asserts",
    ),
    "kv-scales-partial": (
        Severity.WARNING,
        "some attention layers ship no KV scale, or only one of k and v; the engine fills in",
    ),
    "operand-unloaded": (
        Severity.REFUSAL,
        "the engine's weight loader does not load an operand the executed arm needs (it renames "
        "it to a parameter the arm does not register): the layer computes with its initial value",
    ),
    "kv-scales-unloaded": (
        Severity.WARNING,
        "a quantized KV cache is declared and its shipped k/v scales are not loaded: the engine "
        "quantizes the KV cache with scales of 1.0",
    ),
    "kv-cache-ignored": (
        Severity.WARNING,
        "the engine ignores the declared KV-cache quantization: its KV cache is the model's dtype",
    ),
    "kv-scale-on-logits": (
        Severity.REFUSAL,
        "the engine's default attention backend writes the FP8 KV cache without a scale and "
        "multiplies the attention logits by the loaded k_scale, and a shipped k_scale read by "
        "--probe-scalars is not 1.0",
    ),
    "kv-scale-on-logits-unread": (
        Severity.WARNING,
        "the engine's default attention backend multiplies the attention logits by the loaded "
        "k_scale and writes the FP8 KV cache without it; the shipped values were not read",
    ),
    "kv-scales-undeclared": (
        Severity.INFO,
        "k/v scales are shipped but no quantized KV cache is declared",
    ),
    # activation scales
    "input-scale-unread": (
        Severity.INFO,
        "input scales are shipped for a weight-only declaration and are not read",
    ),
    # scale values (read only with --probe-scalars)
    "scale-nonfinite": (
        Severity.REFUSAL,
        "a probed scale tensor holds NaN or an infinity",
    ),
    "scale-negative": (
        Severity.REFUSAL,
        "a probed scale tensor holds a negative value",
    ),
    "scale-zero": (
        Severity.REFUSAL,
        "a probed scale tensor holds zero where no engine can mask it",
    ),
    "expert-scale-zero": (
        Severity.WARNING,
        "a routed expert's activation scale is zero while its siblings' are not",
    ),
    "fused-scales-differ": (
        Severity.WARNING,
        "fused partners (q/k/v, gate/up) ship different global or activation scales",
    ),
    "dequantized-on-load": (
        Severity.INFO,
        "a layer the engine builds without a quant config ships an FP8 weight, which the "
        "engine's loader dequantizes with its scale as it loads",
    ),
    "scales-not-read": (
        Severity.INFO,
        "--probe-scalars was asked and the source holds no tensor bytes to read",
    ),
    # policy
    "ignore-unmatched": (
        Severity.INFO,
        "an ignore rule (qarm.toml, pyproject.toml or --ignore) matched no finding",
    ),
}
"""Every finding code, its severity and what it means. Codes are a public contract."""


@dataclass(frozen=True, order=True)
class Finding:
    code: str
    module: str
    tensor: str
    message: str

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]


def finding(code: str, message: str, *, module: str = "", tensor: str = "") -> Finding:
    if code not in CODES:
        raise KeyError(code)
    return Finding(code=code, module=module, tensor=tensor, message=message)
