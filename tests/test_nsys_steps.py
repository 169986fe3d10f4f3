"""Steps of Nsight Systems exports: the NVTX ranges a user names (``--step-range NAME``) on every command that
opens a run, part of the table cache's key; ProfilerStep#N and common loop names by default."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.ingest.nsys import extract
from commprof.ingest.nsys.nvtx import step_pattern

Cli = Callable[..., Result]
OWN = ("rank", "steps", "step_ns", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "idle_ns")


def _synth(cli: Cli, out: Path, *extra: str) -> Path:
    result = cli("synth", str(out), "--nodes", "2", "--gpus-per-node", "2", "--layout", "tp=2,dp=2",
                 "--steps", "3", "--micro-batches", "1", "--layers", "2", "--write-as", "nsys", *extra)
    assert result.exit_code == 0, result.output
    return out


def _report(cli: Cli, run: Path, *extra: str) -> dict[str, Any]:
    result = cli("analyze", str(run), "--format", "json", *extra)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _own(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in OWN} for r in report["ranks"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from click.testing import CliRunner

    from commprof.cli import main

    def cli(*args: str) -> Result:
        return CliRunner().invoke(main, list(args))

    base = tmp_path_factory.mktemp("steps")
    return {"default": _synth(cli, base / "default"), "named": _synth(cli, base / "named", "--step-range", "fwd_bwd")}


def test_step_pattern_matches_the_name_whole_alone_or_numbered() -> None:
    named = step_pattern("fwd_bwd")
    for text, number in (("fwd_bwd", None), ("fwd_bwd#3", "3"), ("FWD_BWD 12", "12"), ("fwd_bwd_7", "7")):
        match = named.match(text)
        assert match and next((g for g in match.groups() if g), None) == number, text
    for text in ("fwd_bwd_opt", "my fwd_bwd", "fwdXbwd", "ProfilerStep#1"):
        assert not named.match(text), text
    assert step_pattern(None).match("ProfilerStep#4") and not step_pattern(None).match("fwd_bwd#4")


def test_named_step_range_gives_the_default_runs_steps(runs: dict[str, Path], cli: Cli) -> None:
    want = _report(cli, runs["default"])
    assert {r["steps"] for r in want["ranks"]} == {3}
    unnamed = _report(cli, runs["named"])  # fwd_bwd#N is none of the default names: one step per rank
    assert {r["steps"] for r in unnamed["ranks"]} == {1}
    assert any("--step-range NAME" in w and "no NVTX step range" in w for w in unnamed["warnings"])
    named = _report(cli, runs["named"], "--step-range", "fwd_bwd")  # the same cache folder: the key differs
    assert _own(named) == _own(want)
    assert not any("step range" in w or "--step-range" in w for w in named["warnings"])


def test_step_range_is_part_of_the_cache_key(runs: dict[str, Path], cli: Cli, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    said = []
    for extra in ((), ("--step-range", "fwd_bwd"), ("--step-range", "fwd_bwd"), ()):
        result = cli("ingest", str(runs["named"]), *extra, env={"COMMPROF_CACHE_DIR": str(cache)})
        assert result.exit_code == 0, result.output
        said.append(result.stdout.split(": ", 1)[1].split(" (")[0])
    assert said == ["4 trace(s), 4 parsed, 0 from cache", "4 trace(s), 4 parsed, 0 from cache",
                    "4 trace(s), 0 parsed, 4 from cache", "4 trace(s), 4 parsed, 0 from cache"]


def test_a_name_that_matches_nothing_is_one_clear_warning(runs: dict[str, Path], cli: Cli) -> None:
    result = cli("analyze", str(runs["named"]), "--step-range", "train_batch")
    assert result.exit_code == 0, result.output
    lines = [w for w in result.stdout.splitlines() if "train_batch" in w]  # the report's warnings
    assert len(lines) == 1 and "no NVTX range of that name" in lines[0] and "in any export" in lines[0]
    for empty in ("", "  "):
        refused = cli("analyze", str(runs["named"]), "--step-range", empty)
        assert refused.exit_code == 2 and "give the NVTX range's name" in refused.output
    kineto = _report_of_kineto(cli, runs["named"].parent / "kineto")
    assert any(w.startswith("--step-range 'x' applies to Nsight Systems exports") for w in kineto["warnings"])


def _report_of_kineto(cli: Cli, out: Path) -> dict[str, Any]:
    result = cli("synth", str(out), "--nodes", "1", "--gpus-per-node", "2", "--layout", "tp=2", "--steps", "2",
                 "--micro-batches", "1", "--layers", "1")
    assert result.exit_code == 0, result.output
    return _report(cli, out, "--step-range", "x")


def test_check_diff_and_dashboard_take_the_step_range(runs: dict[str, Path], cli: Cli) -> None:
    # exposed ms per step is ~3x lower with the three steps found than with the whole export as one step
    gate = ("--max-exposed-ms-per-step", "200")
    assert cli("check", str(runs["named"]), *gate).exit_code == 1
    assert cli("check", str(runs["named"]), *gate, "--step-range", "fwd_bwd").exit_code == 0
    result = cli("diff", str(runs["default"]), str(runs["named"]), "--format", "json", "--step-range", "fwd_bwd")
    assert result.exit_code == 0, result.output
    assert "--step-range" not in result.stderr
    diff = cli("diff", str(runs["default"]), str(runs["named"]), "--format", "json")
    assert json.loads(result.stdout) != json.loads(diff.stdout)  # without it the step time triples
    from commprof.cli.dashboard import dashboard, load_runs

    assert "step_range" in {p.name for p in dashboard.params}
    opened, failures, _ = load_runs([str(runs["named"])], 1, "fwd_bwd")
    assert not failures and next(iter(opened.values())).tables().step_marks.height == 12


def test_unnumbered_ranges_are_numbered_in_order_on_the_thread_with_most(tmp_path: Path, runs: dict[str, Path]) -> None:
    path = tmp_path / "rank0.sqlite"
    path.write_bytes((runs["named"] / "raw" / "nsys" / "profile_0.sqlite").read_bytes())
    con = sqlite3.connect(path)
    con.execute("UPDATE StringIds SET value = 'train step' WHERE value LIKE 'fwd_bwd#%'")
    con.execute("UPDATE NVTX_EVENTS SET text = 'train step' WHERE text LIKE 'fwd_bwd#%'")
    con.commit()
    con.close()
    marks = extract(path, step_range="Train Step").step_marks
    assert marks["step"].to_list() == [0, 1, 2]
    assert marks["start_ns"].is_sorted()
