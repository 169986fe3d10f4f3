"""What each pair of hosts reached: the links between nodes measured, not labelled.

A group's bandwidth is set by the slowest link it crosses (a ring waits for its slowest hop). So a pair of hosts
is at least as fast as the fastest group the two share: per pair, the best of the groups' median bus bandwidth
over their calls of >= 64 KiB, where the bandwidth part outweighs the latency (a group with only smaller calls
measures its latency, not its links, and is left out: a pair that shares no other has no row). Pairs inside
one rack share groups that stay in it; pairs across racks share only the groups that cross
the spine: with no switch topology given, two levels of pairs far apart tell the tiers apart all the same.

Computed only for runs of at most MAX_HOSTS hosts (pairs grow as the square).
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import polars as pl

MAX_HOSTS = 64
MIN_BYTES = 64 << 10
HOST_PAIRS = pl.Schema({"host_a": pl.String, "host_b": pl.String, "groups": pl.Int32, "calls": pl.Int64,
                        "busbw_gbps": pl.Float64, "tier": pl.String})


def host_pairs(collectives: pl.DataFrame, process_groups: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """One row per pair of hosts that share a group with sized calls, slowest first."""
    host_of = {int(r): h for r, h in ranks.select("rank", "host").iter_rows() if h}
    hosts = set(host_of.values())
    if len(hosts) < 2 or len(hosts) > MAX_HOSTS or "busbw_gbps" not in collectives.columns:
        return pl.DataFrame(schema=HOST_PAIRS)
    sized = collectives.filter(pl.col("busbw_gbps").is_not_null() & (pl.col("busbw_gbps") > 0)
                               & (pl.col("bytes") >= MIN_BYTES))
    per_group = sized.group_by("pg").agg(pl.col("busbw_gbps").median(), pl.len().alias("calls"))
    bandwidth = {pg: (bw, n) for pg, bw, n in per_group.iter_rows()}
    best: dict[tuple[str, str], list[tuple[float, int, str]]] = {}
    for pg, members, tier in process_groups.select("pg", "ranks", "tier").iter_rows():
        if pg not in bandwidth or bandwidth[pg][0] is None:
            continue
        spanned = sorted({host_of[r] for r in members or [] if r in host_of})
        for pair in combinations(spanned, 2):
            best.setdefault(pair, []).append((float(bandwidth[pg][0]), int(bandwidth[pg][1]), str(tier)))
    rows = []
    for (a, b), seen in best.items():
        top = max(s[0] for s in seen)
        tiers = Counter(s[2] for s in seen if s[0] == top)
        rows.append({"host_a": a, "host_b": b, "groups": len(seen), "calls": sum(s[1] for s in seen),
                     "busbw_gbps": top, "tier": tiers.most_common(1)[0][0]})
    return pl.DataFrame(rows, schema=HOST_PAIRS).sort("busbw_gbps", "host_a", "host_b")
