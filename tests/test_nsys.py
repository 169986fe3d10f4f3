"""The Nsight Systems reader (commprof/ingest/nsys): real exports of two schema generations
(../shared/real_inputs/nsys_sqlite), hand-built exports from the schema reference (tests/fixtures/nsys/*.sql),
and synthetic runs written both as Kineto traces and as nsys exports, which must analyze the same."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import Result

from commprof.ingest.nsys import NsysExportError, extract
from commprof.run import open_run
from commprof.synth.nsys import comm_hash, write_exports

Cli = Callable[..., Result]
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real_inputs" / "nsys_sqlite"
FIXTURES = Path(__file__).parent / "fixtures" / "nsys"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real nsys exports not here ({REAL})")


def build(sql_name: str, target: Path) -> Path:
    """A fixture export from its SQL text."""
    target.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(target)
    con.executescript((FIXTURES / sql_name).read_text())
    con.commit()
    con.close()
    return target


def by_hand(path: Path, sql: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


@needs_real
@pytest.mark.parametrize("name, version, host, gpu", [
    ("fuser_report1.sqlite", "3.17.1", "ipp2-0047.nvidia.com", "NVIDIA H200"),
    ("pipit_saxpy-mpi-cuda_perlmutter0.sqlite", "2.9.1", "nid001608", "NVIDIA A100-SXM4-40GB"),
])
def test_real_exports_give_their_kernels_and_memory_operations(name: str, version: str, host: str, gpu: str) -> None:
    path = REAL / name
    before = (path.stat().st_mtime_ns, path.stat().st_size)
    rank_trace = extract(path)
    kinds = dict(rank_trace.intervals.group_by("kind").len().iter_rows())
    assert kinds.get("compute", 0) == by_hand(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    memory = by_hand(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") + by_hand(
        path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")
    assert kinds.get("memory", 0) == memory
    assert "comm" not in kinds and rank_trace.collectives.height == 0  # neither export holds NCCL kernels
    # every kernel has its launch (the runtime call of its correlation id), one row per kernel
    assert rank_trace.intervals["launch_ns"].null_count() == 0
    start = by_hand(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    first = by_hand(path, "SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert rank_trace.intervals.filter(pl.col("kind") == "compute")["start_ns"].min() == start + first
    assert (rank_trace.host, rank_trace.gpu_name, rank_trace.source) == (host, gpu, "nsys")
    assert (path.stat().st_mtime_ns, path.stat().st_size) == before  # read-only: the user's file is untouched
    meta = by_hand(path, "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('META_DATA_EXPORT', 'EXPORT_META_DATA')")
    assert meta == 1 and not any("schema" in w for w in rank_trace.warnings), version


@needs_real
def test_real_nvtx_ranges_match_sql_by_hand() -> None:
    """fuser's 13,513 NVTX ranges are nvFuser's own (none NCCL's, none a step): none is taken; pipit's
    MPI run names its rank in an NVTX thread name ("MPI Rank 0")."""
    from commprof.ingest.nsys.db import open_export
    from commprof.ingest.nsys.nvtx import read_nvtx

    fuser = REAL / "fuser_report1.sqlite"
    assert by_hand(fuser, "SELECT COUNT(*) FROM NVTX_EVENTS") == 13_513
    ex = open_export(fuser)
    facts = read_nvtx(ex)
    ex.close()
    nccl_by_hand = by_hand(fuser, "SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                                  "WHERE COALESCE(n.text, s.value) LIKE 'nccl%'")
    assert len(facts.nccl) == nccl_by_hand == 0 and facts.steps == []
    pipit = extract(REAL / "pipit_saxpy-mpi-cuda_perlmutter0.sqlite")
    assert (pipit.rank, pipit.rank_source) == (0, "MPI rank")


def test_schema2_export_reads_every_nccl_generation_and_copy_engine_collectives(tmp_path: Path) -> None:
    rank_trace = extract(build("schema2_nccl_generations.sql", tmp_path / "rank3.sqlite"))
    assert rank_trace.rank == 3 and rank_trace.rank_source == "file name"
    comm = rank_trace.intervals.filter(pl.col("kind") == "comm")
    assert comm["name"].str.slice(0, 12).to_list() == ["ncclKernel_A", "ncclDevKerne", "ncclSymkDevK", "Memcpy PtoP"]
    assert rank_trace.collectives["op"].to_list() == ["all_reduce", "all_gather", "all_reduce", "all_gather"]
    # no payload in a 2.x export: group and size unknown, said once each, never 0
    assert rank_trace.collectives["bytes"].null_count() == 4 and rank_trace.collectives["pg"].null_count() == 4
    assert any("no NCCL NVTX range" in w for w in rank_trace.warnings)  # the symmetric kernel's call is missing
    assert any("carry no payload" in w for w in rank_trace.warnings)
    assert rank_trace.step_marks.select("step", "start_ns").row(0) == (7, 1_700_000_000_000_500_000)
    assert rank_trace.intervals.filter(pl.col("name") == "Memcpy HtoD")["kind"].to_list() == ["memory"]


def test_lazy_export_without_runtime_nvtx_or_session_start_warns(tmp_path: Path) -> None:
    rank_trace = extract(build("schema3_lazy_tables.sql", tmp_path / "lazy.sqlite"))
    assert rank_trace.intervals.height == 2 and rank_trace.intervals["launch_ns"].null_count() == 2
    assert rank_trace.collectives["op"].to_list() == ["reduce_scatter"]
    said = " ".join(rank_trace.warnings)
    assert "no CUPTI_ACTIVITY_KIND_RUNTIME" in said and "no session start time" in said
    assert rank_trace.rank is None and rank_trace.device == "1"


def test_truncated_and_non_sqlite_files_are_one_line_errors(tmp_path: Path, cli: Cli) -> None:
    good = build("schema3_lazy_tables.sql", tmp_path / "src.sqlite")
    data = good.read_bytes()
    cut = tmp_path / "one" / "rank0.sqlite"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(NsysExportError):
        extract(cut)
    result = cli("analyze", str(cut))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "rank0.sqlite" in result.output and "SQLite" in result.output
    # beside a readable rank, the damaged one is skipped with a warning
    shutil.copy(good, cut.parent / "rank1.sqlite")
    result = cli("analyze", str(cut.parent))
    assert result.exit_code == 0, result.output
    assert "rank0.sqlite: not a readable SQLite database" in result.output and "rank skipped" in result.output


def test_read_only_folder_and_file(tmp_path: Path, cli: Cli) -> None:
    folder = tmp_path / "ro"
    build("schema2_nccl_generations.sql", folder / "rank0.sqlite")
    os.chmod(folder / "rank0.sqlite", 0o444)
    os.chmod(folder, 0o555)
    try:
        result = cli("analyze", str(folder), env={"COMMPROF_CACHE_DIR": str(tmp_path / "cache")})
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in folder.iterdir()) == ["rank0.sqlite"]  # no journal, no -wal, no cache
    finally:
        os.chmod(folder, 0o755)


def _synth(cli: Cli, out: Path, *extra: str) -> Path:
    result = cli("synth", str(out), "--nodes", "2", "--gpus-per-node", "2", "--layout", "tp=2,dp=2",
                 "--steps", "3", "--micro-batches", "1", "--layers", "2", *extra)
    assert result.exit_code == 0, result.output
    return out


def _as_nsys(kineto_run: Path, out: Path, ranks: list[int] | None = None) -> Path:
    """The same run with the traces of ``ranks`` (all by default) replaced by nsys exports."""
    shutil.copytree(kineto_run, out, ignore=shutil.ignore_patterns("tables"))
    tables = open_run(kineto_run).tables()
    written = write_exports(tables, out / "raw" / "nsys")
    for rank, path in zip(sorted(tables.ranks["rank"].to_list()), written, strict=True):
        if ranks is None or rank in ranks:
            (out / "raw" / "traces" / f"rank-{rank}.json.gz").unlink()
        else:
            path.unlink()
    return out


def _normalized(report: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The analysis with what only the source can differ in set aside: group names (a communicator hash
    in nsys), group descriptions and the dimension evidence they give, seq vs call-order matching."""
    text = json.dumps(report)
    for pg, hashed in names.items():
        text = text.replace(hashed, pg)
    out = json.loads(text)
    for key in ("generated_at", "run", "warnings"):
        out.pop(key)
    for group in out["process_groups"]:
        for key in ("desc", "dimension_source", "confidence"):
            group.pop(key)
    out["skew"].pop("match_by")
    for row in out["skew"]["stragglers"]:
        row.pop("max_wait_call")
    for finding in out["findings"]:
        finding["pgs"] = sorted(finding.get("pgs") or [])
    return out


@pytest.mark.slow
def test_synth_run_as_kineto_and_as_nsys_gives_the_same_analysis(tmp_path: Path, cli: Cli) -> None:
    kineto = _synth(cli, tmp_path / "kineto", "--straggler", "3:+2000")
    nsys = _as_nsys(kineto, tmp_path / "nsys")
    mixed = _as_nsys(kineto, tmp_path / "mixed", ranks=[2, 3])
    pgs = open_run(kineto).tables().process_groups["pg"].to_list()
    names = {pg: f"{comm_hash(pg):#x}" for pg in pgs}
    reports = {}
    for run in (kineto, nsys, mixed):
        result = cli("analyze", str(run), "--format", "json")
        assert result.exit_code == 0, result.output
        reports[run.name] = json.loads(result.stdout)
    want = _normalized(reports["kineto"], names)
    # the straggler is found (it makes the others wait most), so the comparison means something
    assert max(want["skew"]["stragglers"], key=lambda r: r["caused_wait_ns_per_step"])["rank"] == 3
    assert [f["id"] for f in want["findings"]] == ["straggler"]
    assert _normalized(reports["nsys"], names) == want
    # a mixed run: a group named by both sources (pg name, communicator hash) is one group, its calls matched
    # across the two halves by order: waits, straggler and finding are the all-Kineto run's
    halves = _normalized(reports["mixed"], names)
    assert halves["skew"] == want["skew"] and halves["ranks"] == want["ranks"]
    assert halves["findings"] == want["findings"]
    assert halves == want
    assert reports["mixed"]["skew"]["match_by"] == "seq and order"  # Kineto's own tp group keeps its seq
    opened = open_run(mixed)
    per_rank = {pg for _, frame in opened.rank_tables("collectives") for pg in frame["pg"].to_list()}
    assert per_rank == set(opened.collectives["pg"].to_list()) == set(opened.process_groups["pg"].to_list()) - {"0"}
    sources = opened.tables().ranks.select("rank", "source").rows()
    assert sources == [(0, "kineto"), (1, "kineto"), (2, "nsys"), (3, "nsys")]


def test_schema2_generation_written_by_synth_reads_kernels_without_payload(tmp_path: Path, cli: Cli) -> None:
    kineto = _synth(cli, tmp_path / "k")
    tables = open_run(kineto).tables()
    paths = write_exports(tables, tmp_path / "old", generation=2)
    old = extract(paths[0])
    assert old.intervals.height == tables.intervals([0]).height
    assert old.collectives.height == tables.collectives.filter(pl.col("rank") == 0).height
    assert old.collectives["pg"].null_count() == old.collectives.height  # 2.x: no payload tables


def test_synth_writes_nsys_exports_from_the_cli(tmp_path: Path, cli: Cli) -> None:
    out = _synth(cli, tmp_path / "n", "--write-as", "nsys")
    assert sorted(p.name for p in (out / "raw").iterdir()) == ["nccl", "nsys", "ranks", "topology"]
    report = json.loads(cli("analyze", str(out), "--format", "json").stdout)
    assert report["run"]["sources"] == {"nsys": [0, 1, 2, 3]}
    assert {g["tier"] for g in report["process_groups"]} >= {"nvlink", "ib"}  # the NCCL logs still map


def test_damaged_schema_text_is_a_one_line_error(tmp_path: Path, cli: Cli) -> None:
    # found by `make fuzz`: bytes that are not UTF-8 written into the schema page made sqlite3's error text
    # undecodable, and a UnicodeDecodeError came out as an internal error
    sys.path.insert(0, str(Path(__file__).parent))
    from fuzz_other_inputs import apply_nsys, nsys_export

    export = nsys_export(tmp_path)
    apply_nsys(export, ("bytes", [(0.06517412185979171, b")[\xabt\x08\xce\xa7\xc1"),
                                  (0.2724577524342382, b"\x86v;@l\xbcd\xd1")]))
    result = cli("analyze", str(tmp_path))
    assert result.exit_code == 2
    assert "damaged text in the database (not UTF-8)" in result.output and "rank0.sqlite" in result.output
    assert "UnicodeDecodeError" not in result.output


def test_text_that_is_not_utf8_is_read_not_a_traceback(tmp_path: Path, cli: Cli) -> None:
    # every string of the export's string table replaced by bytes that are not UTF-8: read with U+FFFD
    out = _synth(cli, tmp_path / "n", "--write-as", "nsys")
    export = sorted(out.rglob("*.sqlite"))[0]
    con = sqlite3.connect(export)
    con.execute("UPDATE StringIds SET value = CAST(X'5bab7408cea7c1' AS TEXT)")
    con.commit()
    con.close()
    result = cli("analyze", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ranks"]
