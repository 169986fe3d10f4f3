"""The analyze report kept beside the table cache (commprof/report/report_cache.py): a warm run with the same
inputs, options and code answers from it with the same output; any change analyses again."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import commprof
from commprof.cli import main
from commprof.report import report_cache

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "tp2_dp2"


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(SAMPLE, folder)
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMMPROF_REPORT_CACHE", raising=False)
    return folder


def counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """``owner.name`` replaced by itself counting its calls (one item a call)."""
    calls: list[int] = []
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the analysis ran."""
    return counting(monkeypatch, commprof, "analyze")


def analyze(*args: str) -> str:
    result = CliRunner().invoke(main, ["analyze", *args])
    assert result.exit_code == 0, result.output
    return result.output


def reports(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").rglob(f"{report_cache.FOLDER}/*.json"))


def without_clock(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    doc.pop("generated_at")
    return doc


def test_warm_run_answers_from_the_report(run_dir: Path, analyses: list[int], tmp_path: Path) -> None:
    cold = {fmt: analyze("--format", fmt, str(run_dir)) for fmt in ("json", "text", "markdown")}
    assert len(analyses) == 1 and len(reports(tmp_path)) == 1  # one report for every format
    warm = {fmt: analyze("--format", fmt, str(run_dir)) for fmt in ("json", "text", "markdown")}
    assert len(analyses) == 1
    assert warm["text"] == cold["text"] and warm["markdown"] == cold["markdown"]
    assert without_clock(warm["json"]) == without_clock(cold["json"])


@pytest.mark.parametrize("change", ["option", "hta", "ranks", "sidecar", "trace", "manifest", "code", "env"])
def test_any_change_analyses_again(change: str, run_dir: Path, analyses: list[int], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    analyze(str(run_dir))
    args = [str(run_dir)]
    trace = sorted((run_dir / "raw" / "traces").iterdir())[0]
    if change == "option":
        args = ["--top", "3", *args]
    elif change == "hta":
        args = ["--hta-compat", *args]
    elif change == "ranks":
        args = ["--ranks", "0-1", *args]
    elif change == "sidecar":
        (run_dir / "nccl.log").write_text("host:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n", encoding="utf-8")
    elif change == "trace":
        st = trace.stat()
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    elif change == "manifest":
        (run_dir / "notes.txt").write_text("a file the sidecar readers may look at", encoding="utf-8")
    elif change == "code":
        rows = report_cache._code_rows()
        monkeypatch.setattr(report_cache, "_code_rows", lambda: [*rows, "edited.py\x001\x002\x003\x004"])
    elif change == "env":
        monkeypatch.setenv("COMMPROF_SOMETHING", "1")
    analyze(*args)
    assert len(analyses) == 2


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the run was opened (its tables read)."""
    import commprof.cli.analyze as cli_analyze

    return counting(monkeypatch, cli_analyze, "open_request")


def test_an_unchanged_run_is_answered_before_it_is_opened(run_dir: Path, analyses: list[int], opened: list[int],
                                                          tmp_path: Path) -> None:
    cold = analyze("--top", "4", str(run_dir))
    assert (len(analyses), len(opened)) == (1, 1)
    assert len(list((tmp_path / "cache").rglob(f"{report_cache.FOLDER}/{report_cache.QUICK}*"))) == 1
    assert analyze("--top", "4", str(run_dir)) == cold  # the same text, from the quick key
    assert without_clock(analyze("--top", "4", "--format", "json", str(run_dir))) == without_clock(
        analyze("--top", "4", "--format", "json", "--workers", "1", str(run_dir)))  # workers: not in the key
    assert (len(analyses), len(opened)) == (1, 1)
    analyze("--top", "5", str(run_dir))  # another option: opened, analysed
    assert (len(analyses), len(opened)) == (2, 2)


def test_a_run_answered_from_its_tables_is_remembered_for_the_quick_key(run_dir: Path, analyses: list[int],
                                                                        opened: list[int], tmp_path: Path) -> None:
    first = analyze(str(run_dir))
    for quick in (tmp_path / "cache").rglob(f"{report_cache.FOLDER}/{report_cache.QUICK}*"):
        quick.unlink()  # as after a commprof that kept no quick keys: the report is found by opening the run
    assert analyze(str(run_dir)) == first and (len(analyses), len(opened)) == (1, 2)
    assert analyze(str(run_dir)) == first and (len(analyses), len(opened)) == (1, 2)


@pytest.mark.parametrize("damage", ["report gone", "pointer garbage", "pointer empty"])
def test_a_quick_key_whose_report_is_gone_opens_the_run(damage: str, run_dir: Path, analyses: list[int],
                                                        opened: list[int], tmp_path: Path) -> None:
    first = analyze(str(run_dir))
    (quick,) = (tmp_path / "cache").rglob(f"{report_cache.FOLDER}/{report_cache.QUICK}*")
    if damage == "report gone":
        reports(tmp_path)[0].unlink()
    else:
        quick.write_text("../../../etc/passwd" if damage == "pointer garbage" else "", encoding="utf-8")
    assert analyze(str(run_dir)) == first and len(opened) == 2
    assert analyze(str(run_dir)) == first and len(opened) == 2  # remembered again


def test_off_switch(run_dir: Path, analyses: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMPROF_REPORT_CACHE", "0")
    first = analyze(str(run_dir))
    assert analyze(str(run_dir)) == first
    assert len(analyses) == 2 and reports(tmp_path) == []


def test_a_damaged_report_is_analysed_again(run_dir: Path, analyses: list[int], tmp_path: Path) -> None:
    first = analyze(str(run_dir))
    for broken in ("", "{not json", "[1, 2]", '{"no": "clock"}'):
        reports(tmp_path)[0].write_text(broken, encoding="utf-8")
        assert analyze(str(run_dir)) == first
    assert len(analyses) == 5
    assert analyze(str(run_dir)) == first and len(analyses) == 5  # rewritten by the last one


def test_at_most_keep_reports(run_dir: Path, analyses: list[int], tmp_path: Path) -> None:
    for top in range(1, report_cache.KEEP + 4):
        analyze("--top", str(top), str(run_dir))
    assert len(reports(tmp_path)) == report_cache.KEEP


def test_a_cache_that_cannot_be_written_is_no_error(run_dir: Path, analyses: list[int], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("commprof.safe_write.atomic_write_text", refuse)
    first = analyze(str(run_dir))
    assert analyze(str(run_dir)) == first
    assert len(analyses) == 2 and reports(tmp_path) == []


def test_one_trace_file(tmp_path: Path, analyses: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    source = sorted((SAMPLE / "raw" / "traces").iterdir())[0]
    trace = tmp_path / source.name
    shutil.copy(source, trace)
    first = analyze(str(trace))
    assert analyze(str(trace)) == first and len(analyses) == 1
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert analyze(str(trace)) == first and len(analyses) == 2


def test_the_key_parts_read_ahead_give_the_same_key(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """report_cache.prepare (called while the prefetch child reads): the next key is the one key() makes alone,
    the parts are used once, and a prepare that could not read the code leaves key() to read it."""
    from commprof.analyzers.settings import AnalysisSettings

    run = commprof.open_run(run_dir)
    alone = report_cache.key(run, AnalysisSettings(), {})
    report_cache.prepare()
    assert set(report_cache._PREPARED) == {"code", "numpy"}
    assert report_cache.key(run, AnalysisSettings(), {}) == alone
    assert not report_cache._PREPARED

    def unreadable() -> list[str]:
        raise OSError("gone")

    monkeypatch.setattr(report_cache, "_code_rows", unreadable)
    report_cache.prepare()
    assert not report_cache._PREPARED
    assert report_cache.key(run, AnalysisSettings(), {}) is None  # key() met the error itself
