"""What a Hub failure says: qarm's own Hub errors, and huggingface_hub's failures told as them.

Every message names the repo, revision or file at fault (:class:`Context`), exits 3, and never
carries the token.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx2
from huggingface_hub import constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_token  # type: ignore[attr-defined]  # public, lazily exported

from ...errors import HubAccessError, HubError, HubNotFoundError, QarmError

if TYPE_CHECKING:
    from .deadline import Deadline


class RangeNotHonouredError(HubError):
    """The server answered a range request with the whole file (HTTP 200); it was not read."""


class RangeMismatchError(HubError):
    """A range answer does not carry the ``Content-Range`` or the number of bytes asked for."""


class HubOfflineError(HubError):
    """``HF_HUB_OFFLINE`` is set and something the audit needs is not in the cache."""


@dataclass(frozen=True)
class Context:
    """What a failure message needs to say which of repo, revision or file is at fault."""

    location: str
    repo: str
    revision: str
    sha: str | None = None
    deadline: Deadline | None = field(default=None, compare=False, repr=False)
    """The audit's deadlines (deadline.py); None: a fresh one per request."""


class StatusError(Exception):
    """An HTTP error answer not turned into a huggingface_hub error (its body too large to read)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an error answer carried, if ``exc`` is one."""
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return int(exc.response.status_code)
    if isinstance(exc, StatusError):
        return exc.status
    return None


def translate(
    exc: Exception, ctx: Context, *, where: str, what: str, file: str | None
) -> QarmError:
    """A huggingface_hub or transport failure as a named qarm error (exit 3)."""
    cause = exc.__cause__
    if isinstance(exc, LocalEntryNotFoundError) and isinstance(cause, Exception):
        # hf_hub_download's metadata request failed (after its own retries): say why.
        return translate(cause, ctx, where=where, what=what, file=file)
    status = status_of(exc)
    at = f"{ctx.repo}@{ctx.sha or ctx.revision}"
    if isinstance(exc, GatedRepoError) or (
        status in (401, 403) and not isinstance(exc, RepositoryNotFoundError)
    ):
        return HubAccessError(
            ctx.location,
            f"{ctx.repo} is gated or private and the Hub refused access (HTTP {status}); log in "
            "with `hf auth login`, or set HF_TOKEN, with a token that has been granted access "
            "to it",
        )
    if isinstance(exc, RepositoryNotFoundError):
        if status == 404:
            return HubNotFoundError(
                ctx.location, f"repository {ctx.repo} does not exist on {_host()}"
            )
        return HubAccessError(
            ctx.location,
            f"repository {ctx.repo} was not found, or it is private or gated (HTTP {status}); "
            "if it exists, log in with `hf auth login` or set HF_TOKEN, with a token that can "
            "read it",
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubNotFoundError(
            ctx.location, f"revision {ctx.revision!r} does not exist in {ctx.repo}"
        )
    if isinstance(exc, EntryNotFoundError) or (status == 404 and file is not None):
        elsewhere = _redirected_to(exc, file)
        if elsewhere is not None:
            return HubNotFoundError(
                where,
                f"the server redirected the request for {file!r} at {at} to {elsewhere!r}, "
                "which answered HTTP 404",
            )
        return HubNotFoundError(
            where, f"file {file!r} is not in {at}, although the file listing names it"
        )
    if status == 404:
        return HubNotFoundError(ctx.location, f"{what}: {at} was not found (HTTP 404)")
    if isinstance(exc, LocalEntryNotFoundError):
        return HubError(where, f"{what}: the Hub could not be reached")
    if isinstance(exc, OfflineModeIsEnabled):
        return HubOfflineError(where, f"{what}: HF_HUB_OFFLINE is set")
    if status is not None:
        return HubError(where, f"{what}: the Hub answered HTTP {status}")
    if isinstance(exc, httpx2.HTTPError):
        return HubError(where, scrub(f"{what}: {type(exc).__name__}: {exc}"))
    if isinstance(exc, OSError):
        return HubError(where, scrub(f"{what}: {exc.strerror or exc}"))
    # anything else the client raised (a ValueError quoting a header): named, and scrubbed
    return HubError(where, scrub(f"{what}: {type(exc).__name__}: {exc}"))


def _redirected_to(exc: Exception, file: str | None) -> str | None:
    """Where the answer came from, when a redirect took the request away from the file (the
    server lost it on the way: the commit may well hold it); else None."""
    response = getattr(exc, "response", None)
    url = getattr(getattr(response, "request", None), "url", None)
    if file is None or not isinstance(url, httpx2.URL) or url.path.endswith(f"/{file}"):
        return None
    shown = scrub(str(url.copy_with(query=None, fragment=None)))
    return shown if len(shown) <= 120 else shown[:117] + "..."


def scrub(text: str) -> str:
    """Belt and braces: a message never carries the token, whatever a library put in it."""
    with contextlib.suppress(Exception):
        token = get_token()
        if token:
            text = text.replace(token, "<HF_TOKEN>")
    return text


def _host() -> str:
    parts = urllib.parse.urlsplit(constants.ENDPOINT)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
