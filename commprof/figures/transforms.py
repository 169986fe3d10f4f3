"""Pure table shaping behind the pages: polars in, polars out, no Dash, no new numbers.

Rules the pages show (and tests pin):

* **Timeline aggregation**: per lane and category, intervals are clipped to the window and merged into
  their union; up to ``bins`` pieces are drawn as they are, beyond that each bin draws the time covered in
  it (analyzers/windows.py) from its start. A drawn length is always the true time, so the black
  (exposed) part of a lane in any window is the analysis' exposed time there, at every zoom.

Every number comes from the analysis (analyzers/): these only select rows and shape them for figures.
* **Links**: each process group is drawn as a ring over its sorted ranks; a pair linked by several
  groups keeps the smallest group (the most specific one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from commprof.analyzers import intervals as iv
from commprof.analyzers import windows
from commprof.vocab import UNKNOWN


# ---------------------------------------------------------------- timeline
@dataclass
class TimelineBase:
    """A run's timeline inputs, prepared once: rows, lane intervals by category, exposed time per rank."""

    origin_ns: int
    end_ns: int
    rows: pl.DataFrame  # row, rank, lane, label
    boxes: pl.DataFrame  # row, category, start_ns, end_ns (compute/memory lanes and comm by dimension)
    calls: pl.DataFrame  # row, dimension, start_ns, end_ns, op, pg, bytes, busbw_gbps, exposed_ns (per call)
    exposed: dict[int, iv.Union]  # rank -> exposed comm spans (from the analysis)
    steps: pl.DataFrame  # step, start_ns, end_ns (over ranks)


def _short_lane(lane: str) -> str:
    if lane.startswith("gpu ") and " stream " in lane:
        return "s" + lane.rsplit(" ", 1)[-1]
    return lane


STREAM_LANES = "streams"  # one lane per stream/thread, as the trace has them
RANK_LANES = "ranks"  # one compute and one comm lane per rank (the default)


def timeline_base(intervals: pl.DataFrame, collectives: pl.DataFrame, steps: pl.DataFrame,
                  exposed_spans: pl.DataFrame, lanes: str = RANK_LANES,
                  group_names: dict[str, str] | None = None) -> TimelineBase:
    """The timeline's rows and boxes. With ``RANK_LANES`` every rank has two rows, its compute (and
    memory) work on all streams merged into one, and its collectives on all streams merged into the other."""
    keep = intervals.filter(pl.col("kind").cast(pl.String).is_in(["compute", "comm", "memory"]))
    if lanes == RANK_LANES:
        keep = keep.with_columns(pl.when(pl.col("kind").cast(pl.String) == "comm").then(pl.lit("comm"))
                                 .otherwise(pl.lit("compute")).alias("lane"))
        collectives = collectives.with_columns(pl.lit("comm").alias("lane"))
        ranks = sorted(set(keep["rank"].to_list()) | set(collectives["rank"].to_list()))
        rows = pl.DataFrame({"rank": [r for r in ranks for _ in range(2)],
                             "lane": ["compute", "comm"] * len(ranks)},
                            schema={"rank": keep.schema["rank"], "lane": pl.String})
        rows = rows.with_row_index("row").with_columns(
            pl.col("row").cast(pl.Int64), pl.format("rank {} {}", "rank", "lane").alias("label"))
    else:
        rows = (
            keep.select("rank", "lane").unique()
            .with_columns(pl.col("lane").str.extract(r"(\d+)\D*$").cast(pl.Int64, strict=False).alias("_n"))
            .sort("rank", "_n", "lane").drop("_n")
            .with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
            .with_columns(pl.format("r{} {}", "rank", pl.col("lane").map_elements(_short_lane, pl.String))
                          .alias("label"))
        )
    lane_boxes = (
        keep.filter(pl.col("kind").cast(pl.String) != "comm")
        .join(rows.select("rank", "lane", "row"), on=["rank", "lane"])
        .select("row", pl.col("kind").cast(pl.String).alias("category"), "start_ns", "end_ns")
    )
    names = group_names or {}
    calls = collectives.join(rows.select("rank", "lane", "row"), on=["rank", "lane"]).select(
        "row", "rank", pl.col("dimension").fill_null(UNKNOWN), pl.col("tier").fill_null(UNKNOWN), "start_ns",
        "end_ns", "op", pl.col("pg").cast(pl.String).replace(names).fill_null(UNKNOWN).alias("group"), "bytes",
        "busbw_gbps", "exposed_ns",
    ).sort("row", "start_ns")
    comm_boxes = calls.select("row", pl.concat_str(pl.lit("comm:"), "dimension").alias("category"),
                              "start_ns", "end_ns")
    exposed: dict[int, iv.Union] = {
        int(rank): (frame["start_ns"].to_numpy().astype(np.int64), frame["end_ns"].to_numpy().astype(np.int64))
        for (rank,), frame in exposed_spans.sort("rank", "start_ns").partition_by("rank", as_dict=True).items()
    }
    step_windows = steps.group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("step")
    origin = int(intervals["start_ns"].min() or 0) if intervals.height else 0  # type: ignore[arg-type]
    end = int(intervals["end_ns"].max() or 0) if intervals.height else 1  # type: ignore[arg-type]
    if steps.height:
        origin = min(origin, int(steps["start_ns"].min()))  # type: ignore[arg-type]
        end = max(end, int(steps["end_ns"].max()))  # type: ignore[arg-type]
    return TimelineBase(origin, end, rows, pl.concat([lane_boxes, comm_boxes]), calls, exposed, step_windows)


def lane_pieces(starts: npt.ArrayLike, ends: npt.ArrayLike, lo: int, hi: int, bins: int
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """What a lane draws of [start, end) in the window [lo, hi): (draw_start, draw_end, span_lo, span_hi).

    At most ``bins`` pieces of the union: drawn exactly. More: one piece per bin that holds any, as long as
    the time covered in the bin (analyzers/windows.py) and drawn from the bin's start, so the drawn length
    in any window is the covered time, whatever the zoom. span_lo/span_hi: the time a piece stands for."""
    us, ue = iv.clip(iv.union(np.asarray(starts, np.int64), np.asarray(ends, np.int64)), lo, hi)
    if us.size <= bins:
        return us, ue, us, ue
    edges = windows.bin_edges(lo, hi, bins)
    covered = windows.covered_per_bin(us, ue, edges)
    full = covered > 0
    first = edges[:-1][full]
    return first, first + covered[full], first, edges[1:][full]


def timeline_segments(base: TimelineBase, window: tuple[int, int], ranks: list[int] | None, bins: int,
                      lanes: str = RANK_LANES) -> pl.DataFrame:
    """Segments to draw for the window: row, category, start_ns, end_ns (drawn), calls (comm) and hover.
    The "exposed" category: the analysis' exposed spans of the lane's rank (``STREAM_LANES``: the part that
    falls on this stream's calls)."""
    lo, hi = window
    rows = base.rows if ranks is None else base.rows.filter(pl.col("rank").is_in(ranks))
    wanted = set(rows["row"].to_list())
    boxes = base.boxes.filter(pl.col("row").is_in(wanted) & (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi))
    out: list[pl.DataFrame] = []

    def add(row: int, category: str, starts: npt.ArrayLike, ends: npt.ArrayLike) -> None:
        s, e, span_lo, span_hi = lane_pieces(starts, ends, lo, hi, bins)
        out.append(pl.DataFrame({"row": np.full(s.size, row, np.int64), "category": [category] * s.size,
                                 "start_ns": s, "end_ns": e, "span_lo": span_lo, "span_hi": span_hi}))

    for (row, category), frame in boxes.partition_by("row", "category", as_dict=True).items():
        add(int(row), str(category), frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy())
    rank_of = dict(zip(rows["row"].to_list(), rows["rank"].to_list(), strict=True))
    comm_rows = boxes.filter(pl.col("category").str.starts_with("comm:"))["row"].unique().to_list()
    for row in comm_rows:
        ex = base.exposed.get(int(rank_of[row]), iv.EMPTY)
        if lanes != RANK_LANES:
            lane_calls = base.calls.filter(pl.col("row") == row)
            ex = iv.intersect(iv.union(lane_calls["start_ns"].to_numpy(), lane_calls["end_ns"].to_numpy()), ex)
        add(int(row), "exposed", ex[0], ex[1])
    schema = {"row": pl.Int64, "category": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64,
              "span_lo": pl.Int64, "span_hi": pl.Int64}
    segs = pl.concat([f.cast(schema) for f in out]) if out else pl.DataFrame(schema=schema)  # type: ignore[arg-type]
    calls = base.calls.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi) & pl.col("row").is_in(wanted))
    return _with_hover(segs.sort("row", "category", "start_ns"), calls.with_columns(
        pl.col("start_ns").clip(lower_bound=lo), pl.col("end_ns").clip(upper_bound=hi)))


def size_text(column: str) -> pl.Expr:
    """Bytes as text with an SI prefix; a missing size reads "size unknown"."""
    b = pl.col(column).cast(pl.Float64)
    return (pl.when(b.is_null() | (b < 0)).then(pl.lit("size unknown"))
            .when(b >= 1e9).then(pl.format("{} GB", (b / 1e9).round(1)))
            .when(b >= 1e6).then(pl.format("{} MB", (b / 1e6).round(1)))
            .when(b >= 1e3).then(pl.format("{} KB", (b / 1e3).round(1)))
            .otherwise(pl.format("{} B", b.cast(pl.Int64))))


def _ms(column: str) -> pl.Expr:
    return (pl.col(column).cast(pl.Float64) / 1e6).round(4)


def _with_hover(segs: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Hover per comm segment, naming rank, group, dimension, tier and size when the segment holds one
    collective, else how many were merged and their exposed time."""
    comm = segs.filter(pl.col("category").str.starts_with("comm:")).with_columns(
        pl.col("category").str.strip_prefix("comm:").alias("dimension")
    )
    if comm.height == 0:
        return segs.drop("span_lo", "span_hi").with_columns(pl.lit(0, pl.Int64).alias("calls"),
                                                            pl.lit(None, pl.String).alias("hover"))
    seg_key = comm.select("row", "dimension", pl.col("span_lo").alias("start_ns"),
                          pl.col("start_ns").alias("seg_start"), pl.col("span_hi").alias("seg_end"))
    joined = (
        calls.sort("start_ns")
        .join_asof(seg_key.sort("start_ns"), on="start_ns", by=["row", "dimension"], strategy="backward",
                   check_sortedness=False)
        .filter(pl.col("seg_start").is_not_null() & (pl.col("start_ns") < pl.col("seg_end")))
    )
    per_seg = joined.group_by("row", "dimension", "seg_start").agg(
        pl.len().alias("calls"), pl.col("rank").first(), pl.col("op").first(), pl.col("group").first(),
        pl.col("tier").first(), pl.col("bytes").first(), pl.col("busbw_gbps").first(), pl.col("exposed_ns").sum(),
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("dur_ns"),
    ).with_columns(
        pl.when(pl.col("calls") == 1).then(pl.format(
            "rank {} · {} · {}<br>dimension {} · tier {}<br>{} · busbw {}<br>exposed {} ms of {} ms",
            "rank", "op", "group", "dimension", "tier", size_text("bytes"),
            pl.when(pl.col("busbw_gbps").is_null()).then(pl.lit("unknown"))
            .otherwise(pl.format("{} GB/s", pl.col("busbw_gbps").round(2))),
            _ms("exposed_ns"), _ms("dur_ns"),
        )).otherwise(pl.format("rank {} · {} collectives merged (zoom in to see each)<br>dimension {}<br>"
                               "exposed {} ms of {} ms", "rank", "calls", "dimension", _ms("exposed_ns"),
                               _ms("dur_ns"))).alias("hover")
    ).select("row", pl.concat_str(pl.lit("comm:"), "dimension").alias("category"),
             pl.col("seg_start").alias("start_ns"), "calls", "hover")
    return segs.drop("span_lo", "span_hi").join(per_seg, on=["row", "category", "start_ns"], how="left").with_columns(
        pl.col("calls").fill_null(0).cast(pl.Int64)
    )


# ---------------------------------------------------------------- skew
def skew_waits(collectives: pl.DataFrame, group_names: dict[str, str] | None = None) -> pl.DataFrame:
    """One row per rank and matched call: key, pg, label (group, dimension, op), first_ns, wait_ns (the
    analysis' wait: time blocked on the latest rank to arrive)."""
    c = collectives.filter(pl.col("match_key").is_not_null() & pl.col("step").is_not_null())
    c = c.with_columns(pl.col("pg").cast(pl.String).replace(group_names or {}).alias("group"))
    return (c.group_by("match_key", "rank").agg(pl.col("wait_ns").max(), pl.col("start_ns").min(),
                                                pl.col("op").first(), pl.col("pg").first(),
                                                pl.col("group").first(), pl.col("dimension").first(),
                                                pl.col("step").first())
            .with_columns(pl.col("start_ns").min().over("match_key").alias("first_ns"),
                          pl.format("{} · {} · {}", "group", "dimension", "op").alias("label"))
            .rename({"match_key": "key"}).sort("first_ns", "rank"))


def skew_by_group(waits: pl.DataFrame, hosts: dict[int, str], group_names: dict[str, str],
                  max_rows: int) -> tuple[pl.DataFrame, str]:
    """The skew heatmap's cells: row (a rank, or a host beyond ``max_rows`` ranks), column ("tp · pg 1": short,
    so that the labels stay shorter than the heatmap; the group's name is in ``group``), wait_ns_per_step (a
    host's row: its worst rank). Returns (cells, "rank"|"host")."""
    by = "rank" if waits["rank"].n_unique() <= max_rows else "host"
    frame = waits.with_columns(
        pl.format("{} · pg {}", "dimension", "pg").alias("column"),
        pl.col("pg").replace_strict(group_names, default=pl.col("pg")).alias("group"),
        pl.col("rank").cast(pl.Int64).replace_strict(hosts, default="?", return_dtype=pl.String).alias("host"),
    )
    if by == "rank":
        cells = frame.select(pl.col("rank").cast(pl.String).alias("row"), "rank", "host", "pg", "dimension",
                             "column", "group", "wait_ns_per_step", "max_wait_ns", "max_wait_step")
    else:
        cells = (frame.sort("wait_ns_per_step", descending=True)
                 .group_by("host", "pg", "dimension", "column", "group", maintain_order=True)
                 .agg(pl.col("rank").first(), pl.col("wait_ns_per_step").first(), pl.col("max_wait_ns").max(),
                      pl.col("max_wait_step").first())
                 .with_columns(pl.col("host").alias("row")))
    return cells, by


# ---------------------------------------------------------------- topology
def group_links(process_groups: pl.DataFrame) -> pl.DataFrame:
    """Rank pairs linked by a process group: a, b, pg, size, dimension, tier (see the module doc)."""
    rows: list[dict[str, object]] = []
    for g in process_groups.iter_rows(named=True):
        members = sorted(set(g["ranks"] or []))
        if len(members) < 2:
            continue
        pairs = [(members[i], members[(i + 1) % len(members)]) for i in range(len(members))]
        if len(members) == 2:
            pairs = pairs[:1]
        rows.extend({"a": min(p), "b": max(p), "pg": g["pg"], "size": len(members),
                     "dimension": g.get("dimension") or UNKNOWN, "tier": g.get("tier") or UNKNOWN} for p in pairs)
    schema = {"a": pl.Int64, "b": pl.Int64, "pg": pl.String, "size": pl.Int64, "dimension": pl.String,
              "tier": pl.String}
    if not rows:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame(rows, schema=schema).sort("size").unique(["a", "b"], keep="first", maintain_order=True)


# ---------------------------------------------------------------- compare
TOTAL_METRICS = (("step time", "step_ns"), ("compute", "compute_ns"), ("overlapped comm", "overlapped_comm_ns"),
                 ("exposed comm", "exposed_comm_ns"), ("exposed · waiting for late ranks", "exposed_wait_ns"),
                 ("exposed · transfer", "exposed_transfer_ns"), ("memory", "memory_ns"), ("idle", "idle_ns"))


def compare_metrics(totals: dict[str, float | None], by_dimension: pl.DataFrame, by_tier: pl.DataFrame
                    ) -> pl.DataFrame:
    """What compare puts side by side: metric, unit (ms | % | bytes | GB/s), value — the analyses' means
    per rank-step, overlap and exposed share, and per dimension and tier: exposed time, bytes, busbw."""
    rows: list[tuple[str, str, float | None]] = [(m, "ms", totals.get(k)) for m, k in TOTAL_METRICS]
    rows += [("overlap (comm hidden behind compute)", "%", totals.get("overlap_pct")),
             ("exposed share of the step", "%", totals.get("exposed_comm_pct_of_step"))]
    for by, frame in (("dimension", by_dimension), ("tier", by_tier)):
        for r in frame.iter_rows(named=True):
            rows += [(f"{by} {r[by]} · exposed", "ms", r["exposed_ns_per_step"]),
                     (f"{by} {r[by]} · bytes per step", "bytes", r["bytes_per_step"]),
                     (f"{by} {r[by]} · busbw", "GB/s", r["busbw_gbps"])]
    return pl.DataFrame({"metric": [m for m, _, _ in rows], "unit": [u for _, u, _ in rows],
                         "value": [None if v is None else float(v) for _, _, v in rows]},
                        schema={"metric": pl.String, "unit": pl.String, "value": pl.Float64})


def compare(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """metric, unit, a, b, delta (b - a), delta_pct; a metric one run lacks is null on that side (a
    dimension the other run does not have is not a zero)."""
    out = a.rename({"value": "a"}).join(b.rename({"value": "b"}), on=["metric", "unit"], how="full",
                                        coalesce=True, maintain_order="left")
    return out.with_columns(
        (pl.col("b") - pl.col("a")).alias("delta"),
        pl.when(pl.col("a") != 0).then(100.0 * (pl.col("b") - pl.col("a")) / pl.col("a").abs()).alias("delta_pct"),
    )


def host_traffic(traffic: pl.DataFrame, hosts: dict[int, str]) -> pl.DataFrame:
    """The traffic matrix rolled up to host pairs: src_host, dst_host, dimension, tier, bytes_per_step
    (a sum of the analysis' rank-pair rows; a host pair's two directions are kept apart)."""
    schema = {"src_host": pl.String, "dst_host": pl.String, "dimension": pl.String, "tier": pl.String,
              "bytes_per_step": pl.Float64}
    if traffic.height == 0:
        return pl.DataFrame(schema=schema)
    return (traffic.with_columns(
        pl.col("src").replace_strict(hosts, default="?", return_dtype=pl.String).alias("src_host"),
        pl.col("dst").replace_strict(hosts, default="?", return_dtype=pl.String).alias("dst_host"))
        .group_by("src_host", "dst_host", "dimension", "tier").agg(pl.col("bytes_per_step").sum())
        .sort("src_host", "dst_host", "dimension").select(list(schema)))
