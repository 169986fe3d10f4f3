"""Issue 37, item 5: NCCL RAS status reports (``ncclras``, NCCL 2.24+) read as a health report. Each fixture in
tests/data/nccl_ras (README there) pins which ranks of which communicator are ahead and which behind, per
collective, at which operation count; the hang report of ``analyze`` (text and JSON, alone and beside traces)
names them and says the source is NCCL RAS; a cut or garbled report gives warnings naming file and line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.analyzers.ras import ras_report
from commprof.ingest.nccl_logs import find_nccl_inputs
from commprof.ingest.nccl_ras import find_reports, is_ras_report
from commprof.ingest.nccl_ras.tables import read_reports

DATA = Path(__file__).parent / "data" / "nccl_ras"
Cli = Callable[..., Result]


def _lags(name: str, warnings: list[str] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """(communicator hash, op) -> {position: (ops, ranks)} and the progress over queries."""
    tables = read_reports([DATA / name], warnings if warnings is not None else [])
    report = ras_report(tables.groups, tables.counts, tables.notes, tables.versions)
    assert report is not None
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in report.lagging.iter_rows(named=True):
        entry = out.setdefault((row["hash"], row["op"]), {"ahead": None, "behind": [], "progress": row["progress"]})
        level = (row["ops"], row["ranks"])
        if row["position"] == "ahead":
            entry["ahead"] = level
        else:
            entry["behind"].append(level)
    return out


def test_a_stuck_allreduce_names_the_rank_behind_and_the_ranks_ahead() -> None:
    lags = _lags("stuck_allreduce_2.26.txt")
    assert lags == {("5be0c71d93a2e448", "AllReduce"): {
        "ahead": (1412, [0, 1, 2, 3, 4, 6, 7]), "behind": [(1411, [5])], "progress": "unchanged"}}


def test_before_2_26_one_count_over_all_collectives_and_a_missing_rank_is_neither() -> None:
    lags = _lags("collective_2.24.txt")
    assert lags == {("a03f9e21c7d45b10", "collective"): {
        "ahead": (880, [0, 1, 3, 4, 5, 6, 7, 8, 10, 11, 14, 15]), "behind": [(879, [2, 12, 13])], "progress": None}}


def test_a_rank_ahead_and_ranks_that_launched_nothing() -> None:
    lags = _lags("ahead_and_status_2.27.txt")
    assert lags[("c81d004e6b2a9f37", "AllGather")]["ahead"] == (65, [3])
    assert lags[("c81d004e6b2a9f37", "AllGather")]["behind"] == [(64, [0, 1, 2, 4, 5, 6, 7])]
    assert lags[("c81d004e6b2a9f37", "ReduceScatter")]["ahead"] == (32, [0, 1, 2, 3, 4, 5])
    assert lags[("c81d004e6b2a9f37", "ReduceScatter")]["behind"] == [(0, [6, 7])]


def test_the_json_report_gives_every_rank() -> None:
    assert _lags("report_2.29.json") == {("7f20c4d1a9e3b856", "AllGather"): {
        "ahead": (210, [0, 1, 3]), "behind": [(209, [2])], "progress": None}}


def test_a_cut_report_is_read_up_to_where_it_breaks_with_file_and_line() -> None:
    warnings: list[str] = []
    lags = _lags("cut_2.26.txt", warnings)
    assert lags[("9d41e7c05b2a8f13", "AllReduce")]["behind"] == [(5119, [21])]
    assert any("cut_2.26.txt:16: line not read: 'Rank 17 has launched up to opera'" in w for w in warnings)
    assert any("cut_2.26.txt:19: the MISMATCH of #0-1 ends" in w for w in warnings)


@pytest.mark.parametrize("text", [
    "Communicators... (0.1s)\n=============\n\n#0-0 (00ff00ff00ff00ff) MISMATCH\n  Rank x has launched up to \x00\n",
    "Communicators...\n" + "12 ranks have launched up to operation 99999999999999999999999\n" * 3,
    "Group     Comms     Nodes     Ranks\n    0   1   1   notanumber\n\u2603" * 40,
    '{"nccl_version": 2, "communicators": [{"ranks": [{"rank": "a"}, 7]}], "communicators_count": "x"}',
    '{"communicators_count": 1, "communicators": [', "",
])
def test_bad_reports_warn_and_never_raise(text: str, tmp_path: Path) -> None:
    path = tmp_path / ("bad.json" if text.startswith("{") else "bad.txt")
    path.write_text(text)
    warnings: list[str] = []
    tables = read_reports([path], warnings)
    ras_report(tables.groups, tables.counts, tables.notes, tables.versions)
    assert all(str(path) in w for w in warnings)


def test_reports_are_found_by_content_and_not_read_as_nccl_logs(tmp_path: Path) -> None:
    (tmp_path / "raw" / "nccl").mkdir(parents=True)
    shutil.copy(DATA / "stuck_allreduce_2.26.txt", tmp_path / "raw" / "nccl" / "status")
    shutil.copy(DATA / "report_2.29.json", tmp_path / "raw" / "ras.json")
    log = tmp_path / "raw" / "nccl" / "nccl.node1.11.log"
    log.write_text("node1:11:12 [0] NCCL INFO NCCL version 2.26.5+cuda12.8\n"
                   "node1:11:12 [0] NCCL INFO Using network IB\n")
    assert [p.name for p in find_reports(tmp_path)] == ["ras.json", "status"]
    assert find_nccl_inputs(tmp_path).logs == [log]
    assert not is_ras_report(log)


def test_analyze_of_a_report_alone_is_a_hang_report_from_nccl_ras(cli: Cli) -> None:
    result = cli("analyze", str(DATA / "stuck_allreduce_2.26.txt"), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "NCCL RAS: 1 report(s), NCCL 2.26.5+cuda12.8, 2 query(ies)" in out
    assert ("5be0c71d93a2e448 (#0-0, 8 ranks) AllReduce: behind at 1411: 5 (node 10.8.1.12); ahead at 1412: "
            "0,1,2,3,4,6,7; unchanged over 2 queries: stuck") in out
    assert "Hang report (NCCL RAS)" in out
    doc = json.loads(cli("analyze", str(DATA / "report_2.29.json"), "--format", "json").stdout)
    ras = doc["nccl_ras"]
    assert ras["source"] == "NCCL RAS" and doc["run"]["sources"] == {"nccl_ras": [str(DATA / "report_2.29.json")]}
    [entry] = ras["lagging"]
    assert (entry["op"], entry["ahead"]["ranks"], entry["behind"][0]["ranks"]) == ("AllGather", [0, 1, 3], [2])


def test_a_report_beside_traces_joins_the_hang_report(cli: Cli, sample_run: Path) -> None:
    shutil.copy(DATA / "collective_2.24.txt", sample_run / "ncclras.out")
    doc = json.loads(cli("analyze", str(sample_run), "--format", "json").stdout)
    [entry] = doc["nccl_ras"]["lagging"]
    assert entry["behind"][0]["ranks"] == [2, 12, 13] and entry["ahead"]["ops"] == 880
    assert any(n["kind"] == "INCOMPLETE" and n["ranks"] == [9] for n in doc["nccl_ras"]["notes"])
    text = " ".join(cli("analyze", str(sample_run), env={"COLUMNS": "200"}).stdout.split())
    assert "a03f9e21c7d45b10 (#0-0, 16 ranks) collective: behind at 879: 2,12,13" in text


def test_the_schema_knows_the_ras_report(cli: Cli) -> None:
    import jsonschema

    schema = json.loads((Path(__file__).parents[1] / "docs" / "schema" / "analyze.schema.json").read_text())
    doc = json.loads(cli("analyze", str(DATA / "ahead_and_status_2.27.txt"), "--format", "json").stdout)
    jsonschema.validate(doc["nccl_ras"], schema["properties"]["nccl_ras"])
