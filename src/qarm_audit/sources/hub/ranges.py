"""One HTTP range read of a shard, checked: exactly the bytes asked for, or an error, never more.

The request goes through huggingface_hub's ``http_stream_backoff`` (retry.py says what it
retries). The answer must be ``206`` with exactly the ``Content-Range`` asked for and exactly that
many bytes; a ``200`` to a partial range means the server ignored ``Range``, and the connection is
closed at once rather than the shard downloaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import httpx2
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    hf_raise_for_status,
    http_stream_backoff,
)

from .deadline import RequestDeadline
from .failures import RangeMismatchError, RangeNotHonouredError, StatusError
from .retry import RETRIED_ERRORS, Again, RetryPolicy, backoff, cut_short, rate_limited

ERROR_BODY_CAP = 1_000_000
"""Largest error body read to build huggingface_hub's error (larger ones are not read)."""

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class Shard:
    """A shard as the listing gives it: where to read it, its size, the Hub's LFS sha256."""

    file: str
    size: int
    url: str
    sha256: str | None


def read_range(
    shard: Shard,
    start: int,
    end: int,
    *,
    headers: Mapping[str, str],
    policy: RetryPolicy,
    tries: int,
    deadline: RequestDeadline,
) -> bytes:
    """Exactly bytes ``start..end`` (inclusive) of the shard, in at most ``tries`` requests,
    checking ``deadline`` as the bytes arrive.

    Raises :class:`~.retry.Again` for what the caller retries: a 429, a body cut short.
    """
    asked = f"bytes={start}-{end}"
    with http_stream_backoff(
        "GET", shard.url, headers={**headers, "Range": asked}, **backoff(policy, tries)
    ) as response:
        try:
            return _answer(response, shard, start, end, asked, deadline)
        except RETRIED_ERRORS as exc:  # kept from the backoff, which cannot retry it from here
            raise cut_short(exc) from exc


def _answer(
    r: httpx2.Response, shard: Shard, start: int, end: int, asked: str, deadline: RequestDeadline
) -> bytes:
    if r.status_code == 429:
        raise rate_limited(r.headers)
    if r.status_code == 200 and not (start == 0 and end == shard.size - 1):
        raise RangeNotHonouredError(
            shard.file,
            f"the server ignored the Range header ({asked}) and answered HTTP 200 with "
            f"the whole {shard.size}-byte file; qarm closed the connection instead of "
            "downloading it",
        )
    if r.status_code not in (200, 206):
        _raise_for_status(r)
    if r.status_code == 206:
        _check_content_range(r.headers.get("Content-Range"), start, end, shard)
    want = end - start + 1
    body = bytearray()
    for chunk in r.iter_bytes():
        deadline.check()
        body += chunk
        if len(body) > want:
            raise RangeMismatchError(
                shard.file,
                f"asked for {want} bytes ({asked}) and the server sent more; qarm stopped reading",
            )
    if len(body) < want:
        raise Again(f"the answer was cut short ({len(body)} of {want} bytes arrived)")
    return bytes(body)


def _check_content_range(value: str | None, start: int, end: int, shard: Shard) -> None:
    match = _CONTENT_RANGE.fullmatch((value or "").strip())
    if (
        match is None
        or int(match[1]) != start
        or int(match[2]) != end
        or match[3] != str(shard.size)
    ):
        raise RangeMismatchError(
            shard.file,
            f"asked for bytes {start}-{end} of {shard.size} and the server answered "
            f"Content-Range {value!r}",
        )


def _raise_for_status(response: httpx2.Response) -> NoReturn:
    """Turn an error answer into huggingface_hub's error (read only if small)."""
    try:
        length = int(response.headers.get("Content-Length", ""))
    except ValueError:
        length = -1
    if 0 <= length <= ERROR_BODY_CAP:
        response.read()
        hf_raise_for_status(response)
    raise StatusError(response.status_code)
