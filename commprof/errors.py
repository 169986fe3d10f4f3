"""Errors that reach the user as one line (exit code 2), never as a traceback."""

from __future__ import annotations

from pathlib import Path


class CommprofError(Exception):
    """A problem with the user's input or usage. The CLI prints ``str(err)`` and exits with 2."""

    exit_code = 2

    def __init__(self, message: str, path: str | Path | None = None, where: str | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.where = where
        parts = []
        if self.path:
            parts.append(self.path + (f" ({where})" if where else ""))
        parts.append(message)
        super().__init__(": ".join(parts))


class InputError(CommprofError):
    """A file or folder that cannot be read as what it claims to be."""


class UsageError(CommprofError):
    """Options that do not fit together."""


class TruncatedTraceError(InputError):
    """A trace cut short before its first event (a job killed while writing). In a run with other
    traces the rank is skipped with a warning instead of failing the whole run."""
