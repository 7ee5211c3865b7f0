"""``model.safetensors.index.json``: which shard holds which tensor."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import HeaderError, ShardIndexError
from .checkpoint import INDEX_FILE
from .header import loads_strict


@dataclass(frozen=True)
class ShardIndex:
    weight_map: dict[str, str]
    total_size: int | None

    @property
    def shard_files(self) -> list[str]:
        """Shard names in first-mention order, each once."""
        return list(dict.fromkeys(self.weight_map.values()))


class _IndexJSONError(HeaderError, ShardIndexError):
    """JSON-level failure inside the index, raised under its index name."""


def parse_index(text: str, where: str = INDEX_FILE) -> ShardIndex:
    """Parse the index, refusing duplicate names and unsafe shard paths."""
    document = loads_strict(text, where, error=_IndexJSONError)
    if not isinstance(document, dict):
        raise ShardIndexError(where, "index is not a JSON object")
    weight_map = document.get("weight_map")
    if not isinstance(weight_map, dict) or not set(map(type, weight_map.values())) <= {str}:
        raise ShardIndexError(where, "weight_map must map tensor names to shard file names")
    for shard in dict.fromkeys(weight_map.values()):
        check_shard_name(shard, where)
    total_size: int | None = None
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and "total_size" in metadata:
        raw = metadata["total_size"]
        if type(raw) is int and raw >= 0:
            total_size = raw
        elif type(raw) is float and raw.is_integer() and raw >= 0:
            total_size = int(raw)
        else:
            raise ShardIndexError(where, f"metadata.total_size {raw!r} is not a byte count")
    return ShardIndex(weight_map=weight_map, total_size=total_size)


def check_shard_name(name: str, where: str) -> None:
    """A shard is a plain relative name: no absolute path, no ``..``, no backslash, no NUL."""
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or (len(name) > 1 and name[1] == ":")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ShardIndexError(where, f"shard file name {name!r} is not a plain relative name")
    if not name.endswith(".safetensors"):
        raise ShardIndexError(where, f"shard file name {name!r} does not end in .safetensors")
