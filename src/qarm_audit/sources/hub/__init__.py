"""Checkpoints on the Hugging Face Hub, read header-only through ``huggingface_hub``.

For ``owner/name[@revision]`` (see docs/hub.md for the whole story), in the order of this
package's modules:

1. listing.py: one request for what ``HfApi.model_info(repo, revision=...,
   files_metadata=True)`` returns, the commit sha the revision points at *and* that commit's
   files with their sizes and LFS sha256. A branch or tag is resolved here, once; every later
   request is built on the sha, so a push to the branch during the run cannot mix two revisions.
   Then the declaration documents and ``model.safetensors.index.json`` the listing holds, through
   ``hf_hub_download`` at the sha (the Hub cache: a second run makes no request for them).
2. headers.py: each shard's 8-byte prefix and header by HTTP range reads on
   ``/{repo}/resolve/{sha}/{file}``, a first read sized from what is known (sizing.py) and, when
   the header turns out longer, exactly one second read of the missing remainder. ranges.py
   checks each answer: ``206`` with exactly the ``Content-Range`` asked for and exactly that many
   bytes; a server that ignores ``Range`` is cut off, never downloaded.
3. cache.py: every header fetched online is also written under
   ``<HF_HUB_CACHE>/models--owner--name/snapshots/<sha>/.qarm-audit/`` with the commit's whole
   file list; with ``HF_HUB_OFFLINE=1`` offline.py reads the audit from there and from the Hub
   cache (documents, refs, and the shards ``hf download`` left), or refuses it with a
   :class:`HubOfflineError` naming what is missing.

Retries are huggingface_hub's backoff plus the little retry.py adds (:data:`RETRY`); failures
become qarm's errors in failures.py. Endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or the saved
login), cache (``HF_HUB_CACHE``), offline mode (``HF_HUB_OFFLINE``) and error classes are
huggingface_hub's own. The token is never part of a message.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

from huggingface_hub import HfApi, ModelInfo, constants
from huggingface_hub.hf_api import RepoSibling
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    build_hf_headers,
)

from ...errors import QarmError, SourceSpecError, UsageError
from ...runtime import VERSION
from ..checkpoint import DECLARATION_FILES, INDEX_FILE, Checkpoint, Origin, ShardIndex
from ..index import parse_index
from . import listing
from .cache import HeaderCache, record_ref
from .deadline import HubDeadlineError
from .deadline import install as install_deadlines
from .document_answers import install as install_document_checks
from .failures import (
    Context,
    HubOfflineError,
    RangeMismatchError,
    RangeNotHonouredError,
)
from .headers import HeaderFetcher, TensorBytes
from .observer import HubObserver, Silent
from .offline import read_offline
from .ranges import Shard
from .retry import RetryPolicy
from .sizing import Estimator, header_bytes_hint

__all__ = [
    "RETRY",
    "WORKERS",
    "HubDeadlineError",
    "HubObserver",
    "HubOfflineError",
    "RangeMismatchError",
    "RangeNotHonouredError",
    "RetryPolicy",
    "read_hub",
]

WORKERS = 16
"""Shards whose headers are read at the same time."""

RETRY = RetryPolicy()
"""The policy in force (tests replace it)."""


def read_hub(
    repo: str,
    revision: str | None,
    *,
    location: str,
    require_pinned: bool,
    observer: HubObserver | None = None,
) -> Checkpoint:
    """Read ``repo`` at ``revision`` (None: ``main``): documents verbatim and every shard header.

    A branch or tag is resolved once to its commit sha and reported to ``observer.resolved``;
    the returned checkpoint's origin names the sha. ``require_pinned`` refuses anything but a
    full 40-hex commit sha.
    """
    watch: HubObserver = observer if observer is not None else Silent()
    ref = revision or "main"
    pinned = listing.SHA.fullmatch(ref) is not None
    if require_pinned and not pinned:
        given = f"revision {ref!r}" if revision else "no revision (the default branch, main)"
        raise UsageError(
            "--require-pinned",
            f"{location}: {given} is not a full 40-hex commit sha; name the commit, "
            f"e.g. {repo}@<sha>",
        )
    ctx = Context(location, repo, ref)
    if constants.is_offline_mode():
        return read_offline(ctx, pinned=pinned, watch=watch)
    return _read_online(ctx, watch, pinned=pinned, require_pinned=require_pinned)


def _read_ahead(
    ctx: Context,
    fetcher: HeaderFetcher,
    info: ModelInfo,
    files: dict[str, RepoSibling],
    endpoint: str,
) -> None:
    """Start reading headers while the documents download: every shard where no index
    decides them, else the first wave of those the index most likely names."""
    if INDEX_FILE in files:
        likely: list[Shard] = []
        for name in listing.likely_shards(files, WORKERS):
            try:
                likely.extend(listing.shards(ctx, files, [name], endpoint))
            except QarmError:
                continue  # refused later where the index names it, else no concern of ours
        fetcher.read_ahead(likely, _prefix_only)
    else:
        shards = listing.shards(ctx, files, listing.shard_files(files, None)[0], endpoint)
        early = _estimator(info, shards, None, None)
        fetcher.read_ahead(shards, lambda s: early.first_read(s.file, s.size, learned=False))


def _prefix_only(shard: Shard) -> int:
    """A first read of the 8-byte prefix alone: before the index, nothing says how long a
    header is, and a guess past it would read tensor data."""
    return 8


def _estimator(
    info: ModelInfo,
    shards: list[Shard],
    index: ShardIndex | None,
    names_by_shard: dict[str, list[str]] | None,
) -> Estimator:
    hint = header_bytes_hint(
        info.safetensors, shards, index.total_size if index is not None else None
    )
    return Estimator(names_by_shard, hint, shards=len(shards))


def _read_online(
    ctx: Context, watch: HubObserver, *, pinned: bool, require_pinned: bool
) -> Checkpoint:
    policy = RETRY
    ctx = dataclasses.replace(ctx, deadline=policy.start_deadline())
    install_deadlines()
    install_document_checks()
    api = HfApi(library_name="qarm-audit", library_version=VERSION)
    headers = build_hf_headers(library_name="qarm-audit", library_version=VERSION)

    info = listing.read_listing(ctx, api, headers, policy)
    ctx = listing.resolve(ctx, info, pinned=pinned, require_pinned=require_pinned, watch=watch)
    sha = str(ctx.sha)
    files = listing.files(ctx, info)

    names = [n for n in (*DECLARATION_FILES, INDEX_FILE) if n in files]
    cache = HeaderCache.for_sha(ctx.repo, sha)
    fetcher = HeaderFetcher(ctx, watch, cache, policy=policy, headers=headers, workers=WORKERS)
    # Ctrl-C anywhere from the first read on cuts off every read, so none is waited for
    interruptible = ctx.deadline.interruptible() if ctx.deadline else nullcontext()
    try:
        with interruptible:
            _read_ahead(ctx, fetcher, info, files, api.endpoint)
            texts = listing.documents(ctx, api, policy, names)
            documents = {n: texts[n] for n in DECLARATION_FILES if n in texts}
            index_text = texts.get(INDEX_FILE)
            index = parse_index(index_text) if index_text is not None else None
            shard_files, names_by_shard = listing.shard_files(files, index)
            shards = listing.shards(ctx, files, shard_files, api.endpoint)
            if not documents and not shards:
                raise SourceSpecError(
                    ctx.location, "holds no declaration document and no .safetensors file"
                )
            estimator = _estimator(info, shards, index, names_by_shard)
            headers_read = fetcher.fetch(shards, estimator)
    finally:
        fetcher.close()
        cache.close()
    cache.finish(files, names, shards)
    if not pinned:
        record_ref(ctx.repo, ctx.revision, sha)
    return Checkpoint(
        origin=Origin("hub", ctx.location, repo=ctx.repo, revision=sha),
        documents=documents,
        index_text=index_text,
        shards=tuple(headers_read),
        read_bytes=TensorBytes(fetcher, shards),
        parsed_index=index,
        listed_files=tuple(sorted(files)),
    )
