"""Operator faults in bulk (``make fuzz``'s operator section, issue 22): the machine misbehaving under real
commands, each case on a fresh copy of one small synthetic run.

- ``kill``: ``commprof ingest`` or ``analyze`` with a two-worker pool, killed with SIGKILL at a random
  moment: no process of its survives it by more than 2.5 s.
- ``concurrent``: two to four ``analyze``/``ingest`` at once on one folder (one cache): every one exits 0
  with the serial answer.
- ``full``: the run on a tmpfs left with a random few KB..MB free (root), else a random file-size rlimit
  (EFBIG, any user): exit 0 with the serial answer, or exit 2 with one line; no temporary file left.

After every case a clean ``analyze`` of the same folder must give the serial answer: nothing a fault left
behind is trusted.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine_faults import can_mount, fill, fsize_limit_preexec, temporaries

REPO = Path(__file__).resolve().parents[1]
KINDS = ("kill", "concurrent", "full")
VOLATILE = ("generated_at", "run", "warnings")  # paths and times: the numbers are the rest


@dataclass
class OperatorTally:
    cases: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items()))
        return f"operator faults: {self.cases} cases ({kinds}), {len(self.failures)} failures"


def _env(cache: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COMMPROF_CACHE_DIR"}
    env.update(PYTHONPATH=str(REPO), COMMPROF_PARALLEL_MIN_BYTES="0")
    if cache is not None:
        env["COMMPROF_CACHE_DIR"] = str(cache)
    return env


def _cmd(command: str, run: Path, *extra: str) -> list[str]:
    args = ["--format", "json"] if command == "analyze" else []
    return [sys.executable, "-m", "commprof", command, str(run), "-w", "2", *args, *extra]


def numbers(stdout: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(stdout)
    return {k: v for k, v in report.items() if k not in VOLATILE}


def serial_answer(run: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(run), "-w", "1", "--format", "json"],
                          capture_output=True, text=True, env=_env(), timeout=300, check=True)
    return numbers(done.stdout)


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                if ppid == parent:
                    found.append(int(entry.name))
                    frontier.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_case(run: Path, rng: random.Random) -> list[str]:
    command = rng.choice(["ingest", "analyze"])
    proc = subprocess.Popen(_cmd(command, run), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + rng.uniform(0.05, 3.0)
    seen: set[int] = set()
    while time.monotonic() < end and proc.poll() is None:
        seen.update(_descendants(proc.pid))
        time.sleep(0.02)
    seen.update(_descendants(proc.pid))
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline and any(_alive(p) for p in seen):
        time.sleep(0.05)
    left = [p for p in seen if _alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return [f"kill -9 of {command}: {len(left)} of its processes outlived it by 2.5 s"] if left else []


def concurrent_case(run: Path, rng: random.Random, answer: dict[str, Any]) -> list[str]:
    commands = [rng.choice(["ingest", "analyze"]) for _ in range(rng.randint(2, 4))]
    procs = [subprocess.Popen(_cmd(c, run), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    problems = []
    for command, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0 or "Traceback" in err:
            problems.append(f"concurrent {command}: exit {proc.returncode}: {err[-400:]}")
        elif command == "analyze" and numbers(out) != answer:
            problems.append(f"concurrent analyze ({'+'.join(commands)}): not the serial answer")
    return problems


def full_case(run: Path, scratch: Path, rng: random.Random, answer: dict[str, Any]) -> tuple[list[str], Path]:
    """Returns the problems and the run folder to re-analyze cleanly (space given back)."""
    command = rng.choice(["ingest", "analyze"])
    if can_mount():
        disk = scratch / "disk"
        disk.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
        try:
            on_disk = disk / "run"
            shutil.copytree(run, on_disk)
            free = rng.choice([0, 4 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20])
            fill(disk, free_bytes=free)
            done = subprocess.run(_cmd(command, on_disk), env=_env(), capture_output=True, text=True, timeout=300)
            what = f"{command} with {free >> 10} KiB free"
            problems = _judge_full(done, what, answer, command) + [f"{what}: left {p}" for p in temporaries(disk)]
            (disk / "filler").unlink()
            shutil.copytree(on_disk, scratch / "after")  # what the fault left, re-analyzed off the tmpfs
        finally:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)
        return problems, scratch / "after"
    limit = rng.choice([1 << 10, 16 << 10, 64 << 10, 256 << 10])
    done = subprocess.run(_cmd(command, run), env=_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=fsize_limit_preexec(limit))
    what = f"{command} with files limited to {limit >> 10} KiB"
    return _judge_full(done, what, answer, command) + [f"{what}: left {p}" for p in temporaries(run)], run


def _judge_full(done: subprocess.CompletedProcess[str], what: str, answer: dict[str, Any],
                command: str) -> list[str]:
    if "Traceback" in done.stderr:
        return [f"{what}: traceback {done.stderr[-400:]}"]
    if done.returncode == 2:
        lines = done.stderr.strip().splitlines()
        return [] if len(lines) == 1 else [f"{what}: exit 2 with {len(lines)} lines: {done.stderr[-400:]}"]
    if done.returncode != 0:
        return [f"{what}: exit {done.returncode}"]
    if command == "analyze" and numbers(done.stdout) != answer:
        return [f"{what}: exit 0 with numbers other than the serial answer"]
    return []


def fuzz_operator(scratch: Path, n: int, seed: int | None = None) -> OperatorTally:
    rng = random.Random(seed)
    tally = OperatorTally()
    base = scratch / "operator-base"
    subprocess.run([sys.executable, "-m", "commprof", "synth", str(base), "--nodes", "1", "--gpus-per-node", "8",
                    "--layout", "tp=4,dp=2", "--steps", "3"], check=True, capture_output=True, env=_env())
    answer = serial_answer(base)
    shutil.rmtree(base / "tables", ignore_errors=True)
    for i in range(n):
        kind = KINDS[i % len(KINDS)] if i < len(KINDS) else rng.choice(KINDS)
        case = scratch / f"operator-{i}"
        case.mkdir()
        run = case / "run"
        shutil.copytree(base, run)
        if kind == "kill":
            problems, again = kill_case(run, rng), run
        elif kind == "concurrent":
            problems, again = concurrent_case(run, rng, answer), run
        else:
            problems, again = full_case(run, case, rng, answer)
        if serial_answer(again) != answer:
            problems.append(f"{kind}: a clean re-run after the fault does not give the serial answer")
        tally.cases += 1
        tally.kinds[kind] = tally.kinds.get(kind, 0) + 1
        tally.failures.extend(problems)
        shutil.rmtree(case, ignore_errors=True)
    return tally
