"""Checkpoints on the Hugging Face Hub, read header-only through ``huggingface_hub``."""

from __future__ import annotations

from ..errors import UsageError
from .checkpoint import Checkpoint


def read_hub(repo: str, revision: str | None, *, location: str, require_pinned: bool) -> Checkpoint:
    raise UsageError(location, "reading from the Hub is not available in this build")
