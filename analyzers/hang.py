"""The hang report from Flight Recorder dumps: per process group, the last collective any member entered
(the group's frontier), who waits in it and who never arrived.

Calls are matched across ranks by ``collective_seq_id`` within a group (the seq PyTorch gives every
collective of a group, the same on every member). A member whose last seq is below the frontier stopped
before the call its peers wait in; a member with no entry of the group at all never entered any of the
calls the dumps still hold (or dumped nothing), unless its dump starts after that call was made (its ring
buffer rolled over: it says nothing about that call). A rank that is behind or absent wherever it appears, and
never among those waiting, is where to look first: the others wait for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

HANG_GROUPS = pl.Schema({
    "pg": pl.String(), "desc": pl.String(), "size": pl.Int32(), "seq": pl.Int64(), "op": pl.String(),
    "state": pl.String(), "waiting": pl.List(pl.Int32()), "behind": pl.List(pl.Int32()),
    "behind_last_seq": pl.List(pl.Int64()), "absent": pl.List(pl.Int32()), "since_ns": pl.Int64(),
})


@dataclass(frozen=True)
class HangReport:
    groups: pl.DataFrame  # HANG_GROUPS: one row per group where a member did not reach the frontier
    suspects: tuple[int, ...]  # behind or absent wherever they appear, never waiting
    empty_dumps: tuple[int, ...]  # ranks whose dump holds no entry at all
    ranks: tuple[int, ...]  # ranks with a readable dump
    groups_seen: int
    timed: bool  # some entry carries duration_ms (TORCH_NCCL_ENABLE_TIMING)
    states: dict[str, int] = field(default_factory=dict)  # entries per state

    @property
    def stalled(self) -> bool:
        return self.groups.height > 0


def hang_report(entries: pl.DataFrame, groups: pl.DataFrame) -> HangReport | None:
    """None when the run has no Flight Recorder dump."""
    dumped = sorted(set(entries["rank"].to_list()) | set(groups["rank"].to_list()))
    if not dumped:
        return None
    members = _members(entries, groups)
    coll = entries.filter(pl.col("seq").is_not_null() & pl.col("pg").is_not_null())
    last = (coll.sort("seq", "record_id", nulls_last=False).group_by("pg", "rank")
            .agg(pl.col("seq").last().alias("last_seq")))
    frontier = (coll.join(coll.group_by("pg").agg(pl.col("seq").max().alias("seq")), on=["pg", "seq"])
                .sort("time_created_ns", nulls_last=True)
                .group_by("pg").agg(pl.col("seq").first(), pl.col("op").first(), pl.col("pg_desc").first(),
                                    pl.col("rank").unique().sort().alias("at_frontier"),
                                    pl.col("rank").filter(pl.col("state") != "completed").unique().sort()
                                    .alias("waiting"),
                                    pl.col("state").drop_nulls().mode().first().alias("state"),
                                    pl.col("time_created_ns").min().alias("since_ns")))
    with_entries = set(coll["rank"].to_list())
    # a rank whose dump starts after the frontier call was made holds none of that time (its ring buffer
    # rolled over): its missing entries say nothing, so it is not counted absent
    oldest = dict(coll.group_by("rank").agg(pl.col("time_created_ns").min()).iter_rows())
    rows = []
    for f in frontier.iter_rows(named=True):
        group = members.get(f["pg"], (None, sorted(set(last.filter(pl.col("pg") == f["pg"])["rank"].to_list()))))
        desc, ranks = group
        seen = dict(last.filter(pl.col("pg") == f["pg"]).select("rank", "last_seq").iter_rows())
        behind = sorted(r for r, s in seen.items() if s < f["seq"])
        absent = sorted(r for r in ranks if r not in seen and _covers(oldest.get(r), f["since_ns"], r in with_entries))
        if behind or absent:
            rows.append({"pg": f["pg"], "desc": f["pg_desc"] or desc, "size": len(ranks), "seq": f["seq"],
                         "op": f["op"], "state": f["state"], "waiting": f["waiting"], "behind": behind,
                         "behind_last_seq": [seen[r] for r in behind], "absent": absent, "since_ns": f["since_ns"]})
    table = pl.DataFrame(rows, schema=HANG_GROUPS).sort("since_ns", "pg", nulls_last=True)
    late = set(table["behind"].explode().drop_nulls().to_list()) | set(table["absent"].explode().drop_nulls().to_list())
    waiting = set(table["waiting"].explode().drop_nulls().to_list())
    states = dict(entries.group_by("state").len().drop_nulls("state").iter_rows())
    return HangReport(
        groups=table, suspects=tuple(sorted(late - waiting)),
        empty_dumps=tuple(r for r in dumped if r not in with_entries), ranks=tuple(dumped),
        groups_seen=int(coll["pg"].n_unique()), timed=bool(entries["duration_ms"].drop_nulls().len()),
        states={str(k): int(v) for k, v in states.items()},
    )


def _covers(oldest_ns: int | None, since_ns: int | None, has_entries: bool) -> bool:
    """Whether a rank's dump spans the instant the frontier call was made (an empty dump spans nothing,
    but says the rank recorded no call at all: counted absent)."""
    if not has_entries or oldest_ns is None or since_ns is None:
        return True
    return oldest_ns <= since_ns


def _members(entries: pl.DataFrame, groups: pl.DataFrame) -> dict[str, tuple[str | None, list[int]]]:
    """Each group's members as the dumps' pg_config says (the largest list any rank gave), else the
    ranks with entries of it."""
    out: dict[str, tuple[str | None, list[int]]] = {}
    for pg, desc, ranks in groups.drop_nulls("ranks").select("pg", "desc", "ranks").iter_rows():
        if pg not in out or len(ranks) > len(out[pg][1]):
            out[pg] = (desc, sorted(ranks))
    return out
