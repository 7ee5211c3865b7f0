"""The listing: one request that resolves the revision to a commit sha and names its files; the
documents it holds, downloaded at that sha; the shards to read.

The listing is what ``HfApi.model_info(repo, revision=..., files_metadata=True)`` requests, made
through huggingface_hub's ``http_backoff`` so that its retries are huggingface_hub's (retry.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from huggingface_hub import HfApi, ModelInfo, hf_hub_url
from huggingface_hub.hf_api import RepoSibling
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    hf_raise_for_status,
    http_stream_backoff,
    validate_repo_id,
)

from ...errors import HubError, ShardIndexError, UsageError
from ..checkpoint import INDEX_FILE, SINGLE_FILE, ShardIndex
from ..index import check_shard_name
from ..local import read_text
from .deadline import RequestDeadline
from .failures import Context
from .observer import HubObserver
from .ranges import Shard
from .retry import (
    RETRIED_ERRORS,
    RetryPolicy,
    backoff,
    cut_short,
    downloading,
    rate_limited,
    requesting,
)

SHA = re.compile(r"[0-9a-fA-F]{40}")
"""A full commit sha."""
SHA256 = re.compile(r"[0-9a-fA-F]{64}")
"""An LFS object's sha256, as the file listing gives it."""


def read_listing(
    ctx: Context, api: HfApi, headers: Mapping[str, str], policy: RetryPolicy
) -> ModelInfo:
    """``model_info(ctx.repo, revision=ctx.revision, files_metadata=True)``, retried."""
    validate_repo_id(ctx.repo)
    url = (
        f"{api.endpoint}/api/models/{ctx.repo}/revision/{urllib.parse.quote(ctx.revision, safe='')}"
    )

    def attempt(tries: int, deadline: RequestDeadline) -> ModelInfo:
        with http_stream_backoff(
            "GET", url, headers=dict(headers), params={"blobs": True}, **backoff(policy, tries)
        ) as r:
            if r.status_code == 429:
                raise rate_limited(r.headers)
            if r.status_code >= 400:
                r.read()
                hf_raise_for_status(r)
            try:
                body = bytearray()
                for chunk in r.iter_bytes():  # the body as it arrives, against the deadline
                    deadline.check()
                    body += chunk
            except RETRIED_ERRORS as exc:
                raise cut_short(exc) from exc
        try:
            data = json.loads(body)
        except ValueError:
            raise HubError(ctx.location, "the file listing is not JSON") from None
        if not isinstance(data, dict):
            raise HubError(ctx.location, "the file listing is not a JSON object")
        return ModelInfo(**data)  # type: ignore[no-untyped-call]  # as model_info does

    return requesting(attempt, policy, ctx, where=ctx.location, what="reading the file listing")


def resolve(
    ctx: Context, info: ModelInfo, *, pinned: bool, require_pinned: bool, watch: HubObserver
) -> Context:
    """The context at the commit sha the listing names; a branch or tag is reported to
    ``watch.resolved`` (or refused with ``require_pinned``)."""
    sha = info.sha.lower() if isinstance(info.sha, str) else ""
    if SHA.fullmatch(sha) is None:
        raise HubError(ctx.location, f"the Hub named no commit sha for revision {ctx.revision!r}")
    if pinned and sha != ctx.revision.lower():
        # a full sha names one commit: an answer about another is never audited as it
        raise HubError(
            ctx.location,
            f"asked for commit {ctx.revision.lower()} and the server answered with the listing "
            f"of commit {sha}; qarm audits only the commit it was asked for",
        )
    if not pinned:
        if require_pinned:
            raise UsageError(
                "--require-pinned",
                f"{ctx.location}: {ctx.revision!r} is a branch or tag pointing at {sha}, "
                "not a commit sha",
            )
        watch.resolved(ctx.revision, sha)
    return dataclasses.replace(ctx, sha=sha)


def files(ctx: Context, info: ModelInfo) -> dict[str, RepoSibling]:
    """The commit's files by name."""
    if info.siblings is None:
        raise HubError(ctx.location, f"the Hub returned no file listing for {ctx.repo}@{ctx.sha}")
    for sibling in info.siblings:
        if not isinstance(sibling.rfilename, str):
            raise HubError(
                ctx.location,
                f"the file listing of {ctx.repo}@{ctx.sha} names a file by "
                f"{sibling.rfilename!r}, not a string",
            )
        sha256 = getattr(sibling.lfs, "sha256", None)
        if sibling.lfs is not None and not (isinstance(sha256, str) and SHA256.fullmatch(sha256)):
            raise HubError(
                sibling.rfilename,
                f"the file listing of {ctx.repo}@{ctx.sha} gives its LFS sha256 as {sha256!r}, "
                "not 64 hexadecimal digits",
            )
    return {s.rfilename: s for s in info.siblings}


def documents(ctx: Context, api: HfApi, policy: RetryPolicy, names: list[str]) -> dict[str, str]:
    """Download the documents in parallel into the Hub cache, at the sha; return their text."""
    if not names:
        return {}

    def document(name: str) -> str:
        path = downloading(
            lambda deadline: api.hf_hub_download(
                ctx.repo,
                name,
                revision=ctx.sha,
                etag_timeout=policy.request_timeout(),
                tqdm_class=deadline.progress_class(),
            ),
            policy,
            ctx,
            where=name,
            what=f"downloading {name}",
            file=name,
        )
        return read_text(Path(path), name)

    interruptible = ctx.deadline.interruptible() if ctx.deadline else nullcontext()
    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="qarm-doc") as pool:
        futures = {name: pool.submit(document, name) for name in names}
        with interruptible:
            return {name: future.result() for name, future in futures.items()}


def shard_files(
    listing: Collection[str], index: ShardIndex | None
) -> tuple[list[str], dict[str, list[str]] | None]:
    """The shards to read (the index's, else ``model.safetensors``, else every root
    ``*.safetensors``), and each one's tensor names when an index gives them."""
    if index is not None:
        names_by_shard: dict[str, list[str]] = {file: [] for file in index.shard_files}
        for tensor, file in index.weight_map.items():
            names_by_shard[file].append(tensor)
        return list(index.shard_files), names_by_shard
    if SINGLE_FILE in listing:
        return [SINGLE_FILE], None
    return sorted(n for n in listing if "/" not in n and n.endswith(".safetensors")), None


_NUMBERED_SHARD = re.compile(r"model-([0-9]{1,9})-of-([0-9]{1,9})\.safetensors")
"""A shard named as ``save_pretrained`` names them beside its index, and as others do: any
width of number, where transformers writes five digits (the unread-files check's pattern,
``unread.py``) and DeepSeek's own shards six for the count (``model-00001-of-000163``)."""


def likely_shards(listing: Collection[str], count: int) -> list[str]:
    """The first ``count`` shards an index in the listing most likely names, before it is
    read: the root ``model-<i>-of-<n>.safetensors`` files, in order, where they form one whole
    set (``1`` to ``n``, each once). None where they form none, or several (a checkpoint sharded
    again beside its old shards): reading either set ahead could be reading the wrong one."""
    sets: dict[str, dict[int, str]] = {}
    spelled_twice: set[str] = set()  # one number written two ways (1 and 01): no whole set
    for name in listing:
        found = _NUMBERED_SHARD.fullmatch(name)
        if found is not None:
            files = sets.setdefault(found[2], {})
            if files.setdefault(int(found[1]), name) != name:
                spelled_twice.add(found[2])
    whole = [
        files
        for of, files in sets.items()
        if of not in spelled_twice
        and len(files) == int(of)
        and set(files) == set(range(1, int(of) + 1))
    ]
    if len(whole) != 1:
        return []
    return [whole[0][i] for i in sorted(whole[0])][:count]


def shards(
    ctx: Context, listing: Mapping[str, RepoSibling], names: list[str], endpoint: str
) -> list[Shard]:
    """Each named shard with its size, LFS sha256 and URL at the sha."""
    found: list[Shard] = []
    for file in names:
        check_shard_name(file, INDEX_FILE)
        sibling = listing.get(file)
        if sibling is None:
            raise ShardIndexError(
                INDEX_FILE, f"names shard {file!r}, which is not in {ctx.repo}@{ctx.sha}"
            )
        size = sibling.size if sibling.size is not None else getattr(sibling.lfs, "size", None)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise HubError(file, f"the listing of {ctx.repo}@{ctx.sha} gives no size for it")
        url = hf_hub_url(ctx.repo, file, revision=ctx.sha, endpoint=endpoint)
        found.append(Shard(file, size, url, sibling.lfs.sha256 if sibling.lfs else None))
    return found
