"""commprof: how much step time communication costs in distributed training, which parallel
dimension and link is responsible, and how much of it is hidden behind compute.

Python API::

    import commprof
    run = commprof.open_run("runs/exp1")          # a run directory, a folder of traces or one trace
    run.intervals, run.collectives, run.ranks      # polars DataFrames
    analysis = commprof.analyze(run)               # every number the views show (analyzers.pipeline)
    analysis.rank_summary, analysis.group_summary, analysis.dimension_tier, analysis.stragglers
    commprof.analyze_run("runs/exp1")              # the ``analyze --format json`` report as a dict
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "analyze", "analyze_run", "open_run"]


def _source_checkout_subpackages() -> None:
    """In the repository, ``analyzers/`` and ``dashboard/`` sit beside ``commprof/`` and the wheel maps them
    to ``commprof.analyzers`` and ``commprof.dashboard`` (pyproject's package-dir). When this package is
    imported from a checkout instead — ``python -m commprof`` in the repository root finds ``./commprof``
    before an installed wheel — the same mapping has to hold here, or every command fails to import its
    analyzers. An installed wheel has ``commprof/analyzers`` itself and is left alone."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if (not os.path.isdir(os.path.join(here, "analyzers"))
            and os.path.isfile(os.path.join(root, "analyzers", "__init__.py"))
            and os.path.isfile(os.path.join(root, "pyproject.toml"))
            and root not in __path__):
        __path__.append(root)


_source_checkout_subpackages()

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis, AnalysisSettings
    from commprof.run import Run


def open_run(path: Any, **kwargs: Any) -> Run:
    from commprof.run import open_run as _open

    return _open(path, **kwargs)


def analyze(run: Any, settings: AnalysisSettings | None = None, **kwargs: Any) -> Analysis:
    """The analysis of a run (a :class:`Run`, or a path to open). Keywords ``runner`` (where the
    per-rank work runs: ``commprof.ingest.runner``) and ``progress`` go to the analysis."""
    import os

    from commprof.analyzers.pipeline import analyze as _analyze

    if isinstance(run, (str, os.PathLike)):
        run = open_run(run, **{k: v for k, v in kwargs.items() if k in ("runner", "progress")})
    return _analyze(run.tables(), settings, **kwargs)


def analyze_run(path: Any, *, hta_compat: bool = False) -> dict[str, Any]:
    """Open, analyze and return the ``analyze`` report as a dict (the JSON schema)."""
    from commprof.analyzers.pipeline import AnalysisSettings
    from commprof.report import analysis_json

    run = open_run(path)
    settings = AnalysisSettings(hta_compat=hta_compat)
    report = analysis_json.build(analyze(run, settings))
    if run.source.windows:  # record --every/--on-demand: the newest window's report, with the trend of them all
        from commprof.report.analyzed import window_trend

        report["windows"] = window_trend(run, report, settings, {})
    return report
