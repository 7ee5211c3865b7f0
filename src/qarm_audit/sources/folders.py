"""File names to checkpoint folders: what ``qarm audit --folders`` audits for pre-commit, which
passes the files a commit touches. The folder is the unit (a shard alone says nothing about its
declaration), so each folder is audited once, whole."""

from __future__ import annotations

from pathlib import Path


def checkpoint_folders(paths: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The folders holding ``paths``, each once, in the order first named; and the paths whose
    folder holds no checkpoint. A folder holds one when a ``*.safetensors`` shard or
    ``hf_quant_config.json`` is in it: a ``config.json`` elsewhere is none (the hook is given
    every one a commit touches)."""
    seen: dict[Path, str] = {}
    skipped: list[str] = []
    for given in paths:
        path = Path(given)
        folder = path if path.is_dir() else path.parent
        try:
            key = folder.resolve()
            holds = (folder / "hf_quant_config.json").is_file() or any(folder.glob("*.safetensors"))
        except OSError:
            key, holds = folder, True  # audited, so that the error is reported
        if key in seen:
            continue
        if not holds:
            skipped.append(given)
            continue
        seen[key] = str(folder)
    return tuple(seen.values()), skipped
