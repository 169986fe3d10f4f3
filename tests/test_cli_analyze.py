"""``commprof analyze`` / ``commprof ingest`` on a tmp copy of the sample run: every format shows the
same numbers, the JSON schema holds its keys, and the per-step parts add up."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

Cli = Callable[..., Result]

RANK_KEYS = {"rank", "steps", "step_ns", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns",
             "idle_ns", "overlap_pct"}
PARTS = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
PG_KEYS = {"pg", "desc", "ranks", "size", "dimension", "dimension_source", "tier", "tier_source"}
SUMMARY_KEYS = {"pg", "dimension", "tier", "op", "count", "bytes", "comm_ns", "exposed_ns", "busbw_gbps"}
SECTIONS = ("Step time per rank", "Process groups", "Top collectives by exposed time")
WIDE = {"COLUMNS": "220"}  # rich wraps and truncates cells at 80 columns otherwise


def flat(text: str) -> str:
    return " ".join(text.split())


def run_ok(cli: Cli, *args: str) -> Result:
    result = cli(*args, env=WIDE)
    assert result.exit_code == 0, (result.output, result.exc_info)
    return result


def analyze_json(cli: Cli, path: Path, *extra: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(run_ok(cli, "analyze", str(path), "--format", "json", *extra).stdout)
    return report


def test_json_schema(cli: Cli, sample_run: Path) -> None:
    report = analyze_json(cli, sample_run)
    assert isinstance(report["schema_version"], int)
    assert isinstance(report["warnings"], list)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    for rank in report["ranks"]:
        assert RANK_KEYS <= rank.keys(), RANK_KEYS - rank.keys()
    assert report["process_groups"]
    for group in report["process_groups"]:
        assert PG_KEYS <= group.keys(), PG_KEYS - group.keys()
    assert report["collectives_summary"]
    for row in report["collectives_summary"]:
        assert SUMMARY_KEYS <= row.keys(), SUMMARY_KEYS - row.keys()
    # the sample's mesh: default_pg over 4 ranks, dp pairs {0,2},{1,3}, tp pairs {0,1},{2,3}
    def members(desc: str) -> list[list[int]]:
        return sorted(sorted(g["ranks"]) for g in report["process_groups"] if g["desc"] == desc)

    assert members("default_pg") == [[0, 1, 2, 3]]
    assert members("mesh_dp") == [[0, 2], [1, 3]]
    assert members("mesh_tp") == [[0, 1], [2, 3]]
    ops = {row["op"] for row in report["collectives_summary"]}
    assert {"all_reduce", "all_gather"} <= ops


def test_parts_add_up_to_the_step(cli: Cli, sample_run: Path) -> None:
    for rank in analyze_json(cli, sample_run)["ranks"]:
        steps = rank["steps"]
        assert steps == 3  # the sample's profiler schedule: wait=1, warmup=1, active=3
        parts = sum(rank[p] for p in PARTS)
        assert all(rank[p] >= 0 for p in PARTS), rank
        # each part is a per-step mean rounded to whole ns: at most 0.5 ns off per part and step
        assert abs(parts * steps - rank["step_ns"] * steps) <= len(PARTS) * steps, rank
        comm = rank["overlapped_comm_ns"] + rank["exposed_comm_ns"]
        assert comm > 0
        assert rank["overlap_pct"] == pytest.approx(100 * rank["overlapped_comm_ns"] / comm, abs=0.01)


def test_text_report(cli: Cli, sample_run: Path) -> None:
    report = analyze_json(cli, sample_run)
    text = flat(run_ok(cli, "analyze", str(sample_run)).stdout)
    totals = report["totals"]
    assert f"{sample_run}: 4 rank(s) of 4; mean step {totals['step_ns'] / 1e6:,.2f} ms" in text
    assert f"{totals['overlap_pct']:.1f}% of comm hidden behind compute" in text
    positions = [text.find(title) for title in SECTIONS]
    assert all(p >= 0 for p in positions), positions
    assert positions == sorted(positions)
    for rank in report["ranks"]:
        cells = [str(rank["rank"]), "3", f"{rank['step_ns'] / 1e6:,.2f}", f"{rank['compute_ns'] / 1e6:,.2f}",
                 f"{rank['overlapped_comm_ns'] / 1e6:,.2f}", f"{rank['exposed_comm_ns'] / 1e6:,.2f}"]
        assert re.search(r"[│|]\s*" + r"\s*[│|]\s*".join(map(re.escape, cells)) + r"\s*[│|]", text), rank


def test_markdown_report(cli: Cli, sample_run: Path) -> None:
    lines = run_ok(cli, "analyze", str(sample_run), "--format", "markdown").stdout.splitlines()
    assert lines[0].startswith("# ")
    header = next(i for i, line in enumerate(lines) if line.startswith("| rank |"))
    assert re.fullmatch(r"\|(---\|)+", lines[header + 1])
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    assert [row.split("|")[1].strip() for row in rows] == ["0", "1", "2", "3"]
    columns = lines[header].count("|")
    assert all(row.count("|") - row.count("\\|") == columns for row in rows)
    assert sum(1 for line in lines if re.fullmatch(r"\|(---\|)+", line)) == 5  # five sections (late ranks too)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_output_file_and_nothing_on_stdout(cli: Cli, sample_run: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"report.{fmt}"
    result = run_ok(cli, "analyze", str(sample_run), "--format", fmt, "-o", str(out))
    assert result.stdout == ""
    body = out.read_text()
    if fmt == "json":
        assert json.loads(body)["ranks"][0]["rank"] == 0
    else:
        assert "4 rank(s) of 4" in flat(body)
        assert all(title in body for title in SECTIONS)


def test_output_into_a_missing_folder_is_a_one_line_error(cli: Cli, sample_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "no-such-folder" / "report.json"
    result = cli("analyze", str(sample_run), "--format", "json", "-o", str(out))
    assert result.exit_code == 2
    assert str(out) in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_ingest_reports_parsed_and_cached(cli: Cli, sample_run: Path) -> None:
    first = flat(run_ok(cli, "ingest", str(sample_run)).stdout)
    assert "4 trace(s), 4 parsed, 0 from cache" in first
    assert str(sample_run / "tables") in first
    second = flat(run_ok(cli, "ingest", str(sample_run)).stdout)
    assert "4 trace(s), 0 parsed, 4 from cache" in second


@pytest.mark.real_traces
def test_hta_compat_overlap_on_a_real_trace(cli: Cli, real_trace_set: Callable[[str], Path]) -> None:
    folder = real_trace_set("hta/nccl_parser_config")
    report = analyze_json(cli, folder, "--hta-compat")
    assert report["run"]["hta_compat"] is True
    rank0 = next(r for r in report["ranks"] if r["rank"] == 0)
    assert rank0["overlap_pct"] == pytest.approx(14.31, abs=0.5)


def test_help_lists_the_commands(cli: Cli) -> None:
    result = run_ok(cli, "--help")
    commands = result.stdout.split("Commands:", 1)[1]
    assert re.search(r"^\s+analyze\s", commands, re.MULTILINE)
    assert re.search(r"^\s+ingest\s", commands, re.MULTILINE)
