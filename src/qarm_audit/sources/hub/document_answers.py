"""What the metadata answer to a document request says of the file, checked before
huggingface_hub reads it: the blob's name and the commit.

``hf_hub_download`` stores a document as ``blobs/<etag>`` in the Hub cache, the etag taken from
the metadata answer's ``X-Linked-Etag`` or ``ETag`` as the server wrote it (huggingface_hub
2.4.0 ``file_download.py``: ``os.path.join(storage_folder, "blobs", etag)``). An etag such as
``"/tmp/x"`` or ``"../../x"`` would have it write the document, and a lock beside it, anywhere
the user can write. The Hub's own etags are hex digests; a metadata answer (``HEAD``) to a
request qarm makes whose etag holds a path separator, a drive colon, a control character, or is
``.``/``..``/empty is refused before huggingface_hub reads it. Answers to other requests (the
caller's own, in a process that uses qarm as a library) are left alone.

The commit: ``hf_hub_download`` files a document under ``snapshots/<X-Repo-Commit>/`` (the
header as the answer gives it), whatever revision it asked for. The listing and every header
range are read at the commit sha the audit resolved; a document answered as of another commit
may be that commit's, audited as this one's, and is filed in the cache under the other, where a
later run asking for that commit finds it. A document's answer naming another commit is
refused, before anything is written.
"""

from __future__ import annotations

import httpx2
from huggingface_hub import get_session

from ...errors import HubError
from .deadline import current_request

ETAG_HEADERS = ("X-Linked-Etag", "ETag")
"""Where huggingface_hub reads a blob's name, the first present winning."""

_NOT_IN_A_NAME = frozenset("/\\:\0")


COMMIT_HEADER = "X-Repo-Commit"
"""Where huggingface_hub reads the commit a file is of."""


def install() -> None:
    """Check the metadata answers of huggingface_hub's session (once per session) to the
    requests qarm makes (those made under a deadline, ``deadline.py``)."""
    hooks = get_session().event_hooks
    if _checked not in hooks.get("response", []):
        hooks["response"] = [*hooks.get("response", []), _checked]


def _checked(response: httpx2.Response) -> None:
    request = current_request()
    if request is not None and response.request.method == "HEAD":
        refuse_unsafe_etag(response.headers, request.where)
        if request.commit is not None:
            refuse_another_commit(response.headers, request.commit, request.where)


def refuse_another_commit(headers: httpx2.Headers, commit: str, where: str) -> None:
    """Refuse an answer that says the file is of a commit other than ``commit`` (one that says
    none is refused by huggingface_hub itself)."""
    named = headers.get(COMMIT_HEADER)
    if named is not None and named != commit:
        shown = named if len(named) <= 80 else named[:77] + "..."
        raise HubError(
            where,
            f"asked for the file at commit {commit} and the server answered with it as of "
            f"commit {shown!r} ({COMMIT_HEADER}); qarm audits only the commit it was asked for",
        )


def refuse_unsafe_etag(headers: httpx2.Headers, where: str) -> None:
    """Refuse the blob name the first of :data:`ETAG_HEADERS` gives where it is no plain name
    (as huggingface_hub normalises it: leading ``W`` and ``/`` and the quotes taken off)."""
    for header in ETAG_HEADERS:
        raw = headers.get(header)
        if raw is None:
            continue
        name = raw.lstrip("W/").strip('"')
        if (
            not name
            or name in (".", "..")
            or not _NOT_IN_A_NAME.isdisjoint(name)
            or not name.isprintable()
        ):
            shown = raw if len(raw) <= 80 else raw[:77] + "..."
            raise HubError(
                where,
                f"the server names the file's blob {shown!r} ({header}), which is no plain "
                "name: huggingface_hub would store the download under that path in the Hub "
                "cache, or outside it; qarm refuses it",
            )
        return
