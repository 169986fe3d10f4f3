"""``commprof record -- COMMAND``: run a training command unchanged and collect a run directory."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", "--out", "output", type=click.Path(path_type=Path, file_okay=False),
              help="Run directory to create (default: runs/<UTC time>-<random>). Never written over.")
@click.option("--force", is_flag=True, help="Clear an earlier commprof run in --output instead of refusing.")
@click.option("--wait", type=click.IntRange(0), default=None,
              help="Optimizer steps to let pass before the window opens.  [default: 1]")
@click.option("--warmup", type=click.IntRange(0), default=None,
              help="Steps the profiler warms up without recording.  [default: 1]")
@click.option("--active", type=click.IntRange(1), default=None, help="Steps recorded.  [default: 3]")
@click.option("--start-after", type=click.FloatRange(0), default=None, metavar="SECONDS",
              help="Time window instead of steps (scripts without an optimizer): open it this long after "
                   "the rank imported torch, at its next optimizer step or communication call.")
@click.option("--duration", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Length of the time window.  [default: 5]")
@click.option("--every", default=None, metavar="N|T",
              help="A window every N optimizer steps (at --wait, --wait + N, ...; N must exceed --warmup + --active), "
                   "each in windows/step-<S>/ of the run; or, with --start-after/--duration, a time window every T "
                   "(600s, 10m, 2h; longer than --duration) in windows/time-<seconds>/. `commprof analyze RUN` shows "
                   "how the windows change.")
@click.option("--on-demand", is_flag=True,
              help="Open a window on every rank at the same step when `commprof trigger RUN` asks (from any "
                   "shell that sees the run folder); nothing is recorded until then unless --every is given too.")
@click.option("--keep-windows", type=click.IntRange(1), default=None, metavar="K",
              help="With --every/--on-demand: keep the newest K windows, removing older ones' files (a bound on "
                   "disk use for long jobs).")
@click.option("--nccl-coll", is_flag=True, help="Also log NCCL's COLL and TUNING subsystems (large logs).")
@click.option("--fr-entries", type=click.IntRange(0), default=20000, show_default=True,
              help="TORCH_FR_BUFFER_SIZE for Flight Recorder, unless already set; 0 leaves it off.")
@click.option("--no-topology", is_flag=True, help="Skip the host topology capture (nvidia-smi, /sys).")
@click.option("--no-analyze", is_flag=True, help="Do not analyze the run when the command ends.")
@click.option("--job-id", default=None, metavar="ID",
              help="Name the job, so that the launchers of one job (one per node or per rank) given the same -o "
                   "fill one run directory. Without it: the SLURM job and step, the MPI job, the torchrun "
                   "rendezvous (--rdzv-endpoint, --rdzv-id) or --master-addr/--master-port.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record(output: Path | None, force: bool, wait: int | None, warmup: int | None, active: int | None,
           start_after: float | None, duration: float | None, every: str | None, on_demand: bool,
           keep_windows: int | None, nccl_coll: bool, fr_entries: int,
           no_topology: bool, no_analyze: bool, job_id: str | None, command: tuple[str, ...]) -> None:
    """Run COMMAND (torchrun, python -m torch.distributed.run, deepspeed, accelerate launch, or a
    Python script) unchanged and record its communication into a run directory.

    \b
      commprof record -o runs/exp1 -- torchrun --nproc-per-node 8 train.py --lr 3e-4

    A job on several nodes: one commprof record per node (around its torchrun) or per rank (srun, mpirun),
    all given the same -o on a shared file system, fill one run directory; on local disks, record each
    node into a folder of its own and analyze the folders together.

    The exit code is COMMAND's (128+N if a signal N killed it; 127/126 if it cannot be started).
    """
    from commprof.errors import UsageError
    from commprof.record.launcher import CommandNotFound
    from commprof.record.launcher import record as run_record
    from commprof.record.rank.config import WindowSettings
    from commprof.record.settings import RecordSettings

    if start_after is None and duration is not None:
        raise UsageError("--duration needs --start-after")
    if start_after is not None and any(v is not None for v in (wait, warmup, active)):
        raise UsageError("--start-after/--duration (a time window) and --wait/--warmup/--active (steps) "
                         "exclude each other")
    every_steps, every_s = _every(every, timed=start_after is not None)
    repeating = every is not None or on_demand
    if on_demand and start_after is not None:
        raise UsageError("--on-demand opens windows at optimizer steps; it does not combine with "
                         "--start-after/--duration")
    if keep_windows is not None and not repeating:
        raise UsageError("--keep-windows bounds the windows of --every/--on-demand; give one of them")
    span = (1 if warmup is None else warmup) + (3 if active is None else active)
    if every_steps is not None and every_steps <= span:
        raise UsageError(f"--every {every_steps} leaves no step between windows: a window takes --warmup + --active = "
                         f"{span} steps; give --every {span + 1} or more")
    length = 5.0 if duration is None else duration
    if every_s is not None and every_s <= length:
        raise UsageError(f"--every {every} leaves no time between windows of --duration {length:g} s")
    window = WindowSettings(
        wait=1 if wait is None else wait,
        warmup=1 if warmup is None else warmup,
        active=3 if active is None else active,
        start_after_s=start_after,
        duration_s=(5.0 if duration is None else duration) if start_after is not None else None,
        flight_recorder=fr_entries > 0,
        every=every_steps, every_s=every_s, on_demand=on_demand, keep_windows=keep_windows,
    )
    settings = RecordSettings(output=output, force=force, window=window, nccl_coll=nccl_coll,
                              fr_buffer_size=fr_entries, topology=not no_topology, job_id=job_id)
    try:
        result = run_record(settings, list(command))
    except CommandNotFound as err:
        if command and _torch_missing() and Path(command[0]).name in TORCH_LAUNCHERS:
            raise CommandNotFound(f"{err} ({NO_TORCH})") from None
        raise
    from commprof.errors import printable

    for line in result.warnings:
        click.echo(printable(f"commprof: warning: {line}"), err=True)
    if not result.traces and _torch_missing():
        click.echo(f"commprof: note: {NO_TORCH}", err=True)
    click.echo(f"commprof: run directory {result.run_dir} ({len(result.traces)} trace"
               f"{'' if len(result.traces) == 1 else 's'}); exit code {result.exit_code}", err=True)
    if result.job is not None and not result.job.whole and result.traces:
        click.echo(_part_of_a_job(result.run_dir, result.job), err=True)  # analyzed once whole, not per node
    elif not no_analyze and result.traces:
        _analyze(result.run_dir)
    sys.exit(result.exit_code)


def _every(text: str | None, timed: bool) -> tuple[int | None, float | None]:
    """``--every``: N optimizer steps, or (a time window) a duration: 600, 600s, 10m, 2h."""
    from commprof.errors import UsageError

    if text is None:
        return None, None
    value = text.strip().lower()
    if not timed:
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"--every {text!r}: give a number of optimizer steps (a duration such as 10m needs "
                             "--start-after, the time window)")
        return int(value), None
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(value[-1:], None)
    number = value[:-1] if scale is not None else value
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise UsageError(f"--every {text!r}: give a duration such as 600s, 10m or 2h")
    return None, seconds


def _part_of_a_job(run_dir: Path, job: object) -> str:
    """What this launcher recorded of a job it shares, and how to analyze the whole of it."""
    from commprof.record.launcher import JobState, _ranges

    assert isinstance(job, JobState)
    mine = _ranges(sorted(job.own)) if job.own else "none"
    world = f" of {job.world_size}" if job.world_size else ""
    if job.running:
        return (f"commprof: this launcher recorded rank(s) {mine}{world}; {job.running} other launcher(s) of the job "
                f"are still recording into {run_dir}: analyze the whole job when they are done "
                f"(commprof analyze {run_dir})")
    return (f"commprof: this folder holds traces of rank(s) {_ranges(sorted(job.traced)) or 'none'}{world}: the "
            "other nodes recorded elsewhere; analyze the nodes' folders together "
            f"(commprof analyze {run_dir} OTHER_NODE_FOLDER ...)")


# what `torchrun` and friends are called; without torch they do not exist
TORCH_LAUNCHERS = frozenset({"torchrun", "deepspeed", "accelerate"})
NO_TORCH = ("torch is not installed for this Python: install the recording extra with "
            "`pip install 'commprof[record]'` (a CPU-only torch: "
            "`pip install torch --index-url https://download.pytorch.org/whl/cpu`)")


def _torch_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is None


def _analyze(run_dir: Path) -> None:
    try:
        from commprof import analyze_run
    except ImportError:
        click.echo(f"commprof: note: analysis is not available here; run `commprof analyze {run_dir}` later",
                   err=True)
        return
    try:
        report = analyze_run(run_dir)
    except Exception as err:  # the recording is done and kept; analysis trouble must not hide that
        click.echo(f"commprof: warning: analysis failed ({type(err).__name__}: {err}); "
                   f"the run is complete, try `commprof analyze {run_dir}`", err=True)
        return
    try:
        from rich.console import Console

        from commprof.report import analysis_text
    except ImportError:
        click.echo(f"commprof: analyzed; see `commprof analyze {run_dir}`", err=True)
        return
    # a pipe or CI log is not cut to 80 columns
    analysis_text.render_text(report, Console(stderr=True, width=None if sys.stderr.isatty() else 160))
