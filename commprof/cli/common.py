"""Options and helpers shared by commands."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

FORMATS = ("text", "json", "markdown")


def output_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write the report to this file instead of standard output.")(f)
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
                     help="Report format.")(f)
    return f


def allow_partial_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--allow-partial", is_flag=True,
                        help="Analyze what is readable of a trace damaged inside (not just cut short at its end): "
                             "the damage becomes a warning instead of an error.")(f)


def open_run_with_progress(path: str, jobs: int | None = None, allow_partial: bool = False) -> Any:
    """Open a run, with a progress bar on stderr while traces are parsed (only on a terminal)."""
    from commprof.run import open_run

    if not sys.stderr.isatty():
        return open_run(path, jobs=jobs, allow_partial=allow_partial)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("parsing traces", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return open_run(path, jobs=jobs, progress=progress, allow_partial=allow_partial)


def write_output(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text if text.endswith("\n") else text + "\n")
    except OSError as err:
        from commprof.errors import UsageError

        raise UsageError(f"cannot write the report: {err.strerror}", output) from None
