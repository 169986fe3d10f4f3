"""The hang report from NCCL RAS status reports (``ncclras``, NCCL 2.24+): per communicator and collective, the
ranks ahead (at the highest operation count any rank launched) and the ranks behind it, with their counts.

RAS counts the operations each rank *launched*, sampled host-side while the job runs, so a spread of one on a
busy job is RAS outrunning its own query; the same ranks behind by the same count in repeated queries is a
stuck communicator (NCCL's RAS documentation). A report lists a group's ranks only when the group is small (an
outlier); the other group's ranks are the communicator's ranks less those listed, when its size is known from
the summary table (``ranks_listed`` is then False). Ranks are the communicator's own (RAS does not know the
job's global ranks); node and pid are given where RAS printed them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

RAS_LAGS = pl.Schema({
    "file": pl.String(), "comm": pl.String(), "hash": pl.String(), "op": pl.String(), "nranks": pl.Int32(),
    "position": pl.String(), "ops": pl.Int64(), "behind_by": pl.Int64(), "ranks_count": pl.Int32(),
    "ranks": pl.List(pl.Int32()), "ranks_listed": pl.Boolean(), "nodes": pl.List(pl.String()),
    "pids": pl.List(pl.Int64()), "progress": pl.String(),
})


@dataclass(frozen=True)
class RasReport:
    lagging: pl.DataFrame  # RAS_LAGS: per communicator and op whose ranks disagree, one row per operation count
    notes: pl.DataFrame  # the reports' other errors and warnings (missing ranks, dead processes, status, timeouts)
    communicators: pl.DataFrame  # the last query's summary rows (groups of alike communicators)
    files: tuple[str, ...]
    versions: tuple[str, ...]
    queries: int  # the most queries (snapshots) one file holds
    statuses: dict[str, int] = field(default_factory=dict)  # communicators per errors label, last query

    @property
    def mismatched(self) -> bool:
        return self.lagging.height > 0


def ras_report(groups: pl.DataFrame, counts: pl.DataFrame, notes: pl.DataFrame,
               versions: list[str] | tuple[str, ...] = ()) -> RasReport | None:
    """None when there is no RAS report."""
    files = sorted(set(groups["file"].to_list()) | set(counts["file"].to_list()) | set(notes["file"].to_list()))
    if not files:
        return None
    last = pl.concat([f.select("file", "snapshot") for f in (groups, counts, notes)]).group_by("file").agg(
        pl.col("snapshot").max().alias("last"), pl.col("snapshot").n_unique().alias("queries"))
    at_last = {f: (s, q) for f, s, q in last.iter_rows()}
    rows: list[dict[str, Any]] = []
    for (file, comm, what), part in counts.filter(pl.col("ops").is_not_null()).group_by(
            "file", "comm", "what", maintain_order=True):
        snap, _ = at_last[file]
        now = part.filter(pl.col("snapshot") == snap)
        if now.height < 2:
            continue
        size = _size(groups, file, snap, now["group"][0])
        missing = set(notes.filter((pl.col("file") == file) & (pl.col("snapshot") == snap)
                                   & (pl.col("comm") == comm) & (pl.col("kind") == "INCOMPLETE"))
                      ["ranks"].explode().drop_nulls().to_list())
        rows += _levels(now, file, str(comm), str(what), size, missing, _progress(part))
    lagging = pl.DataFrame(rows, schema=RAS_LAGS)
    last_groups = groups.join(last.select("file", pl.col("last").alias("snapshot")), on=["file", "snapshot"])
    status_notes = _status_notes(counts, at_last)
    kept = notes.join(last.select("file", pl.col("last").alias("snapshot")), on=["file", "snapshot"]).select(
        "file", "comm", "hash", "kind", "detail", "ranks", "processes")
    statuses = dict(last_groups.group_by("errors").agg(pl.col("comms").sum()).drop_nulls("errors").iter_rows())
    return RasReport(
        lagging=lagging.sort("file", "comm", "op", "ops", descending=[False, False, False, True]),
        notes=pl.concat([kept, status_notes]), communicators=last_groups.drop("line"), files=tuple(files),
        versions=tuple(versions or sorted(set(groups["version"].drop_nulls().to_list()))),
        queries=max(last["queries"].to_list(), default=0),
        statuses={str(k): int(v) for k, v in statuses.items()})


def _size(groups: pl.DataFrame, file: str, snap: int, group: int | None) -> int | None:
    rows = groups.filter((pl.col("file") == file) & (pl.col("snapshot") == snap) & (pl.col("group") == group))
    size = rows["ranks_per_comm"][0] if rows.height else None
    return size if isinstance(size, int) else None


def _levels(now: pl.DataFrame, file: str, comm: str, op: str, size: int | None, missing: set[int],
            progress: str | None) -> list[dict[str, Any]]:
    """One row per operation count of a communicator's op: ahead (the highest count) or behind, and its ranks;
    the one group RAS did not list gets the ranks the others leave (and the ranks it heard nothing from), when
    the communicator's size says them."""
    levels = now.sort("ops", descending=True).to_dicts()
    top = max(int(lv["ops"]) for lv in levels)
    unlisted = [lv for lv in levels if len(lv["ranks"]) < lv["ranks_count"]]
    total = sum(int(lv["ranks_count"]) for lv in levels) + len(missing)
    if len(unlisted) == 1 and size is not None and total == size:
        listed = {r for lv in levels for r in lv["ranks"]} | missing
        rest = sorted(set(range(size)) - listed)
        if len(rest) == unlisted[0]["ranks_count"]:
            unlisted[0]["ranks"], unlisted[0]["inferred"] = rest, True
    return [{"file": file, "comm": comm, "hash": lv["hash"], "op": op, "nranks": size,
             "position": "ahead" if lv["ops"] == top else "behind", "ops": lv["ops"], "behind_by": top - lv["ops"],
             "ranks_count": lv["ranks_count"], "ranks": lv["ranks"],
             "ranks_listed": not lv.get("inferred", False) and len(lv["ranks"]) == lv["ranks_count"],
             "nodes": lv["nodes"] or None, "pids": lv["pids"] or None, "progress": progress} for lv in levels]


def _progress(part: pl.DataFrame) -> str | None:
    """Over a file's repeated queries: the counts at each end the same ("unchanged", a stuck communicator) or
    moved on ("advancing"); None from one query."""
    by_snap = part.group_by("snapshot").agg(pl.col("ops").min().alias("low"),
                                           pl.col("ops").max().alias("high")).sort("snapshot")
    if by_snap.height < 2:
        return None
    first, last = by_snap.row(0, named=True), by_snap.row(-1, named=True)
    return "unchanged" if (first["low"], first["high"]) == (last["low"], last["high"]) else "advancing"


def _status_notes(counts: pl.DataFrame, at_last: dict[str, tuple[int, int]]) -> pl.DataFrame:
    """Ranks of a communicator in different states (RUNNING, FINALIZE, INIT, ABORT, NOCOMM) as notes."""
    rows = []
    for lv in counts.filter(pl.col("status").is_not_null()).iter_rows(named=True):
        if lv["snapshot"] != at_last[lv["file"]][0]:
            continue
        who = f": ranks {','.join(map(str, lv['ranks']))}" if lv["ranks"] else ""
        rows.append({"file": lv["file"], "comm": lv["comm"], "hash": lv["hash"], "kind": "STATUS",
                     "detail": f"{lv['ranks_count']} rank(s) have status {lv['status']}{who}", "ranks": lv["ranks"],
                     "processes": []})
    return pl.DataFrame(rows, schema={"file": pl.String, "comm": pl.String, "hash": pl.String, "kind": pl.String,
                                      "detail": pl.String, "ranks": pl.List(pl.Int32), "processes": pl.List(pl.String)})
