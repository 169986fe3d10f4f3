"""kineto.prefetch: the pass over one trace read in a forked child while ``analyze`` imports. Whatever the
child does (reads the trace, fails on it, is not asked for), the tables, warnings and errors are those of
the pass run in the command's own process."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from commprof.errors import InputError, TruncatedTraceError
from commprof.ingest.kineto import prefetch, reader
from commprof.ingest.kineto.stream import NotATraceError

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the prefetch forks")


def _events(steps: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "python"}},
    ]
    ts = 1_700_000_000_000
    for step in range(steps):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 7, "ts": ts,
                       "dur": 900})
        for k in range(20):
            corr = step * 100 + k
            t = ts + 10 + 40 * k
            comm = k % 5 == 0
            events.append({"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce" if comm else "aten::mm", "pid": 1,
                           "tid": 7, "ts": t, "dur": 5, "args": {"External id": corr}})
            if comm:
                events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 7, "ts": t,
                               "dur": 4, "args": {"External id": corr, "Collective name": "allreduce",
                                                  "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
                                                  "Process Group Name": "0", "Group size": 2}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7,
                           "ts": t + 1, "dur": 3, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 7 if comm else 8, "ts": t + 20, "dur": 15,
                           "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if comm else "sm90_gemm_kernel",
                           "args": {"device": 0, "stream": 7 if comm else 8, "correlation": corr,
                                    "External id": corr}})
            events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 8, "ts": t + 20, "id": corr})
        ts += 1000
    return events


def _write(path: Path, steps: int, cut: int | None = None) -> Path:
    doc = {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}, "baseTimeNanoseconds": 0,
           "traceEvents": _events(steps), "deviceProperties": [{"id": 0, "name": "GPU"}]}
    text = json.dumps(doc, indent=1).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(text, compresslevel=1)
        path.write_bytes(data[:cut] if cut else data)
    else:
        path.write_bytes(text[:cut] if cut else text)
    return path


def _summary(path: Path) -> Any:
    """Every field of extract's RankTrace (tables as rows), or the error."""
    try:
        trace = reader.extract(path)
    except (InputError, TruncatedTraceError) as err:
        return ("error", type(err).__name__, str(err))
    return {key: value.rows() if isinstance(value, pl.DataFrame) else value for key, value in vars(trace).items()}


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """The prefetch on for any size and load, with a cache place of its own; what the child handed back."""
    monkeypatch.setattr(prefetch, "MIN_FILE_BYTES", 0)
    monkeypatch.setattr(prefetch, "MIN_PLAIN_BYTES", 0)
    monkeypatch.setenv(prefetch.ENABLE_ENV, "1")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    # threads other tests left behind (idle servers, writer pools): the command forks before it has any
    monkeypatch.setattr(prefetch, "threading", types.SimpleNamespace(active_count=lambda: 1))
    taken: list[Any] = []
    collect = prefetch._collect

    def spy(pending: Any, path: Path) -> Any:
        taken.append(collect(pending, path))
        return taken[-1]

    monkeypatch.setattr(prefetch, "_collect", spy)
    yield taken
    prefetch._discard()


def _both(path: Path, taken: list[Any]) -> tuple[Any, Any]:
    """(extract without a child, extract with one started for the file)."""
    assert prefetch.start(str(path)), "no child started"  # first: a read may leave its inflate thread behind
    started = prefetch._pending[:]
    prefetch._pending.clear()
    alone = _summary(path)
    prefetch._pending[:] = started
    return alone, _summary(path)


@pytest.mark.parametrize("name", ["rank-0.json.gz", "rank-0.json"])
def test_the_child_pass_reads_alike(tmp_path: Path, forced: list[Any], name: str) -> None:
    path = _write(tmp_path / name, steps=60)
    alone, prefetched = _both(path, forced)
    assert forced and forced[0] is not None  # the child's pass was the one used
    assert prefetched == alone
    assert not prefetch._pending


@pytest.mark.parametrize("handed_over", [False, True])
def test_work_while_waiting_is_done_and_its_failures_ignored(
    tmp_path: Path, forced: list[Any], monkeypatch: pytest.MonkeyPatch, handed_over: bool
) -> None:
    """``while_waiting``: modules imported and, while the child has not handed its pass over, callables called
    before the pass is read; one that raises is skipped (the command meets it again where it does that work
    itself). Once the pass is there, the callables (work done early, not needed) are left out."""
    from commprof.cli.analyze import WHILE_WAITING

    monkeypatch.setattr(prefetch, "_handed_over", lambda fd: handed_over)
    path = _write(tmp_path / "rank-0.json.gz", steps=20)
    calls: list[str] = []

    def fails() -> None:
        calls.append("fails")
        raise RuntimeError("boom")

    assert prefetch.start(str(path), while_waiting=("no.such.module", fails, lambda: calls.append("after"),
                                                    *WHILE_WAITING))
    prefetched = _summary(path)
    assert calls == ([] if handed_over else ["fails", "after"])
    assert forced and forced[0] is not None  # the child's pass was the one used
    prefetch._pending.clear()
    assert prefetched == _summary(path)


def test_the_childs_hand_over_is_seen(tmp_path: Path, forced: list[Any]) -> None:
    """``_handed_over``: not while the child reads, yes once it has written its pass (or exited)."""
    import time

    path = _write(tmp_path / "rank-0.json.gz", steps=20)
    read_fd, write_fd = os.pipe()
    try:
        assert not prefetch._handed_over(read_fd)
        os.write(write_fd, b"x")
        assert prefetch._handed_over(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert prefetch.start(str(path))
    deadline = time.monotonic() + 60
    while not prefetch._handed_over(prefetch._pending[0].fd) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert prefetch._handed_over(prefetch._pending[0].fd)
    assert _summary(path) is not None and forced and forced[0] is not None


@pytest.mark.parametrize("name", ["rank-0.json.gz", "rank-0.json"])
def test_a_cut_trace_warns_alike(tmp_path: Path, forced: list[Any], name: str) -> None:
    (tmp_path / "full").mkdir()
    full = _write(tmp_path / "full" / name, steps=60)
    path = _write(tmp_path / name, steps=60, cut=full.stat().st_size * 2 // 3)
    alone, prefetched = _both(path, forced)
    assert forced and forced[0] is not None
    assert prefetched == alone
    assert any("ends early" in w for w in prefetched["warnings"])


def test_errors_come_from_the_commands_own_pass(tmp_path: Path, forced: list[Any]) -> None:
    """A child that fails (here: corrupt gzip, a cut before the events, not a trace) hands nothing back; the
    command then reads the file itself and raises the same error, from the same code."""
    good = gzip.compress(json.dumps({"traceEvents": _events(20)}).encode())
    cases = {
        "corrupt.json.gz": good[:2000] + bytes(b ^ 0x55 for b in good[2000:2400]) + good[2400:],
        "cut.json.gz": gzip.compress(b'{"distributedInfo": {"rank": 0}, "traceEv' + b" " * 100000)[:-30],
        "other.json.gz": gzip.compress(json.dumps({"schema": "1.0", "nodes": [1] * 100000}).encode()),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        forced.clear()
        alone, prefetched = _both(path, forced)
        assert forced == [None], name  # nothing taken from the child
        assert prefetched == alone and prefetched[0] == "error", name
    with pytest.raises(NotATraceError):
        reader.extract(tmp_path / "other.json.gz")


def test_a_file_changed_after_the_fork_is_read_again(tmp_path: Path, forced: list[Any]) -> None:
    path = _write(tmp_path / "rank-0.json.gz", steps=40)
    assert prefetch.start(str(path))
    _write(path, steps=25)  # rewritten: another size, mtime and ctime
    os.utime(path, ns=(1, 1))
    again = _summary(path)
    assert forced == [None]
    assert not prefetch._pending
    assert again == _summary(path)  # (no child for this read: none was started for it)


def test_other_files_and_labels_do_not_take_the_childs_pass(tmp_path: Path, forced: list[Any]) -> None:
    path = _write(tmp_path / "rank-0.json.gz", steps=30)
    assert prefetch.start(str(path))
    assert prefetch._take(path, "another label") is None
    assert prefetch._take(tmp_path / "other.json.gz", str(path)) is None
    assert len(prefetch._pending) == 1


def test_an_unused_child_is_stopped_at_exit(tmp_path: Path, forced: list[Any]) -> None:
    path = _write(tmp_path / "rank-0.json.gz", steps=200)
    assert prefetch.start(str(path))
    pid = prefetch._pending[0].pid
    prefetch._discard()
    assert not prefetch._pending
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped


def test_no_child_when_not_worth_it(tmp_path: Path, forced: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "rank-0.json.gz", steps=10)
    # listed, fresh, in the cache's index: the store will not parse it
    from commprof.ingest.cache_place import default_places
    from commprof.ingest.discover import discover

    place = default_places(discover(path))[0]
    place.mkdir(parents=True)
    st = path.stat()
    (place / "_index.json").write_text(json.dumps({"files": {path.name: {"size": st.st_size,
                                                                          "mtime_ns": st.st_mtime_ns}}}))
    assert not prefetch.start(str(path))
    (place / "_index.json").unlink()
    assert prefetch.start(str(tmp_path))  # a folder of one trace, as the trace
    prefetch._discard()
    _write(tmp_path / "rank-1.json.gz", steps=10)
    assert not prefetch.start(str(tmp_path))  # of two: one child would not do (the pool reads them)
    monkeypatch.setenv(prefetch.ENABLE_ENV, "")  # the default: by size and load
    monkeypatch.setattr(prefetch, "_idle_core", lambda: True)
    monkeypatch.setattr(prefetch, "MIN_FILE_BYTES", 1 << 30)
    assert not prefetch.start(str(path))  # too small to pay for the fork
    monkeypatch.setattr(prefetch, "MIN_FILE_BYTES", 0)
    monkeypatch.setattr(prefetch, "MAX_FILE_BYTES", 100)
    assert not prefetch.start(str(path))  # so big that the child's copy of the rows would weigh
    monkeypatch.setattr(prefetch, "MAX_FILE_BYTES", 1 << 30)
    monkeypatch.setenv("COMMPROF_SCHEDULER", "tcp://nowhere:8786")
    assert not prefetch.start(str(path))  # the parse runs elsewhere
    monkeypatch.delenv("COMMPROF_SCHEDULER")
    monkeypatch.setattr(prefetch, "_idle_core", lambda: False)
    assert not prefetch.start(str(path))  # a busy machine
    monkeypatch.setenv(prefetch.ENABLE_ENV, "0")
    monkeypatch.setattr(prefetch, "_idle_core", lambda: True)
    assert not prefetch.start(str(path))  # never
    monkeypatch.setenv(prefetch.ENABLE_ENV, "")
    assert not prefetch.start(str(path))  # polars is loaded here (the command forks before importing it)
    monkeypatch.delitem(sys.modules, "polars")
    assert prefetch.start(str(path))  # (and with none of these, one is started)
    prefetch._discard()
    assert not prefetch._pending


def _analyze(path: Path, cache: Path, enable: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMMPROF_CACHE_DIR": str(cache), prefetch.ENABLE_ENV: enable}
    done = subprocess.run([sys.executable, "-m", "commprof", "analyze", str(path)], capture_output=True, text=True,
                          env=env, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_analyze_says_the_same_with_and_without_the_child(tmp_path: Path) -> None:
    """Whole commands on traces past the size that starts a child (8 MB of plain JSON): a sound one, one cut
    short (a warning) and one damaged inside (an error, exit 2): the same output, the same exit status."""
    (tmp_path / "sound").mkdir()
    sound = _write(tmp_path / "sound" / "rank-0.json", steps=560)
    assert sound.stat().st_size > prefetch.MIN_PLAIN_BYTES
    text = sound.read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "rank-0.json").write_bytes(text[: len(text) * 3 // 4])
    (tmp_path / "damaged").mkdir()
    middle = len(text) // 2
    (tmp_path / "damaged" / "rank-0.json").write_bytes(text[:middle] + b"@" * 300 + text[middle + 300 :])
    for case in ("sound", "cut", "damaged"):
        path = tmp_path / case / "rank-0.json"
        without = _analyze(path, tmp_path / f"cache-{case}-0", "0")
        with_child = _analyze(path, tmp_path / f"cache-{case}-1", "1")
        assert with_child == without, case
        if case == "damaged":
            assert with_child[0] == 2 and "corrupt trace text" in with_child[2]
        if case == "cut":
            assert "ends early" in with_child[1] + with_child[2]


def _timed(steps: int, form: str, seed: int) -> list[dict[str, Any]]:
    """_events with their times in ``form``: whole µs, or some of them otherwise (text, floats, bools, out of
    range, missing), at random places, so that batches of every make-up reach the light pass."""
    import random

    rng = random.Random(seed)
    events = _events(steps)
    odd = {"ints": [], "bool": [True, False], "huge": [2**62, -(2**62)], "past_int64": [2**64 + 5],
           "text": ["1700000000123.456", "12.5"], "float": [1.5e3], "none": [None]}[form]
    for ev in events:
        for key in ("ts", "dur"):
            if key in ev and odd and rng.random() < 0.02:
                ev[key] = rng.choice(odd)
    return events


@pytest.mark.parametrize("form", ["ints", "bool", "huge", "past_int64", "text", "float", "none"])
@pytest.mark.parametrize("batch", [7, 64, 1 << 15])
def test_a_light_pass_keeps_the_columns_of_the_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str,
                                                     batch: int) -> None:
    """The child's pass without numpy (Scan.light: array.array columns, adopted by the parent) ends with the
    columns, validity and codes of the pass run here, whatever its batches hold."""
    import pickle

    import numpy as np

    from commprof.ingest.kineto import scan as scan_module
    from commprof.ingest.kineto import stream

    monkeypatch.setattr(scan_module, "BATCH", batch)
    if batch < 1 << 15:  # many pieces, so many batches
        monkeypatch.setattr(stream, "PIECE_BYTES", 4096)
        monkeypatch.setattr(stream, "READ_BLOCK", 4096)
    doc = {"traceEvents": _timed(12, form, seed=batch), "baseTimeNanoseconds": 0}
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))
    _, plain = prefetch.scan_trace(path, str(path))
    _, light = prefetch.scan_trace(path, str(path), light=True)
    light = pickle.loads(pickle.dumps(light))  # as the child hands it over
    kinds = {type(chunk).__name__ for chunk in light.cpu._chunks["ts"]}
    if form == "ints":
        assert kinds == {"array"}  # every batch light (numpy not needed)
    elif batch == 7 and form != "bool":  # (a bool reads as an int, as np.asarray reads it, unless first)
        assert kinds == {"array", "ndarray"}  # the batches with an odd time through flush, the others light
    light.adopt()
    assert not light.light
    for table in ("dev", "cpu", "launch"):
        ours, theirs = getattr(light, table), getattr(plain, table)
        assert len(ours) == len(theirs)
        for name in theirs.names:
            assert ours.col(name).dtype == theirs.col(name).dtype, (table, name)
            assert np.array_equal(ours.col(name), theirs.col(name)), (table, name)
        for name in theirs.times:
            assert np.array_equal(ours.ok(name), theirs.ok(name)), (table, name)
    assert light.dev_names.table() == plain.dev_names.table() and light.bad == plain.bad


def test_a_light_pass_of_whole_us_times_imports_no_numpy(tmp_path: Path) -> None:
    """What the child saves: numpy's import (~0.07 s) on a trace whose times are all whole µs."""
    path = _write(tmp_path / "rank-0.json.gz", steps=40)
    code = ("import sys; from pathlib import Path; from commprof.ingest.kineto.prefetch import scan_trace; "
            f"scan_trace(Path({str(path)!r}), 'x', light=True); print('numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_kept_args_are_handed_over_exactly() -> None:
    """Scan's pickled state writes the CPU ops' kept args as JSON (Scan.__getstate__) and the comm kernels' and
    record_param_comms' as their columns (kept.KeptArgs): every value comes back as it was read, of the same type
    (1, 1.0 and "1" apart; ints past int64; Raw text as written), in the same order, and an unset Raw is the
    decoder's NULL again."""
    import pickle

    import msgspec
    import numpy as np

    from commprof.ingest.kineto.decode import NULL, Args
    from commprof.ingest.kineto.kept import SHAPE_FIELDS
    from commprof.ingest.kineto.scan import KEPT_ARGS, Scan

    texts = [b'{"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1.0, "Group size": "8",'
             b' "dtype": "BFloat16", "Process Group Name": 3, "Process Group Description": "\\u00e9 tp",'
             b' "Process Group Ranks": [0, 1.5, 2], "Seq": 123456789012345678901234567890, "Is asynchronized op": true,'
             b' "Input Dims": [[ 4 , 5 ], []], "Input type": ["c10::BFloat16", ""], "External id": 9}',
             b'{"stream": "7", "device": 0.0, "correlation": -3, "Src Rank": 0, "Dst Rank": -1, "Seq": "12",'
             b' "Is asynchronized op": 0, "Process Group Ranks": "[0, 1]", "name": 5, "labels": "GPU 0"}',
             b'{}', b'{"Input Dims": null, "pg": "not read"}']
    args = [msgspec.json.decode(text, type=Args) for text in texts]
    scan = Scan()
    scan.dev_comm_args.pending.extend([(0, args[1]), (5, args[0])])
    scan.cpu_comm_args = {3: args[2], 1: args[3], 2: args[0]}
    scan.comm_args_by_external_id.pending.extend([(2**62, args[1]), (-1, args[2])])
    scan.finish()
    back = pickle.loads(pickle.dumps(scan))

    def typed(value: Args, fields: tuple[str, ...] = Args.__struct_fields__) -> list[tuple[str, object]]:
        values = [getattr(value, name) for name in fields]
        return [(type(v).__name__, bytes(v) if isinstance(v, msgspec.Raw) else v) for v in values]

    for name in KEPT_ARGS:
        ours, theirs = getattr(back, name), getattr(scan, name)
        assert list(ours) == list(theirs)
        assert [typed(a) for a in ours.values()] == [typed(a) for a in theirs.values()], name
    assert back.cpu_comm_args[3].input_dims is NULL and back.cpu_comm_args[3].input_type is NULL
    for name in ("dev_comm_args", "comm_args_by_external_id"):
        ours, theirs = getattr(back, name), getattr(scan, name)
        for a, b in zip(ours.columns(), theirs.columns(), strict=True):
            assert np.array_equal(a, b) and a.dtype == b.dtype, name
        shapes = ours.columns()[1].tolist()
        assert [typed(ours.args(c), SHAPE_FIELDS) for c in shapes] == [
            typed(theirs.args(c), SHAPE_FIELDS) for c in shapes]
    kept = back.dev_comm_args
    key, shape, ext, ext_ok, seq = kept.columns()
    assert key.tolist() == [0, 5] and ext_ok.tolist() == [False, True] and ext[1] == 9
    assert seq.tolist() == [12, -1]  # "12" reads as 12 (as comm_fields reads it); past int64: not a sequence number
    first = kept.args(int(shape[1]))  # args[0]'s shape: its values and their types as read
    assert typed(first, SHAPE_FIELDS) == typed(args[0], SHAPE_FIELDS)
    assert type(first.out_nelems) is float and type(first.pg_name) is int and first.is_async is True
    assert back.comm_args_by_external_id.columns()[0].tolist() == [2**62, -1]
    assert back.dev_names == scan.dev_names and back.light == scan.light  # the rest of the state as pickled

