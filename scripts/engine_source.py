"""What the engine-answer scripts share: a release wheel read as text, a function of it compiled
by itself among stand-ins, and the compressed-tensors declarations both engines are asked about.
Standard library and compressed-tensors only: the scripts run where the engine's pinned
compressed-tensors is installed, without qarm."""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compressed_tensors.quantization import QuantizationArgs

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
"""Where the answers are committed."""


class Wheel:
    """The release's wheel (or an unpacked copy of it), read as text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None

    def names(self) -> list[str]:
        if self._zip is not None:
            return self._zip.namelist()
        return [p.relative_to(self.path).as_posix() for p in self.path.rglob("*")]

    def read(self, name: str) -> str:
        if self._zip is not None:
            return self._zip.read(name).decode("utf-8")
        return (self.path / name).read_text("utf-8")

    def release(self, engine: str) -> str:
        """The ``__version__`` its ``<engine>/_version.py`` records."""
        for node in ast.parse(self.read(f"{engine}/_version.py")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
            ):
                return str(ast.literal_eval(node.value))
        raise SystemExit(f"no __version__ in {engine}/_version.py")


def find(tree: ast.Module, qualname: str, where: str) -> ast.stmt:
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


def compile_function(node: ast.stmt, where: str, namespace: dict[str, Any]) -> Any:
    """The function, as a staticmethod or classmethod where the release decorates it so."""
    if not isinstance(node, ast.FunctionDef):
        raise SystemExit(f"{where}: {ast.dump(node)[:60]} is no function")
    kinds = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
    module = ast.Module(body=[_bare(node)], type_ignores=[])
    exec(compile(ast.fix_missing_locations(module), where, "exec"), namespace)
    function = namespace[node.name]
    if "staticmethod" in kinds:
        return staticmethod(function)
    if "classmethod" in kinds:
        return classmethod(function)
    return function


def int_keyed_map(wheel: Wheel, path: str, name: str) -> dict[int, str]:
    """A module-level dict of ``path`` keyed by integers (``WNA16_SUPPORTED_TYPES_MAP``): its
    keys, each with its value's source text (``scalar_types.uint4b8``) in place of the value."""
    for node in ast.parse(wheel.read(path)).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {
                ast.literal_eval(k): ast.unparse(v)
                for k, v in zip(node.value.keys, node.value.values, strict=True)
                if k is not None
            }
    raise SystemExit(f"{name} not found in {path}")


def quant_args(spec: dict[str, Any] | None) -> QuantizationArgs | None:
    return None if spec is None else QuantizationArgs.model_validate(spec)


def _int(bits: int, strategy: str, group: int | None = None, **more: Any) -> dict[str, Any]:
    return {"num_bits": bits, "type": "int", "strategy": strategy, "group_size": group, **more}


def _float(bits: int, strategy: str, group: int | None = None, **more: Any) -> dict[str, Any]:
    return {"num_bits": bits, "type": "float", "strategy": strategy, "group_size": group, **more}


def cases() -> list[dict[str, Any]]:
    """Declarations: one config group, its format, the config's format, its target (a
    ``Linear`` class target or a regex over every MLP module)."""
    out: list[dict[str, Any]] = []

    def add(
        weights: Any, activations: Any, fmt: str | None, config_format: str | None = None
    ) -> None:
        out.extend(
            {
                "weights": weights,
                "input_activations": activations,
                "format": fmt,
                "config_format": config_format or fmt,
                "target": target,
            }
            for target in ("Linear", "re:.*mlp\\..*")
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
    add(_int(4, "group", 128), None, None)  # a config that states no format (an example recipe)
    add(_int(8, "channel"), None, "int-quantized")
    add(_int(4, "tensor"), None, "pack-quantized")
    add(_int(8, "channel"), token_int, "int-quantized")
    add(_int(8, "tensor"), token_int, "int-quantized")
    add(_int(8, "channel"), tensor_int, "int-quantized")
    add(_int(8, "channel", symmetric=False), token_int, "int-quantized")
    add(_int(8, "channel"), token_int, "pack-quantized")
    add(_int(8, "channel"), token_int, "fakequant")  # an obsolete format
    add(_int(8, "tensor"), tensor_int, None)
    for activations in (token_float, token_int):
        add(_int(4, "group", 128), activations, "int-quantized")
        add(_int(4, "group", 128), activations, "pack-quantized")
    # the MX formats' E8M0 scales, as llm-compressor writes them
    e8m0 = {"scale_dtype": "torch.uint8"}
    mx8, mx4 = _float(8, "group", 32, **e8m0), _float(4, "group", 32, **e8m0)
    add(mx8, None, "mxfp8-quantized")
    add(mx8, _float(8, "group", 32, dynamic=True, **e8m0), "mxfp8-quantized")
    add(mx4, None, "mxfp4-pack-quantized")
    add(mx4, _float(4, "group", 32, dynamic=True, **e8m0), "mxfp4-pack-quantized")
    add(mx4, None, "mxfp4-pack-quantized", "mixed-precision")
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


GPUS = (80, 90, 100, 120)
"""The compute capabilities each answer is asked on: sm80, sm90, sm100, sm120."""


def answer_grid(
    wheel: Wheel,
    engine: str,
    releases: tuple[str, ...],
    answer: Callable[[Wheel, dict[str, Any], int, str], dict[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """The wheel's release (one of ``releases``) and ``answer`` for every case of
    :func:`cases`, on a dense layer and on routed experts, on every GPU of :data:`GPUS`."""
    release = wheel.release(engine)
    if release not in releases:
        raise SystemExit(f"the wheel is {engine} {release}, this script records {releases}")
    answers = [
        {"case": case, "gpu": gpu, "layer": layer, "answer": answer(wheel, case, gpu, layer)}
        for case in cases()
        for layer in ("dense", "experts")
        for gpu in GPUS
    ]
    return release, answers


def main(
    doc: str, engine: str, derive: Callable[[Wheel], dict[str, Any]], argv: list[str] | None
) -> int:
    """Write (or, with ``--check``, compare) ``tests/data/<engine>-<release>-ct-answers.json``."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    data = derive(Wheel(args.wheel))
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    out = DATA / f"{engine}-{data['release']}-ct-answers.json"
    if args.check:
        if not out.is_file() or out.read_text("utf-8") != text:
            print(f"{out} is stale", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, "utf-8")
    print(f"wrote {out}")
    return 0
