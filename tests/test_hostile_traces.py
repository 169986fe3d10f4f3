"""Hostile and broken traces (issue 15): every field is checked where it is read, damaged text is
recovered in one pass, a corrupt middle is an error unless a partial result is asked for, implausible
times are skipped with counts, only regular files are opened, and a run with nothing to analyze fails.

Linearity is asserted by counting the bytes handed to the decoder, not by timing (these machines are
noisy): one bad byte must not make the reader decode the text again from the start."""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.ingest.kineto import stream
from commprof.ingest.kineto.stream import stream_events

Cli = Callable[..., Result]


def analyze(cli: Cli, path: Path, *extra: str) -> Result:
    return cli("analyze", str(path), "--format", "json", "-j", "1", *extra)


def one_line_error(result: Result, *names: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exc_info)
    assert isinstance(result.exception, SystemExit), result.exc_info
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commprof: error: "), result.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def report_of(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, (result.output, result.exc_info)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def read_trace(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


def plain_rank(sample_run: Path, rank: int = 1, indent: int | None = None) -> tuple[Path, bytes]:
    """rank-N of the sample run as plain JSON (one event per line with ``indent``), the .gz removed."""
    gz = sample_run / f"rank-{rank}.json.gz"
    text = json.dumps(read_trace(gz), indent=indent).encode()
    gz.unlink()
    path = sample_run / f"rank-{rank}.json"
    path.write_bytes(text)
    return path, text


def event_count(path: Path) -> int:
    seen = [0]
    stream_events(path, lambda events: seen.__setitem__(0, seen[0] + len(events)))
    return seen[0]


@pytest.fixture
def decoded_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes of text handed to the fast decoder, per call."""
    calls: list[int] = []
    original = stream._decode_array

    def counting(data: bytearray, open_at: int, close_at: int, typed: bool = False) -> Any:
        calls.append(close_at - open_at)
        return original(data, open_at, close_at, typed)

    monkeypatch.setattr(stream, "_decode_array", counting)
    return calls


# --- a corrupt middle: an error unless --allow-partial; recovery in one pass ----------------------------


def test_one_bad_byte_in_the_middle_is_an_error_naming_the_file_and_byte(cli: Cli, sample_run: Path) -> None:
    path, text = plain_rank(sample_run)
    at = text.index(b'"ph"', len(text) // 3)
    path.write_bytes(text[:at] + b"#" + text[at + 1 :])
    line = one_line_error(analyze(cli, sample_run), "rank-1.json")
    assert "corrupt trace text at byte" in line and "--allow-partial" in line


def test_allow_partial_keeps_the_events_on_both_sides_of_the_damage(cli: Cli, sample_run: Path) -> None:
    path, text = plain_rank(sample_run)
    full = event_count(path)
    at = text.index(b'"ph"', len(text) // 3)
    path.write_bytes(text[:at] + b"#" + text[at + 1 :])
    kept = event_count(path)
    assert full - 3 <= kept < full  # the damaged event alone is lost, not everything after it
    report = report_of(analyze(cli, sample_run, "--allow-partial"))
    warned = [w for w in report["warnings"] if "rank-1.json" in w and "corrupt" in w]
    assert warned and "skipped" in warned[0] and "--allow-partial" in warned[0], report["warnings"]
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]


def test_a_corrupt_byte_is_decoded_a_bounded_number_of_times(sample_run: Path, decoded_bytes: list[int]) -> None:
    """The old salvage re-decoded from the start at every event boundary (57 s for 10 MB)."""
    path, text = plain_rank(sample_run)
    big = text.replace(b'"traceEvents": [', b'"traceEvents": [' + b'{"ph": "i", "name": "pad", "ts": 1}, ' * 150_000)
    at = len(big) // 10
    at = big.index(b'"ph"', at)
    path.write_bytes(big[:at] + b"\x01" + big[at + 1 :])
    assert event_count(path) > 150_000
    assert sum(decoded_bytes) < 3 * len(big), (sum(decoded_bytes), len(big))


@pytest.mark.parametrize("token", [b"NaN", b"-Infinity"])
def test_non_json_numbers_are_read_as_missing_not_as_the_end_of_the_trace(
    cli: Cli, sample_run: Path, token: bytes
) -> None:
    """Python's json writes NaN; the event is kept with that value missing, the rest of the file too."""
    path, text = plain_rank(sample_run)
    full = event_count(path)
    at = text.index(b'"dur": ', len(text) // 2) + len(b'"dur": ')
    end = text.index(b",", at)
    path.write_bytes(text[:at] + token + text[end:])
    assert event_count(path) == full
    report = report_of(analyze(cli, sample_run))
    assert any("NaN/Infinity" in w and "rank-1.json" in w for w in report["warnings"]), report["warnings"]


def test_a_lone_surrogate_escape_costs_one_value_not_the_rest(cli: Cli, sample_run: Path) -> None:
    path, text = plain_rank(sample_run)
    full = event_count(path)
    at = text.index(b'"name": "', len(text) // 2) + len(b'"name": "')
    path.write_bytes(text[:at] + b"\\ud800" + text[at:])
    assert event_count(path) == full
    report_of(analyze(cli, sample_run))


def test_json_nested_ten_thousand_deep_is_damage_not_a_recursion_error(cli: Cli, sample_run: Path) -> None:
    path, text = plain_rank(sample_run)
    at = text.index(b'"args": ', len(text) // 2) + len(b'"args": ')
    path.write_bytes(text[:at] + b"[" * 10_000 + b"]" * 10_000 + b', "x": ' + text[at:])
    one_line_error(analyze(cli, sample_run), "rank-1.json")
    assert report_of(analyze(cli, sample_run, "--allow-partial"))["ranks"]


def test_a_gigabyte_style_whitespace_run_is_skipped_in_bulk(sample_run: Path, decoded_bytes: list[int]) -> None:
    """64 MB of spaces between two events, gzipped: the blank blocks are never held or walked."""
    path, text = plain_rank(sample_run)
    at = text.index(b"}, {", len(text) // 2) + 2
    gz = path.with_name("rank-1.json.gz")
    with gzip.open(gz, "wb", compresslevel=1) as out:
        out.write(text[:at])
        block = b" " * (4 << 20)
        for _ in range(16):
            out.write(block)
        out.write(text[at:])
    path.unlink()
    full = len(json.loads(text)["traceEvents"])
    assert event_count(gz) == full
    assert max(decoded_bytes) < 8 << 20  # never a piece holding the blank run


def test_truncation_at_the_end_stays_a_warning(cli: Cli, sample_run: Path) -> None:
    path, text = plain_rank(sample_run)
    path.write_bytes(text[: int(len(text) * 0.7)])
    report = report_of(analyze(cli, sample_run))
    assert any("ends early" in w and "rank-1.json" in w for w in report["warnings"]), report["warnings"]


# --- fields of the wrong type or range: a skipped event counted, or a field ignored with a warning --------

DEVICE_EVENT = {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7,
                "ts": 1_700_000_000_000_100, "dur": 50, "args": {"stream": 7, "device": 0, "correlation": 11}}


def gpu_trace(tmp_path: Path, change: Callable[[dict[str, Any]], None], n: int = 40) -> Path:
    """A small GPU trace: step marks, a launch per kernel, compute and NCCL kernels."""
    t0 = 1_700_000_000_000_000
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}", "pid": 1,
                                     "tid": 1, "ts": t0 + step * 1000, "dur": 900} for step in range(3)]
    for i in range(n):
        corr = 100 + i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t0 + i * 70, "dur": 5, "args": {"correlation": corr}})
        name = "ncclKernel_AllReduce_RING_LL_Sum_float" if i % 3 == 0 else "volta_sgemm_128x64_nn"
        events.append({**DEVICE_EVENT, "name": name, "ts": t0 + i * 70 + 10, "dur": 40,
                       "args": {"stream": 7, "device": 0, "correlation": corr}})
    trace = {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": events}
    change(trace)
    folder = tmp_path / "gpu"
    folder.mkdir(exist_ok=True)
    (folder / "rank-0.json").write_text(json.dumps(trace))
    return folder


def kernels(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]


def set_kernel(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(trace: dict[str, Any]) -> None:
        target = kernels(trace)[3]
        if key.startswith("args."):
            target["args"][key[5:]] = value
        else:
            target[key] = value
    return change


def set_header(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(trace: dict[str, Any]) -> None:
        if key.startswith("dist."):
            trace["distributedInfo"][key[5:]] = value
        else:
            trace[key] = value
    return change


def set_step_name(trace: dict[str, Any]) -> None:
    trace["traceEvents"][0]["name"] = "ProfilerStep#" + "9" * 30


def set_nelems(trace: dict[str, Any]) -> None:
    trace["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                                 "ts": 1_700_000_000_000_001, "dur": 1,
                                 "args": {"External id": 5, "In msg nelems": 10**30, "dtype": "Float",
                                          "Group size": 1e300, "Seq": "nan", "Process Group Name": "0"}})


HOSTILE = {
    "ts-text": set_kernel("ts", "abc"),
    "ts-1e308": set_kernel("ts", 1e308),
    "dur-400-digits": set_kernel("dur", 10**400),
    "stream-nan": set_kernel("args.stream", "nan"),
    "device-inf": set_kernel("args.device", "inf"),
    "correlation-1e300": set_kernel("args.correlation", 1e300),
    "input-dims-null": set_kernel("args.Input Dims", [[None]]),
    "base-1e300": set_header("baseTimeNanoseconds", 1e300),
    "rank-1e300": set_header("dist.rank", 1e300),
    "world-1e300": set_header("dist.world_size", 1e300),
    "rank-text": set_header("dist.rank", "abc"),
    "step-30-digits": set_step_name,
    "nelems-past-int64": set_nelems,
}


@pytest.mark.parametrize("change", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_field_never_breaks_the_analysis(cli: Cli, tmp_path: Path,
                                                   change: Callable[[dict[str, Any]], None]) -> None:
    """Skipped with a warning, or read as missing; never a crash (nor one the runner reports as a
    skipped file), never a wrapped-around time."""
    folder = gpu_trace(tmp_path, change)
    report = report_of(analyze(cli, folder))
    assert report["ranks"]
    assert not any(re.search(r"\b[A-Z]\w*Error: ", w) for w in report["warnings"]), report["warnings"]
    for row in report["ranks"]:
        assert 0 <= row["step_ns"] < 10**12 and row["idle_ns"] >= 0, row


def test_an_unreadable_ts_is_counted(cli: Cli, tmp_path: Path) -> None:
    report = report_of(analyze(cli, gpu_trace(tmp_path, set_kernel("ts", "abc"))))
    assert any("skipped 1 device events whose ts or dur is not a number" in w for w in report["warnings"])


def test_ts_zero_among_epoch_timestamps_is_skipped_not_a_56_year_step(cli: Cli, tmp_path: Path) -> None:
    def zero(trace: dict[str, Any]) -> None:
        kernels(trace)[5]["ts"] = 0
        trace["traceEvents"][1]["ts"] = 0  # a step mark too

    report = report_of(analyze(cli, gpu_trace(tmp_path, zero)))
    assert any("far outside the trace's span" in w and "1 ×" in w for w in report["warnings"]), report["warnings"]
    assert all(r["step_ns"] < 10**9 for r in report["ranks"])


def test_negative_durations_are_skipped_with_a_count(cli: Cli, tmp_path: Path) -> None:
    def negative(trace: dict[str, Any]) -> None:
        for k in kernels(trace)[:2]:
            k["dur"] = -30

    report = report_of(analyze(cli, gpu_trace(tmp_path, negative)))
    assert any("2 × negative duration" in w for w in report["warnings"]), report["warnings"]
    assert all(r["idle_ns"] >= 0 for r in report["ranks"])


def test_a_wrongly_typed_event_is_skipped_and_counted_not_the_whole_trace(cli: Cli, tmp_path: Path) -> None:
    report = report_of(analyze(cli, gpu_trace(tmp_path, set_kernel("ph", 5))))
    assert any("events of the wrong shape" in w and "1 ×" in w for w in report["warnings"]), report["warnings"]


# --- nothing to analyze ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["analyze", "check"])
def test_a_run_with_no_usable_event_is_exit_2(cli: Cli, tmp_path: Path, command: str) -> None:
    folder = tmp_path / "empty-events"
    folder.mkdir()
    trace = {"distributedInfo": {"rank": 0, "world_size": 1},
             "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "abc", "dur": "x"}] * 3}
    (folder / "rank-0.json").write_text(json.dumps(trace))
    line = one_line_error(cli(command, str(folder), "-j", "1"))
    assert "nothing to analyze" in line


# --- only regular files ---------------------------------------------------------------------------------


def test_fifo_and_dangling_and_looping_links_are_passed_over(cli: Cli, sample_run: Path) -> None:
    os.mkfifo(sample_run / "rank-9.json")
    (sample_run / "rank-8.json").symlink_to(sample_run / "nowhere.json")
    (sample_run / "loop-a.json").symlink_to(sample_run / "loop-b.json")
    (sample_run / "loop-b.json").symlink_to(sample_run / "loop-a.json")
    report = report_of(analyze(cli, sample_run))
    said = " ".join(report["warnings"])
    assert "rank-9.json: a named pipe (FIFO)" in said
    assert "rank-8.json: symbolic link that leads nowhere" in said
    assert "loop-a.json" in said and "loop-b.json" in said
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]


def test_a_lone_fifo_is_one_line_error(cli: Cli, tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert "named pipe" in one_line_error(analyze(cli, fifo), "trace.json")


def test_an_unreadable_file_is_reported(cli: Cli, sample_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Root reads anything, so permission is simulated at the check.)"""
    from commprof.ingest import discover

    real = os.access
    monkeypatch.setattr(discover.os, "access", lambda p, mode: "rank-2" not in str(p) and real(p, mode))
    report = report_of(analyze(cli, sample_run))
    assert any("rank-2.json.gz: cannot be read (permission denied)" in w for w in report["warnings"])


# --- manifests: fields checked, notes about dead ranks surface -------------------------------------------


def test_manifest_notes_about_dead_ranks_are_analyze_warnings(cli: Cli, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "synth"
    shutil.copytree(Path(__file__).parents[1] / "sample_traces" / "synth_2x8_tp8_dp2", run,
                    ignore=shutil.ignore_patterns("tables"))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["notes"] = ["NCCL_DEBUG kept as the user set it",
                         "no trace for rank 5: the rank was killed while recording"]
    manifest["status"], manifest["exit_code"], manifest["exit_signal"] = "failed", 137, "SIGKILL"
    (run / "manifest.json").write_text(json.dumps(manifest))
    report = report_of(analyze(cli, run))
    assert "recording: no trace for rank 5: the rank was killed while recording" in report["warnings"]
    assert any("exit code 137, SIGKILL" in w for w in report["warnings"])
    assert not any("kept as the user set it" in w for w in report["warnings"])


@pytest.mark.parametrize("ranks", ["not a list", [{"rank": "x"}, 5, {"rank": 0, "host": 7, "pid": 1e300}]])
def test_malformed_manifest_fields_are_ignored_with_a_warning(cli: Cli, tmp_path: Path, ranks: Any) -> None:
    import shutil

    run = tmp_path / "synth"
    shutil.copytree(Path(__file__).parents[1] / "sample_traces" / "synth_2x8_tp8_dp2", run,
                    ignore=shutil.ignore_patterns("tables"))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(ranks=ranks, world_size="sixteen", notes={"a": 1})
    (run / "manifest.json").write_text(json.dumps(manifest))
    report = report_of(analyze(cli, run))
    said = " ".join(report["warnings"])
    assert "manifest.json: ignored" in said and "world_size 'sixteen'" in said


def test_malformed_rank_sidecars_do_not_break_ingest(cli: Cli, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "synth"
    shutil.copytree(Path(__file__).parents[1] / "sample_traces" / "synth_2x8_tp8_dp2", run,
                    ignore=shutil.ignore_patterns("tables"))
    (run / "raw" / "ranks" / "rank-0.json").write_text('{"rank": 0, "process_groups": "x"}')
    (run / "raw" / "ranks" / "rank-1.json").write_text('{"rank": 1, "process_groups": [{"name": 1, "ranks": '
                                                       '"[0, 99999999999999999999]", "worker_tids": ["a"]}]}')
    (run / "raw" / "ranks" / "rank-2.json").write_text("[" * 100_000)
    report_of(analyze(cli, run))


# --- the cache directory --------------------------------------------------------------------------------


def test_commprof_cache_dir_is_honoured_for_a_writable_folder(sample_run: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import commprof

    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "mine"))
    run = commprof.open_run(sample_run, jobs=1)
    assert run.ingested.cache.is_relative_to(tmp_path / "mine")
    assert not (sample_run / "tables").exists()


@pytest.mark.parametrize("dims", [[[None]], [["abc"]], [[10**30, 10**30]], "x", [[-1, 5]], [[[1e300]]]],
                         ids=["null", "text", "past-int64", "not-a-list", "negative", "float"])
def test_gloo_input_shapes_of_the_wrong_kind_leave_the_size_unknown(cli: Cli, sample_run: Path, dims: Any) -> None:
    """Gloo ops carry no byte counts, only shapes: a shape that is not one gives an unknown size."""
    for gz in sample_run.glob("rank-*.json.gz"):
        trace = read_trace(gz)
        for event in trace["traceEvents"]:
            if str(event.get("name", "")).startswith("gloo:"):
                event.setdefault("args", {})["Input Dims"] = dims
        gz.write_bytes(gzip.compress(json.dumps(trace).encode()))
    report = report_of(analyze(cli, sample_run))
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert not any("Error: " in w for w in report["warnings"]), report["warnings"]
