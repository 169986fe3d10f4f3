"""Bad input through the real CLI (DESIGN §5): a clear one-line error naming the file (exit 2), or a
partial result with a warning that says what was skipped — never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

import commprof

Cli = Callable[..., Result]


def analyze_json(cli: Cli, path: Path) -> dict[str, Any]:
    result = cli("analyze", str(path), "--format", "json", "-j", "1")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def assert_one_line_error(result: Result, *names: str) -> str:
    """Exit 2 with exactly one line on stderr, naming every file in ``names``, and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exc_info)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("commprof: error: ")
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert "Traceback" not in result.output
    return lines[0]


def intervals_per_rank(path: Path) -> dict[int, int]:
    run = commprof.open_run(path, jobs=1)
    return {rank: n for rank, n in run.intervals.group_by("rank").len().iter_rows()}


def warnings_about(report: dict[str, Any], name: str) -> list[str]:
    return [w for w in report["warnings"] if name in w]


LOSS = re.compile(r"\b(lost|dropped|skipped|truncated|cut short|ends early)\b", re.IGNORECASE)
AMOUNT = re.compile(r"\d[\d,]* (bytes|events)")


def assert_says_how_much_was_lost(report: dict[str, Any], name: str) -> None:
    """A warning names the file, says that something was lost and how much (bytes or events)."""
    warned = warnings_about(report, name)
    assert any(LOSS.search(w) and AMOUNT.search(w) for w in warned), report["warnings"]


# --- truncated traces: analyze what is there, warn about the rest -----------------------------------


def test_truncated_gzip_keeps_the_events_before_the_cut(cli: Cli, sample_run: Path, tmp_path: Path) -> None:
    full = intervals_per_rank(shutil.copytree(sample_run, tmp_path / "full"))
    victim = sample_run / "rank-1.json.gz"
    raw = victim.read_bytes()
    victim.write_bytes(raw[: int(len(raw) * 0.6)])

    report = analyze_json(cli, sample_run)

    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert_says_how_much_was_lost(report, "rank-1.json.gz")
    got = intervals_per_rank(sample_run)
    assert 0 < got[1] < full[1]
    assert {r: got[r] for r in (0, 2, 3)} == {r: full[r] for r in (0, 2, 3)}


def test_truncated_plain_json_keeps_the_events_before_the_cut(cli: Cli, sample_run: Path, tmp_path: Path) -> None:
    full = intervals_per_rank(shutil.copytree(sample_run, tmp_path / "full"))
    gz = sample_run / "rank-2.json.gz"
    text = gzip.decompress(gz.read_bytes())
    gz.unlink()
    (sample_run / "rank-2.json").write_bytes(text[: int(len(text) * 0.6)])

    report = analyze_json(cli, sample_run)

    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert_says_how_much_was_lost(report, "rank-2.json")
    got = intervals_per_rank(sample_run)
    assert 0 < got[2] < full[2]


def test_gzip_cut_inside_the_header_is_called_truncated(cli: Cli, sample_run: Path) -> None:
    victim = sample_run / "rank-1.json.gz"
    raw = victim.read_bytes()
    cut = raw[: len(raw) // 100]
    text = zlib.decompressobj(wbits=31).decompress(cut)
    assert text and b'"traceEvents"' not in text  # the cut falls in the header, before any event
    victim.write_bytes(cut)
    result = cli("analyze", str(sample_run), "--format", "json", "-j", "1")
    # either the other ranks are analyzed with a warning, or one line that says what happened
    said = " ".join(json.loads(result.stdout)["warnings"]) if result.exit_code == 0 else result.stderr
    assert result.exit_code in (0, 2), result.output
    assert "rank-1.json.gz" in said
    assert re.search(r"ends early|cut short|truncated", said), said


def test_truncation_warning_survives_the_cache(cli: Cli, sample_run: Path) -> None:
    victim = sample_run / "rank-3.json.gz"
    raw = victim.read_bytes()
    victim.write_bytes(raw[: int(len(raw) * 0.6)])
    first = analyze_json(cli, sample_run)
    second = analyze_json(cli, sample_run)  # read from tables/, nothing re-parsed
    assert warnings_about(first, "rank-3.json.gz")
    assert warnings_about(second, "rank-3.json.gz") == warnings_about(first, "rank-3.json.gz")


def test_truncated_gzip_through_a_real_process_has_no_traceback(sample_run: Path) -> None:
    victim = sample_run / "rank-0.json.gz"
    raw = victim.read_bytes()
    victim.write_bytes(raw[: int(len(raw) * 0.6)])
    proc = subprocess.run(
        [sys.executable, "-m", "commprof", "analyze", str(sample_run), "--format", "json"],
        capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert warnings_about(json.loads(proc.stdout), "rank-0.json.gz")


# --- unreadable files: exit 2, one line naming the file ----------------------------------------------


def corrupt_gzip_body(path: Path) -> None:
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"  # gzip magic, deflate, no flags
    path.write_bytes(header + random.Random(1).randbytes(4000))


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(2).randbytes(4000))


@pytest.mark.parametrize("damage", [corrupt_gzip_body, random_bytes], ids=["garbage-body", "random-bytes"])
def test_a_corrupt_rank_is_reported_and_skipped(cli: Cli, sample_run: Path, damage: Callable[[Path], None]) -> None:
    """Issue 13: one unreadable rank file does not stop the others; it is named in a warning."""
    damage(sample_run / "rank-1.json.gz")
    report = analyze_json(cli, sample_run)
    assert [r["rank"] for r in report["ranks"]] == [0, 2, 3]
    named = warnings_about(report, "rank-1.json.gz")
    assert any("skipped" in w for w in named), report["warnings"]
    assert any("1 of 4 trace files could not be read" in w for w in report["warnings"]), report["warnings"]


@pytest.mark.parametrize("damage", [corrupt_gzip_body, random_bytes], ids=["garbage-body", "random-bytes"])
def test_a_lone_corrupt_trace_is_one_line_error(cli: Cli, sample_run: Path, damage: Callable[[Path], None]) -> None:
    damage(sample_run / "rank-1.json.gz")
    assert_one_line_error(cli("analyze", str(sample_run / "rank-1.json.gz")), "rank-1.json.gz")


def test_corrupt_gzip_in_parallel_parse_through_a_real_process(sample_run: Path) -> None:
    corrupt_gzip_body(sample_run / "rank-2.json.gz")
    proc = subprocess.run(
        [sys.executable, "-m", "commprof", "analyze", str(sample_run), "-j", "4", "--format", "json"],
        capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 3]
    assert any("rank-2.json.gz" in w and "corrupt gzip" in w for w in report["warnings"]), report["warnings"]


NOT_TRACES = pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"hello": 1}', r"traceEvents"),
        ("[1, 2, 3]", r""),
        ("this is not json at all", r"not JSON"),
        ("{this is not json", r"JSON|trace"),
        ("", r"empty"),
        ('{"schema": "1.1.1-chakra.0.0.4", "pid": 7, "time": "2025-01-01", "nodes": [{"id": 1}]}',
         r"execution trace"),
    ],
    ids=["object-without-events", "list-of-numbers", "plain-text", "broken-object", "empty", "execution-trace"],
)


@NOT_TRACES
def test_json_that_is_not_a_trace_beside_traces_is_skipped_with_a_warning(
    cli: Cli, sample_run: Path, content: str, why: str
) -> None:
    (sample_run / "rank-3.json.gz").unlink()
    (sample_run / "rank-3.json").write_text(content)
    report = analyze_json(cli, sample_run)
    warned = warnings_about(report, "rank-3.json")
    assert any("skipped" in w and "not a Kineto trace" in w and re.search(why, w) for w in warned), report["warnings"]
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1, 2]


@NOT_TRACES
def test_a_lone_file_that_is_not_a_trace_is_one_line_error(
    cli: Cli, sample_run: Path, content: str, why: str
) -> None:
    lone = sample_run / "notes.json"
    lone.write_text(content)
    line = assert_one_line_error(cli("analyze", str(lone)), "notes.json")
    assert re.search(why, line), line


def test_a_folder_of_nothing_but_other_json_is_one_line_error(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "a.json").write_text('{"lr": 0.1}')
    (folder / "b.json").write_text("[1, 2]")
    line = assert_one_line_error(cli("analyze", str(folder)), "a.json", "b.json")
    assert "no Kineto traces" in line, line


def test_a_complete_json_list_is_not_called_truncated(cli: Cli, sample_run: Path) -> None:
    lone = sample_run / "rank-3.json"
    lone.write_text("[1, 2, 3]\n")
    line = assert_one_line_error(cli("analyze", str(lone)), "rank-3.json")
    assert not re.search(r"cut short|truncat|ends early", line), line


def test_empty_folder(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    assert_one_line_error(cli("analyze", str(empty)), str(empty))


def test_missing_path(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    line = assert_one_line_error(cli("analyze", str(missing)), str(missing))
    assert "no such file" in line


def test_missing_path_through_a_real_process(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    proc = subprocess.run(
        [sys.executable, "-m", "commprof", "analyze", str(missing)],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"commprof: error: {missing}: no such file or folder"]


# --- rank identity ------------------------------------------------------------------------------------


def test_two_traces_claiming_the_same_rank(cli: Cli, sample_run: Path) -> None:
    shutil.copyfile(sample_run / "rank-0.json.gz", sample_run / "again-rank-0.json.gz")
    line = assert_one_line_error(cli("analyze", str(sample_run)), "rank-0.json.gz", "again-rank-0.json.gz")
    assert "rank 0" in line


def test_traces_from_different_world_sizes(cli: Cli, sample_run: Path, edit_trace: Callable[..., Path]) -> None:
    def eight_ranks(trace: dict[str, Any]) -> None:
        trace["distributedInfo"]["world_size"] = 8

    edit_trace(sample_run / "rank-3.json.gz", eight_ranks)
    line = assert_one_line_error(cli("analyze", str(sample_run)), "rank-3.json.gz", "rank-0.json.gz")
    assert "world size" in line and "8" in line and "4" in line


def drop_distributed_info(trace: dict[str, Any]) -> None:
    del trace["distributedInfo"]


def test_rank_from_the_file_name_when_distributed_info_is_missing(
    cli: Cli, sample_run: Path, edit_trace: Callable[..., Path]
) -> None:
    edit_trace(sample_run / "rank-2.json.gz", drop_distributed_info)
    report = analyze_json(cli, sample_run)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    warned = warnings_about(report, "rank-2.json.gz")
    assert len(warned) == 1 and "file name" in warned[0] and "rank 2" in warned[0], report["warnings"]
    run = commprof.open_run(sample_run)
    row = run.ranks.filter(run.ranks["file"] == "rank-2.json.gz").row(0, named=True)
    assert (row["rank"], row["rank_source"]) == (2, "file name")


def test_rank_from_file_order_when_the_name_has_none(
    cli: Cli, sample_run: Path, edit_trace: Callable[..., Path]
) -> None:
    edit_trace(sample_run / "rank-2.json.gz", drop_distributed_info, sample_run / "worker.json.gz")
    (sample_run / "rank-2.json.gz").unlink()
    report = analyze_json(cli, sample_run)
    # ranks 0, 1 and 3 are claimed by distributedInfo; the nameless trace takes the first free one
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    warned = warnings_about(report, "worker.json.gz")
    assert len(warned) == 1 and "rank 2" in warned[0], report["warnings"]
    run = commprof.open_run(sample_run)
    row = run.ranks.filter(run.ranks["file"] == "worker.json.gz").row(0, named=True)
    assert (row["rank"], row["rank_source"]) == (2, "file order")
    assert set(run.intervals.filter(run.intervals["rank"] == 2)["rank"].to_list()) == {2}
    assert run.intervals.filter(run.intervals["rank"] == 2).height > 0


def test_file_order_rank_is_the_same_when_only_some_ranks_are_opened(
    cli: Cli, sample_run: Path, edit_trace: Callable[..., Path]
) -> None:
    # --ranks leaves rank-0/rank-1 unopened (their names say their rank): the nameless trace must still
    # be numbered as in the whole run (2), not take the first rank free among the files opened (0)
    edit_trace(sample_run / "rank-2.json.gz", drop_distributed_info, sample_run / "worker.json.gz")
    (sample_run / "rank-2.json.gz").unlink()
    result = cli("analyze", str(sample_run), "--ranks", "2,3", "--format", "json", "-j", "1")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [r["rank"] for r in report["ranks"]] == [2, 3]
    assert len(warnings_about(report, "worker.json.gz")) == 1
    assert "rank 2" in warnings_about(report, "worker.json.gz")[0]
    assert analyze_json(cli, sample_run)["ranks"][2]["rank"] == 2  # and the whole run agrees
