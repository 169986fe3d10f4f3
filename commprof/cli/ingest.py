"""``commprof ingest PATH``: parse traces into the Parquet tables now (other commands do it on demand)."""

from __future__ import annotations

import click

from commprof.cli.common import allow_partial_option, open_run_with_progress


@click.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Processes that parse traces in parallel (default: one per core).")
@allow_partial_option
def ingest(path: str, jobs: int | None, allow_partial: bool) -> None:
    """Parse a run's traces into its tables/ cache and say what was found."""
    run = open_run_with_progress(path, jobs, allow_partial=allow_partial)
    ing = run.ingested
    click.echo(
        f"{run.path}: {len(run.rank_files)} trace(s), {ing.parsed} parsed, "
        f"{len(run.rank_files) - ing.parsed} from cache; tables in {ing.cache}"
    )
    for warning in run.warnings:
        click.echo(f"warning: {warning}", err=True)
