"""Kernels whose names read like communication that no rule counts (issue 37): the user is told which, the
largest by time first, so that an in-house library's kernels can be declared (``--comm-kernel``) instead of
silently booked as compute.

Each rank's reader keeps its largest such kernels by time (commprof/ingest/kineto/reader.py): name, launches,
total ns, ns on a side stream (off the stream running most of the rank's compute, where communication
libraries put their kernels). Here they are summed over the ranks:

* **ranks** the ranks whose traces hold the name; **calls** its launches on them;
* **ns_per_rank** its time per such rank over the whole trace; **side_stream_share** the part of it off the
  ranks' main compute streams.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

SCHEMA = {"name": pl.String, "ranks": pl.Int64, "calls": pl.Int64, "ns_per_rank": pl.Float64,
          "side_stream_share": pl.Float64}
LISTED = 5  # in the report and its warning
NAME_CHARS = 80


def summarize(rows: Sequence[tuple[int, str, int, int, int]]) -> pl.DataFrame:
    """(rank, name, calls, ns, side ns) per rank -> one row per name, the largest total time first."""
    if not rows:
        return pl.DataFrame(schema=SCHEMA)
    frame = pl.DataFrame(list(rows), schema={"rank": pl.Int64, "name": pl.String, "calls": pl.Int64,
                                             "ns": pl.Int64, "side_ns": pl.Int64}, orient="row")
    return (frame.group_by("name")
            .agg(pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"), pl.col("calls").sum(),
                 pl.col("ns").sum().alias("total"), pl.col("side_ns").sum().alias("side"))
            .with_columns((pl.col("total") / pl.col("ranks")).alias("ns_per_rank"),
                          pl.when(pl.col("total") > 0).then(pl.col("side") / pl.col("total")).otherwise(0.0)
                          .alias("side_stream_share"))
            .sort(["total", "name"], descending=[True, False])
            .select(list(SCHEMA)))


def warning(uncounted: pl.DataFrame) -> str | None:
    """One line for the report: the largest such kernels and how to declare them."""
    if uncounted.height == 0:
        return None
    shown = []
    for row in uncounted.head(3).iter_rows(named=True):
        where = "on a side stream" if row["side_stream_share"] >= 0.5 else "on the main stream"
        ranks = f"{row['ranks']} rank{'s' if row['ranks'] != 1 else ''}"
        shown.append(f"{row['name'][:NAME_CHARS]!r} {row['ns_per_rank'] / 1e6:.2f} ms per rank {where} "
                     f"({ranks}, {row['calls']} calls)")
    more = f" and {uncounted.height - 3} more" if uncounted.height > 3 else ""
    return (f"{uncounted.height} kernel name(s) look like communication but no rule counts them, so their time "
            f"is compute; the largest: {'; '.join(shown)}{more}. If they are communication, declare them: "
            f"--comm-kernel 'REGEX=OP[:DIM]' or [[comm_kernel]] in commprof.toml (docs/inputs.md)")
