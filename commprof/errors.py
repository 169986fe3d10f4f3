"""Errors that reach the user as one line (exit code 2), never as a traceback."""

from __future__ import annotations

import re
from pathlib import Path

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators: a file name holding one would
# break a one-line message in two, or fake a "commprof: ..." line of its own
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``): one message, one line."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                                             else f"\\u{ord(m.group()):04x}"), text)


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
        super().__init__(printable(": ".join(parts)))


class InputError(CommprofError):
    """A file or folder that cannot be read as what it claims to be."""


class UsageError(CommprofError):
    """Options that do not fit together."""


class TruncatedTraceError(InputError):
    """A trace cut short before its first event (a job killed while writing). In a run with other
    traces the rank is skipped with a warning instead of failing the whole run."""


class NotATraceError(InputError):
    """A file that is not a Kineto trace at all (another JSON, such as a PyTorch execution trace, or
    no JSON). Beside other traces it is skipped with a warning; given alone it is an error. (Here, not in
    the Kineto stream module, so that the store can catch it without importing the stream.)"""
