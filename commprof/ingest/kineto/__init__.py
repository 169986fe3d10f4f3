"""The Kineto (torch.profiler Chrome-trace JSON) reader: one trace file -> one rank's tables.

``reader.extract`` drives the pass (``scan.Scan``) over the events streamed by ``stream``; ``cpu`` and
``times`` turn what the pass kept into CPU-run tables, step marks and launch times; ``comm`` reads
collective arguments; ``gloo_calls`` / ``gloo_groups`` attribute Gloo worker ops to their calls and groups.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commprof.ingest.common.rank_trace import RankTrace, rank_from_file_name
    from commprof.ingest.kineto.reader import extract

__all__ = ["RankTrace", "extract", "rank_from_file_name"]


def __getattr__(name: str) -> Any:
    """``extract`` on first use: a command that reads cached tables never loads the reader (the
    store imports ``kineto.stream`` for its error type, which runs this package's ``__init__``)."""
    if name == "extract":
        from commprof.ingest.kineto.reader import extract

        return extract
    if name in ("RankTrace", "rank_from_file_name"):  # lazily too: they import polars, which the pass
        from commprof.ingest.common import rank_trace  # of kineto.prefetch's child does without

        return getattr(rank_trace, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
