"""Sources: turn what the user typed into a :class:`Checkpoint` (documents and headers only)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FetchError, SourceSpecError, UsageError
from ..runtime import collector_paused
from .checkpoint import (
    Ahead,
    Checkpoint,
    Origin,
    ShardHeader,
    TensorEntry,
    run_settled,
    settled,
)
from .local import LocalBytes, read_folder, read_local_shard, read_text
from .manifest import is_manifest_text, read_manifest, render_manifest, write_manifest

if TYPE_CHECKING:
    from .hub import HubObserver

__all__ = [
    "Ahead",
    "Checkpoint",
    "Origin",
    "ShardHeader",
    "TensorEntry",
    "open_source",
    "parse_hub_spec",
    "render_manifest",
    "run_settled",
    "settled",
    "write_manifest",
]

HUB_SPEC = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[^\s@]+))?$")


HUB_URI_PREFIXES = ("hf://", "http://", "https://", "huggingface.co/", "hf.co/")
"""What makes a SOURCE a Hub URI or web URL, parsed by huggingface_hub's ``parse_hf_uri``."""


def parse_hub_spec(spec: str) -> tuple[str, str | None] | None:
    """``owner/name[@revision]``, ``hf://owner/name[@revision]`` or a Hub web URL
    (``https://huggingface.co/owner/name/tree/revision``) -> (repo, revision), or None if it is
    none of those. URIs and URLs are parsed by huggingface_hub's own ``parse_hf_uri`` (on the
    configured ``HF_ENDPOINT`` too); one that names a dataset, a Space or a file inside the
    repository is refused by name."""
    if spec.lower().startswith(HUB_URI_PREFIXES):
        return _parse_hub_uri(spec)
    match = HUB_SPEC.match(spec)
    if not match:
        return None
    return match["repo"], match["rev"]


def _parse_hub_uri(spec: str) -> tuple[str, str | None]:
    from huggingface_hub import constants, parse_hf_uri
    from huggingface_hub.errors import HfUriError

    try:
        uri = parse_hf_uri(spec, endpoint=constants.ENDPOINT)
    except (HfUriError, ValueError) as exc:
        raise SourceSpecError(
            spec, f"is not a Hugging Face Hub URI or URL huggingface_hub can parse: {exc}"
        ) from None
    if uri.type != "model":
        raise SourceSpecError(
            spec, f"names a {uri.type} repository; qarm audits model repositories"
        )
    if uri.path_in_repo:
        raise SourceSpecError(
            spec,
            f"names {uri.path_in_repo!r} inside {uri.id}; qarm audits the whole repository: "
            f"give hf://{uri.id}" + (f"@{uri.revision}" if uri.revision else ""),
        )
    return uri.id, uri.revision


def open_source(
    spec: str,
    *,
    require_pinned: bool = False,
    observer: HubObserver | None = None,
    prove_aside: bool = False,
    ahead: Ahead | None = None,
) -> Checkpoint:
    """Read a local folder, a cache snapshot, a manifest, a lone file, or a Hub ``repo@rev``.

    ``observer`` hears about a Hub read (revision resolved, headers arriving); see ``hub/``.
    ``prove_aside``: a folder's index is proven while the caller goes on; the caller then
    settles the checkpoint (:func:`settled`) before it trusts what it made of it.
    ``ahead``: for a folder, told its documents before its index and headers are read.
    """
    with collector_paused():
        return _open(spec, require_pinned, observer, prove_aside, ahead)


def _open(
    spec: str,
    require_pinned: bool,
    observer: HubObserver | None,
    prove_aside: bool,
    ahead: Ahead | None,
) -> Checkpoint:
    path = Path(spec)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError as exc:  # a parent folder that cannot be searched
        raise FetchError(spec, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the name
        raise SourceSpecError(spec, f"is not a path: {exc}") from None
    if is_dir:
        return read_folder(path, spec, prove_aside=prove_aside, ahead=ahead)
    if is_file:
        return _read_file(path, spec)
    hub = parse_hub_spec(spec)
    if hub is not None:
        _check_token()
        from .hub import read_hub

        return read_hub(
            hub[0], hub[1], location=spec, require_pinned=require_pinned, observer=observer
        )
    raise SourceSpecError(
        spec,
        "no such file or folder, and not of the form owner/name@revision, hf://owner/name@revision "
        "or a Hub URL",
    )


def _check_token() -> None:
    """A Hub token is sent as an HTTP header, which carries printable ASCII only: refuse any
    other before a request fails on it (never showing the token)."""
    from huggingface_hub import get_token

    token = get_token()
    if token and not (token.isascii() and token.isprintable()):
        raise UsageError(
            "HF_TOKEN",
            "the Hub token holds a character an HTTP header cannot carry (not printable "
            "ASCII); set HF_TOKEN (or the saved login) to the token itself",
        )


def _read_file(path: Path, spec: str) -> Checkpoint:
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            if path.suffix != ".safetensors" or head[:2] == b"\x1f\x8b" or head[:1] == b"{":
                head += handle.read(192)  # sniff for a manifest; a shard's data is never read
    except OSError as exc:
        raise SourceSpecError(spec, f"cannot read: {exc.strerror or exc}") from None
    if head[:2] == b"\x1f\x8b" or is_manifest_text(head):
        return read_manifest(path, spec)
    if path.suffix == ".safetensors":
        shard = read_local_shard(path, path.name)
        return Checkpoint(
            origin=Origin("local", spec),
            shards=(shard,),
            read_bytes=LocalBytes(path.parent, path.resolve().parent, frozenset({path.name})),
        )
    text = read_text(path, spec)
    return Checkpoint(origin=Origin("declaration", spec), documents={path.name: text})
