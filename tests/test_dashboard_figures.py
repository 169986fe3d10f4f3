"""Figure builders and transforms on the 4-rank sample run and a small synthetic run."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import commprof
from commprof.dashboard.cache import RunCache
from commprof.figures import charts as figures
from commprof.figures import style, transforms
from commprof.synth_run import SynthSpec, expected_parts, make_run

SPEC = SynthSpec(ranks=16, steps=3, layout=(4, 2, 2), straggler_rank=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    root = tmp_path_factory.mktemp("figs")
    sample = root / "sample"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_4rank_profiler", sample,
                    ignore=shutil.ignore_patterns("tables"))
    synth = make_run(root / "synth", ranks=16, steps=3, layout=(4, 2, 2), straggler_rank=5)
    return RunCache({"sample": commprof.open_run(sample), "synth": commprof.open_run(synth)})


@pytest.mark.parametrize("key", ["sample", "synth"])
def test_breakdown_bars_add_up_to_step_time(runs: RunCache, key: str) -> None:
    summary = runs.analysis(key).rank_summary
    fig = figures.breakdown_figure(summary)
    assert [t.name for t in fig.data] == ["compute", "overlapped comm", "exposed comm", "memory", "idle"]
    stacked = np.sum([np.asarray(t.y) for t in fig.data], axis=0)
    # each part is a mean rounded to the ns on its own: at most 5 ns off
    assert np.allclose(stacked, summary["step_ns"].to_numpy() / 1e6, atol=5e-6)


def test_breakdown_synth_is_exact(runs: RunCache) -> None:
    fig = figures.breakdown_figure(runs.analysis("synth").rank_summary)
    exposed = dict(zip(fig.data[2].x, fig.data[2].y, strict=True))
    assert exposed["5"] == pytest.approx(expected_parts(SPEC, 5).exposed_comm_ns / 1e6)
    assert exposed["4"] == pytest.approx(expected_parts(SPEC, 4).exposed_comm_ns / 1e6)


@pytest.mark.parametrize("key", ["sample", "synth"])
def test_exposed_by_dimension_and_tier(runs: RunCache, key: str) -> None:
    a = runs.analysis(key)
    for by in ("dimension", "tier"):
        frame = a.by_dimension if by == "dimension" else a.by_tier
        # the analysis' per-dimension/tier rows: their shares add up to the ranks' exposed totals
        assert frame["exposed_ns_per_step"].sum() == pytest.approx(a.steps["exposed_comm_ns"].mean(), rel=1e-9)
        fig = figures.exposed_by_figure(frame, by)
        assert list(fig.data[0].x) == frame[by].to_list()
        noted = any("is unknown: start the dashboard with" in (ann.text or "") for ann in fig.layout.annotations)
        # the note appears exactly when nothing is classified
        assert noted == (set(frame[by].to_list()) == {"unknown"})


@pytest.mark.parametrize("key", ["sample", "synth"])
def test_timeline_full_window_is_bounded(runs: RunCache, key: str) -> None:
    base = runs.timeline_base(key)
    bins = 200
    segs = transforms.timeline_segments(base, (base.origin_ns, base.end_ns), None, bins)
    per_lane = segs.group_by("row", "category").len()
    assert per_lane["len"].max() <= bins
    fig = figures.timeline_figure(segs, base.rows, base.origin_ns, (base.origin_ns, base.end_ns))
    names = {t.name for t in fig.data}
    assert "compute" in names and "exposed part of comm" in names and any(n.startswith("comm · ") for n in names)
    # one compute and one comm lane per rank, the y range pinned to exactly those lanes
    assert base.rows.height == 2 * runs.analysis(key).ranks.height
    assert list(fig.layout.yaxis.range) == [base.rows.height - 0.5, -0.5]
    for trace in fig.data:
        rows = np.asarray(trace.y, dtype=float)
        rows = rows[~np.isnan(rows)]
        counts = np.unique(np.round(rows, 2), return_counts=True)[1]
        assert counts.max() <= 2 * bins  # two points (start, end) per segment per lane


def test_timeline_exposed_marks_match_analysis(runs: RunCache) -> None:
    base = runs.timeline_base("synth")
    step = base.steps.row(1, named=True)
    segs = transforms.timeline_segments(base, (step["start_ns"], step["end_ns"]), [5], 100_000)
    exposed = segs.filter(pl.col("category") == "exposed")
    total = int((exposed["end_ns"] - exposed["start_ns"]).sum())
    assert total == expected_parts(SPEC, 5).exposed_comm_ns
    hovers = segs.filter(pl.col("category").str.starts_with("comm:"))["hover"].to_list()
    assert any("all_reduce" in h and "exposed 0.1 ms" in h and "tier" in h and "rank 5" in h for h in hovers)


def test_lane_pieces_are_exact_up_to_bins_then_each_bin_draws_its_covered_time() -> None:
    s, e, lo, hi = transforms.lane_pieces([0, 15, 40, 300], [10, 20, 50, 310], 0, 1000, 4)
    assert s.tolist() == [0, 15, 40, 300] and e.tolist() == [10, 20, 50, 310] and lo.tolist() == s.tolist()
    # 4 pieces in 2 bins of 500 ns: the first bin holds 25 ns of them, the second 10 (never a whole bin)
    s, e, lo, hi = transforms.lane_pieces([0, 15, 40, 600], [10, 20, 50, 610], 0, 1000, 2)
    assert (s.tolist(), e.tolist(), hi.tolist()) == ([0, 500], [25, 510], [500, 1000])


@pytest.mark.parametrize("zoom", [1, 8, 200])
def test_timeline_draws_the_analysis_exposed_time_at_every_zoom(runs: RunCache, zoom: int) -> None:
    """The black drawn on each rank's lane inside a window is the analysis' exposed time there (issue 25:
    a bin was painted black if anything in it was exposed), for the whole run and two zooms into step 1."""
    from commprof.analyzers.windows import exposed_in_window

    base = runs.timeline_base("synth")
    step = base.steps.row(1, named=True)
    spans = runs.analysis("synth").exposed_spans
    first = spans.filter(pl.col("start_ns") >= step["start_ns"]).sort("start_ns").row(0, named=True)
    mid, half = (first["start_ns"] + first["end_ns"]) // 2, (base.end_ns - base.origin_ns) // (2 * zoom)
    lo, hi = (base.origin_ns, base.end_ns) if zoom == 1 else (mid - half, mid + half)
    segs = transforms.timeline_segments(base, (lo, hi), None, 40)  # fewer bins than pieces: binned
    drawn = (segs.filter(pl.col("category") == "exposed").join(base.rows, on="row")
             .group_by("rank").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("drawn")).sort("rank"))
    truth = exposed_in_window(spans, lo, hi).join(drawn, on="rank", how="left")
    assert truth["exposed_ns"].sum() > 0
    assert truth["drawn"].fill_null(0).to_list() == truth["exposed_ns"].to_list()


def test_skew_finds_the_straggler(runs: RunCache) -> None:
    waits, worst = runs.skew("synth")
    assert worst is not None and worst["rank"] == 5
    tp = waits.filter(pl.col("key").str.starts_with("2 seq"))  # rank 5's TP group is pg 2
    # the straggler waits for nobody; its TP peers wait its 50 µs at every TP call (3 steps)
    assert set(tp.filter(pl.col("rank") == 5)["wait_ns"].to_list()) == {0}
    assert set(tp.filter(pl.col("rank") != 5)["wait_ns"].to_list()) == {50_000}
    fig = figures.skew_calls_figure(waits, worst["rank"])
    assert fig.data[0].type == "heatmap" and len(fig.layout.shapes) == 1  # the straggler's row boxed
    a = runs.analysis("synth")
    cells, by = transforms.skew_by_group(a.rank_group_waits, runs.hosts("synth"), runs.group_names("synth"), 64)
    group_fig = figures.skew_group_figure(cells, by, 5)
    assert by == "rank" and all(" · " in c for c in group_fig.data[0].x)  # each column: group · dimension
    assert any("rank 5, the rank the others wait for most" in (n.text or "") for n in group_fig.layout.annotations)


def test_skew_without_seq_matches_by_ordinal(runs: RunCache) -> None:
    waits, worst = runs.skew("sample")
    assert waits.height > 0 and worst is not None
    assert waits["key"].str.contains("#").all()  # the sample's Gloo ops carry no seq: matched by order
    assert runs.analysis("sample").match_by == "order"
    # the last rank to arrive at a call waits for nobody
    assert waits.group_by("key").agg(pl.col("wait_ns").min())["wait_ns"].to_list() == [0] * waits[
        "key"].n_unique()


def test_traffic_rule(runs: RunCache) -> None:
    matrix, left_out = runs.analysis("synth").traffic, runs.analysis("synth").traffic_left_out
    assert left_out == 0
    summed = matrix.group_by("src", "dst").agg(pl.col("bytes_per_step").sum())
    cell = dict(((s, d), b) for s, d, b in summed.iter_rows())
    # rank 0: TP all-reduce 16 MiB spread over its 3 TP peers, DP all-reduce 256 MiB to its one DP peer
    assert cell[(0, 1)] == pytest.approx((16 << 20) / 3)
    assert cell[(0, 4)] == pytest.approx(256 << 20)
    assert cell[(0, 8)] == pytest.approx(8 << 20)  # pipeline send to the next stage; recv not counted again
    assert (8, 0) not in cell
    hosts = runs.hosts("synth")
    fig = figures.traffic_figure(matrix, list(range(16)), hosts)
    assert np.asarray(fig.data[0].z).shape == (16, 16)
    by_host = figures.traffic_figure(matrix.filter(pl.col("src") < 16), list(range(80)), hosts)
    assert np.asarray(by_host.data[0].z).shape[0] <= 3  # beyond 64 ranks: host x host
    sample_left_out = runs.analysis("sample").traffic_left_out
    assert sample_left_out > 0  # the sample's Gloo ops name no process group


def test_topology_links_by_group(runs: RunCache) -> None:
    links = runs.links("synth")
    assert set(links.filter(pl.col("a") == 0)["b"].to_list()) >= {1, 3, 4, 8}
    a = runs.analysis("synth")
    host_links = transforms.host_traffic(a.traffic, runs.hosts("synth"))
    fig = figures.topology_figure(a.ranks, a.traffic, host_links)
    markers = next(t for t in fig.data if t.name == "rank")
    assert len(markers.x) == 16
    boxes = [t for t in fig.data if t.fill == "toself"]
    assert len(boxes) == len(set(a.ranks["host"].to_list()))  # one box per host
    links = [t for t in fig.data if t.mode == "lines" and t.fill != "toself"]
    assert links and all("dimension" in t.text[0] and "per step" in t.text[0] for t in links)
    # up to 16 ranks every rank pair with traffic is drawn, per dimension (no cap: a cut mesh would mislead)
    pairs = a.traffic.select(pl.min_horizontal("src", "dst").alias("a"), pl.max_horizontal("src", "dst").alias("b"),
                             "dimension").unique()
    assert len(links) == pairs.height
    assert {t.line.color for t in links} <= {style.dimension_colour(d) for d in a.traffic["dimension"].unique()}


def test_busbw_scatter_and_peaks(runs: RunCache) -> None:
    calls = runs.analysis("synth").collectives
    fig = figures.busbw_figure(calls)
    assert fig.layout.xaxis.type == "log"
    assert sum(len(t.x) for t in fig.data) == calls.filter(pl.col("busbw_gbps").is_not_null()).height
    tiered = calls.with_columns(pl.lit("nvlink").alias("tier"))
    assert any(s.y0 == 450.0 for s in figures.busbw_figure(tiered).layout.shapes)
    unsized = calls.with_columns(pl.lit(None, pl.Float64).alias("busbw_gbps"))
    assert "no calls" in figures.busbw_figure(unsized).layout.annotations[0].text


def test_compare_deltas(runs: RunCache) -> None:
    deltas = transforms.compare(runs.compare_values("sample"), runs.compare_values("synth"))
    step = deltas.filter(pl.col("metric") == "step time").row(0, named=True)
    assert step["b"] == pytest.approx(2_000_000)
    assert step["delta"] == pytest.approx(step["b"] - step["a"])
    assert {"overlap (comm hidden behind compute)", "idle", "compute"} <= set(deltas["metric"].to_list())
    assert set(deltas["unit"].to_list()) <= {"ms", "%", "bytes", "GB/s"}
    fig = figures.compare_figure(deltas, "sample", "synth")
    assert [t.name for t in fig.data] == ["sample", "synth"]
    assert list(fig.data[0].y) == deltas.filter(pl.col("unit") == "ms")["metric"].to_list()


def test_dimension_colours_when_classified(runs: RunCache) -> None:
    cached = runs.timeline_base("synth")
    base = dataclasses.replace(  # a copy: the cached base stays as it is
        cached, calls=cached.calls.with_columns(pl.lit("tp").alias("dimension")),
        boxes=cached.boxes.with_columns(pl.col("category").str.replace("comm:unknown", "comm:tp")))
    segs = transforms.timeline_segments(base, (base.origin_ns, base.end_ns), [0], 500)
    fig = figures.timeline_figure(segs, base.rows, base.origin_ns, (base.origin_ns, base.end_ns))
    tp = next(t for t in fig.data if t.name == "comm · tp")
    assert tp.line.color == "#1f77b4"


def test_figures_stay_within_browser_limits_at_1024_ranks() -> None:
    """1,024 ranks on 128 hosts: the timeline (even past the page's 128-rank cap) stays under 4,000 px, so
    its 2x WebGL canvas stays under 8,192; heatmaps roll up to hosts and stay under MAX_FIGURE_PX."""
    ranks = list(range(1024))
    hosts = {r: f"node-{r // 8:03d}" for r in ranks}
    rows = pl.DataFrame({"row": list(range(2048)), "rank": [r for r in ranks for _ in range(2)],
                         "label": [f"rank {r} {lane}" for r in ranks for lane in ("compute", "comm")]})
    segs = pl.DataFrame({"row": [0, 2047], "category": ["compute", "compute"], "start_ns": [0, 0],
                         "end_ns": [10, 10]})
    fig = figures.timeline_figure(segs, rows, 0, (0, 100))
    assert fig.layout.height <= figures.MAX_TIMELINE_PX and 2 * fig.layout.height <= 8192
    assert list(fig.layout.yaxis.range) == [2047.5, -0.5]
    traffic = pl.DataFrame({"src": ranks, "dst": [(r + 8) % 1024 for r in ranks], "dimension": ["dp"] * 1024,
                            "tier": ["ib"] * 1024, "bytes_per_step": [1e6] * 1024})
    heat = figures.traffic_figure(traffic, ranks, hosts)
    assert np.asarray(heat.data[0].z).shape == (128, 128) and heat.layout.height <= figures.MAX_FIGURE_PX
    waits = pl.DataFrame({"rank": ranks, "pg": [str(r % 8) for r in ranks], "dimension": ["dp"] * 1024,
                          "tier": ["ib"] * 1024, "matched_calls": [3] * 1024, "wait_ns_per_step": ranks,
                          "max_wait_ns": ranks, "max_wait_step": [0] * 1024})
    cells, by = transforms.skew_by_group(waits, hosts, {}, figures.MAX_HEATMAP_RANKS)
    skew = figures.skew_group_figure(cells, by, None)
    assert by == "host" and len(skew.data[0].y) == 128 and skew.layout.height <= figures.MAX_FIGURE_PX
    host_links = transforms.host_traffic(traffic, hosts)
    topo = figures.topology_figure(pl.DataFrame({"rank": ranks, "host": [hosts[r] for r in ranks]}), traffic,
                                   host_links)
    assert topo.layout.height <= figures.MAX_FIGURE_PX
    assert sum(1 for t in topo.data if t.mode == "lines" and t.fill != "toself") <= figures.MAX_LINKS


def test_equal_links_are_drawn_all_or_none() -> None:
    """32 hosts: 16 pp pairs of 0.56 GB and 496 dp pairs of 0.93 GB per step. The 48 heaviest would be 48
    arbitrary dp pairs (issue 25: all out of the first two hosts); equal links are drawn all or none, so the
    dp mesh is left out and said, and the 16 pp links are drawn."""
    hosts = [f"node-{h:02d}" for h in range(32)]
    dp = [(hosts[a], hosts[b], "dp", 0.93e9) for a in range(32) for b in range(a + 1, 32)]
    pp = [(hosts[h], hosts[h + 16], "pp", 0.56e9) for h in range(16)]
    pairs = pl.DataFrame([(a, b, d, "ib", v) for a, b, d, v in dp + pp], orient="row",
                         schema=["a", "b", "dimension", "tier", "bytes_per_step"])
    drawn, left_out = figures.heaviest_links(pairs, figures.MAX_LINKS)
    assert drawn.height == 16 and set(drawn["dimension"].to_list()) == {"pp"}
    assert left_out == ["dp · ib: 496 host pairs of 0.93 GB per step each"]
    drawn, left_out = figures.heaviest_links(pairs.filter(pl.col("dimension") == "pp"), 8)
    assert drawn.height == 0 and left_out == ["pp · ib: 16 host pairs of 0.56 GB per step each"]


def test_a_finding_opens_the_group_of_the_dimension_it_names(runs: RunCache) -> None:
    """"most waited on in tp" with groups ("10", "2"): text order opens 10 (a dp group); the tp group comes
    first, and groups of one dimension in numeric order."""
    from commprof.analyzers.findings import Finding

    pgs = runs.analysis("synth").process_groups
    dims = dict(zip(pgs["pg"].to_list(), pgs["dimension"].to_list(), strict=True))
    tp = sorted((p for p, d in dims.items() if d == "tp"), key=style.natural_key)
    dp = sorted((p for p, d in dims.items() if d == "dp"), key=style.natural_key)
    finding = Finding(id="straggler", key="straggler:rank5", severity="high", title="", detail="", action="",
                      saving_ns_per_step=0, saving_model="", ranks=(5,), pgs=tuple(sorted([*dp, *tp])),
                      dimension="tp")
    assert runs.finding_groups("synth", finding) == tp + dp
    assert style.natural_key("2") < style.natural_key("14") and style.natural_key("node-2") < style.natural_key(
        "node-10")
