"""``commprof dashboard RUN [RUN2 …]``: serve the Dash app for these runs (and only these)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def run_keys(paths: list[str]) -> list[str]:
    """A short unique name per path: the folder (or file) name, with -2, -3 … on clashes."""
    keys: list[str] = []
    for path in paths:
        p = Path(path).expanduser().resolve()
        base = p.name.removesuffix(".gz").removesuffix(".json") if p.is_file() else p.name
        key, n = base or "run", 2
        while key in keys:
            key, n = f"{base}-{n}", n + 1
        keys.append(key)
    return keys


def load_runs(paths: list[str], jobs: int | None = None) -> dict[str, Any]:
    """Open every run up front: a path that does not exist or cannot be read stops with one line (exit 2).
    Analysis happens later, per page; a run that fails it gets a message page."""
    from commprof.errors import InputError

    missing = [p for p in paths if not Path(p).expanduser().exists()]
    if missing:
        raise InputError("no such file or folder", missing[0])
    return {key: _open(path, jobs) for key, path in zip(run_keys(paths), paths, strict=True)}


def _open(path: str, jobs: int | None) -> Any:
    from commprof.cli.common import open_run_with_progress
    from commprof.errors import InputError

    try:
        return open_run_with_progress(path, jobs)
    except (OSError, ValueError) as err:
        raise InputError(f"cannot load the run: {type(err).__name__}: {err}", path) from None


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on (the default serves only this machine).")
@click.option("--port", type=click.IntRange(1, 65535), default=8050, show_default=True, help="TCP port.")
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Processes that parse traces in parallel (default: one per core).")
def dashboard(paths: tuple[str, ...], host: str, port: int, jobs: int | None) -> None:
    """Open runs (run directories, folders of traces or trace files) in a web dashboard.

    Pages: overview, timeline, collectives, topology, skew, and compare (with two runs or more).
    """
    runs = load_runs(list(paths), jobs)
    for key, run in runs.items():
        for warning in run.warnings[:3]:
            click.echo(f"commprof: warning: {key}: {warning}", err=True)
    from commprof.dashboard import create_app
    from commprof.dashboard.cache import warmed

    cache, problems = warmed(runs)
    for problem in problems:
        click.echo(f"commprof: warning: {problem}", err=True)
    app = create_app(runs, cache)
    click.echo(f"commprof dashboard: {len(runs)} run(s) ({', '.join(runs)}) on http://{host}:{port}/", err=True)
    app.run(host=host, port=port, debug=False)
