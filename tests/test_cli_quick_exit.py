"""The program's quick exit (commprof.cli.run): after a command that reads, computes and writes, the process ends
without the interpreter's teardown, and with everything an exit owes: the status, all of stdout and stderr, the
exit handlers, the threads joined first. A command outside QUICK_EXIT takes the usual way out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commprof.cli import QUICK_EXIT, _status

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "tp2_dp2"

# A probe around run(): an exit handler, and os._exit watched (the quick exit's last call), each leaving a mark in a
# file; then the command line given.
PROBE = """
import atexit, os, sys, threading
marks = sys.argv[1]
def mark(what):
    with open(marks, "a", encoding="utf-8") as fh:
        fh.write(what + "\\n")
atexit.register(mark, "exit handler")
real_exit = os._exit
def quick_exit(status):
    mark(f"quick exit {status}")
    real_exit(status)
os._exit = quick_exit
if sys.argv[2] == "--thread":
    def late():
        threading.Event().wait(0.5)
        mark("thread ends")
    threading.Thread(target=late, name="probe-thread").start()
    del sys.argv[2]
sys.argv = ["commprof", *sys.argv[2:]]
from commprof.cli import run
run()
"""


def _probe(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    marks = tmp_path / "marks.txt"
    marks.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMMPROF_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", PROBE, str(marks), *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    return done, (marks.read_text(encoding="utf-8").splitlines() if marks.exists() else [])


def test_an_analysis_ends_without_teardown_and_keeps_what_an_exit_owes(tmp_path: Path) -> None:
    done, marks = _probe(tmp_path, "analyze", str(SAMPLE), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema_version"]  # the whole report: stdout flushed before the end
    assert marks == ["exit handler", "quick exit 0"]  # the exit handlers ran, then the process ended


def test_the_status_and_stderr_of_a_failing_command_are_kept(tmp_path: Path) -> None:
    done, marks = _probe(tmp_path, "analyze", str(tmp_path / "no-such-run"))
    assert done.returncode == 2
    assert "no such file or folder" in done.stderr
    assert marks == ["exit handler", "quick exit 2"]


def test_a_gate_that_fails_keeps_its_status(tmp_path: Path) -> None:
    # the CI gate's own status (check: 1 when a threshold is crossed) is what the quick exit ends with
    done, marks = _probe(tmp_path, "check", str(SAMPLE), "--max-exposed-comm-pct", "0")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert marks == ["exit handler", "quick exit 1"]


def test_commands_outside_the_list_and_help_take_the_usual_way(tmp_path: Path) -> None:
    assert "record" not in QUICK_EXIT and "dashboard" not in QUICK_EXIT
    done, marks = _probe(tmp_path, "--help")
    assert done.returncode == 0 and "analyze" in done.stdout
    assert marks == ["exit handler"]
    done, marks = _probe(tmp_path, "synth", "--help")
    assert done.returncode == 0
    assert marks == ["exit handler"]


def test_a_thread_left_running_is_joined_first(tmp_path: Path) -> None:
    # as the interpreter does: its threads joined before the exit handlers, not cut off
    done, marks = _probe(tmp_path, "--thread", "analyze", str(SAMPLE), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert marks == ["thread ends", "exit handler", "quick exit 0"]


def test_a_profiled_run_takes_the_usual_way(tmp_path: Path) -> None:
    # python -m cProfile -m commprof ...: the profile is written at the usual end, which the quick exit would skip
    out = tmp_path / "analyze.prof"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMMPROF_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "commprof", "analyze", str(SAMPLE)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (256, 0), (-1, 255), (True, 1),
                                              ("a message", 1)])
def test_status_is_the_interpreters(code: object, status: int) -> None:
    assert _status(code) == status
    # the same as the interpreter itself makes of SystemExit(code)
    done = subprocess.run([sys.executable, "-c", f"raise SystemExit({code!r})"], capture_output=True)
    assert done.returncode == status
