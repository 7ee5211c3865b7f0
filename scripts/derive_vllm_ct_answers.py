"""Record vLLM's own answers for compressed-tensors layers: which scheme its
``CompressedTensorsConfig.get_scheme`` builds for a declared scheme on a dense Linear, and which
method ``CompressedTensorsMoEMethod.get_moe_method`` builds for routed experts, or what they
raise.

Reads the pinned vLLM release's source from its wheel at run time (``ast``, never imported),
takes out the decision functions (the two above, ``_get_scheme_from_parts``, the
predicates they call, the capability check and each scheme's ``get_min_capability``), compiles
them in a namespace of stand-ins (the platform's capability; CUDA, not ROCm or XPU; torch itself,
which compressed-tensors installs, for its dtypes) and runs
them on declarations parsed by compressed-tensors' own ``QuantizationArgs``, as vLLM parses
them. No vLLM code is written anywhere: the output is the answers, with the release and a
citation per function. tests/test_vllm_ct_answers.py compares qarm's vLLM rules with them.

    pip download --no-deps vllm==0.33.0 -d /tmp/rel
    python scripts/derive_vllm_ct_answers.py --wheel /tmp/rel/vllm-0.33.0-*.whl
    python scripts/derive_vllm_ct_answers.py --wheel /tmp/rel/vllm-0.33.0-*.whl --check

Run it where compressed-tensors is the releases' pin (0.17.0 for 0.30-0.34). The answers stop
at the scheme's construction: what a scheme's kernel selection or weight creation raises later
is not in them. What the driver follows rather than compiles (cited in the output):
``get_quant_method``'s dispatch (a LinearBase to ``get_scheme``, a FusedMoE layer to
``get_moe_method``), and ``get_scheme_dict``, which hands them the declared group's weights,
input activations and format.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from typing import Any

import engine_source
from compressed_tensors import CompressionFormat
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

RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
FORMAT = "qarm-vllm-ct-answers/1"

CT = "vllm/model_executor/layers/quantization/compressed_tensors/"
CONFIG = CT + "compressed_tensors.py"
MOE = CT + "compressed_tensors_moe/compressed_tensors_moe.py"
SCHEMES = CT + "schemes/"
WNA16 = SCHEMES + "compressed_tensors_wNa16.py"
UTILS = CT + "utils.py"
PREDICATES = (
    "_check_scheme_supported",
    "_is_nvfp4_format",
    "_is_mxfp4",
    "_is_mxfp4_w4a8_fp8",
    "_is_mxfp8",
    "_is_fp8_w4a8",
    "_is_fp8_w4a8_sm90",
    "_is_fp8_w8a8",
    "_is_fp8_w8a8_sm90",
    "_is_fp8_w8a8_sm100",
    "_is_fp8_w8a16",
    "_is_static_tensor_w8a8",
    "_is_dynamic_token_w8a8",
    "_is_dynamic_token_w4a8_int",
    "_is_wNa16_group_channel",
    "_is_wNa8o8_int",
    "_is_wNaM_int",
)
FOLLOWED = [
    (CONFIG, "CompressedTensorsConfig.get_quant_method"),
    (CONFIG, "CompressedTensorsConfig.get_scheme_dict"),
]


class _Platform:
    def __init__(self, gpu: int) -> None:
        self.gpu = gpu

    def get_device_capability(self) -> Any:
        gpu = self.gpu
        return types.SimpleNamespace(to_int=lambda: gpu, major=gpu // 10, minor=gpu % 10)

    def has_device_capability(self, capability: Any) -> bool:
        wanted = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return self.gpu >= wanted

    def is_device_capability(self, capability: Any) -> bool:
        wanted = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return self.gpu == wanted

    def is_device_capability_family(self, family: int) -> bool:
        return self.gpu // 10 == family // 10

    def __getattr__(self, name: str) -> Any:
        if name in ("is_cuda", "is_cuda_alike"):
            return lambda: True
        if name.startswith("is_"):
            return lambda *args, **kwargs: False
        raise AttributeError(name)


class _Logger:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _without_imports(node: ast.stmt) -> ast.stmt:
    """The function without its own ``import`` statements (their names are stand-ins)."""

    class Strip(ast.NodeTransformer):
        def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
            return ast.Pass()

        def visit_Import(self, node: ast.Import) -> Any:
            return ast.Pass()

    stripped: ast.stmt = Strip().visit(node)
    return stripped


def _scheme_files(wheel: Wheel) -> dict[str, str]:
    """Every class of the compressed-tensors schemes and MoE methods, to the file defining it."""
    out: dict[str, str] = {}
    names = [n for n in wheel.names() if n.startswith(CT) and n.endswith(".py")]
    for name in sorted(names):
        for node in ast.parse(wheel.read(name)).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, name)
    return out


def _namespace(wheel: Wheel, gpu: int) -> dict[str, Any]:
    import torch  # compressed-tensors' own dependency: scale dtypes are torch dtypes

    return {
        "torch": torch,
        "QuantizationType": QuantizationType,
        "QuantizationStrategy": QuantizationStrategy,
        "ActivationOrdering": ActivationOrdering,
        "CompressionFormat": CompressionFormat,
        "WNA16_SUPPORTED_BITS": list(int_keyed_map(wheel, WNA16, "WNA16_SUPPORTED_TYPES_MAP")),
        "current_platform": _Platform(gpu),
        "logger": _Logger(),
        "get_current_vllm_config": lambda: None,
        "get_current_vllm_config_or_none": lambda: None,
        "create_fp8_quant_key": lambda **kwargs: ("fp8", tuple(sorted(kwargs.items()))),
        "GroupShape": types.SimpleNamespace(PER_TOKEN="per-token"),
        "UnquantizedFusedMoEMethod": type("UnquantizedFusedMoEMethod", (), {}),
    }


def _stand_ins(wheel: Wheel, namespace: dict[str, Any], functions: list[ast.stmt]) -> None:
    """Every capitalized name the functions use that the namespace lacks: a class that records
    its name, with the release's own ``get_min_capability`` where it has one."""
    files = _scheme_files(wheel)
    names = sorted(
        {
            n.id
            for function in functions
            for n in ast.walk(function)
            if isinstance(n, ast.Name)
            and n.id[:1].isupper()
            and not hasattr(builtins, n.id)
            and n.id not in namespace
        }
    )
    for name in names:
        attrs: dict[str, Any] = {"__init__": lambda self, *args, **kwargs: None}
        path = files.get(name)
        if path is not None:
            try:
                node = find(ast.parse(wheel.read(path)), f"{name}.get_min_capability", path)
            except SystemExit:
                node = None
            if node is not None:
                attrs["get_min_capability"] = compile_function(node, path, dict(namespace))
        namespace[name] = type(name, (), attrs)


def _present(tree: ast.Module, names: tuple[str, ...]) -> list[str]:
    """The predicates this release has (an older one lacks the newer formats' tests, and its
    decisions do not call them)."""
    config = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CompressedTensorsConfig"
    )
    defined = {n.name for n in config.body if isinstance(n, ast.FunctionDef)}
    return [name for name in names if name in defined]


def _config(wheel: Wheel, gpu: int) -> tuple[Any, Any]:
    namespace = _namespace(wheel, gpu)
    tree = ast.parse(wheel.read(CONFIG))
    nodes = {
        name: find(tree, f"CompressedTensorsConfig.{name}", CONFIG)
        for name in ("get_scheme", "_get_scheme_from_parts", *_present(tree, PREDICATES))
    }
    moe = _without_imports(
        find(ast.parse(wheel.read(MOE)), "CompressedTensorsMoEMethod.get_moe_method", MOE)
    )
    utils = find(ast.parse(wheel.read(UTILS)), "is_activation_quantization_format", UTILS)
    _stand_ins(wheel, namespace, [*nodes.values(), moe])
    namespace["is_activation_quantization_format"] = compile_function(utils, UTILS, namespace)
    methods = {name: compile_function(node, CONFIG, namespace) for name, node in nodes.items()}
    methods["_add_fused_moe_to_target_scheme_map"] = lambda self: None
    methods["get_scheme_dict"] = lambda self, layer, name=None: self.scheme_dict
    methods["_fp8_dynamic_input_key"] = staticmethod(lambda input_quant: None)
    config_class = type("CompressedTensorsConfig", (), methods)
    get_moe_method = compile_function(moe, MOE, namespace)
    return config_class, get_moe_method


def answer(wheel: Wheel, case: dict[str, Any], gpu: int, layer: str) -> dict[str, Any]:
    """What vLLM builds for ``case`` on ``gpu`` as a dense Linear or routed experts."""
    config_class, get_moe_method = _config(wheel, gpu)
    config = config_class()
    weights, activations = quant_args(case["weights"]), quant_args(case["input_activations"])
    config.scheme_dict = {
        "weights": weights,
        "input_activations": activations,
        "output_activations": None,
        "format": case["format"],
    }
    config.quant_format = case["config_format"]
    config.target_scheme_map = {case["target"]: config.scheme_dict}
    experts = types.SimpleNamespace(
        ckpt_gate_proj_name="gate_proj",
        ckpt_up_proj_name="up_proj",
        ckpt_down_proj_name="down_proj",
        moe_config=None,
    )
    try:
        if layer == "dense":
            built = config.get_scheme(layer=None, layer_name="model.layers.0.mlp.down_proj")
        else:
            built = get_moe_method.__func__(config, experts, "model.layers.0.mlp.experts")
    except Exception as exc:  # the engine's refusal is the answer
        return {"raises": type(exc).__name__, "message": str(exc)}
    return {"scheme": type(built).__name__}


def derive(wheel: Wheel) -> dict[str, Any]:
    release, answers = answer_grid(wheel, "vllm", RELEASES, answer)
    cite = f"vllm-project/vllm {{}}@v{release}"
    compiled = [f"CompressedTensorsConfig.{n}" for n in ("get_scheme", "_get_scheme_from_parts")]
    compiled += [
        f"CompressedTensorsConfig.{n}" for n in _present(ast.parse(wheel.read(CONFIG)), PREDICATES)
    ]
    return {
        "format": FORMAT,
        "release": release,
        "compiled": [f"{cite.format(CONFIG)} {name}" for name in compiled]
        + [f"{cite.format(MOE)} CompressedTensorsMoEMethod.get_moe_method"]
        + [f"{cite.format(UTILS)} is_activation_quantization_format"],
        "followed": [f"{cite.format(path)} {name}" for path, name in FOLLOWED],
        "answers": answers,
    }


def main(argv: list[str] | None = None) -> int:
    return engine_source.main(__doc__ or "", "vllm", derive, argv)


if __name__ == "__main__":
    sys.exit(main())
