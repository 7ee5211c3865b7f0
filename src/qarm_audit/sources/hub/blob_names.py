"""The names a Hub answer gives its blobs, refused where they are no plain name.

``hf_hub_download`` stores a document as ``blobs/<etag>`` in the Hub cache, the etag taken from
the metadata answer's ``X-Linked-Etag`` or ``ETag`` as the server wrote it (huggingface_hub
2.4.0 ``file_download.py``: ``os.path.join(storage_folder, "blobs", etag)``). An etag such as
``"/tmp/x"`` or ``"../../x"`` would have it write the document, and a lock beside it, anywhere
the user can write. The Hub's own etags are hex digests; a metadata answer (``HEAD``) to a
request qarm makes whose etag holds a path separator, a drive colon, a control character, or is
``.``/``..``/empty is refused before huggingface_hub reads it. Answers to other requests (the
caller's own, in a process that uses qarm as a library) are left alone.
"""

from __future__ import annotations

import httpx2
from huggingface_hub import get_session

from ...errors import HubError
from .deadline import current_request

ETAG_HEADERS = ("X-Linked-Etag", "ETag")
"""Where huggingface_hub reads a blob's name, the first present winning."""

_NOT_IN_A_NAME = frozenset("/\\:\0")


def install() -> None:
    """Check the metadata answers of huggingface_hub's session (once per session) to the
    requests qarm makes (those made under a deadline, ``deadline.py``)."""
    hooks = get_session().event_hooks
    if _plain_blob_names not in hooks.get("response", []):
        hooks["response"] = [*hooks.get("response", []), _plain_blob_names]


def _plain_blob_names(response: httpx2.Response) -> None:
    request = current_request()
    if request is not None and response.request.method == "HEAD":
        refuse_unsafe_etag(response.headers, request.where)


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
