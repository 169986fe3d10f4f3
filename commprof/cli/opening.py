"""How every command opens a run: ``analyze``, ``check``, ``diff``, ``export``, ``ingest``, ``topology`` and
``dashboard`` all come here, so that a path means the same run everywhere.

A run is what the paths given name together: a run directory, a folder of traces, one trace file, a parent
folder of node folders, or several node folders of one job (one ``commprof record`` per node on local
disks). Discovery (``commprof.ingest.discover``), where the table cache lives (``ingest.cache_place``), the
reading of a big trace in a second process while the command imports (``ingest.kineto.prefetch``) and the
report kept from an earlier identical ``analyze`` (``report.report_cache``) are decided here, once, from the
same paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click


def paths_argument(f: Callable[..., Any]) -> Callable[..., Any]:
    """PATH...: one run, from one path or from its nodes' folders."""
    return click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))(f)


@dataclass(frozen=True)
class RunRequest:
    """What a command asks of the run it opens."""

    paths: tuple[str, ...]
    ranks: list[int] | None = None
    allow_partial: bool = False
    step_range: str | None = None
    declared: tuple[Any, ...] = ()  # kernel families declared communication (comm_kernel_option.py)

    @property
    def label(self) -> str:
        return " + ".join(self.paths)

    def one_path(self) -> str | None:
        return self.paths[0] if len(self.paths) == 1 else None


def start_prefetch(request: RunRequest, while_waiting: tuple[str | Callable[[], object], ...] = ()) -> None:
    """One big trace not cached yet: read it in a second process while this one imports its libraries."""
    if request.one_path() is None or request.declared:  # the child reads with the catalogue alone
        return
    from commprof.ingest.kineto import prefetch

    prefetch.start(request.paths[0], while_waiting=while_waiting)


def quick_key(request: RunRequest, options: dict[str, Any]) -> Any:
    """The report cache's key of these paths before they are opened (report.report_cache.quick_key)."""
    from commprof.report import report_cache

    return report_cache.quick_key(list(request.paths), options)


def open_request(request: RunRequest, runner: Any = None, progress: Any = None, jobs: int | None = None) -> Any:
    """The run, with a progress bar on stderr while traces are parsed (only on a terminal)."""
    from commprof.cli.common import work_session
    from commprof.run import open_run

    target: str | list[str] = request.paths[0] if len(request.paths) == 1 else list(request.paths)
    if runner is not None:
        return open_run(target, runner=runner, progress=progress, ranks=request.ranks,
                        allow_partial=request.allow_partial, step_range=request.step_range, declared=request.declared)
    with work_session(jobs) as (own, bar):
        return open_run(target, runner=own, progress=bar, ranks=request.ranks, allow_partial=request.allow_partial,
                        step_range=request.step_range, declared=request.declared)


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


def group_by_job(paths: Iterable[str]) -> list[tuple[str, ...]]:
    """Paths as runs, for commands that take several runs (``dashboard``, ``diff``): the folders of one
    recorded job (the same job over overlapping times in their manifests: its nodes recorded on local disks)
    are one run; every other path is a run of its own. Order as given."""
    from commprof.ingest.discover import recorded_job
    from commprof.ingest.job_parts import same_job

    groups: list[tuple[dict[str, Any] | None, list[str]]] = []
    for path in paths:
        job = recorded_job(Path(path).expanduser())
        real = os.path.realpath(path)
        home = next((members for first, members in groups if job is not None and same_job(first, job)
                     and real not in {os.path.realpath(m) for m in members}), None)  # a run twice: two runs
        if home is None:
            groups.append((job, [path]))
        else:
            home.append(path)
    return [tuple(members) for _, members in groups]


def describe(paths: Sequence[str]) -> str:
    return paths[0] if len(paths) == 1 else " + ".join(paths)
