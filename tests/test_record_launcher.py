"""The launcher with commands that never import torch: run directory rules, exit codes, signals,
the environment given to ranks, and the warnings that explain a missing trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commprof.record import environment, rundir
from commprof.record.launcher import window_warnings
from commprof.record.rank.config import WindowSettings
from commprof.record.settings import RecordSettings


def commprof(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMPROF_")}
    return subprocess.run([sys.executable, "-m", "commprof", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_refuses_a_non_empty_output_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    done = commprof("record", "-o", str(out), "--", *py("pass"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"commprof: error: {out}: output directory is not empty; "
                                                 "choose another or pass --force"]
    done = commprof("record", "-o", str(out), "--force", "--", *py("pass"))
    assert done.returncode == 2 and "not a commprof run directory" in done.stderr
    assert (out / "notes.txt").read_text() == "mine"


def test_force_replaces_an_earlier_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert commprof("record", "-o", str(out), "--no-analyze", "--", *py("pass")).returncode == 0
    first = json.loads((out / "manifest.json").read_text())["start"]
    assert commprof("record", "-o", str(out), "--", *py("pass")).returncode == 2
    time.sleep(0.01)
    assert commprof("record", "-o", str(out), "--force", "--no-analyze", "--", *py("pass")).returncode == 0
    assert json.loads((out / "manifest.json").read_text())["start"] != first


def test_missing_program_is_one_line_and_127(tmp_path: Path) -> None:
    done = commprof("record", "-o", str(tmp_path / "run"), "--", "no-such-program-xyz", "--flag")
    assert done.returncode == 127
    assert done.stderr.strip().splitlines() == ["commprof: error: command not found: no-such-program-xyz"]
    assert not (tmp_path / "run").exists()
    done = commprof("record", "-o", str(tmp_path / "run"), "--", str(tmp_path))
    assert done.returncode == 126 and len(done.stderr.strip().splitlines()) == 1


def test_option_conflicts_are_usage_errors(tmp_path: Path) -> None:
    done = commprof("record", "--duration", "3", "--", *py("pass"))
    assert done.returncode == 2 and "--duration needs --start-after" in done.stderr
    done = commprof("record", "--start-after", "1", "--wait", "2", "--", *py("pass"))
    assert done.returncode == 2 and "exclude each other" in done.stderr
    assert commprof("record").returncode == 2


def test_exit_code_signal_and_default_directory(tmp_path: Path) -> None:
    done = commprof("record", "--no-analyze", "--", *py("import sys; print('hi'); sys.exit(5)"), cwd=tmp_path)
    assert done.returncode == 5 and done.stdout == "hi\n"  # output streamed through, untouched
    (run,) = (tmp_path / "runs").iterdir()
    assert len(run.name) == len("20260101T000000Z-abcdef")
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["exit_code"], manifest["status"], manifest["end"] is not None) == (5, "failed", True)
    assert any("no rank reported" in note for note in manifest["notes"])

    done = commprof("record", "-o", str(tmp_path / "killed"), "--no-analyze", "--",
                    *py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"))
    assert done.returncode == 128 + signal.SIGTERM
    assert json.loads((tmp_path / "killed" / "manifest.json").read_text())["exit_signal"] == "SIGTERM"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_reach_the_command(tmp_path: Path, sig: signal.Signals) -> None:
    marker = tmp_path / "started"
    code = (f"import pathlib, signal, sys, time\nsignal.signal(signal.SIGINT, lambda *a: sys.exit(42))\n"
            f"pathlib.Path({str(marker)!r}).touch()\ntime.sleep(60)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMPROF_")}
    proc = subprocess.Popen([sys.executable, "-m", "commprof", "record", "-o", str(tmp_path / "run"), "--no-analyze",
                             "--", *py(code)], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (42 if sig == signal.SIGINT else 128 + signal.SIGTERM)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["exit_code"] == proc.returncode


def test_environment_keeps_user_values(tmp_path: Path) -> None:
    base = {"NCCL_DEBUG": "WARN", "TORCH_NCCL_TRACE_BUFFER_SIZE": "10", "PYTHONPATH": "/mine",
            "COMMPROF_RANK_PID": "5", "NCCL_IB_HCA": "mlx5_0", "HOME": "/root"}
    settings = RecordSettings(nccl_coll=True)
    built = environment.build(base, tmp_path, settings, tmp_path / "shim", ["torchrun", "train.py"])
    env = built.env
    assert env["NCCL_DEBUG"] == "WARN" and "TORCH_FR_BUFFER_SIZE" not in env
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH,ENV,NET,COLL,TUNING"
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "raw" / "nccl" / "nccl.%h.%p.log")
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "shim"), "/mine"])
    assert "COMMPROF_RANK_PID" not in env and "COMMPROF_SINGLE_PROCESS" not in env
    assert built.used["NCCL_DEBUG"] == {"value": "WARN", "source": "user"}
    assert built.used["NCCL_IB_HCA"] == {"value": "mlx5_0", "source": "user"}
    assert built.used["NCCL_TOPO_DUMP_FILE"]["source"] == "commprof"
    assert "HOME" not in built.used


@pytest.mark.parametrize(("command", "plain"), [
    (["python", "train.py"], True),
    (["python3.11", "-u", "-m", "mypkg.train"], True),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"], False),
    (["torchrun", "t.py"], False),
    (["deepspeed", "t.py"], False),
    (["accelerate", "launch", "t.py"], False),
    (["python", "-m", "deepspeed.launcher.runner", "t.py"], False),
])
def test_plain_python_detection(command: list[str], plain: bool) -> None:
    assert environment.looks_like_plain_python(command) is plain


def test_run_directory_names_and_temporaries(tmp_path: Path) -> None:
    a, b = rundir.default_run_dir(tmp_path), rundir.default_run_dir(tmp_path)
    assert a != b and a.parent == tmp_path
    run = rundir.prepare_run_dir(tmp_path / "r", force=False)
    assert sorted(p.name for p in (run / "raw").iterdir()) == sorted(rundir.RAW_DIRS)
    (run / "raw" / "traces" / ".rank-0.json.gz.tmp-123").write_text("half")
    (run / "raw" / "traces" / "rank-1.json.gz").write_text("whole")
    assert [p.name for p in rundir.leftover_temp_files(run)] == [".rank-0.json.gz.tmp-123"]


def _sidecar(rank: int, status: str, steps: int, trace: bool = False) -> dict[str, object]:
    files = {"trace": f"raw/traces/rank-{rank}.json.gz"} if trace else {}
    return {"rank": rank, "window": {"status": status, "optimizer_steps": steps}, "files": files}


def test_window_warnings_name_ranks_and_reasons() -> None:
    settings = RecordSettings(window=WindowSettings())
    sidecars = [_sidecar(0, "ended_during_warmup", 2), _sidecar(1, "ended_during_warmup", 2),
                _sidecar(2, "ended_during_warmup", 2), _sidecar(4, "complete", 9, trace=True),
                _sidecar(5, "ended_during_active", 3, trace=True)]
    assert window_warnings(sidecars, settings) == [
        "no trace for ranks 0-2: the job ended during the window's warm-up (it needs wait=1 warmup=1 active=3); "
        "optimizer steps seen: 2",
        "the trace of rank 5 is partial: the job ended while the window was recording",
    ]
    assert "no rank reported" in window_warnings([], settings)[0]
    # a stop that waited for collectives in flight until the job ended (inflight.py)
    assert window_warnings([_sidecar(3, "stop_deferred_no_trace", 9)], settings) == [
        "no trace for rank 3: the job ended while collectives recorded in the window were still in flight, and "
        "stopping torch's profiler then can crash the job: it was left running; optimizer steps seen: 9"]
