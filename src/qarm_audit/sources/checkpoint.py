"""What a checkpoint is made of, as far as an audit goes: documents and headers, no weights."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar

DECLARATION_FILES = ("config.json", "hf_quant_config.json", "quantization_config.json")
"""Documents that can declare a quantization, read verbatim when present."""

ReadBytes = Callable[[str, int, int], bytes]
"""``read_bytes(file, start, length)``: exactly ``length`` bytes of shard ``file`` from absolute
offset ``start`` (the 8-byte prefix and the header included in the count). A source that can read
tensor bytes provides one; only ``qarm audit --probe-scalars`` calls it, for a few bytes each."""

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class TensorEntry(NamedTuple):
    """One entry of a safetensors header. A tuple: a million of these must stay cheap."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class ShardIndex:
    weight_map: Mapping[str, str]
    total_size: int | None
    from_headers: bool = False
    """``weight_map`` is proven to be every header name -> its shard (see
    :func:`index_of_headers`), or is taken to be while that is checked aside (see
    :func:`index_in_file_order`; a checkpoint read so is read again where the check fails):
    the integrity check need not look each name up again."""

    @cached_property
    def shard_files(self) -> list[str]:
        """Shard names in first-mention order, each once."""
        if isinstance(self.weight_map, HeaderOwners):
            return [shard.file for shard in self.weight_map.shards]
        return list(dict.fromkeys(self.weight_map.values()))


def header_owners(shards: Iterable[ShardHeader]) -> dict[str, str]:
    """Every header name -> the shard whose header lists it (the last one, for a duplicate)."""
    owner: dict[str, str] = {}
    for shard in shards:
        owner.update(dict.fromkeys(map(_NAME, shard.tensors), shard.file))
    return owner


_NAME = itemgetter(0)


class HeaderOwners(Mapping[str, str]):
    """:func:`header_owners` of shards whose names are proven distinct (an index proven
    against their headers), built on first lookup: its size and its shards' order are known
    without building a million-entry mapping, and an audit needs no more of it."""

    def __init__(self, shards: Sequence[ShardHeader]) -> None:
        self.shards = tuple(shard for shard in shards if shard.tensors)
        self._size = sum(len(shard.tensors) for shard in self.shards)

    @cached_property
    def _owner(self) -> dict[str, str]:
        return header_owners(self.shards)

    def __getitem__(self, name: str) -> str:
        return self._owner[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner)

    def __len__(self) -> int:
        return self._size


@dataclass(frozen=True)
class ShardHeader:
    """One ``.safetensors`` file as its header describes it."""

    file: str
    """Path relative to the checkpoint root, with ``/`` separators."""
    size: int
    """File size in bytes, as the filesystem or the remote reports it."""
    header_length: int
    """The 8-byte little-endian length prefix."""
    metadata: dict[str, str] | None
    tensors: tuple[TensorEntry, ...]
    remote_sha256: str | None = None
    """LFS sha256 reported by a remote; never computed locally, and labelled so."""

    @property
    def data_length(self) -> int:
        return self.size - 8 - self.header_length


@dataclass(frozen=True)
class Origin:
    """Where a checkpoint was read from, for the report."""

    kind: str
    """``local``, ``hf-cache``, ``manifest``, ``hub`` or ``declaration``."""
    location: str
    """What the user typed (a path is shown as given, never made absolute)."""
    repo: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class DerivedIndex:
    """An index whose text is exactly what ``transformers`` writes for these shards:
    ``json.dumps({**rest, "weight_map": {name: shard, ...}}, indent=2, sort_keys=True)`` plus
    ``tail``, with one weight_map entry per header name. A manifest stores this instead of the
    text when the two are byte-identical (checked when it is written), so index and headers
    agree by construction and a million names are not stored, or parsed, twice."""

    rest: dict[str, Any]
    """Every top-level key of the index but ``weight_map`` (usually ``metadata``)."""
    tail: str
    """``"\\n"`` or ``""``: what follows the JSON."""


@dataclass(frozen=True)
class Checkpoint:
    """Declaration documents verbatim, the index verbatim, and every shard header."""

    origin: Origin
    documents: dict[str, str] = field(default_factory=dict)
    """File name -> verbatim text, for the files in :data:`DECLARATION_FILES` that exist."""
    index_text: str | None = None
    """``model.safetensors.index.json`` verbatim, or None for a single-file checkpoint (or when
    ``derived_index`` stands for it)."""
    shards: tuple[ShardHeader, ...] = ()
    read_bytes: ReadBytes | None = field(default=None, compare=False, repr=False)
    """Range reads of tensor bytes, or None where there are none (a manifest, a declaration).
    Never called by a plain audit: without ``--probe-scalars`` only headers are read."""
    derived_index: DerivedIndex | None = None
    """The index as a rule over the headers, from a manifest; see :class:`DerivedIndex`."""
    listed_files: tuple[str, ...] | None = field(default=None, repr=False)
    """Every file of the checkpoint as its source lists it (a Hub commit's listing), for
    naming weight files the audit did not read; None: the source has no listing (a local folder
    is walked instead, see ``unread.py``)."""
    parsed_index: ShardIndex | None = field(default=None, compare=False, repr=False)
    """``index_text`` as the source already parsed it (to find the shards), kept so the
    integrity check does not parse a million names again."""
    pending: PendingProof | None = field(default=None, compare=False, repr=False)
    """Where the index's proof against the headers still runs aside (a folder read for an
    audit): this checkpoint is the one read when it holds; see :func:`settled`."""

    @property
    def has_weights(self) -> bool:
        """False for a lone declaration audit: nothing shipped to cross-check."""
        return bool(self.shards)


@dataclass(frozen=True)
class PendingProof:
    """An index proof running aside (``sources/aside.py``): ``holds()`` waits for its answer,
    ``otherwise()`` reads the checkpoint as a source does where the proof fails."""

    holds: Callable[[], bool]
    otherwise: Callable[[], Checkpoint]


def settled(checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint its source reads: ``checkpoint`` itself, unless its index proof, still
    pending, fails; then the one read without the proof (which may raise, as reading would)."""
    pending = checkpoint.pending
    if pending is None or pending.holds():
        return checkpoint
    return pending.otherwise()


_T = TypeVar("_T")


class Ahead(Protocol):
    """Told what reading a folder learns as it goes, so that what depends on that alone can
    start meanwhile: the declaration documents once they are read, before the index and any
    header are; then each header of the folder's shards, as it is read (in no set order). The
    checkpoint may hold a header it was not told (a shard read again, or found by the index
    alone)."""

    def documents(self, documents: dict[str, str]) -> None: ...

    def header(self, shard: ShardHeader) -> None: ...


def run_settled(checkpoint: Checkpoint, run: Callable[[Checkpoint], _T]) -> _T:
    """``run(checkpoint)`` while its index proof may still run aside: its answer, or its
    error, where the proof holds; else ``run`` of the checkpoint read without the proof.
    Either way what reading first and running after gives, only sooner."""
    failure: Exception | None = None
    try:
        answer = run(checkpoint)
    except Exception as exc:  # the run's error stands only if the checkpoint does
        failure = exc
    read = settled(checkpoint)
    if read is not checkpoint:
        return run(read)
    if failure is not None:
        raise failure
    return answer
