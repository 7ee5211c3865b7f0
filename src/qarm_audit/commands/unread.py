"""What the audit did not read, named: a checkpoint whose tensors were not read is never
clean, and weight files beside the shards read (a second layout, shards no index names) are
refused or named (the files themselves are found by ``sources/unread.py``)."""

from __future__ import annotations

from ..findings import Finding, finding
from ..report.group import plural
from ..sources import Checkpoint
from ..sources.checkpoint import INDEX_FILE
from ..sources.unread import second_layout, unindexed_shards, unread_of


def unread_findings(checkpoint: Checkpoint) -> list[Finding]:
    """Nothing unread passes: a checkpoint whose tensors were not read is never clean, and
    weight files beside the ones read are named."""
    origin = checkpoint.origin
    if origin.kind == "declaration":
        return []
    offline = (
        [
            finding(
                "offline-cache",
                f"{origin.repo}@{origin.revision} was read from the Hub cache (HF_HUB_OFFLINE), "
                "not from the Hub: the file list and headers are those an earlier online audit "
                "or `hf download` stored",
            )
        ]
        if origin.kind == "hub-offline"
        else []
    )
    return offline + _unread_of(checkpoint)


def _unindexed(shards: list[str], *, named: bool) -> list[Finding]:
    """One index-disagrees refusal per shard beside the index that it does not name."""
    said = (
        "does not name it: a loader that follows the index never reads it"
        if named
        else "names no shard (its weight_map is empty or names none of them): a loader that "
        "follows the index reads no tensor"
    )
    return [
        finding(
            "index-disagrees",
            f"{shard} sits beside {INDEX_FILE}, which {said}",
            tensor=shard,
        )
        for shard in shards
    ]


def _unread_of(checkpoint: Checkpoint) -> list[Finding]:
    origin = checkpoint.origin
    read = {shard.file for shard in checkpoint.shards}
    unread = unread_of(checkpoint)
    listed = ", ".join(unread[:10]) + (f" and {len(unread) - 10} more" if len(unread) > 10 else "")
    tensors = sum(len(shard.tensors) for shard in checkpoint.shards)
    has_index = checkpoint.index_text is not None or bool(checkpoint.derived_index)
    unindexed = _unindexed(unindexed_shards(unread, read if has_index else None), named=bool(read))
    if tensors == 0:
        where = f"; weight files qarm does not read: {listed}" if unread else ""
        return [
            finding(
                "weights-unread",
                f"{origin.location}: no tensor was read ({plural(len(read), 'safetensors shard')}, "
                f"0 tensors){where}; nothing the declaration says was checked",
            ),
            *unindexed,
        ]
    out: list[Finding] = list(unindexed)
    single = second_layout(unread, has_index)
    if single is not None:
        out.append(
            finding(
                "second-layout",
                f"{single} sits beside {INDEX_FILE} and was not read: transformers loads the "
                "single file first, vLLM the index's shards",
                tensor=single,
            )
        )
    rest = [f for f in unread if f != single and not any(f == u.tensor for u in unindexed)]
    if rest:
        shown = ", ".join(rest[:10]) + (f" and {len(rest) - 10} more" if len(rest) > 10 else "")
        out.append(
            finding(
                "weight-files-unread",
                f"{plural(len(rest), 'weight file')} beside the {plural(len(read), 'shard')} read "
                f"{'was' if len(rest) == 1 else 'were'} not audited: {shown}",
            )
        )
    return out
