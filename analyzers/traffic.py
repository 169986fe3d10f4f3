"""Bytes per step from rank to rank, per dimension and tier (the topology page's traffic matrix and links).

A point-to-point ``send`` of B bytes counts B from the sender to its peer (``recv`` records are not
counted again). Any other collective call of B bytes on a rank of an n-rank group counts B/(n-1) from
that rank to each other member (the rank's B bytes spread evenly over its group). Calls whose group's
ranks are unknown are left out (and counted). A row per (src, dst, dimension, tier): the dimension and
tier of the calls' process group, so that a view can colour links by dimension and sum rows for the total.
"""

from __future__ import annotations

import polars as pl

from commprof.vocab import UNKNOWN

P2P_OPS = ("send", "recv")
SCHEMA = {"src": pl.Int64, "dst": pl.Int64, "dimension": pl.String, "tier": pl.String, "bytes_per_step": pl.Float64}


def traffic_matrix(collectives: pl.DataFrame, process_groups: pl.DataFrame, n_steps: int
                   ) -> tuple[pl.DataFrame, int]:
    """Long table src, dst, dimension, tier, bytes_per_step, and how many calls were left out (their
    group's ranks unknown)."""
    if collectives.height == 0:
        return pl.DataFrame(schema=SCHEMA), 0
    calls = collectives.filter(pl.col("step").is_not_null() & pl.col("bytes").is_not_null())
    for column in ("dimension", "tier"):
        if column not in calls.columns:
            calls = calls.with_columns(pl.lit(UNKNOWN).alias(column))
    calls = calls.with_columns(pl.col("dimension", "tier").cast(pl.String).fill_null(UNKNOWN))
    steps = max(n_steps, 1)
    sends = calls.filter((pl.col("op") == "send") & pl.col("peer").is_not_null()).select(
        pl.col("rank").cast(pl.Int64).alias("src"), pl.col("peer").cast(pl.Int64).alias("dst"),
        pl.col("bytes").cast(pl.Float64), "dimension", "tier")
    coll = calls.filter(~pl.col("op").is_in(P2P_OPS))
    members = process_groups.select("pg", pl.col("ranks").alias("members"))
    joined = coll.join(members, on="pg", how="left")
    known = joined.filter(pl.col("members").list.len() > 1)
    left_out = joined.height - known.height
    spread = (
        known.with_columns((pl.col("bytes") / (pl.col("members").list.len() - 1)).alias("share"))
        .select(pl.col("rank").cast(pl.Int64).alias("src"), "members", "share", "dimension", "tier")
        .explode("members").rename({"members": "dst"})
        .with_columns(pl.col("dst").cast(pl.Int64))
        .filter(pl.col("dst") != pl.col("src"))
        .select("src", "dst", pl.col("share").alias("bytes"), "dimension", "tier")
    )
    both = pl.concat([sends, spread])
    keys = ["src", "dst", "dimension", "tier"]
    out = both.group_by(keys).agg((pl.col("bytes").sum() / steps).alias("bytes_per_step")).sort(keys)
    return out.select(list(SCHEMA)), left_out



# ------------------------------------------------------------------------------- per host, at any scale
# traffic_matrix makes one row per rank pair: ranks x group size rows (a DP group of 2,048 ranks: 4 M pairs
# each). Every member of a group receives the same share of a rank's bytes, so what a group carries from one
# host to another is (what the first host's ranks send) x (the second host's members) / (n - 1): the sums
# below never make a rank pair; they grow with the calls and the group members, plus (hosts apart)^2.
OTHER_HOSTS = "other hosts"
HOST_SCHEMA = {"src_host": pl.String, "dst_host": pl.String, "dimension": pl.String, "tier": pl.String,
               "bytes_per_step": pl.Float64}
HOST_BYTES = {"host": pl.String, "net_bytes_per_step": pl.Float64, "local_bytes_per_step": pl.Float64}


def _sent(collectives: pl.DataFrame, n_steps: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bytes per step with traffic_matrix's filters: (each rank's group calls: pg, rank, dimension, tier,
    bytes; point-to-point sends: src, dst, dimension, tier, bytes)."""
    calls = collectives.filter(pl.col("step").is_not_null() & pl.col("bytes").is_not_null())
    for column in ("dimension", "tier"):
        if column not in calls.columns:
            calls = calls.with_columns(pl.lit(UNKNOWN).alias(column))
    calls = calls.with_columns(pl.col("dimension", "tier").cast(pl.String).fill_null(UNKNOWN),
                               (pl.col("bytes").cast(pl.Float64) / max(n_steps, 1)).alias("bytes"))
    sends = calls.filter((pl.col("op") == "send") & pl.col("peer").is_not_null()).group_by(
        pl.col("rank").cast(pl.Int64).alias("src"), pl.col("peer").cast(pl.Int64).alias("dst"), "dimension", "tier"
    ).agg(pl.col("bytes").sum())
    coll = calls.filter(~pl.col("op").is_in(P2P_OPS)).group_by(
        pl.col("pg").cast(pl.String), pl.col("rank").cast(pl.Int64), "dimension", "tier").agg(pl.col("bytes").sum())
    return coll, sends


def _labels(ranks: pl.DataFrame, hosts: list[str] | None) -> pl.DataFrame:
    """rank, label: its host ("?" unknown), or OTHER_HOSTS when ``hosts`` are given and it is not on one."""
    host = pl.col("host").cast(pl.String).fill_null("?")
    label = host if hosts is None else pl.when(host.is_in(hosts)).then(host).otherwise(pl.lit(OTHER_HOSTS))
    return ranks.select(pl.col("rank").cast(pl.Int64), label.alias("label"))


def _group_parts(collectives: pl.DataFrame, process_groups: pl.DataFrame, labels: pl.DataFrame, n_steps: int
                 ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, int]:
    """(calls: pg, dimension, tier, label, me (1: the rank is a member of its call's group, so it does not
    send to itself), size, bytes; members per (pg, label): count; sends with src_host, dst_host; calls left
    out: their group's ranks unknown)."""
    coll, sends = _sent(collectives, n_steps)
    members = (process_groups.select(pl.col("pg").cast(pl.String), pl.col("ranks").alias("member"))
               .filter(pl.col("member").list.len() > 1)
               .with_columns(pl.col("member").list.len().cast(pl.Int64).alias("size")).explode("member")
               .with_columns(pl.col("member").cast(pl.Int64)))
    sized = members.select("pg", "size").unique()
    known = collectives.filter(pl.col("step").is_not_null() & pl.col("bytes").is_not_null()
                               & ~pl.col("op").is_in(P2P_OPS))
    left_out = known.height - known.filter(pl.col("pg").cast(pl.String).is_in(sized["pg"].implode())).height
    calls = (coll.join(members.select("pg", pl.col("member").alias("rank"), pl.lit(1, pl.Int64).alias("me")),
                       on=["pg", "rank"], how="left")
             .join(sized, on="pg", how="inner").join(labels, on="rank", how="left")
             .with_columns(pl.col("label").fill_null("?"), pl.col("me").fill_null(0)))
    counts = (members.join(labels, left_on="member", right_on="rank", how="left")
              .with_columns(pl.col("label").fill_null("?")).group_by("pg", "label").len("count"))
    p2p = (sends.join(labels.rename({"rank": "src", "label": "src_host"}), on="src", how="left")
           .join(labels.rename({"rank": "dst", "label": "dst_host"}), on="dst", how="left")
           .with_columns(pl.col("src_host", "dst_host").fill_null("?")))
    return calls, counts, p2p, left_out


def host_traffic(collectives: pl.DataFrame, process_groups: pl.DataFrame, ranks: pl.DataFrame, n_steps: int,
                 hosts: list[str] | None = None) -> tuple[pl.DataFrame, int]:
    """src_host, dst_host, dimension, tier, bytes_per_step: traffic_matrix's rows summed per host pair (both
    directions apart; a host's traffic between its own ranks as host -> itself), and the calls left out.
    ``hosts``: only those hosts apart, every other host summed into ``OTHER_HOSTS`` (what they send to the rest
    of the run and back), so that a view of a few hosts of a large run makes a few rows per group."""
    if collectives.height == 0:
        return pl.DataFrame(schema=HOST_SCHEMA), 0
    calls, counts, p2p, left_out = _group_parts(collectives, process_groups, _labels(ranks, hosts), n_steps)
    sent = calls.group_by("pg", "dimension", "tier", "size", "label", "me").agg(pl.col("bytes").sum())
    pairs = (sent.join(counts.rename({"label": "dst_host"}), on="pg")
             .with_columns((pl.col("bytes") * (pl.col("count") - pl.col("me") * (pl.col("label") == pl.col("dst_host"))
                                               .cast(pl.Int64)) / (pl.col("size") - 1)).alias("bytes"))
             .select(pl.col("label").alias("src_host"), "dst_host", "dimension", "tier", "bytes"))
    keys = ["src_host", "dst_host", "dimension", "tier"]
    out = (pl.concat([pairs, p2p.select(*keys, "bytes")]).filter(pl.col("bytes") > 0).group_by(keys)
           .agg(pl.col("bytes").sum().alias("bytes_per_step")).sort(keys))
    return out.select(list(HOST_SCHEMA)).cast(HOST_SCHEMA), left_out  # type: ignore[arg-type]


def host_bytes(collectives: pl.DataFrame, process_groups: pl.DataFrame, ranks: pl.DataFrame, n_steps: int
               ) -> pl.DataFrame:
    """host, net_bytes_per_step (what its ranks send to other hosts), local_bytes_per_step (to its own ranks):
    host_traffic's rows summed per source host, each host against all others at once (no host pairs)."""
    if collectives.height == 0:
        return pl.DataFrame(schema=HOST_BYTES)
    calls, counts, p2p, _ = _group_parts(collectives, process_groups, _labels(ranks, None), n_steps)
    share = pl.col("bytes") / (pl.col("size") - 1)
    own = (calls.join(counts, on=["pg", "label"], how="left").with_columns(pl.col("count").fill_null(0))
           .select("label", ((pl.col("count") - pl.col("me")) * share).alias("local"),
                   ((pl.col("size") - pl.col("count")) * share).alias("net")))
    same = pl.col("src_host") == pl.col("dst_host")
    p2p_rows = p2p.select(pl.col("src_host").alias("label"),
                          pl.when(same).then(pl.col("bytes")).otherwise(0.0).alias("local"),
                          pl.when(same).then(0.0).otherwise(pl.col("bytes")).alias("net"))
    out = (pl.concat([own, p2p_rows], how="vertical_relaxed").group_by("label")
           .agg(pl.col("net").sum().alias("net_bytes_per_step"), pl.col("local").sum().alias("local_bytes_per_step"))
           .rename({"label": "host"}).sort("host"))
    return out.select(list(HOST_BYTES)).cast(HOST_BYTES)  # type: ignore[arg-type]
