"""Record SGLang's own answers for compressed-tensors layers: which scheme its
``CompressedTensorsConfig`` builds for a declared scheme on a dense Linear
(``get_linear_scheme``) and on a routed-experts layer (``get_moe_scheme``), or what it raises.

Reads the pinned SGLang release's source from its wheel at run time (``ast``, never imported, no
torch), takes out the decision functions (the two above, the predicates they call, the
capability check) and the checks of the schemes they build (``__init__`` where it checks the
declaration, ``get_min_capability``), compiles them in a namespace of stand-ins (the platform's
capability, ``--moe-runner-backend`` and ``--fp4-gemm-backend`` auto, CUDA: not NPU, HIP or XPU,
no sparsity) and runs them on declarations parsed by compressed-tensors' own
``QuantizationArgs``, as SGLang parses them. No SGLang code is written anywhere: the output is
the answers, with the release and a citation per function. tests/test_sglang_ct_answers.py
compares qarm's SGLang rules with them.

    pip download --no-deps sglang==0.5.23 -d /tmp/rel
    python scripts/derive_sglang_ct_answers.py --wheel /tmp/rel/sglang-0.5.23-*.whl
    python scripts/derive_sglang_ct_answers.py --wheel /tmp/rel/sglang-0.5.23-*.whl --check

Run it where compressed-tensors is the releases' pin (0.18.0 for 0.5.22 and 0.5.23). What the
driver follows rather than compiles (cited in the output): ``get_quant_method``'s dispatch (a
LinearBase to ``get_linear_scheme``; a FusedMoE layer to ``Mxfp4MoEMethod`` where
``_is_mxfp4_moe`` holds, outside NPUs, else ``get_moe_scheme``), and ``get_scheme_dict``, which
hands them the declared group's weights, input activations and format.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import sys
import types
from typing import Any

import engine_source
from compressed_tensors.quantization import (
    ActivationOrdering,
    QuantizationStrategy,
    QuantizationType,
)
from engine_source import (
    Wheel,
    answer_grid,
    compile_function,
    find,
    int_keyed_map,
    quant_args,
)

RELEASES = ("0.5.22", "0.5.23")
"""The releases whose answers are committed, as ``sglang-<release>-ct-answers.json``."""
FORMAT = "qarm-sglang-ct-answers/1"

CT = "sglang/srt/layers/quantization/compressed_tensors/"
CONFIG = CT + "compressed_tensors.py"
UTILS = CT + "utils.py"
SCHEMES = CT + "schemes/"
WNA16 = SCHEMES + "compressed_tensors_wNa16.py"
# (file, qualified name): compiled and run exactly as the release has them.
FUNCTIONS: list[tuple[str, str]] = [
    (CONFIG, "CompressedTensorsConfig.get_linear_scheme"),
    (CONFIG, "CompressedTensorsConfig._get_scheme_from_parts"),
    (CONFIG, "CompressedTensorsConfig._is_fp8_w8a16"),
    (CONFIG, "CompressedTensorsConfig._is_static_tensor_w8a8"),
    (CONFIG, "CompressedTensorsConfig.supports_cutlass_24"),
    (CONFIG, "CompressedTensorsConfig.get_moe_scheme"),
    (CONFIG, "CompressedTensorsConfig._is_mxfp4_moe"),
    (CONFIG, "CompressedTensorsConfig._is_wNa16_group_channel"),
    (CONFIG, "CompressedTensorsConfig._is_wna16_triton_moe_supported"),
    (CONFIG, "CompressedTensorsConfig._is_mxint4a16"),
    (CONFIG, "CompressedTensorsConfig._is_fp4a16_nvfp4"),
    (CONFIG, "CompressedTensorsConfig._is_fp4a4_nvfp4"),
    (CONFIG, "CompressedTensorsConfig._is_fp8_w8a8"),
    (CONFIG, "CompressedTensorsConfig._is_dynamic_token_w8a8"),
    (CONFIG, "CompressedTensorsConfig._is_wint4afp8"),
    (CONFIG, "CompressedTensorsConfig._is_dynamic_token_w4a8"),
    (CONFIG, "CompressedTensorsConfig._is_dynamic_token_w4"),
    (CONFIG, "CompressedTensorsConfig._check_scheme_supported"),
]
HELPERS: list[tuple[str, str]] = [(UTILS, "is_activation_quantization_format")]
# Schemes whose constructor (or capability) checks the declaration, compiled likewise.
CHECKED: dict[str, tuple[str, list[str]]] = {
    "CompressedTensorsWNA16": (WNA16, ["__init__", "get_min_capability"]),
    "CompressedTensorsW4A16Fp4": (
        SCHEMES + "compressed_tensors_w4a16_nvfp4.py",
        ["get_min_capability"],
    ),
    "CompressedTensorsW4A4Fp4": (
        SCHEMES + "compressed_tensors_w4a4_nvfp4.py",
        ["get_min_capability"],
    ),
    "CompressedTensorsW8A8Fp8": (
        SCHEMES + "compressed_tensors_w8a8_fp8.py",
        ["get_min_capability"],
    ),
    "CompressedTensorsW8A16Fp8": (
        SCHEMES + "compressed_tensors_w8a16_fp8.py",
        ["get_min_capability"],
    ),
    "CompressedTensorsW8A8Int8": (
        SCHEMES + "compressed_tensors_w8a8_int8.py",
        ["get_min_capability"],
    ),
    "CompressedTensorsWNA16MoE": (SCHEMES + "compressed_tensors_wNa16_moe.py", ["__init__"]),
    "CompressedTensorsW8A8Fp8MoE": (SCHEMES + "compressed_tensors_w8a8_fp8_moe.py", ["__init__"]),
    "CompressedTensorsW4AFP8MoE": (SCHEMES + "compressed_tensors_w4a8_fp8_moe.py", ["__init__"]),
    "CompressedTensorsW4A4Nvfp4MoE": (
        SCHEMES + "compressed_tensors_w4a4_nvfp4_moe.py",
        ["get_min_capability"],
    ),
}
SUBCLASSES = {
    "CompressedTensorsWNA16TritonMoE": "CompressedTensorsWNA16MoE",
    "XPUCompressedTensorsWNA16": "CompressedTensorsWNA16",
}
FOLLOWED: list[tuple[str, str]] = [
    (CONFIG, "CompressedTensorsConfig.get_quant_method"),
    (CONFIG, "CompressedTensorsConfig.get_scheme_dict"),
]


class _Backend:
    """``--moe-runner-backend auto``, ``--fp4-gemm-backend auto``."""

    def is_auto(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("is_"):
            return lambda: False
        raise AttributeError(name)


class _Platform:
    def __init__(self, gpu: int) -> None:
        self.is_sm100 = gpu // 10 == 10
        self.is_sm90 = gpu // 10 == 9
        self.is_sm120 = gpu // 10 == 12


class _Logger:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _namespace(wheel: Wheel, gpu: int) -> dict[str, Any]:
    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_device_capability=lambda: (gpu // 10, gpu % 10))
    )

    class DeviceCapability:
        def __init__(self, major: int, minor: int) -> None:
            self.major, self.minor = major, minor

        def to_int(self) -> int:
            return self.major * 10 + self.minor

    from compressed_tensors.config import CompressionFormat

    def find_matched_target(**kwargs: Any) -> Any:
        raise ValueError("no sparsity target")  # no sparsity_config

    return {
        "find_matched_target": find_matched_target,
        "suppress": contextlib.suppress,
        "get_fp4_gemm_runner_backend": _Backend,
        "QuantizationType": QuantizationType,
        "QuantizationStrategy": QuantizationStrategy,
        "ActivationOrdering": ActivationOrdering,
        "CompressionFormat": CompressionFormat,
        "WNA16_SUPPORTED_TYPES_MAP": int_keyed_map(wheel, WNA16, "WNA16_SUPPORTED_TYPES_MAP"),
        "WNA16_ZP_SUPPORTED_TYPES_MAP": int_keyed_map(wheel, WNA16, "WNA16_ZP_SUPPORTED_TYPES_MAP"),
        "WNA16_SUPPORTED_BITS": list(int_keyed_map(wheel, WNA16, "WNA16_SUPPORTED_TYPES_MAP")),
        "get_moe_runner_backend": _Backend,
        "get_platform": lambda: _Platform(gpu),
        "logger": _Logger(),
        "_is_npu": False,
        "_is_hip": False,
        "_is_xpu": False,
        "torch": torch,
        "DeviceCapability": DeviceCapability,
    }


def _schemes(wheel: Wheel, namespace: dict[str, Any]) -> dict[str, type]:
    """Every scheme class the two decisions name, as a stand-in that records its name; those of
    CHECKED run the release's own checks."""
    tree = ast.parse(wheel.read(CONFIG))
    methods = [
        find(tree, f"CompressedTensorsConfig.{name}", CONFIG)
        for name in ("get_moe_scheme", "_get_scheme_from_parts")
    ]
    names = sorted(
        {
            n.id
            for method in methods
            for n in ast.walk(method)
            if isinstance(n, ast.Name)
            and n.id[0].isupper()
            and not hasattr(builtins, n.id)
            and n.id not in namespace
        }
    )
    out: dict[str, type] = {}
    for name in names:
        attrs: dict[str, Any] = {"__init__": lambda self, *args, **kwargs: None}
        base = SUBCLASSES.get(name, name)
        if base in CHECKED:
            path, members = CHECKED[base]
            source = ast.parse(wheel.read(path))
            for member in members:
                node = find(source, f"{base}.{member}", path)
                attrs[member] = compile_function(node, path, dict(namespace))
        out[name] = type(name, (), attrs)
    return out


def _config(wheel: Wheel, gpu: int) -> tuple[type, dict[str, type]]:
    namespace = _namespace(wheel, gpu)
    schemes = _schemes(wheel, namespace)
    namespace.update(schemes)
    for path, name in HELPERS:
        namespace[name] = compile_function(
            find(ast.parse(wheel.read(path)), name, path), path, namespace
        )
    tree = ast.parse(wheel.read(CONFIG))
    methods = {
        qualname.rpartition(".")[2]: compile_function(
            find(tree, qualname, CONFIG), CONFIG, namespace
        )
        for path, qualname in FUNCTIONS
    }
    methods["_add_fused_moe_to_target_scheme_map"] = lambda self: None
    methods["get_scheme_dict"] = lambda self, layer, name, matched_target=None: self.scheme_dict
    return type("CompressedTensorsConfig", (), methods), schemes


def answer(wheel: Wheel, case: dict[str, Any], gpu: int, layer: str) -> dict[str, Any]:
    """What SGLang builds for ``case`` on ``gpu`` as a dense Linear or routed experts."""
    config_class, _ = _config(wheel, gpu)
    config = config_class()
    weights, activations = quant_args(case["weights"]), quant_args(case["input_activations"])
    scheme = {"weights": weights, "input_activations": activations, "format": case["format"]}
    config.quant_format = case["config_format"]
    config.target_scheme_map = {case["target"]: scheme}
    config.scheme_dict = scheme
    config.sparsity_scheme_map, config.sparsity_ignore_list = {}, []
    config.packed_modules_mapping = {}
    try:
        if layer == "dense":
            built = config.get_linear_scheme(layer=None, layer_name="model.layers.0.mlp.down_proj")
        # get_quant_method: a FusedMoE layer takes Mxfp4MoEMethod where _is_mxfp4_moe holds
        elif config._is_mxfp4_moe(layer_name="model.layers.0.mlp.experts"):
            return {"method": "Mxfp4MoEMethod"}
        else:
            built = config.get_moe_scheme(layer=None, layer_name="model.layers.0.mlp.experts")
    except Exception as exc:  # the engine's refusal is the answer
        return {"raises": type(exc).__name__, "message": str(exc)}
    return {"scheme": type(built).__name__}


def derive(wheel: Wheel) -> dict[str, Any]:
    release, answers = answer_grid(wheel, "sglang", RELEASES, answer)
    cite = f"sgl-project/sglang python/{{}}@v{release}"
    return {
        "format": FORMAT,
        "release": release,
        "compiled": [f"{cite.format(path)} {name}" for path, name in [*FUNCTIONS, *HELPERS]]
        + [f"{cite.format(path)} {cls}.{m}" for cls, (path, ms) in CHECKED.items() for m in ms],
        "followed": [f"{cite.format(path)} {name}" for path, name in FOLLOWED],
        "answers": answers,
    }


def main(argv: list[str] | None = None) -> int:
    return engine_source.main(__doc__ or "", "sglang", derive, argv)


if __name__ == "__main__":
    sys.exit(main())
