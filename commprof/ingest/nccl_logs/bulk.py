"""Pieces of a log dense in COLL lines, read in bulk instead of one Python step per line.

A 128-rank job's log is nearly all COLL lines (one per collective per rank) and TUNING lines. The same few
messages repeat with only the ``opCount`` changing, so a dense piece is split into lines by polars, each line
keyed by its text with the opCount's hex digits left out, and each distinct key is read once, in Python, by
the same tests the line loop makes (``classify``): a COLL line the loop's fast path would take, a TUNING line,
or anything else. Runs of COLL and TUNING lines then update the parser's state with their last values (the
communicator each thread and process touched last, each communicator's last line, each thread's last COLL
message), their TUNING lines read that state as it stood at their line, and their COLL rows are built from
the key's parsed fields and the line's own opCount. Everything else — and the first line of a prefix the
file has not shown yet, and runs too short to be worth it — goes through the line loop, so records, line
numbers, counts and warnings stay what the loop gives.

The hex digits cannot take part in any text the parser looks for (``NCCL INFO ``, ``opCount ``, `` comm ``,
``NCCL ``, ``Bytes -> Algo``, `` via ``: each holds a letter that is not a hex digit), so every line of a key
is read as its key's representative line (the opCount written ``0``) is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from commprof.ingest.nccl_logs import patterns as pt

DENSE_PIECE_CHARS = 1 << 16  # pieces shorter than this go through the line loop (many small files: as before)
MIN_RUN = 128  # runs of COLL / TUNING lines shorter than this go through the line loop too: a bulk run costs
# ~0.4 ms over its lines, the loop ~6 µs a line (break-even near 60 lines); a log whose every second of lines carries
# its own timestamp is runs of tens of lines, read 1.45x slower in bulk than by the loop with runs from 32 lines on
MAX_KEY_SHARE = 0.25  # a piece with more distinct keys than this share of its lines: the line loop
SAMPLE_CHARS = 16_384  # the head of a piece whose prefixes say whether keying it pays

EVENT, COLL, TUNING = 0, 1, 2


@dataclass(slots=True)
class Key:
    """What a distinct line (opCount aside) is: its kind, its prefix and what its kind needs."""

    kind: int
    prefix: str = ""
    ptr: str = ""  # COLL: the comm pointer the fast path reads
    op: str | None = None  # COLL: what a TUNING line without an op name borrows from it
    fields: pt.TuningFields | None = None  # TUNING


def classify(rep: str) -> Key:
    """The loop's tests on a representative line: the COLL fast path's, else what ``_line`` would do."""
    k = rep.find("NCCL INFO ")
    if k < 0:
        return Key(EVENT)
    if "opCount " in rep:
        if rep.count("NCCL ", k + 10) != 0:
            return Key(EVENT)
        i = rep.rfind(" comm ")
        if i <= k or rep.find(" opCount ") < k + 10:
            return Key(EVENT)
        j = rep.find(" ", i + 6)
        ptr = rep[i + 6 : j] if j > 0 else rep[i + 6 :].rstrip()
        msg = rep[k + 10 :]
        return Key(COLL, rep[:k], ptr, msg[: msg.find(":")] if ":" in msg else None)
    msg = rep[k + 10 :]
    if "NCCL " in msg or " via " in msg or "Bytes -> Algo" not in msg:
        return Key(EVENT)
    fields = pt.tuning_fields(msg.rstrip())
    if fields is None:
        return Key(EVENT)
    return Key(TUNING, rep[:k], fields=fields)


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of non-negative integers, ascending: ``np.unique`` without its sort where the values
    are few against their count (a bincount costs their maximum: a run of 50 lines among a batch of 100k keys,
    as when every second's lines carry their own timestamp, must not pay for the batch)."""
    n = len(values)
    if not n:
        return values[:0]
    if values.max() > 4 * n + 1024:
        return np.unique(values)
    return np.flatnonzero(np.bincount(values))


def groups(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct code's first row, and each row's group (numbered by code, ascending): what
    ``np.unique(code, return_index=True, return_inverse=True)`` gives, without its sort when the codes are
    non-negative and few."""
    n = len(code)
    if not n or code.min() < 0 or code.max() > 4 * n + 1024:
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)
    present = np.bincount(code) > 0
    inverse = (np.cumsum(present) - 1)[code]
    first = np.full(int(np.count_nonzero(present)), n, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(n))
    return first, inverse


_TOKENS = ((1, "opCount"), (3, "sendbuff"), (5, "recvbuff"), (7, "count"), (9, "datatype"), (11, "op"),
           (13, "root"), (15, "comm"))


def split_ok(msg: str) -> bool:
    """``colls._by_split``'s test, in Python: the keywords sit where the format puts them."""
    f = msg.split(" ", 19)
    return len(f) > 15 and f[0].endswith(":") and all(f[i] == word for i, word in _TOKENS)


@dataclass
class Batch:
    """Dense pieces split and keyed together (one polars pass for many small files)."""

    lines: pl.Series  # every piece's lines, line breaks kept (as ``io.StringIO(newline=None)`` gives them)
    key: np.ndarray  # per line: index into ``keys``
    keys: list[Key]
    kinds: np.ndarray  # per key: its kind
    first: np.ndarray  # per key: its first line
    msgs: list[str]  # per key: the COLL message its lines share, opCount 0 ("" for other keys)
    op_count: np.ndarray  # per line: its opCount if its key is a COLL key (else 0)


@dataclass
class Piece:
    """One piece of a batch: lines ``start:end`` of it."""

    batch: Batch
    start: int
    end: int


OPCOUNT = r" opCount [0-9a-fA-F]{1,15} "  # the first one a line holds: left out of its key
_OPCOUNT = re.compile(OPCOUNT)


def worth_it(part: str) -> bool:
    """Whether the lines of a piece's head repeat their prefixes (a log of one or a few threads); not where
    every line has its own (a timestamp before the NCCL prefix): keys would be as many as lines."""
    head = part[:SAMPLE_CHARS].splitlines()[:-1] or [part]
    prefixes = {line[: line.find("NCCL ")] for line in head}
    return len(prefixes) <= MAX_KEY_SHARE * len(head)


def prepare(parts: list[str]) -> list[Piece | None]:
    """Split and key decoded pieces; None for a piece where bulk reading would not pay (or if keys collide)."""
    worth = [worth_it(p) for p in parts]
    out: list[Piece | None] = [None] * len(parts)
    chosen = [i for i, w in enumerate(worth) if w]
    if chosen:
        for i, piece in zip(chosen, _prepare([parts[i] for i in chosen]), strict=True):
            out[i] = piece
    return out


def _prepare(parts: list[str]) -> list[Piece | None]:
    # universal newlines, as the loop's ``io.StringIO(part, newline=None)`` reads them
    texts = [p.replace("\r\n", "\n").replace("\r", "\n") if "\r" in p else p for p in parts]
    line = pl.col("line")
    # keys are grouped by their text (a categorical: exact, no hash to check), apart per piece
    frame = (
        pl.DataFrame({"piece": pl.Series(range(len(texts)), dtype=pl.Int32), "line": texts})
        .lazy()
        .select("piece", line.str.split("\n", inclusive=True))
        .explode("line")
        .filter(line.is_not_null())
        .select(
            "piece",
            "line",
            line.str.replace(OPCOUNT, " opCount 0 ").cast(pl.Categorical(pl.Categories.random())).to_physical()
            .alias("code"),
            line.str.len_chars().alias("chars"),
        )
        .collect()
    )
    piece = frame.get_column("piece").to_numpy()
    counts = np.bincount(piece, minlength=len(texts))
    first, inverse = groups(frame.get_column("code").to_numpy().astype(np.int64) * len(texts) + piece)
    keys, msgs, hex_at, rep_len = [], [], [], []
    for first_line in frame.get_column("line").gather(pl.Series(first)).to_list():
        rep = _OPCOUNT.sub(" opCount 0 ", first_line, count=1)  # the key's text, as polars wrote it
        key = classify(rep)
        msg = ""
        j = -9
        if key.kind == COLL:
            msg = rep[len(key.prefix) + 10 :]
            j = rep.find(" opCount ")
            # the first " opCount " is the one whose digits the key left out (a line without hex digits there
            # would have had its first match later, or none: its key is the line, not "... opCount 0 ...")
            if _OPCOUNT.search(rep) is None or rep[j + 9 : j + 11] != "0 " or not split_ok(msg):
                key, msg = Key(EVENT), ""  # no hex opCount, odd spacing (the regex path): the loop reads it
        keys.append(key)
        msgs.append(msg)
        hex_at.append(j + 9)
        rep_len.append(len(rep))
    kinds = np.array([k.kind for k in keys], dtype=np.int8)
    lines = frame.get_column("line")
    ops = _op_counts(lines, frame.get_column("chars").to_numpy(), inverse, kinds, np.array(hex_at), np.array(rep_len))
    batch = Batch(lines, inverse, keys, kinds, first, msgs, ops)
    out: list[Piece | None] = []
    start = 0
    for n in counts.tolist():
        used = np.count_nonzero(np.bincount(inverse[start : start + n]))
        out.append(Piece(batch, start, start + n) if n and used <= MAX_KEY_SHARE * n else None)
        start += n
    return out


def _op_counts(
    lines: pl.Series, nchars: np.ndarray, key: np.ndarray, kinds: np.ndarray, hex_at: np.ndarray, rep_len: np.ndarray
) -> np.ndarray:
    """The opCount of each COLL line (0 for the other lines): its digits stand where its key's representative
    has its ``0`` (``hex_at``), as many as the line's characters exceed the representative's, less 1 (1 to 15
    hex digits: the regex took nothing else). The slices are short: polars keeps them inline, no copy of the
    text."""
    coll = kinds[key] == COLL
    if not coll.any():
        return np.zeros(len(key), dtype=np.int64)
    width = np.where(coll, nchars.astype(np.int64) - rep_len[key] + 1, 0)
    digits = lines.str.slice(pl.Series(hex_at[key]), pl.Series(width))
    return digits.str.to_integer(base=16, strict=False).fill_null(0).to_numpy()


@dataclass
class BulkRows:
    """COLL rows of a bulk run, parsed in the worker thread: lines ``rows`` of a batch."""

    batch: Batch
    rows: np.ndarray
    comm: np.ndarray
    proc: np.ndarray

    @property
    def height(self) -> int:
        return len(self.rows)

    def slice(self, a: int, n: int) -> BulkRows:
        return BulkRows(self.batch, self.rows[a : a + n], self.comm[a : a + n], self.proc[a : a + n])


def frame_of(segs: list[BulkRows], parse: Callable[[list[str]], pl.DataFrame]) -> pl.DataFrame:
    """The COLL rows of bulk runs, in order: each distinct message parsed once (``parse``: typed rows, in
    order), then each row its key's fields and its own opCount."""
    slots: dict[int, np.ndarray] = {}  # per batch: each key's message's place in ``msgs`` (-1: none yet)
    msgs: list[str] = []
    ats = []
    for seg in segs:
        slot = slots.get(id(seg.batch))
        if slot is None:
            slot = slots[id(seg.batch)] = np.full(len(seg.batch.keys), -1, dtype=np.int64)
        k = seg.batch.key[seg.rows]
        for u in distinct(k).tolist():
            if slot[u] < 0:
                slot[u] = len(msgs)
                msgs.append(seg.batch.msgs[u])
        ats.append(slot[k])
    table = parse(msgs)
    return table[np.concatenate(ats)].with_columns(
        pl.Series("op_count", np.concatenate([seg.batch.op_count[seg.rows] for seg in segs]), dtype=pl.Int64),
        pl.Series("comm_index", np.concatenate([seg.comm for seg in segs]), dtype=pl.Int32),
        pl.Series("process_index", np.concatenate([seg.proc for seg in segs]), dtype=pl.Int32),
    )
