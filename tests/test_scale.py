"""Issue 13: the per-rank work on a process pool and on a Dask cluster gives the same tables and
reports as in process; a failed rank is reported and skipped; ``--ranks`` opens only what it needs.

Dask runs for real: a ``LocalCluster`` of worker processes, and ``dask scheduler`` / ``dask worker``
processes on 127.0.0.1 that stop by themselves (idle timeout, lifetime) and are ended by the test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import commprof
from commprof.ingest.runner import DaskRunner, InProcess, LocalPool, Outcome, Progress, Runner
from commprof.report import analysis_json
from commprof.synth_run import make_run
from tests.runners import runner_for

REPO = Path(__file__).resolve().parents[1]
SAMPLES = ("gloo_4rank_profiler", "tp2_pp2_dp2", "synth_2x8_tp8_dp2")
FRAMES = ("steps", "collectives", "pg_steps", "exposed_spans", "rank_summary", "group_summary", "call_sizes",
          "dimension_tier", "stragglers", "traffic")

distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the dev extra")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scale-runs")
    out = {}
    for name in SAMPLES:
        out[name] = root / name
        shutil.copytree(REPO / "sample_traces" / name, out[name], ignore=shutil.ignore_patterns("tables"))
    out["synth64"] = make_run(root / "synth64", ranks=64, steps=2, straggler_rank=37, straggler_delay_us=50)
    return out


def analysis_of(path: Path, cache: Path, runner: Runner) -> tuple[dict[str, Any], Any]:
    run = commprof.open_run(path, cache_dir=cache, runner=runner)
    analysis = commprof.analyze(run, runner=runner)
    report = analysis_json.build(analysis)
    report.pop("generated_at")
    return report, analysis


def assert_same(a: tuple[dict[str, Any], Any], b: tuple[dict[str, Any], Any]) -> None:
    assert a[0] == b[0]
    for name in FRAMES:
        assert_frame_equal(getattr(a[1], name), getattr(b[1], name), check_exact=True)


@pytest.fixture(scope="module")
def in_process(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cache = tmp_path_factory.mktemp("cache-in-process")
    return {name: analysis_of(path, cache / name, InProcess()) for name, path in runs.items()}


def test_process_pool_gives_the_same_tables_and_reports(runs: dict[str, Path], in_process: dict[str, Any],
                                                        tmp_path: Path) -> None:
    with LocalPool(2) as pool:
        for name, path in runs.items():
            assert_same(analysis_of(path, tmp_path / name, pool), in_process[name])
        assert pool.describe() == "2 local processes"


def test_dask_local_cluster_gives_the_same_tables_and_reports(runs: dict[str, Path], in_process: dict[str, Any],
                                                              tmp_path: Path) -> None:
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None,
                                  local_directory=str(tmp_path / "dask")) as cluster:
        with DaskRunner(cluster.scheduler_address) as runner:
            assert runner.workers == 3
            for name, path in runs.items():
                assert_same(analysis_of(path, tmp_path / name, runner), in_process[name])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dask_processes(tmp_path: Path) -> Iterator[str]:
    """A real ``dask scheduler`` and ``dask worker`` (two worker processes) on 127.0.0.1. Both stop on
    their own (the scheduler when idle for 120 s, the workers after 240 s) should the test not end them."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    bindir = Path(sys.executable).parent
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    scheduler = subprocess.Popen(
        [str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
         "--idle-timeout", "120"], stdout=(logs / "scheduler.log").open("w"), stderr=subprocess.STDOUT)
    worker = subprocess.Popen(
        [str(bindir / "dask"), "worker", address, "--nworkers", "2", "--nthreads", "1", "--no-dashboard",
         "--lifetime", "240", "--local-directory", str(tmp_path / "dask-work")],
        stdout=(logs / "worker.log").open("w"), stderr=subprocess.STDOUT)
    try:
        client = distributed.Client(address, timeout=60, set_as_default=False)
        try:
            client.wait_for_workers(2, timeout=90)
        finally:
            client.close()
        yield address
    finally:
        for proc in (worker, scheduler):
            proc.terminate()
        for proc in (worker, scheduler):
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_real_dask_scheduler_and_workers_through_the_cli(runs: dict[str, Path], in_process: dict[str, Any],
                                                         dask_processes: str, tmp_path: Path) -> None:
    """``commprof analyze --scheduler`` in its own process, against ``dask scheduler``/``dask worker``
    processes, prints the same report as the in-process analysis (COMMPROF_SCHEDULER for the second run)."""
    for i, name in enumerate(("tp2_pp2_dp2", "synth64")):
        path = tmp_path / name
        shutil.copytree(runs[name], path, ignore=shutil.ignore_patterns("tables"))
        env = {**os.environ, "COMMPROF_CACHE_DIR": str(tmp_path / "cache")}
        args = ["--scheduler", dask_processes] if i == 0 else []
        if i:
            env["COMMPROF_SCHEDULER"] = dask_processes
        done = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(path), "--format", "json", *args],
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        report.pop("generated_at")
        expected = json.loads(json.dumps(in_process[name][0]))
        report["run"].pop("path"), expected["run"].pop("path")
        assert report == expected


def test_an_unreachable_scheduler_is_one_line_error(cli: Any, runs: dict[str, Path]) -> None:
    result = cli("analyze", str(runs["tp2_pp2_dp2"]), "--scheduler", f"tcp://127.0.0.1:{_free_port()}")
    assert result.exit_code == 2, result.output
    assert "cannot reach the Dask scheduler" in result.stderr and "Traceback" not in result.output


def _corrupt(path: Path) -> None:
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(256)) * 16)


@pytest.mark.parametrize("where", ["in process", "pool", "dask"])
def test_a_corrupt_rank_is_skipped_and_the_others_complete(runs: dict[str, Path], tmp_path: Path,
                                                           where: str) -> None:
    path = tmp_path / "run"
    shutil.copytree(runs["synth_2x8_tp8_dp2"], path, ignore=shutil.ignore_patterns("tables"))
    _corrupt(path / "raw" / "traces" / "rank-5.json.gz")
    cut = (runs["synth_2x8_tp8_dp2"] / "raw" / "traces" / "rank-9.json.gz").read_bytes()[:300]
    (path / "raw" / "traces" / "rank-9.json.gz").write_bytes(cut)  # cut before its first event
    with runner_for(where, tmp_path) as runner:
        report, _ = analysis_of(path, tmp_path / "cache", runner)
    assert [r["rank"] for r in report["ranks"]] == [r for r in range(16) if r not in (5, 9)]
    assert any("rank-5.json.gz" in w and "corrupt gzip" in w and "skipped" in w for w in report["warnings"])
    assert any("rank-9.json.gz" in w for w in report["warnings"])


def _die(code: int) -> int:
    if code:
        os._exit(code)  # a worker killed mid-task (the OOM killer, a segfault)
    return code


def test_a_worker_that_dies_fails_only_its_own_task() -> None:
    with LocalPool(2) as pool:
        outcomes = pool.run(_die, [(0,), (3,), (0,), (0,)], [1, 1, 1, 1], "test")
    assert [o.error is None for o in outcomes] == [True, False, True, True]
    assert outcomes[1] == Outcome(error="its worker process died (killed, or out of memory?)")


def test_progress_reports_ranks_and_bytes_per_phase(runs: dict[str, Path], tmp_path: Path) -> None:
    seen: list[Progress] = []
    with LocalPool(2) as pool:
        run = commprof.open_run(runs["synth_2x8_tp8_dp2"], cache_dir=tmp_path / "c", runner=pool, progress=seen.append)
        commprof.analyze(run, runner=pool, progress=seen.append)
    for phase in ("ingest", "analysis"):
        mine = [p for p in seen if p.phase == phase]
        done = [p.done for p in mine]
        # small traces are parsed, and small ranks analyzed, a few to a task: ranks counted by the task
        assert done == sorted(set(done))
        assert done[-1] == mine[-1].total == 16 and len(done) >= 4
        assert mine[-1].bytes_done == mine[-1].bytes_total > 0 and mine[-1].failed == 0


def test_ranks_subset_opens_only_those_ranks(runs: dict[str, Path], in_process: dict[str, Any],
                                            tmp_path: Path, cli: Any) -> None:
    wanted = [0, 1, 2, 3, 4, 5, 6, 7, 40]
    path = tmp_path / "run"
    shutil.copytree(runs["synth64"], path, ignore=shutil.ignore_patterns("tables"))
    run = commprof.open_run(path, ranks=wanted, runner=InProcess())
    assert run.ingested.parsed == 9 and run.ingested.left_out == 55
    result = cli("analyze", str(path), "--ranks", "0-7,40", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [r["rank"] for r in report["ranks"]] == wanted
    assert any("analyzing 9 of 64 ranks (--ranks 0-7,40)" in w for w in report["warnings"]), report["warnings"]
    # a rank's own step parts do not depend on the others: the same as in the whole run's analysis
    parts = ["rank", "step", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"]
    full = in_process["synth64"][1].steps.filter(pl.col("rank").is_in(wanted)).select(parts)
    mine = commprof.analyze(run, runner=InProcess()).steps.select(parts)
    assert_frame_equal(mine, full)
    # the whole run cached, a subset re-open parses nothing and opens only its ranks' tables
    commprof.open_run(path, runner=InProcess())
    again = commprof.open_run(path, ranks=[63], runner=InProcess())
    assert again.ingested.parsed == 0 and [rf.rank for rf in again.rank_files] == [63]


def test_check_diff_and_export_take_the_same_runner_options(runs: dict[str, Path], tmp_path: Path,
                                                           cli: Any) -> None:
    # --ranks / --workers / --scheduler are one set of options on every command that reads traces; a
    # subset looked at with a 2-process pool gives analyze's numbers on each of them
    path = tmp_path / "run"
    shutil.copytree(runs["synth64"], path, ignore=shutil.ignore_patterns("tables"))
    opts = ["--ranks", "0-7,40", "-w", "2"]
    report = json.loads(cli("analyze", str(path), *opts, "--format", "json").stdout)
    step = report["totals"]["step_ns"]
    checked = cli("check", str(path), *opts, "--format", "json", "--max-exposed-comm-pct", "100")
    assert checked.exit_code == 0, checked.output
    doc = json.loads(checked.stdout)
    assert doc["report"]["totals"]["step_ns"] == step and len(doc["report"]["ranks"]) == 9
    diffed = cli("diff", str(path), str(path), *opts, "--format", "json")
    assert diffed.exit_code == 0, diffed.output
    diff_doc = json.loads(diffed.stdout)
    assert diff_doc["totals"]["step_ns"] == {"a": step, "b": step, "delta": 0, "delta_pct": 0.0}
    assert diff_doc["a"]["run"]["ranks_analyzed"] == 9
    out = tmp_path / "trace.json"
    exported = cli("export", str(path), *opts, "--perfetto", str(out))
    assert exported.exit_code == 0, exported.output
    pids = {e.get("pid") for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"}
    assert len(pids) == 9, pids  # one process per rank asked for


@pytest.mark.parametrize(("text", "why"), [("7-3", "range"), ("a", "rank"), ("1,,x", "rank")])
def test_bad_ranks_option_is_a_usage_error(cli: Any, runs: dict[str, Path], text: str, why: str) -> None:
    result = cli("analyze", str(runs["tp2_pp2_dp2"]), "--ranks", text)
    assert result.exit_code == 2 and why in result.stderr and "Traceback" not in result.output


def test_ranks_none_of_which_exist_is_one_line_error(cli: Any, runs: dict[str, Path]) -> None:
    result = cli("analyze", str(runs["tp2_pp2_dp2"]), "--ranks", "100-200")
    assert result.exit_code == 2 and "none of the ranks asked for (100-200)" in result.stderr


def test_worker_count_follows_cores_and_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from commprof.ingest import runner

    monkeypatch.setattr(runner, "usable_cpus", lambda: 16)
    monkeypatch.setattr(runner, "available_memory_bytes", lambda: 64 << 30)
    assert runner.default_workers(100 << 20, 1000) == 16
    assert runner.default_workers(100 << 20, 3) == 3
    monkeypatch.setattr(runner, "available_memory_bytes", lambda: 2 << 30)
    # 0.8 x 2 GiB over (250 MiB + 2 x 400 MiB) per worker: one worker
    assert runner.default_workers(400 << 20, 1000) == 1


def test_a_small_run_starts_no_worker_by_default(runs: dict[str, Path], tmp_path: Path) -> None:
    """By default a small run is parsed and analyzed in process (workers cost ~0.3 s each to start)."""
    pool = LocalPool()
    commprof.analyze(commprof.open_run(runs["tp2_pp2_dp2"], cache_dir=tmp_path, runner=pool), runner=pool)
    assert pool.describe() == "in process"


def test_the_analysis_never_holds_every_ranks_intervals(runs: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank's task reads its own file, only the columns the analysis uses; nothing concatenates
    the run's intervals (RunTables.intervals is for views that draw a few ranks)."""
    from commprof.analyzers import overlap
    from commprof.ingest.tables import RunTables

    run = commprof.open_run(runs["synth64"], cache_dir=tmp_path, runner=InProcess())
    reads: list[tuple[int, tuple[str, ...]]] = []
    real = overlap.read_rank_intervals

    def spy(rank: int, path: Path, columns: Any = None) -> pl.DataFrame:
        frame = real(rank, path, columns)
        reads.append((rank, tuple(frame.columns)))
        return frame

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the analysis read every rank's intervals at once")

    monkeypatch.setattr(overlap, "read_rank_intervals", spy)
    monkeypatch.setattr(RunTables, "intervals", refuse)
    commprof.analyze(run, runner=InProcess())
    assert sorted(r for r, _ in reads) == list(range(64))
    assert {cols for _, cols in reads} == {overlap.INTERVAL_COLUMNS}


def test_intervals_of_a_few_ranks_read_only_their_files(runs: dict[str, Path], tmp_path: Path) -> None:
    tables = commprof.open_run(runs["synth64"], cache_dir=tmp_path, runner=InProcess()).tables()
    some = tables.intervals([3, 40], columns=["rank", "start_ns", "end_ns"])
    assert some.columns == ["rank", "start_ns", "end_ns"]
    assert sorted(some["rank"].unique().to_list()) == [3, 40]
    assert some.height == sum(f.height for r, f in tables.rank_intervals(ranks={3, 40}))
