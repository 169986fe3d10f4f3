"""Which reader takes a file: decided by its first bytes, not only its name, so a run may mix sources
(Kineto traces for some ranks, nsys exports for others). Every reader hands on a RankTrace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from commprof.ingest import kineto, nsys
from commprof.ingest.common.rank_trace import RankTrace, rank_from_file_name

if TYPE_CHECKING:
    from commprof.ingest.rank_sidecar import SidecarIndex

__all__ = ["RankTrace", "extract", "rank_from_file_name"]


def extract(path: Path, sidecars: SidecarIndex | list[dict[str, Any]] | None = None, label: str | None = None,
            step_range: str | None = None, defer: bool = False) -> RankTrace:
    """One input file -> its rank's tables, by the reader its content calls for. ``step_range``: the NVTX
    range that marks a step in nsys exports (Kineto traces have ProfilerStep#N). ``defer``: a Kineto
    trace's tables may come back unbuilt, for ``kineto.reader.stack`` (the batch's frames at once)."""
    if nsys.is_sqlite(path):
        return nsys.extract(path, label, step_range)
    return kineto.extract(path, sidecars, label=label, defer=defer)
