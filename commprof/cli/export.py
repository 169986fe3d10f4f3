"""``commprof export PATH --perfetto OUT.json``: an annotated Chrome/Perfetto trace of the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

import commprof
from commprof.cli.comm_kernel_option import comm_kernel_option, with_configured
from commprof.cli.common import allow_partial_option, runner_options, step_range_option
from commprof.cli.opening import RunRequest, open_request, paths_argument


@click.command()
@paths_argument
@click.option("--perfetto", "perfetto_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Write a Chrome/Perfetto JSON trace here (open in ui.perfetto.dev or chrome://tracing); "
                   "- for standard output.")
@click.option("--split-ranks", "split_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write one Kineto-style trace per rank into this folder (readable by commprof).")
@runner_options
@allow_partial_option
@step_range_option
@comm_kernel_option
def export(paths: tuple[str, ...], perfetto_path: Path, split_dir: Path | None, workers: int | None,
           scheduler: str | None, ranks: str | None, allow_partial: bool, step_range: str | None,
           comm_kernels: tuple[Any, ...]) -> None:
    """Export a run as one trace: a process per rank, collectives annotated with dimension, tier, bytes,
    busbw and exposed time, an exposed-comm track and counter per rank."""
    from commprof.cli.common import parse_ranks, work_session
    from commprof.errors import UsageError
    from commprof.export import perfetto
    from commprof.ingest.exports import split_by_rank

    with work_session(workers, scheduler) as (runner, progress):
        request = RunRequest(paths, parse_ranks(ranks), allow_partial, step_range, with_configured(comm_kernels))
        run = open_request(request, runner, progress)
        trace = perfetto.build(commprof.analyze(run, runner=runner, progress=progress))
    try:
        if str(perfetto_path) == "-":
            import json
            import sys

            json.dump(trace, sys.stdout, separators=(",", ":"))
            sys.stdout.write("\n")
        else:
            perfetto.write(trace, perfetto_path)
        if split_dir is not None:
            split_dir.mkdir(parents=True, exist_ok=True)
            for rank, part in split_by_rank(trace).items():
                perfetto.write(part, split_dir / f"rank-{rank}.json")
    except BrokenPipeError:
        raise  # `| head`: the CLI entry handles it
    except OSError as err:
        raise UsageError(f"cannot write the export: {err.strerror}", err.filename) from None
    events = len(trace["traceEvents"])
    where = "standard output" if str(perfetto_path) == "-" else perfetto_path
    click.echo(f"wrote {where} ({events} events, {len(run.rank_files)} ranks)", err=True)
