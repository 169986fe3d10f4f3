"""``commprof record`` around real torchrun jobs (Gloo on CPU, 2 ranks, a tiny DDP model).

Each test runs one job through ``python -m commprof record ... -- python -m torch.distributed.run``
with a timeout, then checks the run directory and what the script itself observed (it writes
``REPORT_DIR/rank-<RANK>.json``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]

SCRIPTS = Path(__file__).resolve().parent / "record_scripts"
TOY = SCRIPTS / "toy_train.py"
JOB_TIMEOUT_S = 120


def torchrun(nproc: int, script: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            str(script), *args]


def record_cmd(run_dir: Path, command: list[str], *options: str) -> list[str]:
    return [sys.executable, "-m", "commprof", "record", "-o", str(run_dir), *options, "--", *command]


def job_env(report_dir: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMPROF_", "NCCL_", "TORCH_FR_"))}
    env.pop("RANK", None)
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        env["REPORT_DIR"] = str(report_dir)
    env.update(extra)
    return env


def run_record(run_dir: Path, command: list[str], *options: str, env: dict[str, str] | None = None,
               analyze: bool = False) -> subprocess.CompletedProcess[str]:
    opts = list(options) + ([] if analyze else ["--no-analyze"])
    return subprocess.run(record_cmd(run_dir, command, *opts), env=env or job_env(), capture_output=True,
                          text=True, timeout=JOB_TIMEOUT_S)


# torchrun's summary of a rank killed by SIGABRT or SIGSEGV
_CRASHED = re.compile(r"exitcode\s*: (-6|-11) ")


def crashed_after_training(done: subprocess.CompletedProcess[str], report_dir: Path, ranks: int) -> bool:
    """Every rank finished training and wrote its report, then one died by SIGABRT/SIGSEGV: the rare teardown
    abort of torch's Gloo/profiler threads in recorded CPU jobs ("terminate called without an active
    exception"; tools/abort_repro.py measures it; seen in 2 fresh-clone CI runs on 2026-12-06, both with other
    work on the 2 cores; on 2026-12-07 a plain job without commprof aborted the same way in a fresh-clone CI run,
    test_record_windows' twin run: torch's, not ours). Tests that judge something else run once more when it
    happens."""
    finished = sorted(int(p.stem.split("-")[1]) for p in report_dir.glob("rank-*.json"))
    return done.returncode != 0 and finished == list(range(ranks)) and bool(_CRASHED.search(done.stderr))


def run_plain(command: list[str], report_dir: Path, ranks: int) -> subprocess.CompletedProcess[str]:
    """The job without commprof (a recorded run's twin), once more if torch's teardown abort ended it after
    every rank had finished training (:func:`crashed_after_training`)."""
    done = subprocess.run(command, env=job_env(report_dir), capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    if crashed_after_training(done, report_dir, ranks):
        for p in report_dir.glob("rank-*.json"):
            p.unlink()
        done = subprocess.run(command, env=job_env(report_dir), capture_output=True, text=True,
                              timeout=JOB_TIMEOUT_S)
    return done


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def load_trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def traces(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "raw" / "traces").iterdir())


def reports(report_dir: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem.split("-")[1]): load_json(p) for p in report_dir.glob("rank-*.json")}


def test_dataloader_workers_user_env_and_sitecustomize_are_kept(tmp_path: Path) -> None:
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(
        "import os\nos.environ['USER_SITECUSTOMIZE_PID'] = str(os.getpid())\n")
    env = job_env(tmp_path / "report", PYTHONPATH=str(user_site), NCCL_DEBUG="WARN", TORCH_FR_BUFFER_SIZE="77")
    run_dir = tmp_path / "run"
    done = run_record(run_dir, torchrun(2, TOY, "--steps", "7", "--workers", "2", "--exit-code", "3"), env=env)

    # torchrun itself turns a worker's exit code 3 into 1; commprof passes on torchrun's
    assert done.returncode == 1, done.stderr
    # exactly one trace and one sidecar per rank, none from the 2 x 2 DataLoader workers
    assert traces(run_dir) == ["rank-0.json.gz", "rank-1.json.gz"]
    assert sorted(p.name for p in (run_dir / "raw" / "ranks").iterdir()) == ["rank-0.json", "rank-1.json"]
    for rank, seen in reports(tmp_path / "report").items():
        assert seen["steps_done"] == 7
        assert seen["env"]["NCCL_DEBUG"] == "WARN"
        assert seen["env"]["TORCH_FR_BUFFER_SIZE"] == "77"
        assert seen["env"]["USER_SITECUSTOMIZE_PID"] == str(seen["pid"]), "the user's sitecustomize ran in the rank"
        assert not seen["sys_path_has_shim"]
        sidecar = load_json(run_dir / "raw" / "ranks" / f"rank-{rank}.json")
        assert sidecar["pid"] == seen["pid"]
        assert sidecar["window"]["status"] == "complete"
        names = {e.get("name") for e in load_trace(run_dir / "raw" / "traces" / f"rank-{rank}.json.gz")["traceEvents"]}
        assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"} <= names
        assert not {"ProfilerStep#1", "ProfilerStep#5"} & names
    manifest = load_json(run_dir / "manifest.json")
    assert manifest["exit_code"] == 1 and manifest["status"] == "failed"
    assert manifest["env"]["NCCL_DEBUG"] == {"value": "WARN", "source": "user"}
    assert manifest["env"]["TORCH_FR_BUFFER_SIZE"] == {"value": "77", "source": "user"}
    assert manifest["env"]["NCCL_DEBUG_SUBSYS"]["source"] == "commprof"
    assert manifest["world_size"] == 2 and [r["rank"] for r in manifest["ranks"]] == [0, 1]


def test_plain_python_script_exit_code_passes_through(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, str(SCRIPTS / "plain_train.py"), "3"]
    done = run_record(run_dir, command, analyze=True)
    assert done.returncode == 3, done.stderr
    assert traces(run_dir) == ["rank-0.json.gz"]
    assert load_json(run_dir / "raw" / "ranks" / "rank-0.json")["single_process"] is True
    manifest = load_json(run_dir / "manifest.json")
    assert manifest["exit_code"] == 3 and manifest["end"] is not None
    assert "Traceback" not in done.stderr


def test_sigint_mid_run_leaves_a_readable_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(record_cmd(run_dir, torchrun(2, TOY, "--steps", "2000", "--sleep", "0.05"),
                                       "--no-analyze"),
                            env=job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(list((run_dir / "raw" / "traces").glob("*.json.gz"))) < 2:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    manifest = load_json(run_dir / "manifest.json")
    assert manifest["end"] is not None and manifest["exit_code"] == proc.returncode
    assert traces(run_dir) == ["rank-0.json.gz", "rank-1.json.gz"]
    for name in traces(run_dir):
        assert load_trace(run_dir / "raw" / "traces" / name)["traceEvents"]
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    assert all(r["files"]["trace"] for r in manifest["ranks"])


def test_one_rank_raising_keeps_the_other_ranks_traces(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_record(run_dir, torchrun(2, TOY, "--steps", "9", "--raise-on-rank", "1", "--raise-at-step", "6"))
    assert done.returncode == 1
    assert "fails on purpose" in done.stderr
    assert traces(run_dir) == ["rank-0.json.gz", "rank-1.json.gz"]
    manifest = load_json(run_dir / "manifest.json")
    assert manifest["status"] == "failed"
    assert {r["rank"]: r["window_status"] for r in manifest["ranks"]} == {0: "complete", 1: "complete"}
    assert (run_dir / "raw" / "flight_recorder" / "rank-0.json").is_file()


def test_scripts_own_profiler_wins_and_training_finishes(tmp_path: Path) -> None:
    """Rank 0 starts its profiler while commprof's window records (commprof stops its own);
    rank 1 profiles from the start (commprof never opens its window)."""
    run_dir, report_dir = tmp_path / "run", tmp_path / "report"
    done = run_record(run_dir, torchrun(2, TOY, "--steps", "8", "--user-profiler", "late,whole"),
                      env=job_env(report_dir))
    assert done.returncode == 0, done.stderr
    seen = reports(report_dir)
    assert all(seen[r]["steps_done"] == 8 and seen[r]["user_profiler_events"] > 0 for r in (0, 1))
    status = {r: load_json(run_dir / "raw" / "ranks" / f"rank-{r}.json")["window"]["status"] for r in (0, 1)}
    assert status == {0: "yielded_to_user_profiler", 1: "skipped_user_profiler"}
    assert traces(run_dir) == []
    assert done.stderr.count("commprof: warning: rank 0:") == 1
    assert done.stderr.count("commprof: warning: rank 1:") == 1


def test_scripts_own_step_hook_survives_the_window_closing(tmp_path: Path) -> None:
    """commprof's step hook closes the window from inside torch's loop over global hooks; a hook the
    script registered after it must keep running (removing ours mid-loop used to crash the ranks)."""
    run_dir, report_dir = tmp_path / "run", tmp_path / "report"
    done = run_record(run_dir, torchrun(2, TOY, "--steps", "8", "--user-step-hook"), env=job_env(report_dir))
    assert done.returncode == 0, done.stderr
    assert traces(run_dir) == ["rank-0.json.gz", "rank-1.json.gz"]
    assert all(r["steps_done"] == 8 and r["user_hook_calls"] == 8 for r in reports(report_dir).values())


def test_job_ending_during_warmup_still_writes_a_valid_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_record(run_dir, torchrun(2, TOY, "--steps", "1"))
    assert done.returncode == 0, done.stderr
    assert traces(run_dir) == []
    manifest = load_json(run_dir / "manifest.json")
    assert manifest["status"] == "finished"
    assert {r["window_status"] for r in manifest["ranks"]} == {"ended_during_warmup"}
    assert any("warm-up" in note for note in manifest["notes"])
    warnings = [line for line in done.stderr.splitlines() if line.startswith("commprof: warning:")]
    assert warnings == ["commprof: warning: no trace for ranks 0-1: the job ended during the window's warm-up "
                        "(it needs wait=1 warmup=1 active=3); optimizer steps seen: 1"]


def test_time_window_for_a_script_without_optimizer(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_record(run_dir, torchrun(2, TOY, "--no-optimizer", "--steps", "80", "--sleep", "0.02"),
                      "--start-after", "0.3", "--duration", "0.4")
    assert done.returncode == 0, done.stderr
    assert traces(run_dir) == ["rank-0.json.gz", "rank-1.json.gz"]
    events = load_trace(run_dir / "raw" / "traces" / "rank-0.json.gz")["traceEvents"]
    names = [e.get("name", "") for e in events]
    assert names.count("gloo:all_reduce") >= 3
    assert any(n.startswith("commprof:pg=0;op=all_reduce;seq=") for n in names)
    assert not any(n.startswith("ProfilerStep#") for n in names)
    window = load_json(run_dir / "raw" / "ranks" / "rank-0.json")["window"]
    assert window["mode"] == "time" and window["status"] == "complete"
