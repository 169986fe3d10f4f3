"""The ``commprof`` command line: one small module per command, loaded lazily so that
``commprof --help`` and light commands do not pay for polars/plotly/dash imports."""

from __future__ import annotations

import atexit
import gc
import importlib
import sys
from typing import Any

import click

# command name -> "module:attribute"; each module holds one click command.
COMMANDS: dict[str, str] = {
    "analyze": "commprof.cli.analyze:analyze",
    "dashboard": "commprof.cli.dashboard:dashboard",
    "check": "commprof.cli.check:check",
    "diff": "commprof.cli.diff:diff",
    "export": "commprof.cli.export:export",
    "ingest": "commprof.cli.ingest:ingest",
    "record": "commprof.cli.record:record",
    "topology": "commprof.cli.topology:topology",
    "synth": "commprof.cli.synth:synth",
    "trigger": "commprof.cli.trigger:trigger",
}


# A command runs with a larger first GC generation (as mypy does): the cyclic GC otherwise collects
# after every 700 net container allocations, and a command allocates ~10^5 long-lived objects importing
# polars, numpy and rich, plus many small polars and rich objects, none of them cyclic garbage. On a warm
# `analyze` of the 54 MB Kineto trace the default thresholds cost 111 + 10 + 1 collections, ~50 ms of
# ~0.5 s CPU; with these, none (issue 24). Reference counting still frees at once whatever forms no
# cycle, and cycles are still collected, less often. The dashboard, a long-lived server, keeps the
# interpreter's thresholds.
#
# At exit the interpreter collects every generation more than once while it tears the modules down: with
# polars, numpy and rich loaded that walks a few 10^5 objects, none of them garbage (~100 ms of CPU after
# a warm `analyze` printed its report). The objects alive when the exit handlers run are frozen first
# (gc.freeze: left out of every later collection); the teardown itself (exit handlers, threads joined,
# modules cleared, files closed) is unchanged.
#
# The thresholds are put back when a command returns to a caller in the same process (click's CliRunner, the
# API), not when the command is the program (run): put back, the first allocation after them collects the
# first generation, which then holds every container the command made (~27 ms after a cold `analyze` of the
# 54 MB trace printed its report, 410 objects freed), and the process ends a moment later.
GC_THRESHOLD = (100_000, 50, 100)
KEEP_GC_DEFAULTS = frozenset({"dashboard"})
# Commands that read, compute and write, and then end (see run): not `record` (it runs the training, whose end
# is the user's), not `dashboard` (a server), not `synth`.
QUICK_EXIT = frozenset({"analyze", "check", "diff", "export", "ingest", "topology"})
_freeze_at_exit: list[bool] = []


def _freeze_before_teardown() -> None:
    """Registered once, before any other exit handler of the command, so it runs after them all."""
    if not _freeze_at_exit:
        atexit.register(gc.freeze)
        _freeze_at_exit.append(True)


class LazyGroup(click.Group):
    running: str | None = None  # the command being run (resolve_command)
    as_program = False  # run(): the process ends with the command, and its GC thresholds are not put back

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _freeze_before_teardown()
        before = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLD)
        self._gc_before = before
        try:
            return super().main(*args, **kwargs)
        finally:
            if not self.as_program:
                gc.set_threshold(*before)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                          list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        self.running = name  # the command this invocation runs (get_command also serves --help's listing)
        return name, command, rest

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        if cmd_name in KEEP_GC_DEFAULTS and hasattr(self, "_gc_before"):
            gc.set_threshold(*self._gc_before)
        module_name, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        from commprof.errors import CommprofError

        try:
            return super().invoke(ctx)
        except CommprofError as err:
            click.echo(f"commprof: error: {err}", err=True)  # printable: CommprofError escapes its message
            sys.exit(err.exit_code)
        except BrokenPipeError:
            # `commprof ... | head`: the reader is gone, which is not an error to report. Point stdout at
            # /dev/null so that the interpreter's last flush does not print "Exception ignored", and exit
            # with 1 as click and rich do for the same case (rich's consoles handle it themselves).
            _silence_stdout()
            sys.exit(1)
        except OSError as err:
            # a write or read the command did not expect to fail (a disk that filled up under it): one line
            from commprof.errors import printable

            where = f"{err.filename}: " if err.filename else ""
            click.echo(printable(f"commprof: error: {where}{(err.strerror or str(err)).lower()}"), err=True)
            sys.exit(2)


def _silence_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="commprof")
def main() -> None:
    """How much step time does communication cost, which parallel dimension and link is
    responsible, and how much of it is hidden behind compute."""


# polars' allocator (jemalloc) keeps the pages a process frees for 0.5-1.5 s (the decay polars sets), so a command
# that parses traces itself (--workers 1, runs under COMMPROF_PARALLEL_MIN_BYTES) peaked several MB above what it
# held: a 304 MB kernel-heavy trace's ingest +8 MB (0.50x its JSON against 0.48x). The program hands them back at
# once, as the pool's workers do (ingest.runner._WORKER_JEMALLOC; they inherit it). Set before polars loads (it reads
# the variable then, after its own defaults). A setting of the user's is kept; polars' own defaults, which polars
# writes into the environment of any process that imports it (a parent script's, a benchmark's), are not one.
JEMALLOC_ENV, JEMALLOC_CONF = "_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0"
POLARS_JEMALLOC = ("dirty_decay_ms:500,muzzy_decay_ms:1000", "dirty_decay_ms:500,muzzy_decay_ms:1000,thp:always,"
                   "metadata_thp:always")  # what polars 2.1 writes; with POLARS_THP=1 the second


def _allocator_defaults() -> None:
    import os

    if "polars" in sys.modules:
        return  # its allocator is set up
    if sys.argv[1:2] == ["record"]:
        return  # the training's processes inherit this environment: record never changes what the training does
    value = os.environ.get(JEMALLOC_ENV)
    if value is None:
        os.environ[JEMALLOC_ENV] = JEMALLOC_CONF
    elif value in POLARS_JEMALLOC:
        os.environ[JEMALLOC_ENV] = f"{value},{JEMALLOC_CONF}"


def run() -> None:
    """The ``commprof`` program (the console script, ``python -m commprof``): :data:`main`, and then, after one
    of the :data:`QUICK_EXIT` commands, the end of the process without the interpreter's teardown. That
    teardown frees the objects of every module one by one: with polars, numpy and rich loaded, it ended a cold
    ``analyze`` of the 54 MB trace 18-27 ms after its last exit handler (now 9-13 ms; a bare interpreter 5-6).
    What an exit must do is still done, in the interpreter's order:
    threads joined (``threading._shutdown``, which the interpreter itself calls first: the table cache's
    writer pool is shut down there), the exit handlers run (multiprocessing's, weakref finalizers, temporary
    folders), stdout and stderr flushed; then ``os._exit`` with the status the interpreter would have used.
    Not under a profiler or a tracer (``python -m cProfile -m commprof``: they write what they saw at the usual
    end). Tests that invoke ``main`` in-process (click's CliRunner) never come here."""
    main.as_program = True  # its GC thresholds stay to the end (see GC_THRESHOLD)
    _allocator_defaults()
    try:
        main()  # click's standalone mode: always ends in SystemExit
    except SystemExit as done:
        code: Any = done.code
    else:  # pragma: no cover - standalone mode does not return
        code = None
    import threading

    join_threads = getattr(threading, "_shutdown", None)  # CPython's; elsewhere the usual way out
    watched = sys.getprofile() is not None or sys.gettrace() is not None  # cProfile, trace, coverage: they report
    if main.running not in QUICK_EXIT or join_threads is None or watched:  # at the usual end
        sys.exit(code)
    status = _status(code)
    join_threads()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a reader gone (`| head`), a closed stream: the interpreter's status for it
        status = 120
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    import os

    os._exit(status)


def _status(code: Any) -> int:
    """The exit status the interpreter makes of ``SystemExit(code)``: None is 0, an int is itself, anything
    else is printed to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 1
