"""Record SGLang's own answers for compressed-tensors routed experts: which MoE scheme its
``CompressedTensorsConfig.get_moe_scheme`` builds for a declared scheme, or what it raises.

Reads the pinned SGLang release's source from its wheel at run time (``ast``, never imported,
no torch), takes out the decision functions (``get_moe_scheme`` and the predicates it calls) and
the ``__init__`` of the MoE schemes that check their arguments, compiles them in a namespace of
stand-ins (the platform's capability, ``--moe-runner-backend auto``, CUDA: not NPU, HIP or XPU)
and runs them on declarations parsed by compressed-tensors' own ``QuantizationArgs``, as SGLang
parses them. No SGLang code is written anywhere: the output is the answers, with the release and
a citation per function. tests/test_sglang_moe_answers.py compares qarm's SGLang rules with
them.

    pip download --no-deps sglang==0.5.23 -d /tmp/rel
    python scripts/derive_sglang_moe_answers.py --wheel /tmp/rel/sglang-0.5.23-*.whl
    python scripts/derive_sglang_moe_answers.py --wheel /tmp/rel/sglang-0.5.23-*.whl --check

What the driver follows rather than compiles (cited in the output): ``get_quant_method``'s
dispatch of a FusedMoE layer (``Mxfp4MoEMethod`` where ``_is_mxfp4_moe`` holds, outside NPUs,
before ``get_moe_scheme``), and ``get_scheme_dict``, which hands ``get_moe_scheme`` the declared
group's weights, input activations and format for expert 0's projections.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

from compressed_tensors.quantization import (
    ActivationOrdering,
    QuantizationArgs,
    QuantizationStrategy,
    QuantizationType,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "sglang-0.5.23-moe-answers.json"
RELEASE = "0.5.23"
FORMAT = "qarm-sglang-moe-answers/1"
GPUS = (80, 90, 100, 120)

CT = "sglang/srt/layers/quantization/compressed_tensors/"
CONFIG = CT + "compressed_tensors.py"
SCHEMES = CT + "schemes/"
WNA16 = SCHEMES + "compressed_tensors_wNa16.py"
# (file, qualified name): compiled and run exactly as the release has them.
FUNCTIONS: list[tuple[str, str]] = [
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
# MoE schemes whose constructor (or capability) checks the declaration, compiled likewise.
CHECKED: dict[str, tuple[str, list[str]]] = {
    "CompressedTensorsWNA16MoE": (SCHEMES + "compressed_tensors_wNa16_moe.py", ["__init__"]),
    "CompressedTensorsW8A8Fp8MoE": (SCHEMES + "compressed_tensors_w8a8_fp8_moe.py", ["__init__"]),
    "CompressedTensorsW4AFP8MoE": (SCHEMES + "compressed_tensors_w4a8_fp8_moe.py", ["__init__"]),
    "CompressedTensorsW4A4Nvfp4MoE": (
        SCHEMES + "compressed_tensors_w4a4_nvfp4_moe.py",
        ["get_min_capability"],
    ),
}
SUBCLASSES = {"CompressedTensorsWNA16TritonMoE": "CompressedTensorsWNA16MoE"}
FOLLOWED: list[tuple[str, str]] = [
    (CONFIG, "CompressedTensorsConfig.get_quant_method"),
    (CONFIG, "CompressedTensorsConfig.get_scheme_dict"),
]


class Wheel:
    """The release's wheel (or an unpacked copy of it), read as text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None

    def read(self, name: str) -> str:
        if self._zip is not None:
            return self._zip.read(name).decode("utf-8")
        return (self.path / name).read_text("utf-8")

    def release(self) -> str:
        for node in ast.parse(self.read("sglang/_version.py")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
            ):
                return str(ast.literal_eval(node.value))
        raise SystemExit("no __version__ in sglang/_version.py")


def _find(tree: ast.Module, qualname: str, where: str) -> ast.stmt:
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for part in qualname.split("."):
        node = next(
            (n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part),
            None,
        )
        if node is None:
            raise SystemExit(f"{qualname} not found in {where}: the release changed")
        body = node.body if isinstance(node, ast.ClassDef) else []
    assert node is not None
    return node


def _bare(node: ast.FunctionDef) -> ast.FunctionDef:
    """The function without annotations or decorators (they name torch-bound types)."""
    node.returns = None
    node.decorator_list = []
    for arg in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
        arg.annotation = None
    for extra in (node.args.vararg, node.args.kwarg):
        if extra is not None:
            extra.annotation = None
    return node


def _compile(node: ast.stmt, where: str, namespace: dict[str, Any]) -> Any:
    if not isinstance(node, ast.FunctionDef):
        raise SystemExit(f"{where}: {ast.dump(node)[:60]} is no function")
    module = ast.Module(body=[_bare(node)], type_ignores=[])
    exec(compile(ast.fix_missing_locations(module), where, "exec"), namespace)
    return namespace[node.name]


def _bits_supported(wheel: Wheel) -> list[int]:
    """``WNA16_SUPPORTED_BITS``: the keys of ``WNA16_SUPPORTED_TYPES_MAP``, read from the AST."""
    tree = ast.parse(wheel.read(WNA16))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id == "WNA16_SUPPORTED_TYPES_MAP"
                for t in node.targets
            )
            and isinstance(node.value, ast.Dict)
        ):
            return [ast.literal_eval(k) for k in node.value.keys if k is not None]
    raise SystemExit(f"WNA16_SUPPORTED_TYPES_MAP not found in {WNA16}")


class _Backend:
    """``--moe-runner-backend auto``."""

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


class _Recorded(Exception):
    """A scheme was built: its class name."""


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

    return {
        "QuantizationType": QuantizationType,
        "QuantizationStrategy": QuantizationStrategy,
        "ActivationOrdering": ActivationOrdering,
        "CompressionFormat": CompressionFormat,
        "WNA16_SUPPORTED_BITS": _bits_supported(wheel),
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
    """Every scheme class get_moe_scheme names, as a stand-in that records its name; those of
    CHECKED run the release's own checks first."""
    tree = ast.parse(wheel.read(CONFIG))
    method = _find(tree, "CompressedTensorsConfig.get_moe_scheme", CONFIG)
    names = sorted(
        {
            n.func.id
            for n in ast.walk(method)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id[0].isupper()
            and not hasattr(builtins, n.func.id)
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
                function = _compile(_find(source, f"{base}.{member}", path), path, dict(namespace))
                capability = member == "get_min_capability"
                attrs[member] = classmethod(function) if capability else function
        out[name] = type(name, (), attrs)
    return out


def _config(wheel: Wheel, gpu: int) -> tuple[type, dict[str, type]]:
    namespace = _namespace(wheel, gpu)
    schemes = _schemes(wheel, namespace)
    namespace.update(schemes)
    tree = ast.parse(wheel.read(CONFIG))
    methods = {
        qualname.rpartition(".")[2]: _compile(_find(tree, qualname, CONFIG), CONFIG, namespace)
        for path, qualname in FUNCTIONS
    }
    methods["_add_fused_moe_to_target_scheme_map"] = lambda self: None
    methods["get_scheme_dict"] = lambda self, layer, name: self.scheme_dict
    return type("CompressedTensorsConfig", (), methods), schemes


def _args(spec: dict[str, Any] | None) -> QuantizationArgs | None:
    return None if spec is None else QuantizationArgs.model_validate(spec)


def answer(wheel: Wheel, case: dict[str, Any], gpu: int) -> dict[str, Any]:
    """What SGLang does for the routed experts of ``case`` on ``gpu``."""
    config_class, _ = _config(wheel, gpu)
    config = config_class()
    weights, activations = _args(case["weights"]), _args(case["input_activations"])
    scheme = {"weights": weights, "input_activations": activations, "format": case["format"]}
    config.quant_format = case["config_format"]
    config.target_scheme_map = {case["target"]: scheme}
    config.scheme_dict = scheme
    # get_quant_method: a FusedMoE layer takes Mxfp4MoEMethod where _is_mxfp4_moe holds
    if config._is_mxfp4_moe(layer_name="model.layers.0.mlp.experts"):
        return {"method": "Mxfp4MoEMethod"}
    try:
        built = config.get_moe_scheme(layer=None, layer_name="model.layers.0.mlp.experts")
    except Exception as exc:  # the engine's refusal is the answer
        return {"raises": type(exc).__name__, "message": str(exc)}
    return {"scheme": type(built).__name__}


def _int(bits: int, strategy: str, group: int | None = None, **more: Any) -> dict[str, Any]:
    return {"num_bits": bits, "type": "int", "strategy": strategy, "group_size": group, **more}


def _float(bits: int, strategy: str, group: int | None = None, **more: Any) -> dict[str, Any]:
    return {"num_bits": bits, "type": "float", "strategy": strategy, "group_size": group, **more}


def cases() -> list[dict[str, Any]]:
    """Declarations of routed experts: one config group, its format, the config's format."""
    out: list[dict[str, Any]] = []

    def add(weights: Any, activations: Any, fmt: str, config_format: str | None = None) -> None:
        out.extend(
            {
                "weights": weights,
                "input_activations": activations,
                "format": fmt,
                "config_format": config_format or fmt,
                "target": target,
            }
            for target in ("Linear", "re:.*mlp\\.experts\\..*")
        )

    token_int = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}
    token_float = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
    tensor_int = {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": False}
    tensor_float = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}
    for bits in (4, 8, 2):
        for symmetric in (True, False):
            for group in (32, 64, 128):
                for actorder in (None, "group"):
                    weights = _int(bits, "group", group, symmetric=symmetric, actorder=actorder)
                    add(weights, None, "pack-quantized")
            add(_int(bits, "channel", symmetric=symmetric), None, "pack-quantized")
    add(_int(4, "group", 128), None, "pack-quantized", "mixed-precision")
    add(_int(8, "channel"), None, "int-quantized")
    add(_int(4, "tensor"), None, "pack-quantized")
    add(_int(8, "channel"), token_int, "int-quantized")
    add(_int(8, "tensor"), token_int, "int-quantized")
    add(_int(8, "channel"), tensor_int, "int-quantized")
    add(_int(8, "channel", symmetric=False), token_int, "int-quantized")
    for activations in (token_float, token_int):
        add(_int(4, "group", 128), activations, "int-quantized")
        add(_int(4, "group", 128), activations, "pack-quantized")
    add(_float(8, "group", 32), None, "mxfp8-quantized")
    add(_float(8, "group", 32), _float(8, "group", 32, dynamic=True), "mxfp8-quantized")
    add(_float(4, "group", 32), None, "mxfp4-pack-quantized")
    add(_float(4, "group", 32), _float(4, "group", 32, dynamic=True), "mxfp4-pack-quantized")
    add(_float(4, "group", 32), None, "mxfp4-pack-quantized", "mixed-precision")
    add(_float(4, "tensor_group", 16), None, "nvfp4-pack-quantized")
    nvfp4_act = _float(4, "tensor_group", 16, dynamic="local")
    add(_float(4, "tensor_group", 16), nvfp4_act, "nvfp4-pack-quantized")
    add(_float(8, "channel"), token_float, "float-quantized")
    add(_float(8, "tensor"), tensor_float, "float-quantized")
    add(
        _float(8, "block", block_structure=[128, 128]),
        _float(8, "group", 128, dynamic=True),
        "float-quantized",
    )
    add(_float(8, "channel"), tensor_float, "float-quantized")
    add(_float(8, "tensor"), token_float, "float-quantized")
    add(_float(8, "channel"), None, "float-quantized")
    return out


def derive(wheel: Wheel) -> dict[str, Any]:
    release = wheel.release()
    if release != RELEASE:
        raise SystemExit(f"the wheel is sglang {release}, this script records {RELEASE}")
    cite = f"sgl-project/sglang python/{{}}@v{release}"
    answers = [
        {"case": case, "gpu": gpu, "answer": answer(wheel, case, gpu)}
        for case in cases()
        for gpu in GPUS
    ]
    return {
        "format": FORMAT,
        "release": release,
        "compiled": [f"{cite.format(path)} {name}" for path, name in FUNCTIONS]
        + [f"{cite.format(path)} {cls}.{m}" for cls, (path, ms) in CHECKED.items() for m in ms],
        "followed": [f"{cite.format(path)} {name}" for path, name in FOLLOWED],
        "answers": answers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = json.dumps(derive(Wheel(args.wheel)), indent=1, sort_keys=True) + "\n"
    if args.check:
        if not OUT.is_file() or OUT.read_text("utf-8") != text:
            print(f"{OUT} is stale", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
