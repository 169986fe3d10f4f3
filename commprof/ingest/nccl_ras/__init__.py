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
from pathlib import Path

from commprof.ingest.nccl_ras.parse import looks_like_ras

HEAD_CHARS = 256 << 10  # where a report must show itself
JSON_HEAD_CHARS = 4 << 10
BINARY_HEAD = 4 << 10  # a NUL byte in it: a binary file, never a report (16,384 dumps are not decoded and searched)
MAX_BYTES = 64 << 20  # a status report is kilobytes; a bigger file is read only when given as the input
TEXT_SUFFIXES = frozenset({"", ".txt", ".log", ".out", ".err", ".ras", ".json", ".gz"})
SKIP_DIRS = frozenset({"tables", "__pycache__", "traces", "ranks", "flight_recorder"})

__all__ = ["find_reports", "is_ras_report"]


def _head(path: Path) -> str:
    """The text a report shows itself in: a JSON report names its communicators in its first lines (and a
    folder of Kineto traces is not read far)."""
    size = JSON_HEAD_CHARS if path.suffix.lower() == ".json" else HEAD_CHARS
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        head = f.read(BINARY_HEAD)
        if b"\0" in head:  # binary (a Flight Recorder pickle beside the reports): no text to search
            return ""
        return (head + f.read(size - len(head))).decode("utf-8", "replace")


def is_ras_report(path: Path) -> bool:
    """A file whose head reads as a RAS report (``parse.looks_like_ras``); False for anything unreadable."""
    if path.suffix.lower() not in TEXT_SUFFIXES or path.name.startswith("."):
        return False
    try:
        return looks_like_ras(_head(path))
    except (OSError, EOFError, zlib.error):
        return False


def find_reports(root: Path) -> list[Path]:
    """RAS reports under a run directory's ``raw/`` (any folder of it), or in a folder (searched down), or the
    file itself when it is one."""
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
            try:
                small = path.is_file() and path.stat().st_size <= MAX_BYTES
            except OSError:
                continue
            if small and is_ras_report(path):
                found.append(path)
    return found
