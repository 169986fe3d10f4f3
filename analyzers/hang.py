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


# the entry columns the hang report reads: a caller that wants only it may read only these (read_dumps' columns)
ENTRY_COLUMNS = ("rank", "pg", "pg_desc", "seq", "op", "state", "time_created_ns", "duration_ms")


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
    """None when the run has no Flight Recorder dump.

    Costs grow with the entries and the groups' sizes, never with ranks x group size: each group's members are
    taken once (the dumps' pg_config lists each once, ingest/flight_recorder), and who is behind or absent is
    found by joins over (group, rank) pairs, not per group over every rank."""
    dumped = sorted(set(entries["rank"].unique().to_list()) | set(groups["rank"].unique().to_list()))
    if not dumped:
        return None
    # lazy over the entries: no copy of them, and each aggregation reads only its columns (a group_by of the
    # eager 4M-entry table of 16,384 dumps held ~460 MB more at its peak)
    coll = entries.lazy().select(ENTRY_COLUMNS).filter(pl.col("seq").is_not_null() & pl.col("pg").is_not_null())
    last = coll.group_by("pg", "rank").agg(pl.col("seq").max().alias("last_seq")).collect()
    top = last.group_by("pg").agg(pl.col("last_seq").max().alias("seq"))  # the highest seq any member reached
    frontier = (coll.join(top.lazy(), on=["pg", "seq"])
                .sort("time_created_ns", nulls_last=True)
                .group_by("pg").agg(pl.col("seq").first(), pl.col("op").first(), pl.col("pg_desc").first(),
                                    pl.col("rank").filter(pl.col("state") != "completed").unique().sort()
                                    .alias("waiting"),
                                    # ties: the first by name, not whichever a hash puts first
                                    pl.col("state").drop_nulls().mode().sort().first().alias("state"),
                                    pl.col("time_created_ns").min().alias("since_ns")).collect())
    oldest = coll.group_by("rank").agg(pl.col("time_created_ns").min().alias("oldest_ns"),
                                       pl.lit(True).alias("has_entries")).collect()
    with_entries = set(oldest["rank"].to_list())
    table = _stalled(frontier, last, _members(groups), oldest)
    late = set(table["behind"].explode().drop_nulls().to_list()) | set(table["absent"].explode().drop_nulls().to_list())
    waiting = set(table["waiting"].explode().drop_nulls().to_list())
    states = dict(entries.lazy().group_by("state").len().drop_nulls("state").collect().iter_rows())
    return HangReport(
        groups=table, suspects=tuple(sorted(late - waiting)),
        empty_dumps=tuple(r for r in dumped if r not in with_entries), ranks=tuple(dumped),
        groups_seen=top.height, timed=bool(entries["duration_ms"].drop_nulls().len()),
        states={str(k): int(v) for k, v in states.items()},
    )


def _stalled(frontier: pl.DataFrame, last: pl.DataFrame, members: pl.DataFrame, oldest: pl.DataFrame) -> pl.DataFrame:
    """HANG_GROUPS: per group, its members below the frontier (behind) and those with no entry of it (absent)
    whose dump spans the instant the frontier call was made; the groups where either is someone."""
    at = frontier.select("pg", pl.col("seq").alias("frontier_seq"), "since_ns")
    behind = (last.join(at, on="pg").filter(pl.col("last_seq") < pl.col("frontier_seq")).sort("pg", "rank")
              .group_by("pg", maintain_order=True)
              .agg(pl.col("rank").alias("behind"), pl.col("last_seq").alias("behind_last_seq")))
    # a rank whose dump starts after the frontier call was made holds none of that time (its ring buffer
    # rolled over): its missing entries say nothing, so it is not counted absent; an empty dump spans nothing
    # but says the rank recorded no call at all: absent
    absent = (members.select("pg", pl.col("ranks").alias("rank")).explode("rank").drop_nulls("rank")
              .join(at, on="pg").join(last, on=["pg", "rank"], how="anti")
              .join(oldest, on="rank", how="left")
              .filter(pl.col("has_entries").is_null() | pl.col("oldest_ns").is_null() | pl.col("since_ns").is_null()
                      | (pl.col("oldest_ns") <= pl.col("since_ns")))
              .sort("pg", "rank").group_by("pg", maintain_order=True).agg(pl.col("rank").alias("absent")))
    seen = last.group_by("pg").len("seen")
    empty_ranks, empty_seqs = pl.lit([], dtype=pl.List(pl.Int32)), pl.lit([], dtype=pl.List(pl.Int64))
    desc = pl.col("pg_desc")
    return (frontier.join(members.rename({"desc": "members_desc"}), on="pg", how="left")
            .join(seen, on="pg", how="left").join(behind, on="pg", how="left").join(absent, on="pg", how="left")
            .with_columns(pl.when(desc.is_null() | (desc == "")).then(pl.col("members_desc")).otherwise(desc)
                          .alias("desc"),
                          pl.col("ranks").list.len().fill_null(pl.col("seen")).alias("size"),
                          pl.col("behind").fill_null(empty_ranks), pl.col("behind_last_seq").fill_null(empty_seqs),
                          pl.col("absent").fill_null(empty_ranks))
            .filter((pl.col("behind").list.len() > 0) | (pl.col("absent").list.len() > 0))
            .select([pl.col(name).cast(dtype) for name, dtype in HANG_GROUPS.items()])
            .sort("since_ns", "pg", nulls_last=True))


def _members(groups: pl.DataFrame) -> pl.DataFrame:
    """Each group's members as the dumps' pg_config says (the largest list any rank gave, the first of equal
    size; sorted), with its desc; a group no dump lists members of is not here (its members are the ranks with
    entries of it)."""
    out: dict[str, tuple[str | None, list[int]]] = {}
    for pg, desc, ranks in groups.drop_nulls("ranks").select("pg", "desc", "ranks").iter_rows():
        if pg not in out or len(ranks) > len(out[pg][1]):
            out[pg] = (desc, ranks)
    return pl.DataFrame({"pg": list(out), "desc": [d for d, _ in out.values()],
                         "ranks": [sorted(r) for _, r in out.values()]},
                        schema={"pg": pl.String, "desc": pl.String, "ranks": pl.List(pl.Int32)})
