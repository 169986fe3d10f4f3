"""commprof: how much step time communication costs in distributed training, which parallel
dimension and link is responsible, and how much of it is hidden behind compute.

Python API::

    import commprof
    run = commprof.open_run("runs/exp1")          # a run directory, a folder of traces or one trace
    run.intervals, run.collectives, run.ranks      # polars DataFrames
    analysis = run.analyze()                       # steps, collectives with exposed/overlapped time
    analysis.rank_summary(), analysis.pg_summary(), analysis.collectives_summary()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "analyze_run", "open_run"]

if TYPE_CHECKING:
    from commprof.run import Run


def open_run(path: Any, **kwargs: Any) -> Run:
    from commprof.run import open_run as _open

    return _open(path, **kwargs)


def analyze_run(path: Any, *, hta_compat: bool = False) -> dict[str, Any]:
    """Open, analyze and return the ``analyze`` report as a dict (the JSON schema)."""
    from commprof.analyzers.pipeline import AnalysisSettings
    from commprof.report import analysis_json

    run = open_run(path)
    return analysis_json.build(run, run.analyze(AnalysisSettings(hta_compat=hta_compat)))
