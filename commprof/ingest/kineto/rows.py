"""The rows one pass over a trace keeps, column by column, at a few bytes a row.

Kept as Python tuples, a kernel's row with its times as text (the decoder hands float literals over as
text, see exact_time) costs about 250 bytes, and what the allocator keeps around them more: a 20 MB
trace's rows held more memory than its JSON. Here repeated values (names, lanes, pids, tids,
categories) are numbered in order of first sight, and the values waiting in Python lists are turned
into numpy columns once ``BATCH`` times are pending — the times of every table in one conversion call,
so its fixed cost is paid a few times per trace, not once per decoded piece. What the pass holds is
then bounded by the kept columns plus one batch.

numpy is imported where it is used, not with the module: kineto.prefetch's child runs the pass without it
(:func:`flush_light`), and the command's parent turns what the child kept into numpy (:meth:`Rows.adopt`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from functools import cache
from itertools import chain
from typing import TYPE_CHECKING, Any

from commprof.ingest.common.time_limits import MAX_US

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

BATCH = 1 << 14  # pending time values that make a flush (~1.5 MB of Python values)


class Codes(dict[Any, int]):
    """Values numbered in order of first sight: ``codes[value]`` gives (and, the first time, makes) the
    number; ``table()`` lists the values by number. Equal values share a number (1 and 1.0 too, as the
    tuples they replace compared them)."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code

    def table(self) -> list[Any]:
        return list(self)


class Rows:
    """One table's kept rows. ``pending`` is the list a pass appends a row's values to, one tuple a row
    in ``names`` order (times as read: µs ints or text; then ints that fit their ``dtype``): one append
    a row, not one a column; :func:`flush` turns them into numpy chunks, column by column. After
    :meth:`finish`, ``col(name)`` is the whole column (times in ns, without the trace's base) and
    ``ok(name)`` says which times were numbers."""

    def __init__(self, times: Sequence[str], ints: dict[str, str]) -> None:
        self.times = tuple(times)
        self.ints = dict(ints)  # column -> numpy dtype name, one of TYPECODES
        self.names = (*self.times, *self.ints)
        self.pending: list[tuple[Any, ...]] = []
        # numpy chunks; after flush_light, array.array chunks (times in whole µs) with None for their ok
        self._chunks: dict[str, list[Any]] = {n: [] for n in self.names}
        self._ok: dict[str, list[Any]] = {n: [] for n in self.times}
        self.flushed = 0

    def __len__(self) -> int:
        return self.flushed + len(self.pending)

    def pending_times(self) -> int:
        return len(self.pending) * len(self.times)

    def adopt(self) -> None:
        """numpy chunks in place of the array.array chunks of :func:`flush_light` (whole µs times: their ns,
        all valid; ints as they are), as :func:`flush` would have made them."""
        import numpy as np

        for name, chunks in self._chunks.items():
            dtype = np.int64 if name in self.times else np.dtype(self.ints[name])
            scale = 1000 if name in self.times else 1
            for i, chunk in enumerate(chunks):
                if isinstance(chunk, array):
                    chunks[i] = np.frombuffer(chunk, dtype) * scale if scale != 1 else np.frombuffer(chunk, dtype)
        for oks, times in zip(self._ok.values(), (self._chunks[n] for n in self.times), strict=True):
            for i, ok in enumerate(oks):
                if ok is None:
                    oks[i] = np.ones(len(times[i]), np.bool_)

    def finish(self) -> None:
        """Each column as one array. The chunks of one are handed back to the system before the next is joined
        (they lie between other columns' chunks, where no joined column fits): the join then adds one column at a
        time to the pass's peak, not all of them (a 304 MB trace's 20 MB of columns: +14 MB, then +2 MB)."""
        import numpy as np

        for name in self.names:
            chunks = self._chunks[name]
            dtype = self.ints.get(name, "int64")
            self._chunks[name] = [np.concatenate(chunks) if chunks else np.empty(0, dtype)]
            if len(chunks) > 1:
                del chunks
                release_after(self.flushed)
        for name in self.times:
            oks = self._ok[name]
            self._ok[name] = [np.concatenate(oks) if oks else np.empty(0, np.bool_)]

    def col(self, name: str) -> npt.NDArray[Any]:
        column: npt.NDArray[Any] = self._chunks[name][0]
        return column

    def pop(self, name: str) -> npt.NDArray[Any]:
        """``col(name)``, handed over: the table no longer holds it (a frame built from it shares its memory,
        and the caller may change it in place)."""
        column: npt.NDArray[Any] = self._chunks.pop(name)[0]
        return column

    def ok(self, name: str) -> npt.NDArray[np.bool_]:
        valid: npt.NDArray[np.bool_] = self._ok[name][0]
        return valid


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere (musl, macOS, Windows)."""
    import ctypes

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system. The pass interleaves short-lived buffers (text
    blocks, decoded pieces) with the long-lived column chunks, and glibc raises its mmap threshold once
    a big buffer is freed, so the freed buffers stay resident in the holes between chunks: on a 506 MB
    trace the ingest's peak RSS was 266 MB with them, 228 MB after a trim at the end of the pass."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


TRIM_ROWS = 1 << 15  # rows let go of that are worth a trim (a few µs; a small trace's tables are not)


def release_after(rows: int) -> None:
    """:func:`release_free_memory` where ``rows`` rows' worth of buffers were just let go of, else nothing."""
    if rows >= TRIM_ROWS:
        release_free_memory()


def flush(tables: Sequence[Rows]) -> None:
    """Convert every pending row of ``tables``: all their times in one :func:`to_ns` call."""
    import numpy as np

    from commprof.ingest.common.exact_time import to_ns

    rows = [len(t.pending) for t in tables]
    if not any(rows):
        return
    # rows -> columns at C speed; a table without pending rows gives empty columns
    columns = [list(zip(*t.pending, strict=True)) if t.pending else [()] * len(t.names) for t in tables]
    times = [col for t, cols in zip(tables, columns, strict=True) for col in cols[: len(t.times)]]
    ns, ok = to_ns(list(chain.from_iterable(times)))
    at = 0
    for table, cols, n in zip(tables, columns, rows, strict=True):
        for name in table.times:
            table._chunks[name].append(ns[at : at + n])
            table._ok[name].append(ok[at : at + n])
            at += n
        for values, (name, dtype) in zip(cols[len(table.times):], table.ints.items(), strict=True):
            table._chunks[name].append(np.fromiter(values, dtype, len(values)))
        table.pending.clear()  # cleared, not replaced: the pass holds its append method
        table.flushed += n


TYPECODES = {"int32": "i", "int8": "b", "int64": "q"}  # numpy dtype name -> array.array typecode


def light_ok() -> bool:
    """Do array.array's typecodes have the sizes of the numpy dtypes they stand for here?"""
    return all(array(code).itemsize == int(dtype[3:]) // 8 for dtype, code in TYPECODES.items())


def flush_light(tables: Sequence[Rows]) -> None:
    """:func:`flush` without numpy, where every pending time is a whole µs within ``MAX_US`` (what
    :func:`to_ns` turns into ``µs * 1000``, all valid, in one numpy call): the columns become array.array
    chunks, for :meth:`Rows.adopt` to turn into numpy. Any other batch goes to :func:`flush` (numpy and all),
    so that every batch is converted as :func:`flush` would convert it."""
    rows = [len(t.pending) for t in tables]
    if not any(rows):
        return
    columns = [list(zip(*t.pending, strict=True)) if t.pending else [()] * len(t.names) for t in tables]
    times = list(chain.from_iterable(col for t, cols in zip(tables, columns, strict=True)
                                     for col in cols[: len(t.times)]))
    try:
        # to_ns's first test (type(values[0]) is int), then what np.asarray makes of ints and bools: int64
        whole = array("q", times) if times and type(times[0]) is int else None
    except (TypeError, OverflowError):
        whole = None
    if whole is None or (whole and not -MAX_US <= min(whole) <= max(whole) <= MAX_US):
        flush(tables)
        return
    at = 0
    for table, cols, n in zip(tables, columns, rows, strict=True):
        for name in table.times:
            table._chunks[name].append(whole[at : at + n])
            table._ok[name].append(None)
            at += n
        for values, (name, dtype) in zip(cols[len(table.times):], table.ints.items(), strict=True):
            table._chunks[name].append(array(TYPECODES[dtype], values))
        table.pending.clear()
        table.flushed += n
