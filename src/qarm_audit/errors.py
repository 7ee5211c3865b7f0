"""Every error the library raises, and the exit codes the CLI maps them to.

Each message names the file (or source) and the problem; the CLI prints it as one line.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, defined once."""

    CLEAN = 0
    """The audit ran and found nothing at or above the failure threshold."""
    FINDINGS = 1
    """The audit ran and found refusals (or warnings, with ``--fail-on warning``)."""
    BAD_INPUT = 2
    """Usage error, or input that is not a well-formed checkpoint or declaration."""
    COULD_NOT_AUDIT = 3
    """I/O or network failure: nothing can be said about the checkpoint."""


class QarmError(Exception):
    """Base of every error qarm raises on purpose."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


class UsageError(QarmError):
    """The command line or API call asks for something that cannot be done."""


class SourceSpecError(QarmError):
    """The SOURCE argument names nothing qarm can read."""


class HeaderError(QarmError):
    """A safetensors header is malformed or violates the format."""


class HeaderTooLargeError(HeaderError):
    """A header's length prefix is above the cap."""


class ShardIndexError(QarmError):
    """``model.safetensors.index.json`` is malformed or disagrees with the shard headers."""


class IntegrityError(QarmError):
    """Shards that parse but do not form one consistent checkpoint."""


class ManifestError(QarmError):
    """A manifest file is malformed, or a write would clobber a different file."""


class DeclarationError(QarmError):
    """A declaration document is not valid JSON or not of a known shape."""


class ProfileError(QarmError):
    """An engine profile file is malformed."""


class PatternError(QarmError):
    """A ``re:`` target or ignore in a declaration cannot be compiled or is unsafe."""


class FetchError(QarmError):
    """Reading from disk or the network failed; nothing can be concluded."""

    exit_code = ExitCode.COULD_NOT_AUDIT


class OutputError(QarmError):
    """Writing a report or a manifest failed (a full disk, a folder that went away)."""

    exit_code = ExitCode.COULD_NOT_AUDIT


class HubError(FetchError):
    """The Hub answered with an error or could not be reached."""


class HubAccessError(HubError):
    """The repository is gated or private and no valid token was given."""


class HubNotFoundError(HubError):
    """The repository, revision or file does not exist."""
