"""Issue 13 item 5 (text report): a big run's report shows a readable summary — the ranks at each
figure's extremes and the most exposed, the spread over all ranks, the groups that cost most — and
says how many rows it left out; the JSON keeps every row."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from rich.console import Console

import commprof
from commprof.analyzers.distribution import rank_distribution
from commprof.report import analysis_json, analysis_text
from commprof.synth_run import make_run


def test_distribution_is_the_nearest_ranks_values_and_names_the_extremes() -> None:
    ranks = pl.DataFrame({"rank": list(range(10)), "step_ns": [100] * 10,
                          "exposed_comm_ns": [5, 1, 9, 3, 9, 2, 8, 4, 7, 6]})
    dist = {d["metric"]: d for d in rank_distribution(ranks).to_dicts()}
    assert set(dist) == {"step_ns", "exposed_comm_ns"}  # metrics missing from the frame are left out
    e = dist["exposed_comm_ns"]
    assert (e["min"], e["max"], e["mean"], e["ranks"]) == (1, 9, 5.4, 10)
    # sorted 1 2 3 4 5 6 7 8 9 9: index q x 9 rounded half up (0.9, 4.5, 8.1), values not interpolations
    assert (e["p10"], e["median"], e["p90"]) == (2, 6, 9)
    assert (e["min_rank"], e["max_rank"]) == (1, 2)  # the lowest rank on ties (2 and 4 hold 9)
    assert dist["step_ns"]["min_rank"] == dist["step_ns"]["max_rank"] == 0


@pytest.fixture(scope="module")
def big_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = make_run(tmp_path_factory.mktemp("big") / "s64", ranks=64, steps=2, straggler_rank=37,
                    straggler_delay_us=50)
    return analysis_json.build(commprof.analyze(commprof.open_run(path, jobs=1)))


def _text(report: dict[str, Any]) -> str:
    buffer = io.StringIO()
    analysis_text.render_text(report, Console(file=buffer, width=200, no_color=True))
    return buffer.getvalue()


def _rank_cells(text: str, title: str) -> list[int]:
    block = text.split(title, 1)[1].split("└", 1)[0]
    return [int(line.split("│")[1]) for line in block.splitlines() if line.startswith("│")]


def test_the_text_report_of_64_ranks_shows_16_and_says_what_it_left_out(big_report: dict[str, Any]) -> None:
    assert len(big_report["ranks"]) == 64  # the JSON keeps every rank
    text = _text(big_report)
    assert "16 of 64 ranks" in text and "48 more in --format json" in text
    shown = _rank_cells(text, "Step time per rank")
    assert len(shown) == 16 and shown == sorted(shown)
    assert 37 in shown  # the straggler: the least exposed (the others wait for it) and the most hidden
    spread = text.split("Spread over the 64 ranks", 1)[1].split("└", 1)[0]
    assert "exposed comm ms" in spread and "comm hidden %" in spread
    assert "Process groups: the 20 of 57 with the most exposed time; 37 more in --format json" in text
    # the group of the straggler costs the most exposed TP time: it is listed first among the TP groups
    assert text.index("32..39") < text.index("0..7")


def test_markdown_summarises_the_same_way(big_report: dict[str, Any]) -> None:
    md = analysis_text.render_markdown(big_report)
    assert "16 of 64 ranks" in md and "## Spread over the 64 ranks" in md
    rows = md.split("## Step time per rank", 1)[1].split("## Spread", 1)[0]
    assert sum(1 for line in rows.splitlines() if line.startswith("| ") and line[2].isdigit()) == 16


def test_a_small_run_shows_every_rank_and_no_spread(sample_run: Path) -> None:
    report = analysis_json.build(commprof.analyze(commprof.open_run(sample_run, jobs=1)))
    text = _text(report)
    assert _rank_cells(text, "Step time per rank") == [0, 1, 2, 3]
    assert "Spread over" not in text and "more in --format json" not in text
    assert json.loads(json.dumps(report))["rank_distribution"][0]["ranks"] == 4


def _clock(host: str, offset_ns: int, residual_ns: int, fit: str = "aligned") -> dict[str, Any]:
    return {"host": host, "offset_ns": offset_ns, "residual_ns": residual_ns, "calls_used": 8, "fit": fit}


def test_the_host_clock_table_of_many_hosts_shows_the_ones_that_matter(big_report: dict[str, Any]) -> None:
    # 40 hosts: the reference, one not aligned, two moved far, two that fit badly, the rest unremarkable
    clocks = [_clock(f"node-{i:02d}", 10 * i, 100) for i in range(40)]
    clocks[0] = _clock("node-00", 0, 0, "reference")
    clocks[33] = _clock("node-33", 0, 0, "no call shared with other hosts; clock not aligned")
    clocks[7]["offset_ns"], clocks[21]["offset_ns"] = -9_000_000, 5_000_000
    clocks[12]["residual_ns"], clocks[30]["residual_ns"] = 700_000, 400_000
    report = {**big_report, "skew": {**big_report["skew"], "host_clocks": clocks}}
    text = _text(report)
    assert "16 of 40 hosts" in text and "24 more in --format json" in text
    block = text.split("Host clocks", 1)[1].split("└", 1)[0]
    hosts = [line.split("│")[1].strip() for line in block.splitlines() if line.startswith("│")]
    assert len(hosts) == 16 and hosts == sorted(hosts)  # in the report's order
    assert {"node-00", "node-33", "node-07", "node-21", "node-12", "node-30"} <= set(hosts)
    assert "16 of 40 hosts" in analysis_text.render_markdown(report)
    few = {**big_report, "skew": {**big_report["skew"], "host_clocks": clocks[:5]}}
    assert "more in --format json" not in _text(few).split("Host clocks", 1)[1]  # a few hosts: all of them


def test_a_group_of_irregular_members_is_summarised_never_listed() -> None:
    """A process group's members print as a range when they are one ("3..4091 step 8"); past 16 irregular
    ones as their count and first runs (issue 39: a group of 2,048 ranks is not printed member by member)."""
    assert analysis_text.fmt_ranks(list(range(3, 4096, 8))) == "3..4091 step 8"
    assert analysis_text.fmt_ranks([9, 2, 5]) == "2,5,9"
    members = [*range(0, 1024), *range(2048, 3072), 4000, 4001, 5000, 7000, 7003]
    text = analysis_text.fmt_ranks(members)
    assert text == "2,053 ranks: 0..1023, 2048..3071, 4000, 4001, … (3 more runs)"
    report = {"process_groups": [{"pg": "9", "desc": None, "ranks": members, "dimension": "dp", "tier": "ib",
                                  "op_mix": {"all_reduce": 2}, "bytes_per_step": 8, "comm_ns_per_step": 1,
                                  "exposed_ns_per_step": 1, "busbw_gbps": None, "efficiency": None}]}
    assert analysis_text.pg_rows(report)[0][2] == text


def test_the_late_ranks_table_says_how_many_it_left_out(big_report: dict[str, Any]) -> None:
    late = [s for s in big_report["skew"]["stragglers"] if s["caused_wait_ns_per_step"] > 0]
    title = analysis_text.skew_title(big_report)
    assert len(late) == 32  # the ranks that were last to arrive at some matched call
    assert "the 5 of 32 that make the others wait most; 27 more in --format json" in title
    assert len(analysis_text.skew_rows(big_report)) == 5
    few = {**big_report, "skew": {**big_report["skew"], "stragglers": late[:3]}}
    assert "more in --format json" not in analysis_text.skew_title(few)
