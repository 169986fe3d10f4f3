"""Server-side cache: every table a page needs, computed once per run (and per window for the timeline).

Callbacks pass only keys (run names, steps, windows) through the browser; the frames stay here. The run
dict is fixed at startup from the CLI, so no request can name a path: an unknown key is an error page.
A run that could not be opened at startup is kept as its message (``failures``) and shown on its page.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import polars as pl

import commprof
from commprof.analyzers import windows
from commprof.dashboard.memo import memoized
from commprof.dashboard.state import LOG
from commprof.figures import charts as figures
from commprof.figures import transforms
from commprof.figures.style import group_label, natural_key

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis, AnalysisSettings
    from commprof.run import Run

TIMELINE_BINS = 600  # segments per lane at most, for any window (about 2 px each on a wide screen)
TIMELINE_POINT_BUDGET = 60_000  # lanes × bins × 3 points: 256 lanes get 78 bins (payload ~4 MB with hover)
DEFAULT_TIMELINE_RANKS = 8
MAX_TIMELINE_RANKS = 128  # 256 lanes: the figure stays far below the browser's 8192-px canvas limit


class RunFailed(Exception):
    """A run that loaded but could not be analyzed; the page shows ``str(self)``."""

    def __init__(self, key: str, error: BaseException) -> None:
        self.key = key
        self.error = error
        where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
        place = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
        super().__init__(f"run {key!r} could not be analyzed: {type(error).__name__}: {error}{place}")


class RunCache:
    def __init__(self, runs: dict[str, Run], settings: AnalysisSettings | None = None,
                 failures: dict[str, str] | None = None, order: list[str] | None = None) -> None:
        self.runs = dict(runs)
        self.settings = settings
        self.failures = dict(failures or {})  # key -> why the run could not be opened
        self.order = order or [*self.runs, *(k for k in self.failures if k not in self.runs)]
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.Lock] = {}
        self._analyses: dict[str, Analysis] = {}
        self._failures: dict[str, RunFailed] = {}
        # per-instance caches (a module-level cache on methods would keep every app's runs alive), each
        # computed once per key however many requests ask at once (memo.py)
        self._timeline_bases = memoized(self._timeline_base, 8)
        self.timeline_figure = memoized(self._timeline_figure, 128)
        self.report = memoized(self._report, 8)
        self.perfetto = memoized(self._perfetto, 2)
        self.skew = memoized(self._skew, 8)
        self.collective_groups = memoized(self._collective_groups, 8)
        self.group_names = memoized(self._group_names, 8)
        self.default_ranks = memoized(self._default_ranks, 8)

    def warm_views(self, key: str) -> None:
        """What every page's first view reads, computed once per run before anyone asks (the analysis'
        report, the timeline's rows and its default view, the skew and collectives tables): a page's first
        render then only draws."""
        try:
            self.report(key)
            self.group_names(key)
            self.collective_groups(key)
            self.skew(key)
            base = self.timeline_base(key)
            self.timeline_figure(key, base.origin_ns, base.end_ns, self.default_ranks(key), transforms.RANK_LANES)
        except Exception:  # noqa: BLE001 - a view that fails says so on its page, when it is asked for
            LOG.warning("warming the views of %s failed", key, exc_info=True)

    def keys(self) -> list[str]:
        return list(self.order)

    def analysis(self, key: str) -> Analysis:
        """The run's analysis (computed on first use); raises KeyError or RunFailed."""
        if key not in self.runs:
            raise KeyError(key)
        done = self._analyses.get(key)
        if done is not None:  # the common case: no lock at all
            return done
        with self._lock:
            run_lock = self._run_locks.setdefault(key, threading.Lock())
        with run_lock:  # one analysis per run; another run's pages are not held up meanwhile
            if key in self._failures:
                raise self._failures[key]
            if key not in self._analyses:
                try:
                    self._analyses[key] = commprof.analyze(self.runs[key], self.settings)
                except Exception as err:  # noqa: BLE001 - any analyzer bug becomes a message page
                    self._failures[key] = RunFailed(key, err)
                    raise self._failures[key] from err
            return self._analyses[key]

    def check(self, key: str) -> str | None:
        """None when the run can be shown, else the message to show."""
        if key in self.failures:
            return f"run {key!r} could not be opened: {self.failures[key]}"
        if key not in self.runs:
            names = ", ".join(self.order) or "none"
            return f"No run named {key!r}. This dashboard serves only the runs it was started with: {names}."
        try:
            self.analysis(key)
        except RunFailed as err:
            return str(err)
        return None

    # ------------------------------------------------------------ shared
    def _group_names(self, key: str) -> dict[str, str]:
        """pg -> "mesh_dp (pg 5)"."""
        pgs = self.analysis(key).process_groups
        descs = pgs["desc"].to_list() if "desc" in pgs.columns else [None] * pgs.height
        return {str(pg): group_label(str(pg), d) for pg, d in zip(pgs["pg"].to_list(), descs, strict=True)}

    def hosts(self, key: str) -> dict[int, str]:
        ranks = self.analysis(key).ranks
        return {int(r): (h or "?") for r, h in zip(ranks["rank"].to_list(), ranks["host"].to_list(), strict=True)}

    def _report(self, key: str) -> dict[str, Any]:
        """The CLI's analyze report (analysis_json): the overview's table shows exactly the CLI's rows."""
        from commprof.report import analysis_json

        report = analysis_json.build(self.analysis(key))
        run = self.runs[key]
        if run.source.windows:  # record --every/--on-demand: the windows' trend (each window's report kept on disk)
            from commprof.report.analyzed import window_trend

            report["windows"] = window_trend(run, report, self.settings, {})
        return report

    def _perfetto(self, key: str) -> bytes:
        from commprof.export import perfetto

        return json.dumps(perfetto.build(self.analysis(key)), separators=(",", ":")).encode()

    def findings(self, key: str) -> tuple[Any, ...]:
        """The analysis' ranked findings (analyzers/findings.py); () where it computes none."""
        found = getattr(self.analysis(key), "finding_list", ())
        return tuple(found) if isinstance(found, (tuple, list)) else ()

    def finding_groups(self, key: str, finding: Any) -> list[str]:
        """A finding's groups, those of the dimension it names first ("most waited on in tp" opens a tp
        group, not the DP group whose id sorts first as text), each part in numeric order."""
        pgs = self.analysis(key).process_groups
        dims = dict(zip(pgs["pg"].cast(pl.String).to_list(), pgs["dimension"].to_list(), strict=True))
        mine = getattr(finding, "dimension", None)
        return sorted({str(p) for p in (getattr(finding, "pgs", ()) or ())},
                      key=lambda p: (dims.get(p) != mine, natural_key(p)))

    def finding_ranks(self, key: str, finding: Any, limit: int = DEFAULT_TIMELINE_RANKS * 2) -> list[int]:
        """The ranks that show a finding: its own, then the members of its groups (a straggler and the
        peers that wait for it; a bubble's pipeline stages), at most ``limit``."""
        out = [int(r) for r in (getattr(finding, "ranks", ()) or ())]
        pgs = self.analysis(key).process_groups
        members = dict(zip(pgs["pg"].cast(pl.String).to_list(), pgs["ranks"].to_list(), strict=True))
        for pg in self.finding_groups(key, finding):
            out += [int(r) for r in (members.get(pg) or [])]
        return sorted(list(dict.fromkeys(out))[:limit])  # its own ranks first, then its groups

    def findings_computed(self, key: str) -> bool:
        return bool(getattr(self.analysis(key), "findings_computed", False))

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
            ("world size", str(facts.world_size or "unknown")),
            ("ranks analyzed", str(ranks.height)),
            ("hosts", f"{len(hosts)}: {', '.join(hosts[:8])}{' …' if len(hosts) > 8 else ''}" if hosts
             else "unknown"),
            ("GPUs", ", ".join(gpus) if gpus else ("none (CPU run)" if modes == ["cpu"] else "unknown")),
            ("backend", ", ".join(sorted(set(ranks["backend"].drop_nulls().to_list()))) or "unknown"),
            ("steps analyzed", str(analysis.steps_analyzed)),
            ("calls matched", {"seq": "by sequence number", "order": "by their order in each group (no seq)",
                               "seq and order": "by sequence number, else by order"}.get(analysis.match_by,
                                                                                         "not matched")),
        ]
        versions = manifest.get("versions") or {}
        if isinstance(versions, dict) and versions:
            out.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "launcher_python")))
        if facts.synthetic:
            out.append(("synthetic", "yes — generated, every number known by construction"))
        return out

    # ------------------------------------------------------------ timeline
    def timeline_base(self, key: str, lanes: str = transforms.RANK_LANES) -> transforms.TimelineBase:
        """The run's timeline rows and boxes, once per (run, lane mode)."""
        return self._timeline_bases(key, lanes)  # positional: one cache entry whatever the call's spelling

    def _timeline_base(self, key: str, lanes: str) -> transforms.TimelineBase:
        a = self.analysis(key)
        # rank by rank: RunTables.intervals() scans each rank's slice of a shared batch file on its own (4,096
        # ranks: 119 s); rank_intervals reads each batch file once (0.8 s), the same rows in the same order
        parts = [frame for _, frame in a.tables.rank_intervals()]
        intervals = pl.concat(parts, how="vertical_relaxed") if parts else a.tables.intervals()
        return transforms.timeline_base(intervals, a.collectives, a.steps, a.exposed_spans, lanes,
                                        self.group_names(key))

    def snap_window(self, key: str, start: int, end: int) -> tuple[int, int]:
        """A window back from the browser (JSON numbers keep 53 bits: ns since 1970 lose ~256 ns) onto the
        run's own bounds and step bounds within a µs, so that the figure cached for them is found."""
        base = self.timeline_base(key)
        bounds = [base.origin_ns, base.end_ns, *base.steps["start_ns"].to_list(), *base.steps["end_ns"].to_list()]

        def snap(t: int) -> int:
            near = min(bounds, key=lambda b: abs(int(b) - t))
            return int(near) if abs(int(near) - t) <= 1000 else t

        return snap(start), snap(end)

    def _default_ranks(self, key: str) -> tuple[int, ...]:
        """The ranks worth a first look: the top finding's, else the straggler and the group that waits
        for it most, then the ranks with the most exposed comm (at most DEFAULT_TIMELINE_RANKS)."""
        a = self.analysis(key)
        chosen: list[int] = []
        for finding in self.findings(key)[:1]:
            chosen += self.finding_ranks(key, finding, DEFAULT_TIMELINE_RANKS)
        worst = a.stragglers.filter(pl.col("caused_wait_ns_per_step") > 0).sort(
            "caused_wait_ns_per_step", "rank", descending=[True, False]).head(1)
        if worst.height and not chosen:
            late = int(worst["rank"][0])
            chosen.append(late)
            waited = a.collectives.filter((pl.col("late_rank") == late) & (pl.col("rank") != late)).sort(
                "wait_ns", descending=True).head(1) if "late_rank" in a.collectives.columns else pl.DataFrame()
            if waited.height:
                pg = waited["pg"][0]
                members = a.process_groups.filter(pl.col("pg") == pg)["ranks"].to_list()
                chosen += [int(r) for r in (members[0] if members else [])]
        for r in a.rank_summary.sort("exposed_comm_ns", "rank", descending=[True, False])["rank"].to_list():
            chosen.append(int(r))
        out: list[int] = []
        for r in chosen:
            if r not in out:
                out.append(r)
        return tuple(sorted(out[:DEFAULT_TIMELINE_RANKS]))

    def _timeline_figure(self, key: str, start_ns: int, end_ns: int, ranks: tuple[int, ...], lanes: str
                         ) -> tuple[go.Figure, dict[str, Any]]:
        base = self.timeline_base(key, lanes)
        rows = base.rows.filter(pl.col("rank").is_in(list(ranks)))
        bins = max(50, min(TIMELINE_BINS, TIMELINE_POINT_BUDGET // max(rows.height * 3, 1)))
        segs = transforms.timeline_segments(base, (start_ns, end_ns), list(ranks), bins, lanes)
        if lanes == transforms.RANK_LANES:  # each comm lane says its exposed share of the window in words
            spans = self.analysis(key).exposed_spans
            share = {int(r): 100.0 * ns / max(end_ns - start_ns, 1) for r, ns in windows.exposed_in_window(
                spans.filter(pl.col("rank").is_in(list(ranks))), start_ns, end_ns).iter_rows()}
            rows = rows.with_columns(pl.when(pl.col("lane") == "comm").then(pl.format(
                "{} · {}% exposed", "label", pl.col("rank").cast(pl.Int64).replace_strict(
                    share, default=0.0, return_dtype=pl.Float64).round(1))).otherwise("label").alias("label"))
        fig = figures.timeline_figure(segs, rows, base.origin_ns, (start_ns, end_ns), base.steps)
        info = {"lanes": rows.height, "segments": segs.height, "bins": bins}
        return fig, info

    # ------------------------------------------------------------ collectives
    def _collective_groups(self, key: str) -> pl.DataFrame:
        """One table row per (pg, dimension, tier, op, bytes): the analysis' call_sizes, in display units."""
        sizes = self.analysis(key).call_sizes
        if sizes.height == 0:
            return pl.DataFrame()
        names = self.group_names(key)
        return sizes.select(
            pl.col("pg").cast(pl.String),
            pl.col("pg").cast(pl.String).replace(names).alias("group"), "dimension", "tier", "op",
            pl.col("bytes"),
            pl.when(pl.col("op") == "barrier").then(pl.lit("none (barrier)"))
            .otherwise(transforms.size_text("bytes").str.replace("size unknown", "unknown")).alias("size"),
            pl.col("count").alias("calls"), "ranks",
            (pl.col("mean_ns") / 1e6).round(4).alias("mean_ms"),
            (pl.col("exposed_ns_per_step") / 1e6).round(4).alias("exposed_ms_per_step"),
            pl.col("busbw_gbps").round(2), (pl.col("efficiency") * 100).round(1).alias("efficiency_pct"),
        )

    # ------------------------------------------------------------ skew
    def _skew(self, key: str) -> tuple[pl.DataFrame, dict[str, Any] | None]:
        """Waits per rank and matched call, and the rank the others waited for most (None: nobody)."""
        a = self.analysis(key)
        worst = a.stragglers.sort("caused_wait_ns_per_step", "rank", descending=[True, False]).head(1)
        top = worst.row(0, named=True) if worst.height and worst["caused_wait_ns_per_step"][0] > 0 else None
        return transforms.skew_waits(a.collectives, self.group_names(key)), top

    def links(self, key: str) -> pl.DataFrame:
        return transforms.group_links(self.analysis(key).process_groups)

    # ------------------------------------------------------------ compare
    def compare_values(self, key: str) -> pl.DataFrame:
        a = self.analysis(key)
        return transforms.compare_metrics(a.totals, a.by_dimension, a.by_tier)


def warm_in_background(cache: RunCache, report: Callable[[str], None],
                       then: Callable[[str], object] | None = None) -> threading.Thread:
    """Analyze every run in a thread, so that the server answers at once (a page asked for meanwhile waits
    for its run's analysis on the cache's lock); ``report`` gets each run's problem; ``then(key)`` runs
    after a run's views are warm (the app builds its overview page)."""

    def work() -> None:
        for key in list(cache.runs):
            problem = cache.check(key)
            if problem:
                report(problem)
            else:
                cache.warm_views(key)
                try:
                    if then is not None:
                        then(key)
                except Exception:  # noqa: BLE001 - the page says what failed when it is asked for
                    LOG.warning("building the first page of %s failed", key, exc_info=True)

    thread = threading.Thread(target=work, name="commprof-warm", daemon=True)
    thread.start()
    return thread


def warmed(runs: dict[str, Run], settings: AnalysisSettings | None = None, failures: dict[str, str] | None = None,
           order: list[str] | None = None) -> tuple[RunCache, list[str]]:
    """A cache with every run analyzed up front (so no page's first load pays for it), and the
    message of each run that could not be analyzed."""
    cache = RunCache(runs, settings, failures, order)
    problems = [problem for key in runs if (problem := cache.check(key))]
    for key in runs:
        if cache.check(key) is None:
            cache.warm_views(key)
    return cache, problems
