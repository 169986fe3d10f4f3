"""``commprof record`` when the machine misbehaves (issue 22), on real torchrun jobs (Gloo, 4 CPU ranks):
a SIGTERM'd job, hung or not; a disk with a few KB free; a disk too full for the manifest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from machine_faults import fill, full_disk, temporaries
from test_record_torchrun import crashed_after_training

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "record_scripts"
JOB_TIMEOUT_S = 150


def record_cmd(run_dir: Path, script: str, *args: str, options: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--no-analyze", *options, "--",
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
            str(SCRIPTS / script), *args]


def job_env(report_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMPROF_", "NCCL_", "TORCH_FR_"))}
    env.pop("RANK", None)
    report_dir.mkdir(parents=True, exist_ok=True)
    return {**env, "REPORT_DIR": str(report_dir), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def terminate_when(proc: subprocess.Popen[str], ready: Any) -> str:
    """SIGTERM to ``commprof record`` once ``ready()``; its stderr."""
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not ready():
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=JOB_TIMEOUT_S)[1]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_of_a_hung_job_keeps_flight_recorder_and_where_each_rank_was(tmp_path: Path) -> None:
    run_dir, report_dir = tmp_path / "run", tmp_path / "reports"
    proc = subprocess.Popen(record_cmd(run_dir, "hang_train.py", "--hang-at", "4"), env=job_env(report_dir),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = terminate_when(proc, lambda: len(list(report_dir.glob("rank-*.json"))) == 4)
    manifest = load(run_dir / "manifest.json")
    ranks = {r["rank"]: r for r in manifest["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank, info in ranks.items():
        # main: 'killed during the window's warm-up; optimizer steps seen: 1' and no dump
        assert info["optimizer_steps"] == load(report_dir / f"rank-{rank}.json")["optimizer_steps"] == 4
        assert info["killed_by"] == "SIGTERM"
        assert info["window_status"] in ("killed_during_active", "killed_during_active_no_trace")
        assert "hang_train.py:" in info["stopped_in"]
        assert ("in recv" if rank == 0 else "in all_to_all_single") in info["stopped_in"]
        dump = load(run_dir / info["files"]["flight_recorder"])
        assert dump["entries"], f"rank {rank}: empty Flight Recorder dump"
    assert "killed by SIGTERM: rank 0 after optimizer step 4" in stderr
    assert any("killed by SIGTERM" in note for note in manifest["notes"])
    assert temporaries(run_dir) == []
    analyzed = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(run_dir)], capture_output=True,
                              text=True, env=job_env(report_dir), timeout=JOB_TIMEOUT_S)
    # no trace, but the dumps are read (issue 23's reader): the hang report says who is stuck in what
    assert analyzed.returncode == 0, analyzed.stderr
    assert "all_to_all" in analyzed.stdout and "look first at rank(s) 0" in analyzed.stdout
    assert "killed by SIGTERM: rank 0 after optimizer step 4" in analyzed.stdout  # the manifest's where-was-each


def test_sigterm_mid_window_writes_traces_that_analyze_reads(tmp_path: Path) -> None:
    run_dir, report_dir = tmp_path / "run", tmp_path / "reports"
    proc = subprocess.Popen(record_cmd(run_dir, "toy_train.py", "--steps", "3000", "--sleep", "0.05",
                                       options=("--active", "200")),
                            env=job_env(report_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def recording() -> bool:
        sidecars = [run_dir / "raw" / "ranks" / f"rank-{r}.json" for r in range(4)]
        return all(p.is_file() and load(p)["window"]["status"] == "active" for p in sidecars)

    stderr = terminate_when(proc, recording)
    assert sorted(p.name for p in (run_dir / "raw" / "traces").iterdir()) == [f"rank-{r}.json.gz" for r in range(4)]
    manifest = load(run_dir / "manifest.json")
    assert {r["window_status"] for r in manifest["ranks"]} == {"killed_during_active"}
    assert "partial" in stderr
    analyzed = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(run_dir), "--format", "json"],
                              capture_output=True, text=True, env=job_env(report_dir), timeout=JOB_TIMEOUT_S)
    assert analyzed.returncode == 0, analyzed.stderr
    assert len(json.loads(analyzed.stdout)["ranks"]) == 4


@pytest.mark.parametrize("free_kib", [8, 64, 400])
def test_a_nearly_full_disk_never_changes_the_training_outcome(tmp_path: Path, free_kib: int) -> None:
    report_dir = tmp_path / "reports"
    with full_disk(tmp_path / "disk", size_kib=8192) as disk:
        fill(disk, free_bytes=free_kib << 10)
        done = subprocess.run(record_cmd(disk / "run", "toy_train.py", "--steps", "8"), env=job_env(report_dir),
                              capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        if crashed_after_training(done, report_dir, 4):  # torch's teardown abort, not the disk: once more
            warnings.warn(f"a rank crashed at exit after training; recorded again:\n{why(done.stderr)[:1500]}",
                          stacklevel=1)
            shutil.rmtree(disk / "run", ignore_errors=True)
            shutil.rmtree(report_dir)
            report_dir.mkdir()
            fill(disk, free_bytes=free_kib << 10)
            done = subprocess.run(record_cmd(disk / "run", "toy_train.py", "--steps", "8"),
                                  env=job_env(report_dir), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        assert done.returncode == 0, why(done.stderr)
        assert "terminate called" not in done.stderr and "Traceback" not in done.stderr, why(done.stderr)
        assert temporaries(disk) == []
    finished = {int(p.stem.split("-")[1]): load(p) for p in report_dir.glob("rank-*.json")}
    assert sorted(finished) == [0, 1, 2, 3]  # every rank trained to its end
    assert "no trace written: the disk is full" in done.stderr  # the profiler's writer never ran there


_CAUSES = ("Fatal Python error", "terminate called", "what():", "Abort", "abort", "Signal ", "exitcode",
           "Error", "error", "Traceback", "corrupt", "free()", "malloc")


def why(stderr: str) -> str:
    """The lines that say why a rank died (the ranks' own messages come long before torchrun's summary),
    then the tail."""
    lines = [line for line in stderr.splitlines() if any(c in line for c in _CAUSES)]
    return "\n".join(["-- lines naming a cause:", *lines[:60], "-- tail:", stderr[-3000:]])


# The profiler's trace export into a disk with exactly the room that makes its C++ writer (Kineto's
# ChromeTraceLogger: <name>.tmp, then a rename) fail part-way, in a child process: one profile per try.
_EXPORT_ON_A_FULL_DISK = r"""
import json, os, shutil, sys, tempfile
sys.path.insert(0, sys.argv[1])
import torch
from pathlib import Path
from machine_faults import fill
from commprof.record.rank import trace as trace_mod
from commprof.record.rank.config import RankConfig, WindowSettings
from commprof.record.rank.identity import RankIdentity
from commprof.record.rank.sidecar import RankPaths, Sidecar

disk, mode = sys.argv[2], sys.argv[3]
PAGE = 4096

def profiled(ops):
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    prof.start()
    x = torch.ones(16, 16)
    for _ in range(ops):
        x = torch.tanh(x @ x)
    prof.stop()
    return prof

def size_of(ops):
    with tempfile.TemporaryDirectory() as scratch:
        profiled(ops).export_chrome_trace(os.path.join(scratch, "t.json"))
        return os.path.getsize(os.path.join(scratch, "t.json"))

def plans():
    if mode != "cut":
        size = size_of(40)
        yield 40, size, (size * 2 if mode == "reserve" else size // 2) // PAGE * PAGE
        return
    # room for all but the last few hundred bytes: the writer's last flush, at close(), fails (most traces
    # end with more than that in its buffer); the trace size picks the number of ops
    tried = 0
    for ops in range(40, 240):
        size = size_of(ops)
        if 64 <= size % PAGE <= 512:
            yield ops, size, size // PAGE * PAGE
            tried += 1
            if tried == 6:
                return

tries = []
for ops, size, free in plans():
    for name in os.listdir(disk):
        path = os.path.join(disk, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    fill(Path(disk), free_bytes=free)
    trace_mod.RESERVE_BYTES = 16 << 20 if mode == "reserve" else free  # the writer starts, then the disk is full
    paths = RankPaths(os.path.join(disk, "run"), 0)
    paths.make_dirs()
    warnings = []
    writer = trace_mod.TraceWriter(Sidecar(RankConfig(paths.run_dir, WindowSettings()),
                                           RankIdentity(0, 0, 1, 1, None, 0, True), paths), warnings.append)
    prof = profiled(ops)
    writer.export(prof)  # prof stays alive, as in a rank: it holds the writer's file open
    writer.wait()
    left = sorted(os.path.relpath(os.path.join(d, f), disk) for d, _, fs in os.walk(disk) for f in fs if f != "filler")
    st = os.statvfs(disk)
    tries.append({"ops": ops, "free": free, "size": size, "warnings": warnings, "files": left,
                  "free_after": st.f_bavail * st.f_frsize})
    del prof
    if mode != "cut" or any("cut short" in w for w in warnings):
        break
print(json.dumps(tries))
"""


@pytest.mark.parametrize("mode", ["partial", "cut", "reserve"])
def test_a_trace_export_that_fills_the_disk_leaves_nothing_behind(tmp_path: Path, mode: str) -> None:
    """partial: the writer fails half-way and leaves its partial ``.tmp`` (all the room that was left) until
    the end of the run; cut: only its last flush fails and it renames a cut-short trace as if whole; reserve:
    on a disk with less than 16 MiB free the writer does not start."""
    with full_disk(tmp_path / "disk", size_kib=4096) as disk:
        done = subprocess.run([sys.executable, "-c", _EXPORT_ON_A_FULL_DISK, str(REPO / "tests"), str(disk), mode],
                              capture_output=True, text=True, env=job_env(tmp_path / "reports"), timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        tries = json.loads(done.stdout)
    last = tries[-1]
    assert last["files"] == [], tries  # no trace, no partial file
    assert last["free_after"] >= last["free"], tries  # all the room is given back at once
    expected = {"partial": "the profiler wrote no file", "cut": "the profiler wrote it cut short",
                "reserve": "no trace written: the disk is full"}[mode]
    assert any(expected in w for w in last["warnings"]), tries


def test_no_room_for_the_manifest_is_one_line_before_the_job_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with full_disk(tmp_path / "disk", size_kib=256) as disk:
        fill(disk)
        done = subprocess.run([sys.executable, "-m", "commprof", "record", "-o", str(disk / "run"), "--",
                               sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                              capture_output=True, text=True, env=job_env(tmp_path / "reports"), timeout=60)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "no space left on device" in lines[0], done.stderr
        assert "cannot write the manifest" in lines[0] or "cannot create the run directory" in lines[0]
        assert temporaries(disk) == []
    assert not marker.exists()


def test_a_gloo_timeout_leaves_traces_and_flight_recorder(tmp_path: Path) -> None:
    """The watchdog's way out of a hang: Gloo's timeout raises in every rank, which exit through their
    exit handlers (a trace each, partial, and a Flight Recorder dump), and analyze reads the run."""
    run_dir, report_dir = tmp_path / "run", tmp_path / "reports"
    done = subprocess.run(record_cmd(run_dir, "hang_train.py", "--hang-at", "4", "--timeout-s", "5"),
                          env=job_env(report_dir), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert done.returncode != 0
    manifest = load(run_dir / "manifest.json")
    for info in manifest["ranks"]:
        assert info["window_status"] == "ended_during_active" and info["optimizer_steps"] == 4
        assert set(info["files"]) >= {"trace", "flight_recorder"}
    analyzed = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(run_dir), "--format", "json"],
                              capture_output=True, text=True, env=job_env(report_dir), timeout=JOB_TIMEOUT_S)
    assert analyzed.returncode == 0, analyzed.stderr
    assert len(json.loads(analyzed.stdout)["ranks"]) == 4


@pytest.mark.parametrize("mode", ["own-handler", "child"])
def test_sigterm_flush_never_takes_a_sigterm_that_is_not_ours(tmp_path: Path, mode: str) -> None:
    """A script's own SIGTERM handler (a checkpoint on preemption) keeps SIGTERM, and a forked child's
    SIGTERM (a DataLoader worker stopped) never ends the rank."""
    run_dir, report_dir = tmp_path / "run", tmp_path / "reports"
    done = subprocess.run([sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--no-analyze", "--",
                           sys.executable, str(SCRIPTS / "sigterm_script.py"), "--mode", mode],
                          env=job_env(report_dir), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    assert load(report_dir / "done.json")["how"] == ("handler" if mode == "own-handler" else "end")
