"""The Nsight Systems reader: one ``nsys export --type sqlite`` file per rank -> that rank's tables.

``db`` opens the export read-only and probes its schema (2.x and 3.x differ in table and column names);
``devices`` reads kernels and memory operations with their launches; ``nvtx`` reads NCCL's API ranges and
step ranges; ``attach`` gives each communication kernel the NCCL calls it runs; ``reader`` builds the tables.
"""

from typing import TYPE_CHECKING, Any

from commprof.ingest.nsys.db import NsysExportError, is_sqlite

if TYPE_CHECKING:
    from commprof.ingest.nsys.reader import SOURCE, extract

__all__ = ["SOURCE", "NsysExportError", "extract", "is_sqlite"]


def __getattr__(name: str) -> Any:
    """The reader on first use: a command that reads cached tables never loads it."""
    if name in ("SOURCE", "extract"):
        from commprof.ingest.nsys import reader

        return getattr(reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
