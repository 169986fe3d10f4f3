"""The Kineto reader's fast paths give what the plain ones give (issue 24): the typed decode of X / M events
with their args (decode.TYPED_EVENT, falling back to list[Event] for a piece it rejects), zlib-ng's inflate
(falling back to zlib on a corrupt or cut stream), and the polars path for ``digits.ddd`` times. Each is
compared with the path it replaces on events of every kind and args of odd types, whole and cut short."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commprof.errors import InputError, TruncatedTraceError
from commprof.ingest.common import exact_time
from commprof.ingest.kineto import reader, stream
from commprof.ingest.kineto.decode import TYPED_EVENT, EventM, EventX

SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
REAL = Path(__file__).resolve().parents[2] / "shared" / "real_traces" / "hta"


def _base_events() -> list[dict[str, Any]]:
    """One event of each kind a Kineto trace holds, in the key order Kineto writes."""
    return [
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 7, "tid": 7, "args": {"name": "main"}},
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 7, "tid": 7, "ts": 1000, "dur": 900,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1001.5, "dur": 10.25,
         "args": {"External id": 2, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 7, "ts": 1100, "dur": 5,
         "args": {"External id": 3, "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                  "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Group size": 2,
                  "Seq": 4}},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 7, "tid": 7, "ts": 1099, "dur": 8,
         "args": {"External id": 3, "Input Dims": [[[1024]]], "Input type": ["TensorList"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": 1102.125, "dur": 4,
         "args": {"External id": 3, "cbid": 211, "correlation": 11}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 7, "tid": 7, "ts": 1150, "dur": 4,
         "args": {"correlation": 12}},
        {"ph": "X", "cat": "kernel", "pid": 0,
         "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "tid": 7, "ts": 1110.5, "dur": 30.001,
         "args": {"External id": 3, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 11,
                  "registers per thread": 96, "grid": [2, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>(Params)", "pid": 0, "tid": 8, "ts": 1200,
         "dur": 12, "args": {"External id": 2, "device": 0, "stream": 8, "correlation": 13}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8, "ts": 1300,
         "dur": 3, "args": {"device": 0, "stream": 8, "correlation": 14, "bytes": 64}},
        {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 7, "tid": 7, "ts": 999,
         "dur": 902, "args": {"Python id": 5, "Python parent id": 4}},
        {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 7, "tid": 7, "ts": 1000, "dur": 50},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": 1001,
         "args": {"Total Reserved": 2, "Device Type": 1}},
        {"ph": "s", "id": 11, "pid": 7, "tid": 7, "ts": 1102.125, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": 1110.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "C", "name": "counter", "pid": 7, "ts": 1000, "args": {"x": 1}},
    ]


# values of odd types for fields the reader reads (and for one it does not): each one either reads alike
# in both paths or makes the typed decode reject the piece (then the plain path decides)
ODD_VALUES = [None, True, -1, 1.5, 2**70, "7", "", [1], {"a": 1}, "NaN", 1e300]
ARG_KEYS = ["stream", "device", "correlation", "External id", "Collective name", "In msg nelems", "dtype",
            "Process Group Name", "Seq", "Group size", "name", "labels", "Input Dims", "unrelated"]
EVENT_KEYS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "args"]


def _trace(events: list[Any]) -> bytes:
    doc = {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}, "baseTimeNanoseconds": 0,
           "traceEvents": events, "deviceProperties": [{"id": 0, "name": "GPU"}]}
    return json.dumps(doc).encode()


def _summary(path: Path, typed: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What extract makes of ``path``: every field of the RankTrace, tables as rows; or the error."""
    plain = stream.stream_events

    def without_typed(path: Path, on_events: Any, label: str | None = None, on_typed: Any = None) -> Any:
        return plain(path, on_events, label=label)

    monkeypatch.setattr(stream, "stream_events", plain if typed else without_typed)  # what the pass calls
    try:
        trace = reader.extract(path)
    except (InputError, TruncatedTraceError) as err:
        return ("error", type(err).__name__, str(err))
    out = {}
    for key, value in vars(trace).items():
        out[key] = value.rows() if isinstance(value, pl.DataFrame) else value
    return out


def _same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _summary(path, True, monkeypatch) == _summary(path, False, monkeypatch)


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of a few events, so that one odd event rejects only its own piece."""
    monkeypatch.setattr(stream, "PIECE_BYTES", 700)
    monkeypatch.setattr(stream, "TEXT_BLOCK", 512)


def test_every_kind_of_event_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_trace(_base_events() * 3))
    typed = _summary(path, True, monkeypatch)
    assert typed == _summary(path, False, monkeypatch)
    assert len(typed["intervals"]) == 9 and len(typed["collectives"]) == 3 and len(typed["step_marks"]) == 1


def test_typed_pieces_are_the_common_case(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_trace(_base_events() * 20)))
    seen = {"typed": 0, "plain": 0}
    stream.stream_events(path, lambda e: seen.update(plain=seen["plain"] + 1),
                         on_typed=lambda e: seen.update(typed=seen["typed"] + 1))
    assert seen["typed"] > 5 and seen["plain"] == 0


@pytest.mark.parametrize("text", [
    b'[{"ph": "Q", "name": "x"}]',  # a phase outside the Trace Event Format
    b'[{"name": "x", "cat": "kernel"}]',  # no phase
    b'[{"ph": 5}]',
    b'[{"ph": "X", "args": 5}]',
    b'[{"ph": "X", "args": {"stream": [1]}}]',
    b'[{"ph": "X", "ph": "f"}]',  # the key twice: the last one counts, as in the plain decode
])
def test_what_the_typed_decode_rejects_is_read_by_the_plain_one(text: bytes) -> None:
    def outcome(typed: bool) -> Any:
        data = bytearray(text)
        try:
            got: Any = stream._decode_array(data, 0, len(data) - 1, typed=typed)
        except msgspec.ValidationError as err:
            got = str(err)
        assert data == bytearray(text)
        return got

    assert outcome(True) == outcome(False)
    assert outcome(True)[1] is not True


def test_typed_classes() -> None:
    decoded = stream._typed_decoder.decode(
        b'[{"ph":"X","name":"k","ts":1.5,"args":{"stream":7}},{"ts":2.0,"ph":"f"},{"name":"n","ph":"M","args":null}]')
    assert [type(e) for e in decoded[::2]] == [EventX, EventM]
    assert decoded[0].ts == "1.5" and decoded[0].args.stream == 7 and decoded[2].args is None
    assert not isinstance(decoded[1], (EventX, EventM)) and not hasattr(decoded[1], "ts")  # never read
    assert TYPED_EVENT is not None


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 16), st.sampled_from(ARG_KEYS + EVENT_KEYS), st.sampled_from(ODD_VALUES),
                          st.booleans()), max_size=12), st.booleans(), st.integers(0, 3))
def test_odd_values_read_alike(tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, str, Any, bool]],
                               zipped: bool, cut: int) -> None:
    events = _base_events() * 2
    for index, key, value, drop in edits:
        event = events[index]
        if key in EVENT_KEYS:
            if drop:
                event.pop(key, None)
            else:
                event[key] = value
        elif isinstance(event.get("args"), dict):
            if drop:
                event["args"].pop(key, None)
            else:
                event["args"][key] = value
    text = _trace(events)
    if cut:  # cut short: inside the events, at a quarter, half or three quarters
        text = text[: len(text) * cut // 4]
    path = tmp_path_factory.mktemp("odd") / ("t.json.gz" if zipped else "t.json")
    path.write_bytes(gzip.compress(text) if zipped else text)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same(path, monkeypatch)


@pytest.mark.parametrize("trace", sorted(REAL.rglob("*.json.gz")) if REAL.is_dir() else [], ids=str)
def test_real_traces_read_alike(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "PIECE_BYTES", 256 << 10)
    _same(trace, monkeypatch)


# --- inflate: zlib-ng where installed, the standard zlib for a stream it cannot finish ---

def _blocks(path: Path, fast: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, str | None]:
    monkeypatch.setattr(stream, "_FAST_ZLIB", fast)
    out: list[bytes] = []
    try:
        out.extend(stream._blocks(path, path))  # what came before an error stays in ``out``
    except (InputError, EOFError) as err:
        return b"".join(out), f"{type(err).__name__}: {err}"
    return b"".join(out), None


class _Failing:
    """An accelerator that gives up after some output (a stand-in for one that disagrees with zlib)."""

    error = ValueError

    def __init__(self, after: int) -> None:
        self.after = after

    def decompressobj(self, wbits: int) -> Any:
        inner, budget = zlib.decompressobj(wbits=wbits), [self.after]

        class Obj:
            def decompress(self, data: bytes, max_length: int) -> bytes:
                if budget[0] <= 0:
                    raise ValueError("gave up")
                text = inner.decompress(data, min(max_length, budget[0]))
                budget[0] -= len(text)
                return text

            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

        return Obj()


@pytest.mark.parametrize("damage", ["none", "cut", "flip", "two_members", "cut_second_member"])
def test_inflate_alike_with_and_without_the_accelerator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        damage: str) -> None:
    rnd = random.Random(damage)
    text = _trace(_base_events() * 50)
    blob = bytearray(gzip.compress(text))
    if damage == "cut":
        blob = blob[: len(blob) // 2]
    elif damage == "flip":
        blob[len(blob) // 3] ^= 0x5A
    elif damage == "two_members":
        blob += gzip.compress(b" " * 1000)
    elif damage == "cut_second_member":
        blob += gzip.compress(bytes(rnd.randrange(256) for _ in range(5000)))[:-100]
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(blob))
    plain = _blocks(path, None, monkeypatch)
    if stream._fast_zlib() is not None:
        assert _blocks(path, stream._fast_zlib(), monkeypatch) == plain
    for after in (1, 700, 5000):
        assert _blocks(path, _Failing(after), monkeypatch) == plain
    if damage == "none":
        assert plain == (text, None)


# --- times: the polars path for 'digits.ddd' against the general conversion, value by value ---

ODD_TEXT = ["12.", ".5", "1.2345", "-12.5", "+3.2", " 1.5", "1e5", "1.5e3", "nan", "١٢.٥", "12.5 ", "9" * 19 + ".1",
            f"{exact_time.MAX_US}.999", f"{exact_time.MAX_US + 1}.0", "0.0", "00012.50", "", "abc", "1.2.3", "12..5",
            "99999999999999999.9", "9223372036854775.807", "9223372036854775807.0", "-0.0", "+1.5", "-0.5", "-0.000",
            "1.-5", "1.+5", "0-1.5", "1_0.5", "1.5_", ".", "-.5", "0.5\n", "１.5",
            "1e1000000", "-1e999999", "1e-1000000", "9e+999999"]  # beyond decimal's range: not a time, no error


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(ODD_TEXT), st.from_regex(r"\A-?[0-9]{1,20}\.[0-9]{0,5}\Z"),
                          st.text(alphabet="0123456789.-+e ", max_size=22)), min_size=1, max_size=50),
       st.integers(1, 3))
def test_plain_decimal_times_convert_alike(texts: list[str], places: int) -> None:
    common = [f"{1760000000000000 + i * 37}.{i % 10 ** places:0{places}d}" for i in range(exact_time.SMALL + 10)]
    values = common + texts
    random.Random(len(texts)).shuffle(values)
    fast = exact_time.to_ns(values)
    general = exact_time._general(values)  # the conversion before the fast path
    assert np.array_equal(fast[0], general[0]) and np.array_equal(fast[1], general[1])


def test_times_beyond_decimal_range_read_invalid() -> None:
    ns, ok = exact_time.to_ns(["1e1000000", "1.5", "-1e999999"])
    assert ns.tolist() == [0, 1500, 0] and ok.tolist() == [False, True, False]
    assert exact_time.to_ns([2.5, "1e1000000"])[1].tolist() == [True, False]


def test_plain_decimal_times_need_text() -> None:
    assert exact_time._plain_decimals(["1.5"] * 3000 + [7]) is None  # a mixed list: the general path
    ns, ok = exact_time.to_ns(["1.5"] * 3000 + [7])
    assert ns[0] == 1500 and ns[-1] == 7000 and ok.all()
