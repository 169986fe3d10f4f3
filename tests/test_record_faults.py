"""``commprof record`` when the machine misbehaves (issue 22), on real torchrun jobs (Gloo, 4 CPU ranks):
a SIGTERM'd job, hung or not; a disk with a few KB free; a disk too full for the manifest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from machine_faults import fill, full_disk, temporaries

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
        assert done.returncode == 0, done.stderr[-3000:]
        assert "terminate called" not in done.stderr and "Traceback" not in done.stderr
        assert temporaries(disk) == []
    finished = {int(p.stem.split("-")[1]): load(p) for p in report_dir.glob("rank-*.json")}
    assert sorted(finished) == [0, 1, 2, 3]  # every rank trained to its end


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
