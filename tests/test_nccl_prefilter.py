"""The byte-level prefilter (``nccl_logs.scan``, issue 24) reads a file exactly as the line-by-line text
pass does: the same records, tables, warnings, line numbers and counts of blank and foreign lines, whatever
the line breaks (\\n, \\r\\n, lone \\r), the whitespace (Unicode's too), bytes that are not UTF-8 or a
last line without a break; and whether a piece of the file is sparse in NCCL lines or dense."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commprof.ingest.nccl_logs import LogParser, NcclInputs, NcclRun, build_tables, scan
from commprof.nccl import summarize

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
NCCL_LINES = sorted({line for p in sorted(FIXTURES.rglob("*.log")) for line in p.read_text().splitlines()})[::7]
FOREIGN = [
    "[rank3]:2026-12-04 02:21:58,123 INFO train.py:88 step 10 loss 2.3",
    '  File "/opt/torch/nn/module.py", line 1501, in _call_impl',
    "Epoch 1: 45%|████▌     | 450/1000 [00:10<00:12, 3.2it/s]",
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)",
    "#  Rank  1 Group  0 Pid  1234 on  node02 device  0 [0x07] Tesla V100-SXM2-16GB",
    "NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=eth0",
    "NCCL version 2.19.3+cuda12.3",
    "caf\xe9 \u00a9 \u2014 done",
]
BLANKS = ["", " ", "\t \x0b", "\x1c\x1f", "\u00a0", "\u3000 \u2028", "\x85", " \u200a\t"]
BREAKS = ["\n", "\n", "\n", "\r\n", "\r"]
ODD_BYTES = [b"\xff", b"\xc2", b"\xc2 \xa0", b"\xe2\x80", b"\x00"]


def _parse(path: Path, prefilter: bool) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, pl.DataFrame]]:
    parser = LogParser()
    if not prefilter:  # every file line by line through the text decoder, as before the prefilter
        parser._parse_utf8 = lambda *_: False  # type: ignore[method-assign]
    parser.parse_file(path)
    logs = parser.finish()
    tables = build_tables(logs)
    summary = summarize(NcclRun(NcclInputs(path.parent), logs, [], []), tables)
    frames = {k: v for k, v in vars(tables).items() if isinstance(v, pl.DataFrame)}
    return summary, [dataclasses.asdict(w) for w in logs.warns], frames


def _same(path: Path) -> None:
    new, old = _parse(path, True), _parse(path, False)
    assert new[0] == old[0]
    assert new[1] == old[1]
    for name, frame in old[2].items():
        assert new[2][name].equals(frame, null_equal=True), name


@st.composite
def log_bytes(draw: st.DrawFn) -> bytes:
    out = []
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(["nccl", "nccl", "foreign", "foreign", "foreign", "blank", "odd", "run"]))
        if kind == "nccl":
            text = draw(st.sampled_from(NCCL_LINES))
            if draw(st.booleans()):
                text = draw(st.sampled_from(["[rank3]:", "pod-7 | ", "2026-12-04T02:00:00Z "])) + text
            line = text.encode()
        elif kind == "foreign":
            line = draw(st.sampled_from(FOREIGN)).encode()
        elif kind == "blank":
            line = draw(st.sampled_from(BLANKS)).encode()
        elif kind == "odd":
            cut = draw(st.sampled_from(FOREIGN)).encode()[: draw(st.integers(0, 20))]
            line = cut + draw(st.sampled_from(ODD_BYTES))
        else:  # a long stretch of application output, for the counted (not decoded) path
            body = "".join(draw(st.sampled_from(FOREIGN + BLANKS)) + draw(st.sampled_from(BREAKS)) for _ in range(8))
            line = (body * draw(st.integers(1, 40))).encode()
        out.append(line + draw(st.sampled_from(BREAKS)).encode())
    data = b"".join(out)
    return data[: len(data) - draw(st.integers(0, 3))] if data else data  # a cut last line too


@pytest.fixture(params=[(1 << 22, 2048, 1 << 16), (300, 4, 64), (97, 100_000, 1)], ids=["default", "small", "tiny"])
def sizes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    piece, dense, numpy_bytes = request.param
    monkeypatch.setattr(scan, "PIECE_BYTES", piece)
    monkeypatch.setattr(scan, "DENSE_BYTES", dense)
    monkeypatch.setattr(scan, "NUMPY_BYTES", numpy_bytes)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=log_bytes())
def test_prefilter_reads_what_the_line_pass_reads(data: bytes, sizes: None, tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(data)
    _same(path)


@pytest.mark.parametrize("log", sorted(p for p in FIXTURES.rglob("*") if p.is_file() and "." not in p.name
                                       or p.suffix == ".log"), ids=lambda p: p.name)
def test_prefilter_on_fixtures(log: Path) -> None:
    _same(log)


def test_blank_lines_counted_without_decoding(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    noise = "x\n \t\n\u3000\r\n\n  y\r\r" * 20_000  # 6 lines: x, 3 blank, "  y", 1 blank
    path.write_bytes(("h:1:1 [0] NCCL INFO NCCL version 2.19.3\n" + noise + "h:1:1 [0] NCCL WARN bad\n").encode())
    summary, warns, _ = _parse(path, True)
    stats = summary["parse_stats"]
    assert stats["lines_total"] == 2 + 20_000 * 6
    assert stats["skipped"] == {"empty": 20_000 * 4, "foreign": 20_000 * 2}
    assert warns[0]["line_no"] == 2 + 20_000 * 6
    _same(path)


def test_whitespace_is_what_strip_removes() -> None:
    every = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()} - {"\r", "\n"}
    assert set(scan.WHITESPACE) == every
