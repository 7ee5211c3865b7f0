"""What a caller hears while a Hub checkpoint is read (the library itself prints nothing)."""

from __future__ import annotations

from typing import Protocol


class HubObserver(Protocol):
    """What a caller may want to show while a Hub checkpoint is read (the library prints nothing).

    Every method is called from the thread that called :func:`read_hub`.
    """

    def resolved(self, revision: str, sha: str) -> None:
        """A branch or tag (``revision``) was resolved to the commit ``sha``."""

    def headers_started(self, total: int) -> None:
        """``total`` shard headers are about to be read."""

    def header_read(self, file: str) -> None:
        """One more shard header has arrived and parsed."""

    def headers_finished(self) -> None:
        """No more headers will arrive (success or failure)."""


class Silent:
    """The observer when none is given."""

    def resolved(self, revision: str, sha: str) -> None:
        pass

    def headers_started(self, total: int) -> None:
        pass

    def header_read(self, file: str) -> None:
        pass

    def headers_finished(self) -> None:
        pass
