"""How many bytes to ask for in a shard's first read, so that most headers take one read.

A wrong size costs an extra read or a few spare bytes, never a wrong answer: the 8-byte prefix
decides how long a header is, and a header longer than the first read is completed by exactly
one second read of the remainder (headers.py).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from itertools import repeat
from operator import itemgetter
from typing import Any

from ..checkpoint import ShardHeader
from ..header import DTYPE_BITS
from .ranges import Shard

UNKNOWN_FIRST_READ = 100_000
"""First read of a shard nothing is known about (no index names, no size hint): the same
100 kB guess as huggingface_hub's ``parse_safetensors_file_metadata``."""

SPECULATIVE_CAP = 4 * 1024 * 1024
"""A first read never speculates beyond this many bytes, whatever an estimate says."""

MIN_ENTRY_BYTES = 48
"""Fewest bytes one header entry takes besides its quoted name: ``:{"dtype":"F8","shape":[],
"data_offsets":[0,0]}`` plus the separating comma. Whitespace or escapes only add to it."""

ENTRY_BYTES = 44
"""Bytes of an entry besides its quoted name, dtype, shape and offsets (compact JSON):
``:{"dtype":"","shape":[],"data_offsets":[,]}`` and the separating comma."""

MARGIN = 0.01
"""Relative margin added to an estimate learned from this checkpoint's headers."""

HINT_MARGIN = 0.05
"""Relative margin added to an estimate from the whole checkpoint's average (the first wave):
a shard's mix of names (embeddings, scalars, experts) moves its bytes per entry a few per cent
off the average, and a second read costs a round trip where 5 % costs a few kB."""

MAX_ENTRY_BYTES_HINT = 160
"""A hinted figure of bytes per entry above this is not believed (real ones are 50 to 100)."""

LEARN_SHARDS = 32
"""Headers the estimator learns from (each costs a pass over its entries)."""


def header_bytes_hint(
    safetensors: Any, shards: list[Shard], total_size: int | None = None
) -> int | None:
    """The bytes of all the shards' headers together implied by what the tensor data takes.

    The tensor data takes a known number of bytes, hence the headers (with their 8-byte
    prefixes) the rest of the shards' sizes. That number comes from the Hub's parameter count per
    dtype in ``model_info`` (the Hub reports it; Hub-compatible servers often do not), else from
    the index's ``metadata.total_size`` (the bytes of every tensor, as transformers writes it).
    Only a first-read size: a wrong hint costs an extra read or a few spare bytes, never a wrong
    answer (and an implausible one is not used).
    """
    if not shards:
        return None
    data = _parameter_bytes(safetensors)
    if data is None and isinstance(total_size, int) and not isinstance(total_size, bool):
        data = total_size if total_size >= 0 else None
    if data is None:
        return None
    length = sum(s.size - 8 for s in shards) - data
    return length if 2 * len(shards) <= length <= SPECULATIVE_CAP * len(shards) else None


def _parameter_bytes(safetensors: Any) -> int | None:
    """The bytes of tensor data the Hub's parameter count implies, if it gives one."""
    parameters = getattr(safetensors, "parameters", None) if safetensors is not None else None
    if not isinstance(parameters, Mapping) or not parameters:
        return None
    bits = 0
    for dtype, count in parameters.items():
        if dtype not in DTYPE_BITS or not isinstance(count, int) or count < 0:
            return None
        bits += count * DTYPE_BITS[dtype]
    return (bits + 7) // 8


class Estimator:
    """How many bytes to ask for in a shard's first read.

    With an index, the tensor names of every shard are known, and a header spends on each entry
    its quoted name plus some bytes for dtype, shape and offsets: at least
    :data:`MIN_ENTRY_BYTES`. What those bytes are is learned, best source first:

    1. From the headers that arrived (the first :data:`LEARN_SHARDS`): per name suffix
       (``weight``, ``weight_scale``, ``input_scale``...: the suffix decides dtype and rank,
       hence most of the length), plus the largest rest (metadata, padding) seen.
    2. Before any has arrived: from the Hub's parameter count in the listing, or the index's
       ``total_size``, either of which fixes the bytes of all the tensor data, hence of all the
       headers together (:func:`header_bytes_hint`), spread evenly over the entries, with
       :data:`HINT_MARGIN`.
    3. Without either: the lower bound, so the first read never reaches tensor data and a second
       read fetches the remainder.

    An estimate from 1 gets :data:`MARGIN` and one byte per entry on top: most shards take
    one read, and the bytes past a header stay within a few per cent of it. The first wave (one
    shard per worker) is decided by position to never use 1, so a run's requests do not depend
    on thread timing.

    Without an index, a lone shard asks for the header length the parameter count implies, and
    other shards for :data:`UNKNOWN_FIRST_READ`.
    """

    def __init__(
        self, names: Mapping[str, list[str]] | None, hint: int | None, *, shards: int
    ) -> None:
        self._names = names
        self._lock = threading.Lock()
        self._suffix: dict[str, list[int]] = {}
        self._rest = 0
        self._learned = 0
        self._base: dict[str, int] = {}
        self._leaf_counts: dict[str, Counter[str]] = {}
        # Without an index, the hint is the header length of a lone shard.
        self._lone_length = hint if names is None and shards == 1 else None
        # With one, it is spread over the entries besides their names: the figure the headers
        # teach later, averaged over the whole checkpoint.
        self._per_entry_hint: float | None = None
        if names and hint is not None:
            count = sum(len(n) for n in names.values())
            base = 0
            for file in names:
                known = self._known(file)
                base += known[1] if known else 0
            per_entry = (hint - base) / count if count else 0.0
            if MIN_ENTRY_BYTES <= per_entry <= MAX_ENTRY_BYTES_HINT:
                self._per_entry_hint = per_entry

    def _known(self, file: str) -> tuple[list[str], int] | None:
        """The shard's tensor names, and the bytes of ``{}`` and of every quoted name."""
        names = None if self._names is None else self._names.get(file)
        if not names:
            return None
        base = self._base.get(file)
        if base is None:
            base = self._base[file] = 2 + 2 * len(names) + sum(map(len, map(str.encode, names)))
        return names, base

    def _leaves(self, file: str, names: list[str]) -> Counter[str]:
        """How many of the shard's names end in each leaf (``weight``, ``weight_scale``...)."""
        with self._lock:
            counts = self._leaf_counts.get(file)
        if counts is None:
            counts = Counter(map(_LEAF, map(str.rpartition, names, repeat("."))))
            with self._lock:
                self._leaf_counts[file] = counts
        return counts

    def first_read(self, file: str, size: int, *, learned: bool = True) -> int:
        """Bytes to ask for first; ``learned=False`` ignores what arrived headers taught."""
        known = self._known(file)
        if known is not None:
            names, base = known
            with self._lock:
                means = {k: total / n for k, (total, n) in self._suffix.items()} if learned else {}
                rest = self._rest
            if means:
                fallback = max(means.values())
                leaves = self._leaves(file, names)
                entries = sum(n * means.get(leaf, fallback) for leaf, n in leaves.items())
                estimate = int((base + entries + rest) * (1 + MARGIN)) + len(names)
            elif self._per_entry_hint is not None:
                entries = len(names) * self._per_entry_hint
                estimate = int((base + entries) * (1 + HINT_MARGIN)) + len(names)
            else:
                estimate = base + len(names) * MIN_ENTRY_BYTES
            wanted = 8 + min(estimate, SPECULATIVE_CAP)
        elif self._lone_length is not None:
            wanted = 8 + self._lone_length
        else:
            wanted = UNKNOWN_FIRST_READ
        return min(size, wanted)

    def observe(self, header: ShardHeader) -> None:
        """Learn from a header that arrived (the first :data:`LEARN_SHARDS` only)."""
        known = self._known(header.file)
        if known is None or self._learned >= LEARN_SHARDS:
            return
        names, base = known
        if len(names) != len(header.tensors):
            return  # the index disagrees with this header (integrity says so): learn nothing
        sums: dict[str, list[int]] = {}
        total = 0
        for entry in header.tensors:
            length = (
                ENTRY_BYTES
                + len(entry.dtype)
                + len(",".join(map(str, entry.shape)))
                + len(str(entry.begin))
                + len(str(entry.end))
            )
            total += length
            tally = sums.setdefault(_suffix(entry.name), [0, 0])
            tally[0] += length
            tally[1] += 1
        with self._lock:
            self._learned += 1
            for key, (length, count) in sums.items():
                tally = self._suffix.setdefault(key, [0, 0])
                tally[0] += length
                tally[1] += count
            self._rest = max(self._rest, header.header_length - base - total)


def _suffix(name: str) -> str:
    return name.rpartition(".")[2]


_LEAF = itemgetter(2)
