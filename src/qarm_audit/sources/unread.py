"""Weight files a checkpoint folder holds that the audit did not read.

An engine or transformers may load weights qarm never saw: ``pytorch_model.bin`` where no
safetensors shard exists, shards in a subfolder, or a ``model.safetensors`` beside an index
(transformers loads the single file first, vLLM the index's shards). Listing them keeps a
report from calling clean what it never read.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from pathlib import Path

from .checkpoint import SINGLE_FILE, Checkpoint

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".msgpack", ".h5")
MAX_LISTED = 10_000
"""Files looked at, at most: a folder is walked only this far (a hostile tree is bounded)."""


def unread_weight_files(root: Path, read: set[str]) -> list[str]:
    """Relative paths (``/`` separators) of weight files under ``root`` not in ``read``, sorted;
    an unreadable folder lists nothing (the source reported it already)."""
    found: list[str] = []
    seen = 0
    try:
        walker = sorted(root.rglob("*"))
    except OSError:
        return []
    for path in walker:
        seen += 1
        if seen > MAX_LISTED:
            break
        if path.suffix not in WEIGHT_SUFFIXES:
            continue
        try:
            if not path.is_file():
                continue
        except OSError:
            continue
        relative = path.relative_to(root).as_posix()
        if relative not in read and not relative.startswith("."):
            found.append(relative)
    return found


def unread_of(checkpoint: Checkpoint) -> list[str]:
    """Weight files of the checkpoint the audit did not read: from the source's listing (a Hub
    commit, online or offline), else by walking a local folder; none for a manifest."""
    read = {shard.file for shard in checkpoint.shards}
    if checkpoint.listed_files is not None:
        return unlisted_weight_files(checkpoint.listed_files, read)
    if checkpoint.origin.kind in ("local", "hf-cache"):
        return unread_weight_files(Path(checkpoint.origin.location), read)
    return []


def unlisted_weight_files(listed: Iterable[str], read: set[str]) -> list[str]:
    """Weight files of a listing (``/`` separators) not in ``read``, sorted, hidden ones left out
    as for a folder."""
    return sorted(
        name
        for name in set(listed)
        if name.endswith(WEIGHT_SUFFIXES) and name not in read and not name.startswith(".")
    )


def second_layout(unread: list[str], has_index: bool) -> str | None:
    """``model.safetensors`` left unread beside an index (transformers would load it)."""
    return SINGLE_FILE if has_index and SINGLE_FILE in unread else None


def unindexed_shards(unread: list[str], indexed: Collection[str] | None) -> list[str]:
    """Top-level shards beside an index that leaves them out: of the series the index names
    (``model-00003-of-00003.safetensors`` beside an index naming only the first two), or any
    top-level shard when the index names none. A loader that follows the index never reads
    them. ``indexed``: the shards the index names; None without an index.

    Other safetensors files beside an index are another layout, listed as unread weight files:
    ``model.safetensors`` (a second layout, see :func:`second_layout`), Mistral's own
    ``consolidated.safetensors``, a variant's shards (``model.fp16-00001-of-00002``), an
    adapter."""
    if indexed is None:
        return []
    series = {m.group(1, 2) for m in map(_SERIES.fullmatch, indexed) if m is not None}
    out = []
    for name in unread:
        if "/" in name or not name.endswith(".safetensors") or name == SINGLE_FILE:
            continue
        found = _SERIES.fullmatch(name)
        if not indexed or (found is not None and found.group(1, 2) in series):
            out.append(name)
    return out


_SERIES = re.compile(r"(.+)-[0-9]{5}-of-([0-9]{5})\.safetensors")
"""A shard of a sharded checkpoint as transformers names it: prefix and shard count."""


SIDE_DECLARATIONS: dict[str, tuple[str, ...]] = {
    "quantize_config.json": ("gptq", "awq", "moe_wna16"),
    "quant_config.json": ("awq",),
}
"""AutoGPTQ's and AutoAWQ's own declaration files, and the ``--quantization`` methods whose
vLLM config reads each (``get_config_filenames`` of ``AutoGPTQConfig``, ``AutoAWQConfig`` and
``MoeWNA16Config``, alike in the 0.30-0.33 wheels:
``vllm/model_executor/layers/quantization/{auto_gptq,auto_awq,moe_wna16}.py``). vLLM reads
one only when started with such a ``--quantization`` and config.json declares nothing
(``get_quant_config``, ``model_loader/weight_utils.py``); transformers never reads them."""


def side_declarations(checkpoint: Checkpoint) -> list[str]:
    """The files of :data:`SIDE_DECLARATIONS` the checkpoint holds at its top level: from the
    source's listing, else in a local folder; none for a manifest."""
    listing = checkpoint.listed_files
    if listing is not None:
        return [name for name in SIDE_DECLARATIONS if name in set(listing)]
    if checkpoint.origin.kind in ("local", "hf-cache"):
        root = Path(checkpoint.origin.location)
        found = []
        for name in SIDE_DECLARATIONS:
            try:
                if (root / name).is_file():
                    found.append(name)
            except OSError:
                continue
        return found
    return []
