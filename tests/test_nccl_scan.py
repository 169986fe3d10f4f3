"""The marker scan of ``nccl_logs.scan`` (issue 24): ``_markers_at`` finds, in one pass, a start on every line that
holds a marker, whether the piece is UTF-8 (polars) or not (``bytes.find``); and files read through it give
what the line-by-line pass gives at the edges: markers at the file's two ends, pieces cut next to a marker,
no trailing newline, CRLF and lone CR, prefixes, bytes that are not UTF-8, an empty file, and markers inside
application text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commprof.ingest.nccl_logs import scan
from tests.test_nccl_prefilter import _parse, _same

NCCL = b"node01:1234:1240 [3] NCCL INFO Using network IB"
WARN = b"node01:1234:1240 [3] NCCL WARN Call to ibv_reg_mr failed"


def _lines_with_marker(b: bytes) -> set[int]:
    """Line numbers (universal newlines) of the lines that hold a marker, found the slow way."""
    out = set()
    for no, line in enumerate(b.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")):
        if any(m in line for m in scan.MARKERS):
            out.add(no)
    return out


def _lines_of_hits(b: bytes, hits: list[int]) -> set[int]:
    norm = b.replace(b"\r\n", b"\n ").replace(b"\r", b"\n")  # same length: positions stay put
    return {norm.count(b"\n", 0, at) for at in hits}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"NCCL ", b"NCCL", b"NVIDIA", b"GeForce", b"Tesla", b"x", b" ", b"\n", b"\r\n",
                                 b"\r", b"\xff", b"\xe2\x96\x88", b"\xc2", b"NCC", b"L "]), max_size=40))
def test_hits_mark_every_line_with_a_marker(parts: list[bytes]) -> None:
    b = b"".join(parts)
    hits = scan._markers_at(b)
    assert hits == sorted(hits)
    for at in hits:
        assert any(b.startswith(m, at) for m in scan.MARKERS)
    assert _lines_of_hits(b, hits) == _lines_with_marker(b)


def test_hits_utf8_and_not_agree() -> None:
    text = "caf\u00e9 NCCL INFO x \u2588\u2588 NVIDIA Tesla\nGeForce NCCL NCCL \n".encode()
    utf8 = scan._markers_at(text)
    bad = scan._markers_at(text + b"\xff")  # the bytes.find path
    assert utf8 == bad
    assert utf8 == [6, 25, 32, 38, 46, 51]  # NCCL, NVIDIA, Tesla, GeForce, NCCL, NCCL (bytes, not characters)


def test_hits_empty() -> None:
    assert scan._markers_at(b"") == []


@pytest.fixture(params=[(1 << 22, 2048), (64, 4), (7, 100_000), (1, 1)], ids=["default", "small", "tiny", "bytes"])
def sizes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    piece, dense = request.param
    monkeypatch.setattr(scan, "PIECE_BYTES", piece)
    monkeypatch.setattr(scan, "DENSE_BYTES", dense)


APP = b"[rank3]:2026-12-04 02:21:58,123 INFO train.py:88 step 10 loss 2.3\n" * 50


@pytest.mark.parametrize(
    "data",
    [
        b"",
        NCCL,  # one line, no break
        NCCL + b"\n",
        NCCL + b"\n" + APP + WARN,  # markers at the first byte and in the last line, without its break
        APP + NCCL + b"\r\n" + APP + WARN + b"\r\n",
        APP.replace(b"\n", b"\r\n") + b"[rank3]:" + NCCL + b"\r" + APP.replace(b"\n", b"\r") + b"pod-7 | " + WARN,
        APP + b"\xff\xfe " + NCCL + b" \xc2\n" + APP + b"\xe2\x80" + WARN + b"\n",  # not UTF-8
        APP + b"export NCCL_DEBUG=INFO; NCCL version 2.19.3+cuda12.3 NVIDIA H100 Tesla\n" + APP,  # markers in app text
        APP + b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\n" + b"step NCCL NCCL NCCL \n" * 3 + APP,
        (b"x" * 61 + b"\n" + NCCL + b"\n") * 20,  # with 64-byte pieces, markers sit at every cut
        b"\n\n \t\n" + NCCL,
    ],
    ids=lambda d: str(len(d)),
)
def test_edges_read_as_the_line_pass(data: bytes, sizes: None, tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(data)
    _same(path)


def test_marker_in_last_line_counts(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(APP + WARN)
    summary, warns, _ = _parse(path, True)
    assert [w["line_no"] for w in warns] == [51]
    assert summary["parse_stats"]["lines_total"] == 51


def test_dense_head_is_decoded_whole() -> None:
    dense = (NCCL + b"\n") * 2000
    assert scan._hits(dense) is None
    assert scan._hits(APP * 100 + dense) == scan._markers_at(APP * 100 + dense)  # sparse head: positions


@pytest.mark.parametrize("tail", [APP * 2000, APP * 2000 + WARN, b"\r\n".join([NCCL] * 3) + APP * 2000])
def test_dense_head_then_application_text(tail: bytes, tmp_path: Path) -> None:
    """The first piece of a job's stdout: NCCL's init lines, then megabytes of other output."""
    path = tmp_path / "job.out"
    path.write_bytes((NCCL + b"\n") * 400 + tail)
    _same(path)
