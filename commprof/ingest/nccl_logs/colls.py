"""COLL lines, parsed a chunk at a time by polars (split on spaces, regex only for odd rows) instead
of line by line in Python.

NCCL's ``count`` is in elements of ``datatype`` and per rank where the collective has per-rank
buffers (AllGather: send count; ReduceScatter: receive count), so ``bytes`` here is NCCL's
message size, not the full buffer nccl-tests uses for busbw; the analyzers scale it by group size.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from commprof.ingest.nccl_logs import patterns as pt

COLL_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "op": pl.String,
    "op_count": pl.Int64,
    "count": pl.Int64,
    "datatype": pl.String,
    "bytes": pl.Int64,
    "redop": pl.String,
    "root": pl.Int32,
    "comm_ptr": pl.String,
    "nranks": pl.Int32,
    "stream": pl.String,
    "comm_index": pl.Int32,
    "process_index": pl.Int32,
}

_DTYPE_NAMES = {str(i): name for i, (name, _) in enumerate(pt.DATATYPES)}
_DTYPE_SIZES = {str(i): size for i, (_, size) in enumerate(pt.DATATYPES)}
_REDOPS = {str(i): name for i, name in enumerate(pt.REDOPS)}


# "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream %p"
_TOKENS = {1: "opCount", 3: "sendbuff", 5: "recvbuff", 7: "count", 9: "datatype", 11: "op", 13: "root", 15: "comm"}


def _by_split(raw: pl.DataFrame) -> pl.DataFrame:
    """Split on spaces (3x faster than a regex in polars) and keep rows whose keywords sit where
    the format puts them."""
    f = [pl.col("t").struct.field(f"field_{i}") for i in range(20)]
    has_nranks = f[17].str.starts_with("[nranks=")
    frame = raw.select(pl.col("msg").str.splitn(" ", 20).alias("t"), "comm_index", "process_index").select(
        f[0].str.strip_suffix(":").alias("op"),
        f[2].alias("opcount"),
        f[8].alias("count"),
        f[10].alias("dtype"),
        f[12].alias("redop"),
        f[14].alias("root"),
        f[16].str.strip_chars_end().alias("ptr"),
        pl.when(has_nranks).then(f[17].str.strip_prefix("[nranks=").str.strip_suffix("]")).alias("nranks"),
        pl.when(has_nranks).then(f[19]).otherwise(f[18]).str.strip_chars_end().alias("stream"),
        "comm_index",
        "process_index",
        pl.all_horizontal([f[i] == word for i, word in _TOKENS.items()] + [f[0].str.ends_with(":")])
        .fill_null(False)
        .alias("ok"),
    )
    return frame


def _by_regex(raw: pl.DataFrame) -> pl.DataFrame:
    """The slow path, for rows the split did not place (odd spacing)."""
    return (
        raw.select(pl.col("msg").str.extract_groups(pt.COLL.pattern).alias("g"), "comm_index", "process_index")
        .unnest("g")
        .filter(pl.col("op").is_not_null())
    )


def _typed(parsed: pl.DataFrame) -> pl.DataFrame:
    dtype, count = pl.col("dtype"), pl.col("count").cast(pl.Int64, strict=False)
    frame = parsed.select(
        "op",
        pl.col("opcount").str.to_integer(base=16, strict=False).alias("op_count"),
        count.alias("count"),
        dtype.replace_strict(_DTYPE_NAMES, default=pl.lit("dtype") + dtype).alias("datatype"),
        (count * dtype.replace_strict(_DTYPE_SIZES, default=None)).cast(pl.Int64).alias("bytes"),
        pl.col("redop").replace_strict(_REDOPS, default=pl.lit("user")).alias("redop"),
        pl.col("root").cast(pl.Int32, strict=False),
        pl.col("ptr").alias("comm_ptr"),
        pl.col("nranks").cast(pl.Int32, strict=False),
        "stream",
        "comm_index",
        "process_index",
    )
    return frame.cast(COLL_SCHEMA)  # type: ignore[arg-type]


def _raw(msgs: list[str], comm_index: list[int], process_index: list[int]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "msg": pl.Series(msgs, dtype=pl.String),
            "comm_index": pl.Series(comm_index, dtype=pl.Int32),
            "process_index": pl.Series(process_index, dtype=pl.Int32),
        }
    )


Segment = Any  # bulk.BulkRows | tuple[list[str], list[int], list[int]]


def chunk_frame(segments: list[Segment]) -> tuple[pl.DataFrame, int]:
    """A chunk of COLL rows in line order, given as raw messages (with their comm and process indices) and
    bulk runs (``bulk.BulkRows``). As ``coll_frame`` of all its messages: the rows the split placed, in order,
    then those only the regex placed; and how many neither did. One parse of all the raw messages, one of
    the bulk runs' distinct messages, then the pieces put back in order."""
    from commprof.ingest.nccl_logs.bulk import BulkRows, frame_of

    raws = [seg for seg in segments if not isinstance(seg, BulkRows)]
    bulks = [seg for seg in segments if isinstance(seg, BulkRows)]
    msgs = [m for seg in raws for m in seg[0]]
    n_raw = len(msgs)
    comm = [c for seg in raws for c in seg[1]]
    proc = [p for seg in raws for p in seg[2]]
    typed: pl.DataFrame | None = None
    odd_frame = None
    bad = 0
    ok_counts: list[int] = []

    def parse(bulk_msgs: list[str]) -> pl.DataFrame:
        """All the chunk's messages split at once: the raw ones, then the bulk runs' (all placed)."""
        nonlocal typed, odd_frame, bad
        n = len(bulk_msgs)
        raw = _raw(msgs + bulk_msgs, comm + [0] * n, proc + [0] * n)
        split = _by_split(raw)
        ok = split.get_column("ok")
        parsed = _typed(split.filter(ok).drop("ok"))
        okn = ok.to_numpy()
        at = 0
        for seg in raws:
            ok_counts.append(int(okn[at : at + len(seg[0])].sum()))
            at += len(seg[0])
        n_ok = sum(ok_counts)
        assert parsed.height == n_ok + n, "bulk messages are placed by the split"
        typed = parsed.slice(0, n_ok)
        bad = n_raw - n_ok
        if bad:
            columns = ["op", "opcount", "count", "dtype", "redop", "root", "ptr", "nranks", "stream", "comm_index",
                       "process_index"]
            odd_frame = _typed(_by_regex(raw.head(n_raw).filter(~ok.head(n_raw))).select(columns))
            bad -= odd_frame.height
        return parsed.slice(n_ok)

    bulk_frame = frame_of(bulks, parse) if bulks else None
    if bulk_frame is None and raws:
        parse([])
    frames = []
    raw_at = bulk_at = 0
    raw_i = 0
    for seg in segments:
        if isinstance(seg, BulkRows):
            assert bulk_frame is not None
            frames.append(bulk_frame.slice(bulk_at, seg.height))
            bulk_at += seg.height
        else:
            assert typed is not None
            n = ok_counts[raw_i]
            raw_i += 1
            if n:
                frames.append(typed.slice(raw_at, n))
                raw_at += n
    if odd_frame is not None:
        frames.append(odd_frame)
    if not frames:
        return pl.DataFrame(schema=COLL_SCHEMA), bad
    return pl.concat(frames, rechunk=True), bad


def coll_frame(msgs: list[str], comm_index: list[int], process_index: list[int]) -> tuple[pl.DataFrame, int]:
    """Parse COLL messages; returns the rows that parsed and how many did not (cut lines)."""
    return chunk_frame([(msgs, comm_index, process_index)])
