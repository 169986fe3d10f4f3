"""Server-side cache: every table a page needs, computed once per run (and per window for the timeline).

Callbacks pass only keys (run names, steps, windows) through the browser; the frames stay here. The run
dict is fixed at startup from the CLI, so no request can name a path: an unknown key is an error page.
"""

from __future__ import annotations

import threading
import traceback
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import polars as pl

import commprof
from commprof.dashboard import figures, transforms

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis
    from commprof.run import Run

TIMELINE_BINS = 1000  # segments per lane at most, for any window
TIMELINE_POINT_BUDGET = 150_000  # lanes × bins is capped by this (3 points per segment)
DEFAULT_TIMELINE_RANKS = 16


class RunFailed(Exception):
    """A run that loaded but could not be analyzed; the page shows ``str(self)``."""

    def __init__(self, key: str, error: BaseException) -> None:
        self.key = key
        self.error = error
        where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
        place = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
        super().__init__(f"run {key!r} could not be analyzed: {type(error).__name__}: {error}{place}")


class RunCache:
    def __init__(self, runs: dict[str, Run]) -> None:
        self.runs = dict(runs)
        self._lock = threading.Lock()
        self._analyses: dict[str, Analysis] = {}
        self._failures: dict[str, RunFailed] = {}
        # per-instance caches (a module-level lru_cache on methods would keep every app's runs alive)
        self.timeline_base = lru_cache(maxsize=8)(self._timeline_base)
        self.timeline_figure = lru_cache(maxsize=128)(self._timeline_figure)
        self.skew = lru_cache(maxsize=8)(self._skew)
        self.traffic = lru_cache(maxsize=8)(self._traffic)
        self.exposed_by = lru_cache(maxsize=32)(self._exposed_by)
        self.collective_groups = lru_cache(maxsize=8)(self._collective_groups)
        self.compare_values = lru_cache(maxsize=8)(self._compare_values)

    def keys(self) -> list[str]:
        return list(self.runs)

    def analysis(self, key: str) -> Analysis:
        """The run's analysis (computed on first use); raises KeyError or RunFailed."""
        if key not in self.runs:
            raise KeyError(key)
        with self._lock:
            if key in self._failures:
                raise self._failures[key]
            if key not in self._analyses:
                try:
                    self._analyses[key] = commprof.analyze(self.runs[key])
                except Exception as err:  # noqa: BLE001 - any analyzer bug becomes a message page
                    self._failures[key] = RunFailed(key, err)
                    raise self._failures[key] from err
            return self._analyses[key]

    def check(self, key: str) -> str | None:
        """None when the run can be shown, else the message to show."""
        if key not in self.runs:
            names = ", ".join(self.runs) or "none"
            return f"No run named {key!r}. This dashboard serves only the runs it was started with: {names}."
        try:
            self.analysis(key)
        except RunFailed as err:
            return str(err)
        return None

    # ------------------------------------------------------------ overview
    def facts(self, key: str) -> list[tuple[str, str]]:
        analysis = self.analysis(key)
        facts = analysis.facts
        manifest = facts.manifest or {}
        ranks = analysis.ranks
        hosts = sorted({h for h in ranks["host"].to_list() if h})
        manifest_gpus = [r.get("gpu_name") for r in manifest.get("ranks") or [] if isinstance(r, dict)]
        names = [g for g in ranks["gpu_name"].to_list() if g] or [g for g in manifest_gpus if g]
        gpus = [f"{names.count(g)} × {g}" for g in sorted(set(names))]
        modes = sorted(set(ranks["mode"].drop_nulls().to_list()))
        out = [
            ("run", key), ("path", facts.path), ("source", facts.kind),
            ("world size", str(facts.world_size or "?")),
            ("ranks analyzed", str(ranks.height)),
            ("hosts", f"{len(hosts)}: {', '.join(hosts[:8])}{' …' if len(hosts) > 8 else ''}" if hosts else "?"),
            ("GPUs", ", ".join(gpus) if gpus else ("none (CPU run)" if modes == ["cpu"] else "?")),
            ("backend", ", ".join(sorted(set(ranks["backend"].drop_nulls().to_list()))) or "?"),
            ("steps analyzed", str(analysis.steps_analyzed)),
        ]
        versions = manifest.get("versions") or {}
        if isinstance(versions, dict) and versions:
            out.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "launcher_python")))
        if facts.synthetic:
            out.append(("synthetic", "yes — generated, every number known by construction"))
        if analysis.warnings:
            out.append(("warnings", f"{len(analysis.warnings)}: {analysis.warnings[0]}"))
        return out

    def findings(self, key: str) -> pl.DataFrame | None:
        found = getattr(self.analysis(key), "findings", None)
        return found if isinstance(found, pl.DataFrame) else None

    def _exposed_by(self, key: str, by: str) -> pl.DataFrame:
        a = self.analysis(key)
        return a.by_dimension if by == "dimension" else a.by_tier

    # ------------------------------------------------------------ timeline
    def _timeline_base(self, key: str) -> transforms.TimelineBase:
        a = self.analysis(key)
        return transforms.timeline_base(a.tables.intervals(), a.collectives, a.steps, a.exposed_spans)

    def default_ranks(self, key: str) -> list[int]:
        ranks = self.analysis(key).ranks["rank"].to_list()
        return ranks[:DEFAULT_TIMELINE_RANKS]

    def _timeline_figure(self, key: str, start_ns: int, end_ns: int, ranks: tuple[int, ...] | None
                         ) -> tuple[go.Figure, dict[str, Any]]:
        base = self.timeline_base(key)
        rows = base.rows if ranks is None else base.rows.filter(pl.col("rank").is_in(list(ranks)))
        bins = max(50, min(TIMELINE_BINS, TIMELINE_POINT_BUDGET // max(rows.height * 3, 1)))
        segs = transforms.timeline_segments(base, (start_ns, end_ns), None if ranks is None else list(ranks), bins)
        fig = figures.timeline_figure(segs, rows, base.origin_ns, (start_ns, end_ns))
        info = {"lanes": rows.height, "segments": segs.height, "bins": bins}
        return fig, info

    # ------------------------------------------------------------ collectives
    def _collective_groups(self, key: str) -> pl.DataFrame:
        """One table row per (pg, dimension, tier, op, bytes): the analysis' call_sizes, in display units."""
        sizes = self.analysis(key).call_sizes
        if sizes.height == 0:
            return pl.DataFrame()
        return sizes.select(
            "pg", "dimension", "tier", "op", "bytes", pl.col("count").alias("calls"), "ranks",
            (pl.col("mean_ns") / 1e3).round(1).alias("mean_us"),
            (pl.col("exposed_ns_per_step") / 1e3).round(2).alias("exposed_us_per_step"),
            pl.col("busbw_gbps").round(2), pl.col("efficiency").round(3),
        )

    # ------------------------------------------------------------ skew / topology
    def _skew(self, key: str) -> tuple[pl.DataFrame, dict[str, Any] | None]:
        """Waits per rank and matched call, and the rank the others waited for most (None: nobody)."""
        a = self.analysis(key)
        worst = a.stragglers.sort("caused_wait_ns_per_step", "rank", descending=[True, False]).head(1)
        top = worst.row(0, named=True) if worst.height and worst["caused_wait_ns_per_step"][0] > 0 else None
        return transforms.skew_waits(a.collectives), top

    def _traffic(self, key: str) -> tuple[pl.DataFrame, int]:
        a = self.analysis(key)
        return a.traffic, a.traffic_left_out

    def links(self, key: str) -> pl.DataFrame:
        return transforms.group_links(self.analysis(key).process_groups)

    # ------------------------------------------------------------ compare
    def _compare_values(self, key: str) -> pl.DataFrame:
        a = self.analysis(key)
        return transforms.step_and_exposed(a.totals, a.by_dimension, a.by_tier)


def warmed(runs: dict[str, Run]) -> tuple[RunCache, list[str]]:
    """A cache with every run analyzed up front (so no page's first load pays for it), and the
    message of each run that could not be analyzed."""
    cache = RunCache(runs)
    problems = [problem for key in runs if (problem := cache.check(key))]
    return cache, problems
