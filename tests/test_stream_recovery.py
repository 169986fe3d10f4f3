"""The one-pass recovery of tests/test_hostile_traces.py, property-tested with tiny pieces and read
blocks so that every path of the piecewise reader runs: events split across blocks, event boundaries
inside strings (``"},{"`` in a name), damage spanning a piece's cut. Every intact event is delivered
exactly once, in order; damage costs the damaged event (and at most its neighbours), never a duplicate."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commprof.errors import TruncatedTraceError
from commprof.ingest.kineto import stream


@pytest.fixture(autouse=True)
def tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "READ_BLOCK", 97)
    monkeypatch.setattr(stream, "TEXT_BLOCK", 89)
    monkeypatch.setattr(stream, "PIECE_BYTES", 300)


NAMES = st.sampled_from(["", '},{"ph": "X"}', "}, {", "x" * 400, "a,b", "]}", "ü"])


def trace_text(suffixes: list[str], indent: int | None) -> tuple[bytes, list[str]]:
    # fixed-width ids: a damaged name cut short ("e13" -> "e1") cannot read as another event's name
    names = [f"e{i:03d}{s}" for i, s in enumerate(suffixes)]
    events = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 1}
              for i, n in enumerate(names)]
    doc = {"distributedInfo": {"rank": 0}, "traceEvents": events, "traceName": "t"}
    return json.dumps(doc, indent=indent).encode(), names


def read(path: Path) -> tuple[list[str], stream.StreamResult]:
    got: list[str] = []
    result = stream.stream_events(path, lambda events: got.extend(str(e.name) for e in events))
    return got, result


SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(st.lists(NAMES, min_size=1, max_size=40), st.sampled_from([None, 1]), st.booleans())
def test_clean_text_gives_every_event_once(tmp_path_factory: pytest.TempPathFactory, suffixes: list[str],
                                           indent: int | None, zipped: bool) -> None:
    text, names = trace_text(suffixes, indent)
    path = tmp_path_factory.mktemp("s") / ("t.json.gz" if zipped else "t.json")
    path.write_bytes(gzip.compress(text) if zipped else text)
    got, result = read(path)
    assert got == names
    assert result.corrupt is None and not result.warnings
    assert result.header.distributedInfo is not None and result.header.distributedInfo.rank == 0


@SETTINGS
@given(st.lists(NAMES, min_size=3, max_size=40), st.sampled_from([None, 1]), st.data())
def test_damage_costs_its_event_and_never_duplicates(tmp_path_factory: pytest.TempPathFactory,
                                                     suffixes: list[str], indent: int | None,
                                                     data: st.DataObject) -> None:
    text, names = trace_text(suffixes, indent)
    k = data.draw(st.integers(0, len(names) - 1))
    start = text.index(f'"e{k:03d}'.encode())  # inside event k's name
    at = start + data.draw(st.integers(0, 3))
    bad = data.draw(st.sampled_from([b"#", b"\x00", b'"', b"{", b"[" * 3000]))
    path = tmp_path_factory.mktemp("s") / "t.json"
    path.write_bytes(text[:at] + bad + text[at + 1 :])
    got, result = read(path)
    assert len(got) == len(set(got)), got  # never a duplicate
    changed = [g for g in got if g not in names]  # the byte landed in a name and left valid JSON
    assert len(changed) <= 1, changed
    kept = [g for g in got if g in names]
    assert kept == [n for n in names if n in kept]  # in order
    lost = set(names) - set(got) - ({names[k]} if changed else set())
    assert lost <= {names[j] for j in (k - 1, k, k + 1) if 0 <= j < len(names)}, (lost, k)
    if lost:
        assert result.corrupt is not None and "corrupt trace text" in result.corrupt


@SETTINGS
@given(st.lists(NAMES, min_size=2, max_size=30), st.data())
def test_a_cut_keeps_every_event_before_it(tmp_path_factory: pytest.TempPathFactory, suffixes: list[str],
                                           data: st.DataObject) -> None:
    text, names = trace_text(suffixes, None)
    first = text.index(b'{"ph"')
    cut = data.draw(st.integers(first, len(text) - 3))
    path = tmp_path_factory.mktemp("s") / "t.json"
    path.write_bytes(text[:cut])
    ends = [text.index(b'"dur": 1}', text.index(json.dumps(n).encode())) + len(b'"dur": 1}') for n in names]
    complete = [n for n, end in zip(names, ends, strict=True) if end <= cut]
    try:
        got, result = read(path)
    except TruncatedTraceError:
        assert not complete  # cut inside the first event
        return
    assert got == complete
    assert result.corrupt is None and any("ends early" in w for w in result.warnings)
