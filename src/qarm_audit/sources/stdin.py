"""``-`` as a source: a manifest (plain or gzip) read from standard input."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

from ..errors import FetchError, ManifestError
from .checkpoint import Checkpoint
from .manifest import MANIFEST_CAP, read_manifest

STDIN = "-"
"""The source name that means standard input, as ``pip-audit -r -`` or ``cat`` take it."""


def read_stdin_manifest(stream: BinaryIO) -> Checkpoint:
    """Read a manifest from ``stream`` with the file reader's checks (the size cap, the gzip
    bomb guard): the bytes go to a temporary file first, never more than the cap."""
    handle, name = tempfile.mkstemp(prefix="qarm-stdin.", suffix=".manifest")
    temp = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            try:
                shutil.copyfileobj(_capped(stream), out)
            except OSError as exc:
                raise FetchError(STDIN, f"cannot read standard input: {exc}") from None
        if temp.stat().st_size == 0:
            raise ManifestError(STDIN, "standard input is empty: pipe a manifest into qarm")
        return read_manifest(temp, STDIN)
    finally:
        temp.unlink(missing_ok=True)


class _capped:
    """``stream`` read in pieces, refused once it passes :data:`MANIFEST_CAP`."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.seen = 0

    def read(self, size: int = -1) -> bytes:
        piece = self.stream.read(size if size > 0 else 1 << 20)
        self.seen += len(piece)
        if self.seen > MANIFEST_CAP:
            raise ManifestError(STDIN, f"standard input is above the {MANIFEST_CAP}-byte cap")
        return piece
