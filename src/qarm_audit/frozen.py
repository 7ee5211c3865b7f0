"""The settings every pydantic model of the package starts from."""

from __future__ import annotations

from typing import Unpack

from pydantic import ConfigDict


def frozen_config(**options: Unpack[ConfigDict]) -> ConfigDict:
    """``ConfigDict(**options)`` for a frozen model whose validator is built on first use
    (``defer_build``): a process builds few of the package's models (one declaration format,
    one report kind), and building them all at import was a tenth of a small audit's time."""
    return ConfigDict(defer_build=True, frozen=True, **options)
