"""The analyze report of an opened run, kept like any run's (report_cache), and the trend of a run recorded in
repeating windows (``record --every``/``--on-demand``): each window analyzed as the run directory it is. A view:
the CLI, the dashboard and the API all ask here."""

from __future__ import annotations

from typing import Any


def analyzed_report(run: Any, settings: Any, cache_options: dict[str, Any], quick: Any = None, runner: Any = None,
                    progress: Any = None) -> dict[str, Any]:
    """The analyze report of an opened run: the one kept for the same inputs, options and code, else a fresh
    analysis (then kept)."""
    import commprof
    from commprof.report import analysis_json, report_cache

    key = report_cache.key(run, settings, cache_options)
    report = report_cache.load(run, key)
    if report is None:
        report = analysis_json.build(commprof.analyze(run, settings, runner=runner, progress=progress))
        if run.source.windows:
            report["windows"] = window_trend(run, report, settings, cache_options, runner, progress)
        report_cache.store(run, key, report)
    report_cache.remember(run, quick, key)
    return report


def window_trend(run: Any, report: dict[str, Any], settings: Any, cache_options: dict[str, Any], runner: Any = None,
                 progress: Any = None) -> dict[str, Any]:
    """The trend over a run's repeating windows (analyzers/trend.py): each window analyzed as the run directory
    it is (its report kept like any run's), ``report`` being the newest one's."""
    from commprof.analyzers import trend
    from commprof.errors import CommprofError
    from commprof.run import open_run

    rows, failed = [], []
    newest = run.source.windows[-1][0]
    for name, folders in run.source.windows:
        if name == newest:
            rows.append(trend.window_row(name, report))
            continue
        try:
            window = open_run(list(folders) if len(folders) > 1 else folders[0], runner=runner, progress=progress,
                              ranks=cache_options.get("ranks"), allow_partial=bool(cache_options.get("allow_partial")),
                              step_range=cache_options.get("step_range"), declared=run.declared)
            rows.append(trend.window_row(name, analyzed_report(window, settings, cache_options, None, runner,
                                                               progress)))
        except CommprofError as err:
            failed.append((name, str(err)))
    result: dict[str, Any] = trend.trend(rows, failed)
    return result
