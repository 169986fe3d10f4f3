"""Repeating windows (issue 38, items 1 and 2) without a job: the schedule, the on-demand control (requests
and progress through files), pruning, the trend over windows, and a run laid out in windows (copies of the
recorded sample run, so every window's figures are the sample's) analyzed whole, alone and as two to compare."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from commprof.analyzers import trend
from commprof.record.rank import windows as win

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "tp2_dp2"


def windowed_run(dest: Path, steps: tuple[int, ...] = (10, 20, 30), sample: Path = SAMPLE) -> Path:
    """A run directory as `record --every 10 --wait 10` leaves it, each window a copy of ``sample``'s files."""
    manifest = json.loads((sample / "manifest.json").read_text())
    dest.mkdir(parents=True)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    shutil.copytree(sample / "raw" / "ranks", dest / "raw" / "ranks")
    for step in steps:
        folder = dest / win.WINDOWS_DIR / win.window_name(step)
        for sub in ("traces", "ranks", "flight_recorder"):
            if (sample / "raw" / sub).is_dir():
                shutil.copytree(sample / "raw" / sub, folder / "raw" / sub)
        window = {**manifest, "status": "window", "window": {"name": folder.name, "step": step, "reason": "every",
                                                             "trigger": None, "warmup": 1, "active": 3,
                                                             "run": "../.."}}
        window.pop("ranks", None)
        (folder / "manifest.json").write_text(json.dumps(window))
    return dest


def test_the_schedule_opens_at_wait_then_every_n() -> None:
    opened = [s for s in range(40) if win.every_request(s, 3, 10) is not None]
    assert opened == [3, 13, 23, 33]
    assert win.window_name(40) == "step-00000040" and win.window_step("step-00000040") == 40
    assert win.window_step("step-x") is None and win.window_step("tables") is None


def test_control_reads_requests_and_writes_progress(tmp_path: Path) -> None:
    control = win.Control(str(tmp_path), rank=3)
    assert control.on_step(10, now=0.0) is None
    progress = json.loads((tmp_path / "control" / "progress" / "rank-3.json").read_text())
    assert progress["step"] == 10 and progress["steps_per_s"] is None
    folder = tmp_path / "control"
    (folder / "trigger-25.json").write_text(json.dumps({"step": 25, "active": 2, "id": "trigger-25"}))
    (folder / "trigger-bad.json").write_text("{not json")
    (folder / "trigger-neg.json").write_text(json.dumps({"step": -4}))
    assert control.on_step(20, now=0.1) is None  # not looked at yet: the next look is 0.5 s after the last
    assert control.on_step(24, now=win.POLL_EVERY_S + 0.01) is None  # read, not due before step 25
    request = control.on_step(25, now=win.POLL_EVERY_S + 0.02)
    assert request == win.Request(25, "on_demand", 2, None, "trigger-25")
    control.on_step(60, now=win.PROGRESS_EVERY_S + 0.5)
    progress = json.loads((folder / "progress" / "rank-3.json").read_text())
    assert progress["step"] == 60 and progress["steps_per_s"] == pytest.approx(50 / (win.PROGRESS_EVERY_S + 0.5))
    (folder / "trigger-90.json").write_text(json.dumps({"step": 90}))
    assert [r.step for r in control.close(61)] == [90]  # never reached: the rank says so, and that it ended
    assert json.loads((folder / "progress" / "rank-3.json").read_text())["ended"] is True


def test_pruning_keeps_the_newest_windows(tmp_path: Path) -> None:
    run = windowed_run(tmp_path / "run", (10, 20, 30, 40))
    dropped = []
    for rank in range(4):
        dropped = win.prune(str(run), rank, keep=2)
    assert dropped == ["step-00000010", "step-00000020"]
    assert sorted(p.name for p in (run / "windows").iterdir()) == ["step-00000030", "step-00000040"]


def test_trend_changes_against_the_first_window() -> None:
    def report(step_ms: float, exposed_ms: float, findings: list[dict[str, Any]]) -> dict[str, Any]:
        return {"run": {"ranks_analyzed": 4, "steps_analyzed": 12, "window": {"step": 1, "reason": "every"}},
                "totals": {"step_ns": step_ms * 1e6, "exposed_comm_ns": exposed_ms * 1e6, "overlap_pct": 50.0,
                           "exposed_comm_pct_of_step": 10.0}, "findings": findings}

    slow = {"id": "straggler", "key": "straggler:rank3", "severity": "high", "title": "rank 3 is late"}
    note = {"id": "exposed", "key": "exposed", "severity": "info", "title": "not shown"}
    rows = [trend.window_row("a", report(100, 10, [note])), trend.window_row("b", report(150, 30, [slow])),
            trend.window_row("c", report(90, 9, []))]
    out = trend.trend(rows, [("d", "no trace")])
    assert out["count"] == 4 and out["failed"] == [{"window": "d", "why": "no trace"}]
    a, b, c = out["rows"]
    assert a["findings"] == [] and a["step_change_pct"] is None
    assert b["step_change_pct"] == pytest.approx(50.0) and b["exposed_change_pct"] == pytest.approx(200.0)
    assert b["new_findings"] == ["straggler:rank3"] and c["gone_findings"] == ["straggler:rank3"]
    assert c["step_change_pct"] == pytest.approx(-10.0)


def test_a_windowed_run_analyzes_whole_alone_and_in_pairs(cli: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = windowed_run(tmp_path / "run")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("analyze", str(run), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["window"]["name"] == "step-00000030"  # the tables are the newest window's
    rows = report["windows"]["rows"]
    assert [r["window"] for r in rows] == ["step-00000010", "step-00000020", "step-00000030"]
    assert {r["step_ns"] for r in rows} == {report["totals"]["step_ns"]}  # copies: the same figures
    assert rows[1]["step_change_pct"] == 0.0
    from tests.test_report_formats import _validator

    _validator("analyze.schema.json").validate(report)
    text = cli("analyze", str(run))
    assert text.exit_code == 0 and "Windows (3, oldest first)" in text.stdout
    from commprof.report import analysis_text

    assert f"commprof diff {run}/windows/A {run}/windows/B" in analysis_text.window_title(report)
    alone = cli("analyze", str(run / "windows" / "step-00000010"), "--format", "json")
    assert alone.exit_code == 0 and "windows" not in json.loads(alone.stdout)
    assert "the manifest says the run never finished" not in alone.stdout  # a window is whole
    pair = cli("diff", str(run / "windows" / "step-00000010"), str(run / "windows" / "step-00000030"),
               "--format", "json")
    assert pair.exit_code == 0, pair.stderr  # two windows of one job are two runs, not two nodes of one
    both = cli("analyze", str(run / "windows" / "step-00000010"), str(run / "windows" / "step-00000030"))
    assert both.exit_code == 2 and "different windows of a run (step-00000010, step-00000030)" in both.stderr


def test_a_newest_window_open_on_some_ranks_only_is_not_the_report(cli: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Time windows open on each rank's own clock: a job can end with its newest window open on one rank only (seen
    in a fresh-clone CI run, test_record_windows). The report is the newest window with every rank's traces, and
    says which it passed over; the trend keeps them all."""
    run = windowed_run(tmp_path / "run")
    newest = run / "windows" / "step-00000030" / "raw" / "traces"
    for trace in sorted(newest.iterdir())[1:]:
        trace.unlink()
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("analyze", str(run), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["window"]["name"] == "step-00000020"
    assert len(report["ranks"]["rows"] if isinstance(report["ranks"], dict) else report["ranks"]) == 4
    said = [w for w in report["warnings"] if "fewer ranks' traces than step-00000020 (4)" in w]
    assert said and "step-00000030 (1)" in said[0], report["warnings"]
    assert [r["window"] for r in report["windows"]["rows"]] == ["step-00000010", "step-00000020", "step-00000030"]
    text = cli("analyze", str(run))
    assert text.exit_code == 0 and "the tables below are step-00000020's" in text.stdout


def test_node_folders_whose_newest_window_lacks_a_rank_report_the_one_before(cli: Any, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a job's node folders given together: window by window across the nodes (ranks 0-1 on one,
    2-3 on the other), the newest holding 3 of the 4 ranks."""
    nodes = [windowed_run(tmp_path / name) for name in ("node-a", "node-b")]
    for node, others in zip(nodes, ((2, 3), (0, 1)), strict=True):
        for trace in (t for r in others for t in (node / "windows").glob(f"*/raw/traces/rank-{r}.*")):
            trace.unlink()
    next((nodes[1] / "windows" / "step-00000030" / "raw" / "traces").glob("rank-3.*")).unlink()
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("analyze", *map(str, nodes), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["window"]["name"] == "step-00000020"
    assert any("step-00000030 (3)" in w and "the report is step-00000020's" in w for w in report["warnings"])
    assert [r["window"] for r in report["windows"]["rows"]] == ["step-00000010", "step-00000020", "step-00000030"]


def test_a_window_that_cannot_be_read_is_said(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = windowed_run(tmp_path / "run", (10, 20))
    for trace in (run / "windows" / "step-00000010" / "raw" / "traces").iterdir():
        trace.write_bytes(b"\x1f\x8b broken")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("analyze", str(run), "--format", "json")
    assert result.exit_code == 0, result.stderr
    windows = json.loads(result.stdout)["windows"]
    assert [r["window"] for r in windows["rows"]] == ["step-00000020"]
    assert windows["failed"][0]["window"] == "step-00000010"
