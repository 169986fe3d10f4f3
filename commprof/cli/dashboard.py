"""``commprof dashboard RUN [RUN2 …]``: serve the Dash app for these runs (and only these).

It takes ``analyze``'s analysis options (the same click options, so their names and help cannot drift),
so that the advice a page gives ("start the dashboard with --network ib") can be followed.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import click

from commprof.cli.analyze import analyze as _analyze_command
from commprof.cli.analyze import read_switches

ANALYSIS_OPTIONS = ("layout", "network", "gpus_per_node", "switches_path", "peaks", "hta_compat", "step_range",
                    "comm_kernels")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "127.0.1.1")


def run_keys(paths: list[str] | list[tuple[str, ...]]) -> list[str]:
    """A short unique name per run: the folder (or file) name, with -2, -3 … on clashes; a job given as its
    nodes' folders is named after their parent folder."""
    keys: list[str] = []
    for given in paths:
        group = (given,) if isinstance(given, str) else given
        p = Path(group[0]).expanduser().resolve()
        if len(group) > 1:
            p = Path(os.path.commonpath([str(Path(g).expanduser().resolve()) for g in group]))
        base = p.name.removesuffix(".gz").removesuffix(".json") if p.is_file() else p.name
        key, n = base or "run", 2
        while key in keys:
            key, n = f"{base}-{n}", n + 1
        keys.append(key)
    return keys


def load_runs(paths: list[str], jobs: int | None = None, step_range: str | None = None,
              declared: tuple[Any, ...] = ()) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Open every run up front: (runs, failures key -> message, keys in the order given). The folders of one
    job's nodes are one run (opening.group_by_job). A run that cannot be opened is reported on its page while
    the others are served; when none can, it stops (exit 2)."""
    from commprof.cli.opening import group_by_job
    from commprof.errors import InputError

    runs: dict[str, Any] = {}
    failures: dict[str, str] = {}
    groups = group_by_job(paths)
    keys = run_keys(groups)
    for key, path in zip(keys, groups, strict=True):
        opened = _open_or_message(path, jobs, step_range, declared)
        if isinstance(opened, str):
            failures[key] = opened
        else:
            runs[key] = opened
    if not runs:
        first = next(iter(failures.values()))
        raise InputError(first if len(failures) == 1 else f"no run could be opened; the first: {first}")
    return runs, failures, keys


def _open_or_message(paths: tuple[str, ...], jobs: int | None, step_range: str | None = None,
                     declared: tuple[Any, ...] = ()) -> Any:
    """The opened run, or the one-line message saying why it could not be opened."""
    from commprof.errors import CommprofError, InputError

    try:
        for path in paths:
            if not Path(path).expanduser().exists():
                raise InputError("no such file or folder", path)
        return _open(paths, jobs, step_range, declared)
    except CommprofError as err:
        return str(err)


def _open(paths: tuple[str, ...], jobs: int | None, step_range: str | None, declared: tuple[Any, ...] = ()) -> Any:
    from commprof.cli.opening import RunRequest, open_request
    from commprof.errors import InputError

    try:
        return open_request(RunRequest(paths, step_range=step_range, declared=declared), jobs=jobs)
    except (OSError, ValueError, RecursionError) as err:
        raise InputError(f"cannot load the run: {type(err).__name__}: {err}", " + ".join(paths)) from None


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


def host_warning(host: str, port: int) -> str | None:
    """The warning printed when the dashboard listens beyond this machine."""
    if is_loopback(host):
        return None
    return (f"commprof: warning: --host {host} serves the dashboard to the network, to whoever has its token (in the "
            f"URL below; every request without it is refused). The traffic is plain HTTP, the token included: "
            f"on a network others can read, keep the default 127.0.0.1 and tunnel "
            f"(ssh -L {port}:localhost:{port} HOST).")


def choose_token(host: str, given: str | None) -> tuple[str | None, bool]:
    """(the token requests must carry or None, whether it was made here): the one given (--token or the
    environment), else a random one when the server listens beyond loopback, else none."""
    if given is not None:
        if not given.strip():
            raise click.BadParameter("must not be empty", param_hint="'--token'")
        return given, False
    if is_loopback(host):
        return None, False
    from commprof.dashboard.access import new_token

    return new_token(), True


def server_url(host: str, port: int, token: str | None, made_here: bool) -> str:
    """The URL to open. A token made here is printed in it (the only way to learn it); one the user gave is
    not, so that it stays out of logs they did not choose to write it into."""
    from urllib.parse import quote

    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    url = f"http://{shown}:{port}/"
    if token is None:
        return url
    return url + (f"?token={quote(token, safe='')}" if made_here else "?token=<the token you gave>")


TOKEN_HELP = ("Token every request must carry: ?token= in the URL (the browser keeps it in a cookie), or an "
              "'Authorization: token ...' header. Default: a random one, printed in the URL, when --host serves "
              "beyond this machine; none on loopback. Prefer the environment variable to the flag: a command "
              "line is visible to other users of the machine (ps).")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on (the default serves only this machine; anything else serves the "
                   "runs to the network, to whoever has the token: --token).")
@click.option("--port", type=click.IntRange(1, 65535), default=8050, show_default=True, help="TCP port.")
@click.option("--token", envvar="COMMPROF_DASHBOARD_TOKEN", show_envvar=True, default=None, help=TOKEN_HELP)
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Processes that parse traces in parallel (default: one per core).")
def dashboard(paths: tuple[str, ...], host: str, port: int, token: str | None, jobs: int | None, layout: str | None,
              network: str | None, gpus_per_node: int | None, switches_path: str | None, peaks: str | None,
              hta_compat: bool, step_range: str | None, comm_kernels: tuple[Any, ...]) -> None:
    """Open runs (run directories, folders of traces or trace files) in a web dashboard.

    Pages: overview, timeline, collectives, topology, skew, and compare (with two runs or more). The
    analysis options are analyze's and apply to every run.
    """
    from commprof.analyzers.classify import parse_layout
    from commprof.analyzers.efficiency import parse_peaks
    from commprof.analyzers.pipeline import AnalysisSettings

    settings = AnalysisSettings(hta_compat=hta_compat, layout=parse_layout(layout) if layout else None,
                                network=network, gpus_per_node=gpus_per_node, peaks=parse_peaks(peaks),
                                switches=read_switches(switches_path))
    token, made_here = choose_token(host, token)
    warning = host_warning(host, port)
    if warning:
        click.echo(warning, err=True)
    from commprof.cli.comm_kernel_option import with_configured

    runs, failures, order = load_runs(list(paths), jobs, step_range, with_configured(comm_kernels))
    for key, message in failures.items():
        click.echo(f"commprof: warning: {key}: {message} (its page says so; the other runs are served)", err=True)
    for key, run in runs.items():
        for line in run.warnings[:3]:
            click.echo(f"commprof: warning: {key}: {line}", err=True)
    from commprof.dashboard import create_app
    from commprof.dashboard.cache import RunCache, warm_in_background
    from commprof.dashboard.serve import serve

    # the server answers at once; the runs are analyzed beside it (a page waits for its run's analysis)
    cache = RunCache(runs, settings, failures, order)
    app = create_app(runs, cache)
    if token is not None:
        from commprof.dashboard.access import require_token

        require_token(app, token, port)  # every route: pages, callbacks, scripts, downloads
    warm_in_background(cache, lambda problem: click.echo(f"commprof: warning: {problem}", err=True),
                       app.commprof_warm_page)
    failed = f"; {len(failures)} could not be opened ({', '.join(failures)})" if failures else ""
    click.echo(f"commprof dashboard: {len(runs)} run(s) ({', '.join(runs)}){failed} on "
               f"{server_url(host, port, token, made_here)}",
               err=True)
    serve(app, host, port)  # threads, each view state computed once (dashboard/serve.py)


# analyze's own option objects: same names, choices and help text in both commands
dashboard.params.extend(p for p in _analyze_command.params if p.name in ANALYSIS_OPTIONS)
