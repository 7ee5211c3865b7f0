"""Prove the shards form one consistent checkpoint: index and headers agree, by name, both ways.

This is semantic verification (every header parsed and laid out, sizes accounted for); it is
not a content hash, and the report says so.
"""

from __future__ import annotations

from ..errors import IntegrityError, ShardIndexError
from ..findings import Finding, finding
from ..report.model import IntegrityInfo, ShardCheck
from .checkpoint import INDEX_FILE, Checkpoint, header_owners
from .index import load_index, names_each_shard

VERIFICATION = (
    "semantic: every header parsed; data_offsets contiguous from 0 with no overlap or hole; "
    "dtype x shape = bytes; 8 + header + data = file size; index and headers agree by name. "
    "Not a content hash."
)


def _names(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def check_integrity(checkpoint: Checkpoint) -> tuple[IntegrityInfo | None, list[Finding]]:
    if not checkpoint.shards:
        return None, []
    parsed = checkpoint.parsed_index
    if parsed is not None and (
        parsed.from_headers or names_each_shard(parsed.weight_map, checkpoint.shards)
    ):
        owner = parsed.weight_map  # the same mapping, proven without building it again
    else:
        owner = header_owners(checkpoint.shards)
    if len(owner) != sum(len(shard.tensors) for shard in checkpoint.shards):
        first: dict[str, str] = {}
        for shard in checkpoint.shards:
            for entry in shard.tensors:
                previous = first.get(entry.name)
                if previous is not None:
                    where = "this shard" if previous == shard.file else previous
                    raise IntegrityError(
                        shard.file, f"tensor {entry.name!r} is also in {where}: duplicate name"
                    )
                first[entry.name] = shard.file
    tensor_bytes = sum(shard.data_length for shard in checkpoint.shards)
    shards = [
        ShardCheck(
            file=s.file,
            size=s.size,
            header_length=s.header_length,
            tensors=len(s.tensors),
            data_bytes=s.data_length,
            remote_sha256=s.remote_sha256,
        )
        for s in checkpoint.shards
    ]
    checks = [
        f"{s.file}: 8 + {s.header_length} + {s.data_length} = {s.size}" for s in checkpoint.shards
    ]
    findings: list[Finding] = []
    index_line: str | None = None
    total_size: int | None = None
    index = load_index(checkpoint, owner)
    if index is not None:
        listed = set(index.shard_files)
        present = {s.file for s in checkpoint.shards}
        missing = sorted(listed - present)
        if missing:
            raise ShardIndexError(
                INDEX_FILE, f"names shards not in the checkpoint: {_names(missing)}"
            )
        # What cannot be parsed stops the run; what disagrees but can be read is refused by
        # name in a full report: every other module is still audited.
        unindexed = sorted(present - listed)
        if unindexed:
            findings.append(
                finding("index-disagrees", f"{INDEX_FILE} does not name shards {_names(unindexed)}")
            )
        # one C-level comparison (none for a derived index); details only on failure
        agree = index.weight_map is owner or index.weight_map == owner
        wrong = [] if agree else sorted(n for n, f in index.weight_map.items() if owner.get(n) != f)
        if wrong:
            detail = [
                f"{n} -> {index.weight_map[n]} (header: {owner.get(n, 'absent')})"
                for n in wrong[:3]
            ]
            findings.append(
                finding(
                    "index-disagrees",
                    f"{INDEX_FILE}: {len(wrong)} weight_map names are not in the header of the "
                    "shard they name: " + "; ".join(detail),
                    tensor=wrong[0],
                )
            )
        unlisted = [] if agree else sorted(set(owner) - set(index.weight_map))
        if unlisted:
            findings.append(
                finding(
                    "index-disagrees",
                    f"{INDEX_FILE}: {len(unlisted)} header names are not in weight_map: "
                    f"{_names(unlisted)}; a loader that follows the index never reads them",
                    tensor=unlisted[0],
                )
            )
        total_size = index.total_size
        overhead = sum(8 + s.header_length for s in checkpoint.shards)
        file_bytes = sum(s.size for s in checkpoint.shards)
        index_line = (
            f"{len(index.weight_map)} names in {len(listed)} shards; shards total {file_bytes} "
            f"bytes = {tensor_bytes} tensor bytes + {overhead} header bytes "
            f"(8-byte prefixes + headers)"
        )
        if total_size is not None:
            if total_size == tensor_bytes:
                index_line += f"; metadata.total_size {total_size} = tensor bytes"
            else:
                index_line += f"; metadata.total_size {total_size} != {tensor_bytes} tensor bytes"
                findings.append(
                    finding(
                        "index-total-size",
                        f"{INDEX_FILE} metadata.total_size is {total_size}, tensors hold "
                        f"{tensor_bytes} bytes (difference {total_size - tensor_bytes})",
                    )
                )
    info = IntegrityInfo(
        verification=VERIFICATION,
        shards=shards,
        index=index_line,
        total_size=total_size,
        tensor_bytes=tensor_bytes,
        checks=checks,
    )
    return info, findings
