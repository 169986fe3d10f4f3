"""Options and helpers shared by commands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

FORMATS = ("text", "json", "markdown", "html")


def output_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write the report to this file instead of standard output.")(f)
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
                     help="Report format. html: one file that opens offline in any browser (findings, pictures "
                          "and the text report's tables; give -o FILE).")(f)
    return f


def runner_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--workers (alias -j/--jobs), --scheduler and --ranks: where the per-rank work runs, and on what."""
    f = click.option("--ranks", "ranks", default=None, metavar="LIST",
                     help="Analyze only these ranks, e.g. 0-7,64,128 (a quick look at a big run: only their traces "
                          "are opened; waits and skew then compare these ranks only).")(f)
    f = click.option("--scheduler", default=None, envvar="COMMPROF_SCHEDULER", metavar="tcp://HOST:PORT",
                     help="Run the per-rank work on this Dask cluster (env COMMPROF_SCHEDULER); its workers must see "
                          "the run and its table cache at the same paths. Needs commprof[dask].")(f)
    f = click.option("-w", "--workers", "-j", "--jobs", "workers", type=click.IntRange(1), default=None,
                     help="Local processes for per-rank ingest and analysis (default: one per core, fewer when free "
                          "memory is short; in process for small runs).")(f)
    return f


def parse_ranks(text: str | None) -> list[int] | None:
    """``0-7,64,128`` -> [0..7, 64, 128]."""
    if text is None:
        return None
    from commprof.errors import UsageError

    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise UsageError(f"--ranks: {part!r} is not a rank or a range like 0-7") from None
        if a < 0 or b < a:
            raise UsageError(f"--ranks: {part!r} is not a rank or a range like 0-7")
        out.update(range(a, b + 1))
    if not out:
        raise UsageError("--ranks: no rank given")
    return sorted(out)


class ProgressBar:
    """One bar per phase on stderr (only on a terminal): ranks done, MB/s of trace read, time left,
    and how many ranks failed so far."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[ranks]}"),
                            TransferSpeedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[failed]}"),
                            transient=True)
        self.tasks: dict[str, Any] = {}

    def __call__(self, p: Any) -> None:
        if p.phase not in self.tasks:
            label = {"ingest": "reading traces", "analysis": "analyzing ranks"}.get(p.phase, p.phase)
            self.tasks[p.phase] = self.bar.add_task(label, total=p.bytes_total or None, ranks="", failed="")
        self.bar.update(self.tasks[p.phase], completed=p.bytes_done, ranks=f"{p.done}/{p.total} ranks",
                        failed=f"{p.failed} failed" if p.failed else "")

    def __enter__(self) -> ProgressBar:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()


@contextmanager
def work_session(workers: int | None = None, scheduler: str | None = None) -> Iterator[tuple[Any, Any]]:
    """(runner, progress callback or None) for one command; the runner's workers are stopped after."""
    from commprof.ingest.runner import make_runner

    with make_runner(workers, scheduler) as runner:
        if not sys.stderr.isatty():
            yield runner, None
            return
        with ProgressBar() as bar:
            yield runner, bar


def allow_partial_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--allow-partial", is_flag=True,
                        help="Analyze what is readable of a trace damaged inside (not just cut short at its end): "
                             "the damage becomes a warning instead of an error.")(f)


def _range_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("give the NVTX range's name, e.g. --step-range train_step")
    return value.strip() if value is not None else None


def step_range_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--step-range", "step_range", default=None, metavar="NAME", callback=_range_name,
                        help="Nsight Systems exports: the NVTX range that marks one training step, matched whole, "
                             "alone or followed by a step number (\"train_step\", \"train_step 12\"); default: "
                             "ProfilerStep#N and common loop names (step, iteration, train_step ...).")(f)


def write_output(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    from commprof.safe_write import atomic_write_text

    # whole or not at all: a full disk leaves the previous report (or none), never half of one
    atomic_write_text(output, text if text.endswith("\n") else text + "\n", "the report")
