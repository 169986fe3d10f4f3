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

from commprof.report.analyzed import analyzed_report as analyzed_report  # the CLI's name for it
from commprof.report.analyzed import window_trend as window_trend


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
