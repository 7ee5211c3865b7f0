"""Retries: huggingface_hub's backoff, and the little qarm adds to it, in this one place.

The requests qarm makes itself (the listing, every range read) go through huggingface_hub's
``http_backoff`` / ``http_stream_backoff`` with :func:`backoff`'s arguments. It retries timeouts,
refused or reset connections, a server closing before it answers (:data:`RETRIED_ERRORS`) and
HTTP 408/500/502/503/504 (:data:`RETRIED_STATUS`), waiting ``base_delay``, doubled after each try
up to ``max_delay`` (or, when the answer carries a ``Retry-After``, what it asks plus 1 s, with no
upper bound), sleeping through ``huggingface_hub.utils._http.time.sleep``; out of tries, it
raises the last error.
``hf_hub_download`` (the documents) makes its requests with retries of its own.

What neither does is done here, by :func:`requesting` and :func:`downloading`:

* **HTTP 429** on qarm's requests. huggingface_hub would wait whatever the answer asks, plus 1 s,
  with no upper bound; qarm reads the wait as huggingface_hub does (the ``RateLimit`` reset when
  no request is left, else ``Retry-After`` in whole seconds) and refuses one above
  ``max_retry_after`` instead of waiting.
* **An answer cut short** after its body has begun: the body of a range read is read inside the
  backoff's stream, where a failure is the caller's to retry (ranges.py raises :class:`Again`).
* **A document download** failing where ``hf_hub_download`` does not retry: HTTP 5xx on its GET,
  a reset connection, a server closing before it answers the HEAD (see
  :func:`_not_retried_by_download`).

Each failure is retried by one loop only, never by one inside another. For qarm's own requests
one budget of ``attempts`` tries bounds both loops: each retry made here leaves huggingface_hub's
backoff one try fewer for the next request.
"""

from __future__ import annotations

import datetime
import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx2
from huggingface_hub import constants
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    parse_ratelimit_headers,
)

from ...errors import HubError, QarmError
from .deadline import (
    AUDIT_DEFAULT,
    AUDIT_ENV,
    REQUEST_DEFAULT,
    REQUEST_ENV,
    Deadline,
    RequestDeadline,
    seconds_from_env,
    too_long_a_wait,
)
from .failures import Context, scrub, status_of, translate

T = TypeVar("T")

SERVER_ERRORS = (500, 502, 503, 504)
RETRIED_STATUS = (408, *SERVER_ERRORS)
"""Statuses huggingface_hub's backoff retries for qarm (its default list, less 429)."""

RETRIED_ERRORS: tuple[type[Exception], ...] = (
    httpx2.TimeoutException,
    httpx2.NetworkError,
    httpx2.RemoteProtocolError,
)
"""Failures huggingface_hub's backoff retries before an answer arrives (its default list)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: timeouts, resets, 408/429/5xx, short bodies."""

    attempts: int = 4
    """Tries per request, the first included."""
    base_delay: float = 0.5
    """Seconds before the first retry; doubled after each, up to ``max_delay``."""
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    """A 429 asking to wait longer than this is not waited for: the run fails instead."""
    timeout: float | None = None
    """Seconds per request; None uses huggingface_hub's ``HF_HUB_DOWNLOAD_TIMEOUT``."""
    sleep: Callable[[float], None] = time.sleep
    """qarm's own waits (the retries of this module); huggingface_hub's backoff sleeps
    through its own ``time`` module."""
    request_deadline: float | None = None
    """Seconds one request may take, its retries included; None: ``QARM_HUB_REQUEST_DEADLINE``,
    else 300 (deadline.py)."""
    deadline: float | None = None
    """Seconds all the Hub reads of one audit may take; None: ``QARM_HUB_DEADLINE``, else 1800."""

    def start_deadline(self) -> Deadline:
        """The deadlines of an audit starting now."""
        request, audit = self.request_deadline, self.deadline
        return Deadline(
            request if request is not None else seconds_from_env(REQUEST_ENV, REQUEST_DEFAULT),
            audit if audit is not None else seconds_from_env(AUDIT_ENV, AUDIT_DEFAULT),
            longest_wait=self.max_retry_after,
        )

    def request_timeout(self) -> float:
        return (
            self.timeout if self.timeout is not None else float(constants.HF_HUB_DOWNLOAD_TIMEOUT)
        )


class Again(Exception):
    """One try failed in a way huggingface_hub did not retry: qarm tries again."""

    def __init__(
        self, reason: str, retry_after: float | None = None, asked_by: str = "Retry-After"
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        """Seconds the server asked to wait, in the header ``asked_by``; None: back off."""
        self.asked_by = asked_by


def backoff(policy: RetryPolicy, tries: int) -> dict[str, Any]:
    """Arguments for ``http_backoff`` / ``http_stream_backoff``: at most ``tries`` requests."""
    return {
        "max_retries": tries - 1,
        "base_wait_time": policy.base_delay,
        "max_wait_time": policy.max_delay,
        "retry_on_status_codes": RETRIED_STATUS,
        "retry_on_exceptions": RETRIED_ERRORS,
        "timeout": policy.request_timeout(),
    }


def rate_limited(headers: Mapping[str, str]) -> Again:
    """A 429, to be waited for (or refused) here."""
    limit = parse_ratelimit_headers(headers)
    if limit is not None and limit.remaining == 0:
        return Again("rate limited (HTTP 429)", float(limit.reset_in_seconds), "RateLimit")
    return Again("rate limited (HTTP 429)", retry_after(headers.get("Retry-After", "")))


def retry_after(value: str, now: float | None = None) -> float | None:
    """``Retry-After`` as RFC 9110 writes it: ASCII digits (seconds), or an HTTP date (the
    seconds until then, 0 when past); anything else (``²``, words) asks for nothing."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds)


def cut_short(exc: Exception) -> Again:
    """The connection failed while an answer's body arrived."""
    return Again(describe(exc))


def describe(exc: Exception) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"connection failed ({type(exc).__name__}: {exc})"


def requesting(
    attempt: Callable[[int, RequestDeadline], T],
    policy: RetryPolicy,
    ctx: Context,
    *,
    where: str,
    what: str,
    file: str | None = None,
) -> T:
    """``attempt(tries, deadline)``: one request through huggingface_hub's backoff
    (:func:`backoff` with ``tries``) that checks ``deadline`` as its bytes arrive, retried here
    on :class:`Again`; any failure leaves as a :class:`QarmError`."""
    return _loop(attempt, policy, ctx, where=where, what=what, file=file, spent=_backoff_gave_up)


def downloading(
    call: Callable[[RequestDeadline], T],
    policy: RetryPolicy,
    ctx: Context,
    *,
    where: str,
    what: str,
    file: str,
) -> T:
    """``call(deadline)`` (an ``hf_hub_download``), run again only after a failure it did not
    retry."""

    def attempt(tries: int, deadline: RequestDeadline) -> T:
        try:
            return call(deadline)
        except Exception as exc:
            reason = _not_retried_by_download(exc)
            if reason is None:
                raise
            raise Again(reason) from exc

    return _loop(
        attempt,
        policy,
        ctx,
        where=where,
        what=what,
        file=file,
        spent=lambda exc: None,
        commit=ctx.sha,
    )


def _loop(
    attempt: Callable[[int, RequestDeadline], T],
    policy: RetryPolicy,
    ctx: Context,
    *,
    where: str,
    what: str,
    file: str | None,
    spent: Callable[[Exception], str | None],
    commit: str | None = None,
) -> T:
    tries = policy.attempts
    delay = policy.base_delay
    deadline = (ctx.deadline or policy.start_deadline()).begin(where, what, commit)
    while True:
        try:
            deadline.check()
            with deadline:
                return attempt(tries, deadline)
        except QarmError:
            raise
        except Again as again:
            deadline.check()  # a failure after the deadline is the deadline passing
            failure = again
        except Exception as exc:
            deadline.check()
            reason = spent(exc)
            if reason is not None:
                raise HubError(
                    where, scrub(f"{what}: {reason}, {tries} times; giving up")
                ) from None
            raise translate(exc, ctx, where=where, what=what, file=file) from None
        tries -= 1
        if tries <= 0:
            raise HubError(
                where, scrub(f"{what}: {failure.reason}, {policy.attempts} times; giving up")
            ) from None
        wait = delay if failure.retry_after is None else failure.retry_after
        if wait > policy.max_retry_after:
            raise too_long_a_wait(
                where, what, failure.reason, failure.asked_by, wait, policy.max_retry_after
            ) from None
        deadline.check(wait)
        policy.sleep(wait)
        delay = min(delay * 2, policy.max_delay)


def _not_retried_by_download(exc: Exception) -> str | None:
    """Why to run ``hf_hub_download`` again after ``exc``, if it did not retry that itself.

    Its metadata request (HEAD) is retried with backoff after a timeout, a refused connection or
    an error answer (those arrive wrapped in a ``LocalEntryNotFoundError``), its GET on 408 and
    429, and the GET is resumed after a timeout, a refused connection or an early close. Left:
    5xx on the GET, a reset connection, an early close of the HEAD.
    """
    status = status_of(exc)
    if status in SERVER_ERRORS:
        return f"the Hub answered HTTP {status}"
    if isinstance(exc, httpx2.NetworkError) and not isinstance(exc, httpx2.ConnectError):
        return describe(exc)
    if isinstance(exc, httpx2.RemoteProtocolError) and _method(exc) == "HEAD":
        return describe(exc)
    return None


def _method(exc: httpx2.RequestError) -> str | None:
    try:
        return str(exc.request.method)
    except RuntimeError:  # no request attached
        return None


def _backoff_gave_up(exc: Exception) -> str | None:
    """Why huggingface_hub's backoff stopped retrying, if ``exc`` is what it retries."""
    status = status_of(exc)
    if status in RETRIED_STATUS:
        return f"the Hub answered HTTP {status}"
    if status is None and isinstance(exc, RETRIED_ERRORS):
        return describe(exc)
    return None
