"""Hostile input to check, diff, record and the NCCL readers (issue 15): a one-line exit 2 or a partial
result with a warning, never a traceback, and never a gate that passes on what it could not read."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

Cli = Callable[..., Result]
REPO = Path(__file__).resolve().parents[1]


def one_line_error(result: Result, *names: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exc_info)
    assert isinstance(result.exception, SystemExit), result.exc_info
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commprof: error: "), result.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def usage_error(result: Result, *words: str) -> None:
    """click's own usage errors (exit 2, "Error: ..." naming the option)."""
    assert result.exit_code == 2, (result.output, result.exc_info)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.stderr, (word, result.stderr)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from click.testing import CliRunner

    from commprof.cli import main

    run = tmp_path_factory.mktemp("ref") / "run"
    shutil.copytree(REPO / "sample_traces" / "gloo_4rank_profiler", run, ignore=shutil.ignore_patterns("tables"))
    result = CliRunner().invoke(main, ["analyze", str(run), "--format", "json", "-j", "1"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


# --- thresholds: NaN and inf are usage errors ------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("flag", ["--max-exposed-comm-pct", "--max-straggler-wait-ms", "--noise-floor-ms"])
def test_a_non_finite_threshold_flag_is_a_usage_error(cli: Cli, tmp_path: Path, report: dict[str, Any],
                                                      flag: str, value: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    usage_error(cli("check", str(path), flag, value), flag)


@pytest.mark.parametrize("value", ["nan", "inf", "+inf", "-nan"])
def test_a_non_finite_threshold_in_toml_is_an_error_naming_the_line(cli: Cli, tmp_path: Path,
                                                                     report: dict[str, Any], value: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    config = tmp_path / "commprof.toml"
    config.write_text(f"max_regression_pct = 5\n\n[dimension.tp]\nmax_exposed_comm_pct = {value}\n")
    line = one_line_error(cli("check", str(path), "--config", str(config)), "commprof.toml", "line 4")
    assert "finite" in line


@pytest.mark.parametrize("rule", ["max_exposed_comm_pct=nan", "tier.nvlink.min_busbw_efficiency=inf"])
def test_a_non_finite_rule_override_is_an_error(cli: Cli, tmp_path: Path, report: dict[str, Any], rule: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert "finite" in one_line_error(cli("check", str(path), "-r", rule))


def test_max_regression_nan_is_a_usage_error(cli: Cli, tmp_path: Path, report: dict[str, Any]) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    usage_error(cli("check", str(path), "--max-regression", "nan%"), "finite")


# --- check and diff on a mutated report: validated at load ----------------------------------------------

MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "rank-metric-text": lambda d: d["ranks"][0].__setitem__("exposed_pct_of_step", "abc"),
    "ranks-object": lambda d: d.__setitem__("ranks", {"0": 1}),
    "run-text": lambda d: d.__setitem__("run", "-inf"),
    "run-without-path": lambda d: d["run"].pop("path"),
    "totals-list": lambda d: d.__setitem__("totals", [1, 2]),
    "step-400-digits": lambda d: d["totals"].__setitem__("step_ns", 10**400),
    "straggler-rank-null": lambda d: d["skew"].__setitem__("stragglers", [{"rank": None}]),
    "group-calls-text": lambda d: d["process_groups"][0].__setitem__("calls", "many"),
    "dimension-row-number": lambda d: d["dimensions"].append(5),
    "finding-severity-number": lambda d: d.__setitem__("findings", [{"id": "x", "severity": 3}]),
}


@pytest.mark.parametrize("mutate", list(MUTATIONS.values()), ids=list(MUTATIONS))
@pytest.mark.parametrize("command", ["check", "check-baseline", "diff"])
def test_a_mutated_report_is_one_line_error_naming_the_file(cli: Cli, tmp_path: Path, report: dict[str, Any],
                                                            mutate: Callable[[dict[str, Any]], None],
                                                            command: str) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(report))
    doc = json.loads(json.dumps(report))
    mutate(doc)
    bad.write_text(json.dumps(doc))
    args = {"check": ["check", str(bad)], "check-baseline": ["check", str(good), "--baseline", str(bad)],
            "diff": ["diff", str(good), str(bad)]}[command]
    line = one_line_error(cli(*args), "bad.json")
    assert "not a commprof analyze report" in line or "not valid JSON" in line


@pytest.mark.parametrize("token", ["NaN", "Infinity", "1e400"])
def test_non_finite_numbers_in_a_report_are_refused(cli: Cli, tmp_path: Path, report: dict[str, Any],
                                                    token: str) -> None:
    text = json.dumps(report).replace('"step_ns": ', f'"step_ns": {token}, "_was": ', 1)
    path = tmp_path / "bad.json"
    path.write_text(text)
    one_line_error(cli("check", str(path)), "bad.json")


# --- record: every output-path problem before the job starts --------------------------------------------


def record(cli: Cli, marker: Path, *options: str) -> Result:
    return cli("record", *options, "--no-analyze", "--no-topology", "--",
               sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')")


def test_record_into_a_dangling_symlink(cli: Cli, tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing" / "target")
    marker = tmp_path / "ran"
    assert "symbolic link" in one_line_error(record(cli, marker, "-o", str(link)), str(link))
    assert not marker.exists()


def test_record_under_a_file(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    marker = tmp_path / "ran"
    line = one_line_error(record(cli, marker, "-o", str(tmp_path / "afile" / "run")), "afile")
    assert "is a file, not a folder" in line
    assert not marker.exists()


def read_only_place(tmp_path: Path) -> Path:
    """A folder this process cannot write: chmod 0o555 for a normal user; /sys (read-only in
    containers) for root, who writes through file modes."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    if os.access("/sys", os.W_OK) and not _cannot_mkdir(Path("/sys")):
        pytest.skip("no read-only folder to test with")
    return Path("/sys")


def _cannot_mkdir(folder: Path) -> bool:
    try:
        (folder / "commprof-probe").mkdir()
    except OSError:
        return True
    (folder / "commprof-probe").rmdir()
    return False


def test_record_into_a_read_only_folder(cli: Cli, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    target = read_only_place(tmp_path) / "run"
    line = one_line_error(record(cli, marker, "-o", str(target)), str(target))
    assert "cannot create the run directory" in line
    assert not marker.exists()


def test_record_default_runs_folder_in_a_read_only_cwd(cli: Cli, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    monkeypatch.chdir(read_only_place(tmp_path))
    line = one_line_error(record(cli, marker), "runs")
    assert "cannot create the run directory" in line
    assert not marker.exists()


def test_a_full_disk_is_not_called_a_kill_during_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from commprof.record import launcher, manifest, rundir
    from commprof.record.rank.config import WindowSettings
    from commprof.record.settings import RecordSettings

    run = rundir.prepare_run_dir(tmp_path / "run", force=False)
    (run / "raw" / "ranks" / "rank-0.json").write_text(json.dumps(
        {"rank": 0, "window": {"status": "warmup", "optimizer_steps": 1}, "files": {}}))
    monkeypatch.setattr(rundir, "disk_free_bytes", lambda path: 1 << 20)
    settings = RecordSettings(output=run, force=False, window=WindowSettings())
    doc = manifest.start(["train.py"], settings.as_manifest(), {})
    result = launcher._finish(run, doc, 0, settings)
    said = " ".join(result.warnings)
    assert "is full (1 MiB free)" in said
    assert "disk full" in said and "killed during the window's warm-up" not in said


# --- NCCL logs and topology dumps ------------------------------------------------------------------------

LOG = REPO / "sample_traces" / "synth_2x8_tp8_dp2" / "raw" / "nccl" / "nccl.gpu-node-00.41000.log"


def load(folder: Path) -> Any:
    from commprof.ingest.nccl_logs import build_tables, load_nccl
    from commprof.nccl import summarize

    run = load_nccl(folder)
    tables = build_tables(run.logs, run.topologies, run.graphs)
    summarize(run, tables)
    return run, tables


def log_folder(tmp_path: Path, name: str, content: bytes) -> Path:
    folder = tmp_path / "nccl-run"
    (folder / "raw" / "nccl").mkdir(parents=True)
    (folder / "raw" / "nccl" / name).write_bytes(content)
    return folder


def test_a_rank_past_int64_is_a_malformed_line_not_a_crash(tmp_path: Path) -> None:
    text = LOG.read_text()
    assert " rank 0 nranks 8 " in text or " rank 0 nRanks 8 " in text
    bad = text.replace(" rank 0 nranks ", " rank 4018446744073709551616 nranks ", 1).replace(
        " rank 0 nRanks ", " rank 99999999999999999999 nRanks ", 1)
    run, tables = load(log_folder(tmp_path, "nccl.log", bad.encode()))
    assert run.logs.stats.skipped.get("malformed", 0) >= 1 or sum(run.logs.stats.skipped.values()) >= 1
    assert tables.nccl_communicators.height > 0


def test_topology_xml_nested_50k_deep_is_skipped_with_a_note(tmp_path: Path) -> None:
    folder = log_folder(tmp_path, "nccl.log", LOG.read_bytes())
    (folder / "raw" / "topology").mkdir()
    (folder / "raw" / "topology" / "topo.xml").write_text(
        '<system version="1">' + "<pci>" * 50_000 + "</pci>" * 50_000 + "</system>")
    run, _ = load(folder)
    assert any("nested deeper than" in s and "topo.xml" in s for s in run.logs.stats.skipped_files)


def test_a_log_whose_first_nccl_line_comes_after_a_megabyte_is_found(tmp_path: Path) -> None:
    noise = ("epoch 1 loss 0.25 lr 3e-4 " * 4 + "\n").encode() * 12_000
    assert len(noise) > 1 << 20
    run, tables = load(log_folder(tmp_path, "train.out", noise + LOG.read_bytes()))
    assert run.inputs.logs and tables.nccl_communicators.height > 0


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])
def test_a_utf16_log_is_read(tmp_path: Path, encoding: str) -> None:
    plain, _ = load(log_folder(tmp_path / "a", "nccl.log", LOG.read_bytes()))
    run, tables = load(log_folder(tmp_path / "b", "nccl.log", LOG.read_text().encode(encoding)))
    assert run.inputs.logs and tables.nccl_communicators.height > 0
    assert sum(run.logs.stats.parsed.values()) == sum(plain.logs.stats.parsed.values())


def test_a_gzipped_utf16_log_is_read(tmp_path: Path) -> None:
    run, tables = load(log_folder(tmp_path, "nccl.log.gz", gzip.compress(LOG.read_text().encode("utf-16"))))
    assert tables.nccl_communicators.height > 0


def test_a_fifo_among_the_logs_is_passed_over(tmp_path: Path) -> None:
    folder = log_folder(tmp_path, "nccl.log", LOG.read_bytes())
    os.mkfifo(folder / "raw" / "nccl" / "stuck.log")
    run, _ = load(folder)
    assert any("stuck.log: a named pipe" in s for s in run.logs.stats.skipped_files)
