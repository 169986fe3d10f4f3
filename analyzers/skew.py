"""Cross-rank skew (DESIGN §3 "Skew"): which calls on different ranks are the same collective, how late
each rank arrived, and how much of each call was waiting for a later rank versus transferring.

* **Matching.** A collective is matched across the ranks of its group by (pg, seq) wherever the call
  carries a seq (from the trace, or from the commprof annotation of the call that enqueued it); a call
  without one by order, and ``match_by`` says which: a synchronous call by its order among the group's
  order-matched calls (the k-th on each rank), an async call on a worker thread (``is_async``: DDP's
  bucket all-reduces on Gloo's two worker threads, which start in either order) by its order among the
  group's async calls of the same op and size, the one order every rank shares: such calls always
  match calls of their own op and size, so they never read as a desync. A point-to-point send from a to
  b matches b's receive from a by their order on that (group, a -> b) pair.
* **Clocks.** Ranks on different hosts have different clocks. Matched collectives finish together, so
  each host's offset is fitted from the end times of the calls it shares with other hosts (alternating
  medians: a call's common end, then each host's median deviation from it), relative to the host of the
  lowest rank. ``host_clocks`` reports each offset, the calls used and the median residual.
* **Wait and transfer.** On aligned clocks: arrival skew = latest start - earliest start; a rank's wait
  = latest start - its start (capped at its call's duration); transfer = the rest of the call. A call
  seen on one rank only cannot be matched: all of it counts as transfer, and the count is reported.
  Of a call's exposed time, ``min(exposed, wait)`` is exposed wait (see analyzers/overlap.py: the time
  the call would not have been exposed had nobody been late), the rest exposed transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from commprof.vocab import P2P_OPS, UNKNOWN

CALL_SKEW = pl.Schema({
    "rank": pl.Int32, "call": pl.Int64, "match_key": pl.String, "match_by": pl.String, "matched_ranks": pl.Int32,
    "arrival_skew_ns": pl.Int64, "wait_ns": pl.Int64, "transfer_ns": pl.Int64, "late_rank": pl.Int32,
})
HOST_CLOCKS = pl.Schema({
    "host": pl.String, "offset_ns": pl.Int64, "residual_ns": pl.Int64, "calls_used": pl.Int64, "fit": pl.String,
})
FIT_ITERATIONS = 6
# the calls matched across ranks: collectives by group (pg, seq or order), point-to-point by (pair, order)
GROUP_CALL = ~pl.col("op").is_in(list(P2P_OPS))
P2P_CALL = pl.col("op").is_in(["send", "recv"]) & pl.col("peer").is_not_null()


@dataclass(frozen=True)
class Skew:
    calls: pl.DataFrame  # CALL_SKEW: one row per rank and call
    host_clocks: pl.DataFrame  # HOST_CLOCKS: one row per host
    match_by: str  # "seq", "order", "seq and order" or "none"
    unmatched: int  # calls seen on one rank only


def _keys(coll: pl.DataFrame) -> pl.DataFrame:
    """rank, call, host, start/end, and the key that names the same call on every rank."""
    by_seq = pl.col("seq").is_not_null()
    by_size = ~by_seq & pl.col("is_async").fill_null(False)
    group = (
        coll.filter(GROUP_CALL)
        .sort("rank", "start_ns", "call")
        .with_columns(pl.when(by_seq).then(pl.lit(0)).when(by_size).then(pl.lit(1)).otherwise(pl.lit(2)).alias("_how"))
        .with_columns(pl.int_range(pl.len()).over("rank", "pg", "_how", pl.when(by_size).then(pl.col("op")),
                                                  pl.when(by_size).then(pl.col("bytes"))).alias("_ordinal"))
        .with_columns(
            pl.when(by_seq).then(pl.format("{} seq {}", "pg", "seq"))
            .when(by_size).then(pl.format("{} async {} {}B #{}", "pg", "op", pl.col("bytes").fill_null(-1), "_ordinal"))
            .otherwise(pl.format("{} #{}", "pg", "_ordinal"))
            .alias("match_key"),
            pl.when(by_seq).then(pl.lit("seq")).otherwise(pl.lit("order")).alias("match_by"),
        )
    )
    p2p = (
        coll.filter(P2P_CALL)
        .with_columns(
            pl.when(pl.col("op") == "send").then(pl.col("rank")).otherwise(pl.col("peer")).alias("_src"),
            pl.when(pl.col("op") == "send").then(pl.col("peer")).otherwise(pl.col("rank")).alias("_dst"),
        )
        .sort("rank", "start_ns", "call")
        .with_columns(pl.int_range(pl.len()).over("rank", "pg", "_src", "_dst", "op").alias("_ordinal"))
        .with_columns(pl.format("{} {}->{} #{}", "pg", "_src", "_dst", "_ordinal").alias("match_key"),
                      pl.lit("order").alias("match_by"))
    )
    cols = ["rank", "call", "host", "start_ns", "end_ns", "match_key", "match_by"]
    return pl.concat([group.select(cols), p2p.select(cols)])


def _column(frame: pl.DataFrame, name: str, dtype: pl.DataType | type[pl.DataType]) -> pl.Expr:
    """A column the matching can do without (hand-built tables may lack it): null when absent."""
    return pl.col(name) if name in frame.columns else pl.lit(None, dtype).alias(name)


def _fit_clocks(keyed: pl.DataFrame, hosts: list[str]) -> pl.DataFrame:
    """Host offsets from the end times of calls matched across hosts (see the module doc)."""
    if len(hosts) < 2:
        fit = "single host" if hosts else "no hosts"
        return pl.DataFrame({"host": hosts, "offset_ns": [0] * len(hosts), "residual_ns": [0] * len(hosts),
                             "calls_used": [0] * len(hosts), "fit": [fit] * len(hosts)}, schema=HOST_CLOCKS)
    reference = hosts[0]
    cross = keyed.filter(pl.col("host").n_unique().over("match_key") > 1).select("match_key", "host", "end_ns")
    offsets = pl.DataFrame({"host": hosts, "offset": [0.0] * len(hosts)})
    for _ in range(FIT_ITERATIONS):
        common = (cross.join(offsets, on="host").group_by("match_key")
                  .agg((pl.col("end_ns") - pl.col("offset")).median().alias("_common")))
        dev = cross.join(common, on="match_key").with_columns((pl.col("end_ns") - pl.col("_common")).alias("_dev"))
        per_host = dev.group_by("host").agg(pl.col("_dev").median().alias("offset"))
        ref = per_host.filter(pl.col("host") == reference)["offset"]
        shift = float(ref[0]) if ref.len() else 0.0
        offsets = (pl.DataFrame({"host": hosts}).join(per_host, on="host", how="left")
                   .with_columns((pl.col("offset").fill_null(shift) - shift).alias("offset")))
    common = (cross.join(offsets, on="host").group_by("match_key")
              .agg((pl.col("end_ns") - pl.col("offset")).median().alias("_common")))
    resid = (cross.join(offsets, on="host").join(common, on="match_key")
             .with_columns((pl.col("end_ns") - pl.col("offset") - pl.col("_common")).abs().alias("_res"))
             .group_by("host").agg(pl.col("_res").median().alias("residual_ns"),
                                   pl.col("match_key").n_unique().alias("calls_used")))
    out = offsets.join(resid, on="host", how="left").with_columns(
        pl.col("offset").round().cast(pl.Int64).alias("offset_ns"),
        pl.col("residual_ns").round().cast(pl.Int64).fill_null(0),
        pl.col("calls_used").cast(pl.Int64).fill_null(0),
    ).with_columns(
        pl.when(pl.col("host") == reference).then(pl.lit("reference"))
        .when(pl.col("calls_used") > 0).then(pl.lit("aligned"))
        .otherwise(pl.lit("no call shared with other hosts; clock not aligned")).alias("fit")
    )
    return out.select(list(HOST_CLOCKS)).sort(pl.col("host") != reference, "host")


def analyze_skew(collectives: pl.DataFrame, ranks: pl.DataFrame) -> Skew:
    """``collectives``: rank, call, pg, seq, op, peer, start_ns, end_ns, and where known bytes and is_async
    (one row per rank and call);
    ``ranks``: rank, host."""
    if collectives.height == 0:
        return Skew(pl.DataFrame(schema=CALL_SKEW), pl.DataFrame(schema=HOST_CLOCKS), "none", 0)
    host_of = ranks.select("rank", pl.col("host").fill_null("?"))
    hosts = ranks.sort("rank")["host"].fill_null("?").unique(maintain_order=True).to_list()
    if collectives["rank"].n_unique() == 1:  # one rank's calls (a single trace): nothing to match them with
        keyed_calls = collectives.select((GROUP_CALL | P2P_CALL).sum()).item()
        nothing = pl.DataFrame(schema={"match_key": pl.String, "host": pl.String, "end_ns": pl.Int64})
        return Skew(pl.DataFrame(schema=CALL_SKEW), _fit_clocks(nothing, hosts), "none", int(keyed_calls))
    coll = (collectives.select("rank", "call", pl.col("pg").fill_null(UNKNOWN), "seq", "op", "peer", "start_ns",
                               "end_ns", _column(collectives, "bytes", pl.Int64),
                               _column(collectives, "is_async", pl.Boolean))
            .join(host_of, on="rank", how="left").with_columns(pl.col("host").fill_null("?")))
    keyed = _keys(coll).with_columns(pl.col("rank").n_unique().over("match_key").alias("matched_ranks"))
    matched = keyed.filter(pl.col("matched_ranks") > 1)
    clocks = _fit_clocks(matched, hosts)
    aligned = matched.join(clocks.select("host", "offset_ns"), on="host", how="left").with_columns(
        (pl.col("start_ns") - pl.col("offset_ns").fill_null(0)).alias("_start"))
    latest = pl.col("_start").max().over("match_key")
    calls = aligned.with_columns(
        (latest - pl.col("_start").min().over("match_key")).alias("arrival_skew_ns"),
        pl.min_horizontal(latest - pl.col("_start"), pl.col("end_ns") - pl.col("start_ns")).clip(0).alias("wait_ns"),
        pl.col("rank").sort_by("_start").last().over("match_key").alias("late_rank"),
    ).with_columns((pl.col("end_ns") - pl.col("start_ns") - pl.col("wait_ns")).alias("transfer_ns"))
    used = set(calls["match_by"].unique().to_list())
    match_by = "seq and order" if used == {"seq", "order"} else next(iter(used), "none")
    return Skew(calls.select(list(CALL_SKEW)).cast(dict(CALL_SKEW)), clocks,  # type: ignore[arg-type]
                match_by, keyed.height - matched.height)
