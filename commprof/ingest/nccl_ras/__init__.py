"""The NCCL RAS reader: status reports the ``ncclras`` client prints (NCCL 2.24+), saved to a file, in a run's
``raw/`` or given as an input, found by their content (no name is fixed) -> three small tables: the
Communicators summary rows, the groups of ranks at each operation count (or status) of a communicator whose
ranks disagree, and the other errors and warnings (missing ranks, dead processes, timeouts). The hang report
reads them (``analyzers/ras.py``) beside Flight Recorder's. The formats are described in ``parse``; the
tables are made in ``tables`` (this module, which finds the reports, imports no polars: every NCCL log search
asks it whether a file is a report)."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Collection
from pathlib import Path

from commprof.ingest.nccl_ras.parse import looks_like_ras

HEAD_CHARS = 256 << 10  # where a report must show itself
JSON_HEAD_CHARS = 4 << 10
BINARY_HEAD = 4 << 10  # a NUL byte in it: a binary file, never a report (16,384 dumps are not decoded and searched)
MAX_BYTES = 64 << 20  # a status report is kilobytes; a bigger file is read only when given as the input
TEXT_SUFFIXES = frozenset({"", ".txt", ".log", ".out", ".err", ".ras", ".json", ".gz"})
SKIP_DIRS = frozenset({"tables", "__pycache__", "traces", "ranks", "flight_recorder"})

__all__ = ["find_reports", "is_ras_report"]


# a word each form ``parse.looks_like_ras`` accepts holds: a head without any is no report, decided without decoding
# it or running the pattern (every NCCL log of a run is asked: 16,384 of them took 3.8 s)
_WORDS = (b"Communicators", b"Group", b"MISMATCH", b"INCOMPLETE", b"ERROR", b"RAS Monitor Mode", b'"communicators')


def _head(path: Path, read: bytes | None = None) -> str:
    """The text a report shows itself in: a JSON report names its communicators in its first lines (and a
    folder of Kineto traces is not read far); "" for a binary file or one with none of the words a report holds.
    ``read``: the file's first bytes when the caller has them already (at least as many as are looked at)."""
    size = JSON_HEAD_CHARS if path.suffix.lower() == ".json" else HEAD_CHARS
    if read is not None:
        head = read[:size]
    else:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            if path.suffix != ".gz":  # no buffer of the whole head for a small file
                size = min(size, os.fstat(f.fileno()).st_size + 1)
            head = f.read(size)
    if b"\0" in head[:BINARY_HEAD]:  # binary (a Flight Recorder pickle beside the reports): no text to search
        return ""
    for word in _WORDS:  # memchr-fast each; a pattern of them all tried every position (~5x slower)
        if word in head:
            return head.decode("utf-8", "replace")
    return ""


def is_ras_report(path: Path, head: bytes | None = None) -> bool:
    """A file whose head reads as a RAS report (``parse.looks_like_ras``); False for anything unreadable.
    ``head``: its first bytes (decompressed), at least ``HEAD_CHARS`` of them or the whole file, when the caller
    read them already (the NCCL log search does: one read a file)."""
    if path.suffix.lower() not in TEXT_SUFFIXES or path.name.startswith("."):
        return False
    try:
        return looks_like_ras(_head(path, head))
    except (OSError, EOFError, zlib.error):
        return False


def find_reports(root: Path, known: Collection[Path] = ()) -> list[Path]:
    """RAS reports under a run directory's ``raw/`` (any folder of it), or in a folder (searched down), or the
    file itself when it is one; ``known``: files already known to be something else (the NCCL logs found)."""
    if root.is_file():
        return [root] if is_ras_report(root) else []
    base = root / "raw" if (root / "raw").is_dir() else root
    if not base.is_dir():
        return []
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path in known:
                continue
            try:
                small = path.is_file() and path.stat().st_size <= MAX_BYTES
            except OSError:
                continue
            if small and is_ras_report(path):
                found.append(path)
    return found
