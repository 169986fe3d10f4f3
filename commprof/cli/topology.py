"""``commprof topology PATH``: what NCCL saw — versions, hosts, communicators, transports, NICs,
algorithms and the link tier of each communicator — from NCCL logs alone."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


@click.command("topology")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people, json (with schema_version) for scripts",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="write here, not stdout")
def topology(paths: tuple[Path, ...], fmt: str, output: Path | None) -> None:
    """Show what NCCL saw in the logs under PATH (a run directory, a folder searched recursively,
    or one NCCL log file; several: the node folders of one job). A run without NCCL logs (Gloo, or NCCL_DEBUG
    unset) shows its hosts, devices, process groups and topology captures instead, and says what is missing."""
    from rich.console import Console

    from commprof.ingest.nccl_logs import build_tables, load_nccl
    from commprof.ingest.nccl_logs.load import NoNcclLogs
    from commprof.nccl import render, summarize

    draw: Callable[[dict[str, Any], Console], None] = render
    try:
        run = load_nccl(list(paths))
        summary = summarize(run, build_tables(run.logs, run.topologies, run.graphs))
    except NoNcclLogs as err:
        summary = _without_logs(paths, err)
        from commprof.nccl.without_logs import render_without_logs

        draw = render_without_logs
    if output is None:
        if fmt == "json":
            sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        else:
            draw(summary, Console())
        return
    from commprof.safe_write import atomic_write

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as out:
            if fmt == "json":
                out.write(json.dumps(summary, indent=2) + "\n")
            else:
                draw(summary, Console(file=out, width=140))

    atomic_write(output, write, "output")


def _without_logs(paths: tuple[Path, ...], err: Exception) -> dict[str, Any]:
    """What the run has, when it has traces; without them the missing logs are the error."""
    from commprof.errors import InputError
    from commprof.nccl.without_logs import summarize_without_logs
    from commprof.run import open_run

    try:
        run = open_run(paths[0] if len(paths) == 1 else list(paths))
    except InputError:
        raise err from None
    return summarize_without_logs(run, "none found under " + " + ".join(map(str, paths)))
