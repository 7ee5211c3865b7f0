"""A declaration document or index, read whole or only where it is looked at.

A sorted index of a million tensors is tens of MB, and the audit of its folder never needs
its text: the text is proven, in a forked copy (``aside.py``), to be exactly what
``transformers`` writes for the headers, and the process reads only its head (the keys before
``weight_map``), its end and a few hundred windows (:func:`~.index.index_head`). Reading it
whole, into tens of MB of fresh memory, cost the process 0.05-0.08 s (nearly all of it page
faults) before the shards' copies could start. :class:`DocumentFile` serves those windows as
the bytes would, and the whole text where it is wanted (the proof, an index read otherwise);
every read names the document in its error, as :func:`read_document` does.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FetchError, SourceSpecError

DOCUMENT_CAP = 256 * 1024 * 1024
"""Largest declaration or index document read (Kimi-class indexes run to tens of MB)."""

FIRST_WINDOW = 4096
"""Bytes read for a search's first window: an index's head, or one of its entries, fits."""

LARGEST_WINDOW = 1 << 20
"""A search that goes on doubles its window up to this."""


def read_document(path: Path, where: str, cap: int = DOCUMENT_CAP) -> bytes:
    """Read a document's bytes, bounded in size."""
    _size(path, where, cap)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FetchError(where, f"cannot read: {exc.strerror or exc}") from None


def _size(path: Path, where: str, cap: int) -> int:
    """The document's size, refused above ``cap``."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise FetchError(where, f"cannot read: {exc.strerror or exc}") from None
    if size > cap:
        raise SourceSpecError(where, f"{size} bytes is above the {cap}-byte document cap")
    return size


class DocumentFile:
    """The bytes of the document at ``path`` (``where`` in errors) as :class:`bytes` serves
    them to :func:`~.index.index_head`: its length, slices, ``find`` and ``endswith`` with
    bounds at or above 0, each read from the file where it is asked; :meth:`whole` reads it
    all, as :func:`read_document` does.

    The size is the one found when it is opened, and its head is read then, so that a
    document above ``cap``, or one that cannot be read, is refused where reading it whole is.
    A file that changes afterwards is read as it then is: what a caller takes from windows
    must be proven on the whole text, read in one go."""

    def __init__(
        self, path: Path, where: str, cap: int = DOCUMENT_CAP, *, window: int = FIRST_WINDOW
    ) -> None:
        self.path = path
        self.where = where
        self.cap = cap
        self._window = max(window, 1)
        self._whole: bytes | None = None
        self.size = _size(path, where, cap)
        self._held: tuple[int, bytes, bool] = (0, b"", False)
        """The last read: where it began, what it gave, and whether it met the file's end."""
        self._read(0, self._window)  # the head, and the error reading it gives

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice) -> bytes:
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("a document is read in slices without a step")
        return self._read(start, stop - start) if stop > start else b""

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """``bytes.find``, for bounds at or above 0."""
        end = self.size if end is None else min(end, self.size)
        at, window = start, max(self._window, len(sub))
        while at + len(sub) <= end:
            stop = min(end, at + window)
            found = self[at:stop].find(sub)
            if found >= 0:
                return at + found
            if stop >= end:
                break
            at = stop - len(sub) + 1  # a match across the window's end is found in the next
            window = max(min(window * 2, LARGEST_WINDOW), len(sub))
        return -1

    def endswith(self, suffix: bytes, start: int = 0, end: int | None = None) -> bool:
        """``bytes.endswith``, for bounds at or above 0."""
        end = self.size if end is None else min(end, self.size)
        if end - start < len(suffix):
            return False
        return self[end - len(suffix) : end] == suffix

    def whole(self) -> bytes:
        """All of the document (:func:`read_document`), read once and kept."""
        if self._whole is None:
            self._whole = read_document(self.path, self.where, self.cap)
        return self._whole

    def _read(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end), read in whole windows from a
        window's edge, the last read kept: the key-order look reads a few keys from each of
        the places it looks at, and a search goes on from where the last one stopped."""
        if self._whole is not None:
            return self._whole[start : start + length]
        base, held, ended = self._held
        if base <= start and (ended or start + length <= base + len(held)):
            return held[start - base : start - base + length]
        base = start - start % self._window
        asked = -(-(start + length - base) // self._window) * self._window
        try:
            with self.path.open("rb") as file:
                file.seek(base)
                held = file.read(asked)
        except OSError as exc:
            raise FetchError(self.where, f"cannot read: {exc.strerror or exc}") from None
        self._held = (base, held, len(held) < asked)
        return held[start - base : start - base + length]
