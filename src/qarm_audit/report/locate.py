"""Where a finding lands in the repository, for a GitHub annotation's ``file=`` and ``line=``.

* A manifest: the manifest file, at the tensor's row (or the first row of the module's
  tensors); a declaration finding at the line its document starts.
* A folder: the shard that holds the tensor (from the index, or the folder's only shard); a
  declaration finding on the declaration file.
* A declaration file or a lone shard: that file. A Hub repository or standard input: nowhere.

Paths are relative to ``GITHUB_WORKSPACE`` (the repository root a runner checked out) or the
current folder, as GitHub reads them; a file outside it keeps the path the user typed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from .model import FindingRow, IgnoredRow, Report

Where = tuple[str | None, int | None]
Locate = Callable[[FindingRow | IgnoredRow], Where]

_DOCUMENT = re.compile(r'^ "((?:[^"\\]|\\.)+)": \[')
_DOC_PREFIX = re.compile(r"^([\w.-]+\.json)\b")


def locator(report: Report) -> Locate:
    """A function from a finding of ``report`` to its file and line (either may be None)."""
    src = report.source
    path = Path(src.location)
    if src.kind == "manifest" and src.location != "-" and path.is_file():
        return _manifest(report, path)
    if src.kind == "local" and path.is_dir():
        return _folder(report, path)
    if src.kind in ("local", "declaration") and path.is_file():
        shown = _shown(path)
        return lambda row: (shown, None)
    return lambda row: (None, None)


def source_file(source: str) -> str | None:
    """The file a source names, as an annotation's ``file=``; None for anything else."""
    path = Path(source)
    try:
        return _shown(path) if source != "-" and path.is_file() else None
    except (OSError, ValueError):
        return None


def _shown(path: Path) -> str:
    root = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    try:
        return path.resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return str(path)


def _document(report: Report, row: FindingRow | IgnoredRow) -> str:
    """The declaration file a finding without a tensor is about: the one its message names
    first (``config.json: ...``), else the one the declaration was read from."""
    named = _DOC_PREFIX.match(row.message)
    if named:
        return named.group(1)
    return (report.declaration.source or "config.json").split(":")[0].strip()


def _manifest(report: Report, path: Path) -> Locate:
    shown = _shown(path)
    rows: dict[str, int] = {}
    documents: dict[str, int] = {}
    try:
        with path.open("rb") as handle:
            gzip = handle.read(2) == b"\x1f\x8b"
            handle.seek(0)
            lines = [] if gzip else handle.read().decode("utf-8", "replace").split("\n")
    except OSError:
        lines = []
    in_shards = False
    for number, line in enumerate(lines, start=1):
        if not in_shards:
            document = _DOCUMENT.match(line)
            if document:
                documents.setdefault(json.loads(f'"{document.group(1)}"'), number)
            in_shards = line.startswith('"shards": [')
            continue
        text = line.strip().rstrip(",").removesuffix("]}").removesuffix(" ]").strip()
        if not text.startswith(('"', "[")):
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        name = value.split("\t")[0] if isinstance(value, str) else None
        if isinstance(value, list) and value and isinstance(value[0], str):
            name = value[0]
        if name is not None:
            rows.setdefault(name, number)
    modules: dict[str, int] = {}
    for name, number in rows.items():
        module = name.rpartition(".")[0]
        if number < modules.get(module, number + 1):
            modules[module] = number

    def locate(row: FindingRow | IgnoredRow) -> Where:
        if row.tensor and row.tensor in rows:
            return shown, rows[row.tensor]
        if row.module and row.module in modules:
            return shown, modules[row.module]
        if not row.tensor and not row.module:
            return shown, documents.get(_document(report, row))
        return shown, None

    return locate


def _folder(report: Report, folder: Path) -> Locate:
    weight_map: dict[str, str] = {}
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    try:
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        if isinstance(index, dict) and isinstance(index.get("weight_map"), dict):
            weight_map = {k: v for k, v in index["weight_map"].items() if isinstance(v, str)}
    except (OSError, ValueError):
        pass

    def shard_of(tensor: str) -> str | None:
        if tensor in weight_map:
            return weight_map[tensor]
        return shards[0] if len(shards) == 1 else None

    def locate(row: FindingRow | IgnoredRow) -> Where:
        if row.tensor or row.module:
            tensor = row.tensor or next(
                (t for t in weight_map if t.startswith(row.module + ".")), ""
            )
            shard = shard_of(tensor)
            return (_shown(folder / shard), None) if shard else (_shown(folder), None)
        document = folder / _document(report, row)
        return (_shown(document) if document.is_file() else _shown(folder)), None

    return locate
