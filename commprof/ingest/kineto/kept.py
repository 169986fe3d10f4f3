"""The args the pass keeps past their piece (communication kernels', ``record_param_comms`` ops'), a few bytes a row.

Kept as the decoded :class:`~commprof.ingest.kineto.decode.Args`, each such event held ~700 bytes until the
tables were built (the struct, its strings, its ints): 200 MB for the 282k of a 304 MB kernel-heavy trace, and
the allocator's arenas they were spread over stayed resident after. Here a batch of them is split into what
changes call by call — the External id and the Seq, int64 columns — and the rest, the call's *shape* (op,
sizes, dtype, group, its members, peer, async), numbered once per distinct value by its JSON text (so 1, 1.0,
true and "1" stay apart, as the fields' readers tell them apart) and held once. What reads them
(``reader._gpu_collectives``, ``comm.process_groups``) works per distinct shape, not per row.

Only ``array.array`` here, never numpy: kineto.prefetch's child keeps them too (see rows.flush_light).
"""

from __future__ import annotations

import operator
import pickle
from array import array
from typing import TYPE_CHECKING, Any

import msgspec

from commprof.ingest.kineto.decode import Args
from commprof.ingest.kineto.numbers import INT64_LIMIT, as_int
from commprof.ingest.kineto.rows import Codes

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# the Args fields a kept event's readers use, besides external_id and seq (comm.comm_fields, comm.process_groups)
SHAPE_FIELDS = ("collective_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name", "pg_desc",
                "pg_ranks", "src_rank", "dst_rank", "is_async")
NO_SEQ, BAD_SEQ = -2, -1  # a row's seq: none given; given but not a sequence number (else the number, >= 0)

_shape_of = operator.attrgetter(*SHAPE_FIELDS)
_external_id, _seq = operator.attrgetter("external_id"), operator.attrgetter("seq")
_encode = msgspec.json.Encoder().encode
_INT = {int}


def _key(shape: tuple[Any, ...]) -> bytes:
    """A shape's exact key: its JSON, or (text JSON cannot write: a lone surrogate) its pickle (never '[')."""
    try:
        return _encode(shape)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
        return pickle.dumps(shape, protocol=pickle.HIGHEST_PROTOCOL)


def _exts(values: list[Any]) -> tuple[array[int], array[int] | None]:
    """External ids as comm.as_int reads them: int64 values and where they are ids (None: all are)."""
    if set(map(type, values)) <= _INT:
        try:
            return array("q", values), None
        except OverflowError:
            pass
    read = [as_int(v) for v in values]
    return array("q", [0 if v is None else v for v in read]), array("b", [v is not None for v in read])


def _seqs(values: list[Any]) -> array[int]:
    """Sequence numbers as comm_fields reads them (bounded_int(seq, 0, 2^63)), NO_SEQ where none is given and
    BAD_SEQ where one is given that is not one."""
    types = set(map(type, values))
    if types <= _INT:
        try:
            out = array("q", values)
        except OverflowError:
            out = None
        if out is not None and (not out or min(out) >= 0):
            return out
    elif types == {type(None)}:
        return array("q", [NO_SEQ]) * len(values)
    return array("q", [NO_SEQ if v is None else _seq_of(v) for v in values])


def _seq_of(value: Any) -> int:
    number = as_int(value)
    return number if number is not None and 0 <= number < INT64_LIMIT else BAD_SEQ


class KeptArgs:
    """The kept args of one kind of event, by row: ``pending`` takes ``(key, args)`` tuples (the key: a device
    row's position among its table's pending rows, or a record_param_comms op's External id), :meth:`flush` turns
    them into columns; :meth:`columns` gives them whole and :meth:`args` a shape's Args."""

    _COLUMNS = (("key", "q"), ("shape", "i"), ("ext", "q"), ("ext_ok", "b"), ("seq", "q"))

    def __init__(self) -> None:
        self.pending: list[tuple[int, Args]] = []
        self.codes = Codes()  # a shape's key -> its number
        self._chunks: dict[str, list[Any]] = {name: [] for name, _ in self._COLUMNS}  # array chunks, then numpy
        self._args: dict[int, Args] = {}
        self._keys: list[bytes] = []
        self.count = 0

    def __len__(self) -> int:
        return self.count + len(self.pending)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_args": {}, "_keys": []}  # made again from the codes where read

    def flush(self, offset: int = 0) -> None:
        """Pending args into columns; ``offset`` is added to their keys (a device table's rows flushed before)."""
        pending = self.pending
        if not pending:
            return
        keys, args = zip(*pending, strict=True)
        shapes = list(map(_shape_of, args))
        codes = self.codes
        try:
            numbers = list(map(codes.__getitem__, map(_encode, shapes)))
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
            numbers = [codes[_key(shape)] for shape in shapes]
        ext, ok = _exts(list(map(_external_id, args)))
        chunks = self._chunks
        chunks["key"].append(array("q", map(offset.__add__, keys)) if offset else array("q", keys))
        chunks["shape"].append(array("i", numbers))
        chunks["ext"].append(ext)
        chunks["ext_ok"].append(array("b", [1]) * len(ext) if ok is None else ok)
        chunks["seq"].append(_seqs(list(map(_seq, args))))
        self.count += len(pending)
        pending.clear()  # cleared, not replaced: the pass holds its append method

    def columns(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64],
                               npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """key, shape, External id (0 where there is none), where there is one, seq (or NO_SEQ, BAD_SEQ); each
        column joined once (a piece's chunk each: the chunks are let go of as each column is joined)."""
        import numpy as np

        from commprof.ingest.kineto.rows import release_after

        self.flush()
        joined = []
        for name, code in self._COLUMNS:
            chunks = self._chunks[name]
            dtype = np.dtype({"q": np.int64, "i": np.int32, "b": np.bool_}[code])
            if len(chunks) != 1 or not isinstance(chunks[0], np.ndarray):
                column = np.concatenate([np.frombuffer(c, dtype) for c in chunks]) if chunks else np.empty(0, dtype)
                chunks[:] = [column]
                release_after(self.count)
            joined.append(chunks[0])
        key, shape, ext, ok, seq = joined
        return key, shape, ext, ok, seq

    def args(self, code: int) -> Args:
        """Shape ``code`` as Args (external_id and seq unset: they are each row's own)."""
        known = self._args.get(code)
        if known is None:
            if len(self._keys) != len(self.codes):
                self._keys = self.codes.table()
            key = self._keys[code]
            shape = msgspec.json.decode(key) if key[:1] == b"[" else pickle.loads(key)  # noqa: S301 - written here
            known = self._args[code] = Args(**dict(zip(SHAPE_FIELDS, shape, strict=True)))
        return known

    def last_by_key(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The distinct keys (sorted), the row of each one's last args (a key given twice: the later wins, as
        in a dict) and of its first (where a dict would list it)."""
        import numpy as np

        key = self.columns()[0]
        if key.size < 2 or bool((key[1:] > key[:-1]).all()):  # each key once, in order (External ids are)
            rows = np.arange(key.size, dtype=np.int64)
            return key, rows, rows
        distinct, first = np.unique(key, return_index=True)
        last = key.size - 1 - np.unique(key[::-1], return_index=True)[1]
        return distinct, last.astype(np.int64), first.astype(np.int64)

    def lookup(self, wanted: npt.NDArray[np.int64], wanted_ok: npt.NDArray[np.bool_]
               ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
        """For each wanted key (where ``wanted_ok``): the shape and seq of its last args; -1 and NO_SEQ where none."""
        import numpy as np

        shape, seq = self.columns()[1], self.columns()[4]
        distinct, last, _ = self.last_by_key()
        if not distinct.size:
            return np.full(wanted.size, -1, np.int32), np.full(wanted.size, NO_SEQ, np.int64)
        pos = np.minimum(np.searchsorted(distinct, wanted), distinct.size - 1)
        hit = wanted_ok & (distinct[pos] == wanted)
        row = last[pos]
        return np.where(hit, shape[row], -1).astype(np.int32), np.where(hit, seq[row], NO_SEQ)

    def shapes_in_order(self, by_key: bool) -> list[Args]:
        """Each distinct shape once, in the order of its first row; ``by_key``: of the rows a dict keyed by the
        keys would hold (each key's last args, where its first was)."""
        import numpy as np

        shape = self.columns()[1]
        if by_key:
            _, last, first = self.last_by_key()
            shape = shape[last[np.argsort(first, kind="stable")]]
        codes, at = np.unique(shape, return_index=True)
        return [self.args(int(code)) for code in codes[np.argsort(at, kind="stable")]]
