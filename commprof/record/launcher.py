"""Run the wrapped command exactly as given and turn what its ranks wrote into a run directory.

Exit codes: the command's own; ``128 + N`` when it was killed by signal N (what a shell reports);
127 when the program does not exist and 126 when it cannot be executed (what ``env``, ``timeout``
and shells return), so that ``commprof record -- cmd`` exits as ``cmd`` would. Usage errors
(an existing output folder, bad options) exit with 2 before anything runs.

Signals: the command runs in its own process group; SIGINT, SIGTERM and SIGHUP that reach commprof
are passed on to that group once. From an interactive terminal the command stays in commprof's
process group (so it can read the terminal) and the terminal's own SIGINT/SIGHUP reach it directly;
only SIGTERM is passed on.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from commprof.errors import UsageError
from commprof.record import environment, manifest, rundir
from commprof.record.job import job_identity
from commprof.record.rank import topology
from commprof.record.settings import RecordSettings

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DISK_FULL_BYTES = 16 << 20  # less free space than this at the end of a run: writes have been failing
STALE_ON_FULL_DISK = frozenset({"waiting", "warmup", "active", "complete"})


class CommandNotFound(UsageError):
    exit_code = 127


class CommandNotExecutable(UsageError):
    exit_code = 126


@dataclass
class RecordResult:
    run_dir: Path
    exit_code: int
    traces: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    job: JobState | None = None


def resolve_program(program: str, path: str | None = None) -> str:
    if os.sep in program or (os.altsep and os.altsep in program):
        if not os.path.exists(program):
            raise CommandNotFound("no such file", program)
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            raise CommandNotExecutable("not an executable file", program)
        return program
    found = shutil.which(program, path=path)
    if found is None:
        raise CommandNotFound(f"command not found: {program}")
    return found


def record(settings: RecordSettings, command: list[str], echo: Callable[[str], None] | None = None) -> RecordResult:
    say = echo or _stderr
    if not command:
        raise UsageError("no command to run; usage: commprof record [OPTIONS] -- COMMAND [ARGS]...")
    resolve_program(command[0], os.environ.get("PATH"))
    wanted = (settings.output or rundir.default_run_dir()).expanduser().absolute()
    job = job_identity(command, os.environ, settings.job_id)
    shim_dir = Path(tempfile.mkdtemp(prefix="commprof-shim-"))
    try:
        environment.install_shim(shim_dir)
        rank_env = environment.build(os.environ, wanted, settings, shim_dir, command)
        doc = manifest.start(command, settings.as_manifest(), rank_env.used, job)
        doc["notes"].extend(rank_env.notes)
        claim = rundir.claim(wanted, settings.force, job, doc)  # a full disk for manifest.json: exit 2, here
        run_dir = claim.run_dir
        try:  # "running" for the other launchers of the job; without room it is written at the end, or never
            manifest.write_part(run_dir, doc)
        except OSError as err:
            say(f"commprof: warning: cannot write this launcher's part of the manifest yet "
                f"({(err.strerror or str(err)).lower()}); the job starts all the same")
        say(f"commprof: {claim.note}" if claim.note else f"commprof: recording into {run_dir}")
        returncode = run_child(command, rank_env.env, topology_for=run_dir if settings.topology else None)
        return _finish(run_dir, doc, returncode, settings)
    finally:
        shutil.rmtree(shim_dir, ignore_errors=True)


def run_child(command: list[str], env: dict[str, str], topology_for: Path | None = None) -> int:
    """Start the command, pass signals on, wait; returns ``Popen.returncode`` (negative: signal)."""
    interactive = _stdin_is_terminal()
    try:
        proc = subprocess.Popen(command, env=env, start_new_session=not interactive)
    except FileNotFoundError:
        raise CommandNotFound(f"command not found: {command[0]}") from None
    except PermissionError:
        raise CommandNotExecutable("not an executable file", command[0]) from None

    def forward(signum: int, frame: FrameType | None) -> None:
        if interactive and signum != signal.SIGTERM:
            return  # the terminal sent it to the command's process group (ours) already
        try:
            if interactive:
                proc.send_signal(signum)
            else:
                os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    previous: dict[signal.Signals, Any] = {}
    for sig in FORWARDED_SIGNALS:
        previous[sig] = signal.signal(sig, forward)
    capture = _start_topology(topology_for)
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if capture is not None:
            capture.join(timeout=20.0)


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


def _start_topology(run_dir: Path | None) -> threading.Thread | None:
    if run_dir is None:
        return None

    def capture() -> None:
        try:
            topology.write(str(run_dir))
        except Exception:
            pass  # a missing tool or a permission problem: topology is optional

    thread = threading.Thread(target=capture, name="commprof-topology", daemon=True)
    thread.start()
    return thread


def _finish(run_dir: Path, doc: dict[str, Any], returncode: int, settings: RecordSettings) -> RecordResult:
    leftovers = rundir.leftover_temp_files(run_dir, _own_files(run_dir, doc))
    for path in leftovers:
        try:
            path.unlink()
        except OSError:
            continue
        doc["notes"].append(f"removed half-written {path.relative_to(run_dir)} (its process died while writing)")
    free = rundir.disk_free_bytes(run_dir)
    disk_full = free is not None and free < DISK_FULL_BYTES
    try:
        sidecars = manifest.finish(run_dir, doc, returncode)
        unwritten = None
    except OSError as err:  # the manifest itself could not be written (full disk, file system gone)
        sidecars, unwritten = manifest.read_sidecars(run_dir)[0], err
    traces = sorted(str(info["files"]["trace"]) for info in doc.get("ranks") or []
                    if (info.get("files") or {}).get("trace"))  # this launcher's ranks' (run-relative)
    warnings = window_warnings(sidecars, settings, disk_full=disk_full) if sidecars or not disk_full else [
        "no rank could write its status file (the disk is full): whether they profiled is unknown"]
    if disk_full:
        warnings.insert(0, f"the disk holding {run_dir} is full ({(free or 0) >> 20} MiB free): ranks could not "
                           "write their traces or update their status files")
    if unwritten is not None:
        warnings.append(f"could not write {run_dir / manifest.MANIFEST}: {unwritten.strerror or unwritten}")
    elif warnings:
        doc["notes"].extend(warnings)
        try:
            manifest.write(run_dir, doc)
        except OSError as err:
            warnings.append(f"could not write {run_dir / manifest.MANIFEST}: {err.strerror or err}")
    return RecordResult(run_dir=run_dir, exit_code=int(doc["exit_code"]), traces=traces, warnings=warnings,
                        job=job_state(run_dir, doc))


def _own_files(run_dir: Path, doc: dict[str, Any]) -> Callable[[str], bool]:
    """Whether a file name is one this launcher's ranks or host write (``rank-3.json.gz``, ``nccl.node0.…``)."""
    ranks = {int(sc["rank"]) for sc in manifest.read_sidecars(run_dir)[0]
             if sc.get("launcher") in (doc["launcher"]["id"], None)}
    host = str(doc["launcher"]["host"])

    def mine(name: str) -> bool:
        if name.startswith("rank-"):
            head = name[5:].split(".", 1)[0]
            return head.isdigit() and int(head) in ranks
        return f".{host}." in f".{name}." or name.startswith(f"{doc['launcher']['id']}.")

    return mine


@dataclass(frozen=True)
class JobState:
    """Where the whole job stands when this launcher ends: its world, the ranks with a trace in this folder,
    the launchers still running (other nodes), so that the run is analyzed once it is whole."""

    world_size: int | None
    traced: frozenset[int]
    own: frozenset[int]
    running: int
    named: bool  # the launcher belongs to a named job (several launchers); else it is the whole job

    @property
    def whole(self) -> bool:
        if not self.named:
            return True  # one launcher: its ranks without a trace died or never profiled, and the analysis says so
        return self.running == 0 and (self.world_size is None or len(self.traced) >= self.world_size)


def job_state(run_dir: Path, doc: dict[str, Any]) -> JobState:
    from commprof.ingest.job_parts import read_parts, union

    merged, _ = union(read_parts(run_dir, []), None)
    traced = {int(r["rank"]) for r in merged.get("ranks") or [] if (r.get("files") or {}).get("trace")}
    own = {int(r["rank"]) for r in doc.get("ranks") or [] if (r.get("files") or {}).get("trace")}
    running = sum(1 for n in merged.get("nodes") or [merged] if n.get("status") == "running")
    sizes = [merged.get("world_size"), doc.get("world_size")]
    world = max((s for s in sizes if isinstance(s, int)), default=None)
    return JobState(world, frozenset(traced), frozenset(own), running, named=doc.get("job") is not None)


def window_warnings(sidecars: list[dict[str, Any]], settings: RecordSettings, disk_full: bool = False) -> list[str]:
    """One line per reason a rank has no trace, naming the ranks. On a full disk a rank's status file
    stops at its last successful write, so "killed during warm-up" would be a guess: it says so."""
    if not sidecars:
        return [
            "no rank reported to commprof: no process imported torch with RANK set (torchrun sets it), "
            "or the interpreter ignored PYTHONPATH (python -E/-I)"
        ]
    by_status: dict[str, list[int]] = {}
    steps: dict[str, set[int]] = {}
    partial: list[int] = []
    for sc in sidecars:
        window = sc.get("window") or {}
        if (sc.get("files") or {}).get("trace"):
            if window.get("status") in ("ended_during_active", "killed_during_active"):
                partial.append(int(sc["rank"]))
            continue
        status = str(window.get("status"))
        by_status.setdefault(status, []).append(int(sc["rank"]))
        steps.setdefault(status, set()).add(int(window.get("optimizer_steps") or 0))
    w = settings.window
    need = f"wait={w.wait} warmup={w.warmup} active={w.active}"
    reasons = {
        "ended_before_window": f"the job ended before the profiling window opened (it needs {need})",
        "waiting": "the rank was killed before the profiling window opened",
        "ended_during_warmup": f"the job ended during the window's warm-up (it needs {need})",
        "warmup": "the rank was killed during the window's warm-up",
        "active": "the rank was killed while recording",
        "skipped_user_profiler": "the script runs its own torch profiler",
        "yielded_to_user_profiler": "the script started its own torch profiler during the window",
        "failed": "profiling failed (see the rank's warning)",
        "complete": "the rank ended before its trace was written out",
        "killed_before_window": "the rank was killed before the profiling window opened",
        "killed_during_warmup": "the rank was killed during the window's warm-up",
        "killed_during_active_no_trace": "the rank was killed while recording with its training thread blocked "
                                         "(a hang?), and only that thread can stop the profiler; its Flight "
                                         "Recorder dump says which collective it waited in (or collectives "
                                         "it recorded were still in flight: see its trace_lost)",
        "stop_deferred_no_trace": "the job ended while collectives recorded in the window were still in flight, "
                                  "and stopping torch's profiler then can crash the job: it was left running",
    }
    out = []
    for status, ranks in sorted(by_status.items()):
        seen = sorted(steps[status])
        step_text = f"; optimizer steps seen: {seen[0] if len(seen) == 1 else seen}" if w.mode == "steps" else ""
        reason = reasons.get(status, f"window status {status}")
        if disk_full and status in STALE_ON_FULL_DISK:
            reason = f"its files could not be written (disk full); the last status it wrote was {status!r}"
        out.append(f"no trace for rank{'s' if len(ranks) > 1 else ''} {_ranges(ranks)}: {reason}{step_text}")
    if partial:
        out.append(
            f"the trace of rank{'s' if len(partial) > 1 else ''} {_ranges(partial)} is partial: "
            "the job ended while the window was recording"
        )
    killed = kill_sites(sidecars)
    if killed:
        out.append(killed)
    return out + unrecorded_windows(sidecars)


def unrecorded_windows(sidecars: list[dict[str, Any]]) -> list[str]:
    """record --every/--on-demand: windows asked for that ranks did not record (declined while another one
    recorded, not reached before the job ended, skipped), one line per window and reason, naming the ranks."""
    lines: dict[tuple[str, str, str], list[int]] = {}
    for sc in sidecars:
        for w in sc.get("windows") or []:
            if isinstance(w, dict) and w.get("status") in ("declined", "not_reached"):
                key = (str(w.get("name")), str(w.get("status")).replace("_", " "), str(w.get("why") or ""))
                lines.setdefault(key, []).append(int(sc["rank"]))
    return [f"window {name} ({why}): {status} on rank{'s' if len(ranks) > 1 else ''} {_ranges(sorted(ranks))}"
            for (name, status, why), ranks in sorted(lines.items())]


def kill_sites(sidecars: list[dict[str, Any]]) -> str | None:
    """Where each rank's training thread was when a signal ended it (the rank wrote it as it died)."""
    sites: dict[str, list[int]] = {}
    signals: set[str] = set()
    for sc in sidecars:
        window = sc.get("window") or {}
        if window.get("killed_by"):
            signals.add(str(window["killed_by"]))
            step = window.get("optimizer_steps")
            sites.setdefault(f"after optimizer step {step}, in {window.get('stopped_in')}", []).append(int(sc["rank"]))
    if not sites:
        return None
    listed = "; ".join(f"rank{'s' if len(r) > 1 else ''} {_ranges(r)} {site}" for site, r in sorted(
        sites.items(), key=lambda kv: min(kv[1])))
    return f"killed by {'/'.join(sorted(signals))}: {listed}"


def _ranges(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    parts, start = [], ranks[0]
    for prev, cur in zip(ranks, [*ranks[1:], None], strict=True):
        if cur is None or cur != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            if cur is not None:
                start = cur
    return ",".join(parts)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
