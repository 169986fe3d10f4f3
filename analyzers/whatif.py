"""What-if: the step time a change would give, estimated from the measured run (docs/findings.md, "What-if").

Changes (``commprof analyze RUN --what-if X``, several combine):

* ``ib=25`` — a tier's bandwidth, GB/s per GPU and direction (the unit of busbw);
* ``tp:nvlink`` — a dimension's groups moved onto another tier;
* ``overlap:dp`` — a dimension's sync overlapped with the backward;
* ``straggler:off`` — the late ranks the straggler findings name arrive on time;
* ``layout:tp=4,dp=2`` — another layout at the same world size (analyzers/whatif_layout.py).

A change that cannot happen (a group larger than a node moved onto NVLink) is a UsageError.

The model keeps every rank's compute as measured and changes only communication:

1. **Transfer, alpha-beta.** A call's transfer time (its time minus its wait for late ranks) is
   ``alpha · latency steps + bus bytes / bandwidth``. Moving it from tier A to tier B (or changing A's
   bandwidth) keeps the bytes and the collective's algorithm factors: the latency part becomes B's and
   the bandwidth part is scaled by ``peak_A / peak_B`` (so the efficiency the call reached is kept).
   On a CPU run (Gloo's loopback and TCP: the CPUs, not the link, set the pace) a tier's peak is what this
   run's calls reached on it (``measured_gbps``), unless ``--peak`` gives one: the ratio is then what the
   run measured on each tier, and the method says so (a network's default peak, 12.5 GB/s for ethernet, is
   a NIC's, not what a CPU job moves).
2. **Exposure.** Per rank, step and process group: blocking groups (no compute ran beside them) expose
   all of their change. Asynchronous ones keep hiding behind the compute that runs between their first
   call's start and their last call's end, up to their new length; whatever does not fit is exposed.
3. **Overlap** of a dimension runs its calls during the backward (2/3 of the step's compute, ending
   where the sync starts now): call k of K becomes ready at k/K of it, the calls run one after another;
   what runs past the backward's end stays exposed (at least the last call).
4. **Straggler off** removes each named straggler's lateness per step (the straggler finding's saving)
   from every rank's step, as exposed wait on the ranks that waited.

Step time after = step time - (exposed comm before - exposed comm after), per rank; the run's figure
is the mean over rank-steps, as ``totals``. It is an estimate: the output says so and names the model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from commprof.analyzers import intervals as iv
from commprof.analyzers.efficiency import NETWORK_DEFAULTS, gpu_peaks
from commprof.errors import UsageError
from commprof.vocab import DIMENSIONS, P2P_OPS, TIERS, UNKNOWN

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

# NCCL's per-step latency on each tier (µs): the alpha of the alpha-beta model.
LATENCY_US = {"nvlink": 1.0, "pcie": 1.0, "shm": 2.0, "ib": 2.0, "roce": 3.0, "ethernet": 12.0, "spine": 12.0,
              "loopback": 1.0}
BACKWARD_SHARE = 2 / 3  # backward = 2x forward: the share of a step's compute a gradient sync can hide behind
ASYNC_OVERLAP = 0.05  # a group whose calls ran beside compute for >= 5 % of their time hides behind compute
MODEL = ("alpha-beta transfer on measured bytes (latency steps x tier latency + bus bytes / bandwidth), "
         "compute kept as measured, exposure re-derived per rank, step and group")


@dataclass(frozen=True)
class Change:
    text: str
    kind: str  # bandwidth | move | overlap | straggler; retier (findings only: from_tier's calls onto tier)
    tier: str | None = None
    gbps: float | None = None
    dimension: str | None = None
    from_tier: str | None = None
    sizes: tuple[tuple[str, int], ...] = ()  # layout: the new size per dimension
    order: tuple[str, ...] = ()  # layout: its rank order (Megatron's when empty)


def parse_change(text: str) -> Change:
    """One ``--what-if`` value; UsageError naming the value when it is not one of the five forms."""
    t = text.strip().lower()
    if t.startswith("layout:"):
        from commprof.analyzers.classify import parse_layout

        try:
            layout = parse_layout(t.removeprefix("layout:"))
        except UsageError as err:
            raise UsageError(f"--what-if {text}: {str(err).removeprefix('--layout: ')}") from None
        return Change(text, "layout", sizes=tuple(layout.sizes.items()), order=layout.order)
    if t in ("straggler:off", "stragglers:off"):
        return Change(text, "straggler")
    m = re.fullmatch(r"overlap:(\w+)", t)
    if m:
        if m.group(1) not in DIMENSIONS or m.group(1) == UNKNOWN:
            raise UsageError(f"--what-if {text}: {m.group(1)!r} is not a dimension ({', '.join(DIMENSIONS[:5])})")
        return Change(text, "overlap", dimension=m.group(1))
    m = re.fullmatch(r"(\w+)\s*=\s*([0-9.]+)\s*(?:gb/?s)?", t)
    if m:
        if m.group(1) not in LATENCY_US:
            raise UsageError(f"--what-if {text}: {m.group(1)!r} is not a tier ({', '.join(LATENCY_US)})")
        gbps = float(m.group(2))
        if not gbps > 0:
            raise UsageError(f"--what-if {text}: the bandwidth must be more than 0 GB/s")
        return Change(text, "bandwidth", tier=m.group(1), gbps=gbps)
    m = re.fullmatch(r"(\w+):(\w+)", t)
    if m:
        dim, tier = m.groups()
        if dim not in DIMENSIONS or dim == UNKNOWN:
            raise UsageError(f"--what-if {text}: {dim!r} is not a dimension ({', '.join(DIMENSIONS[:5])})")
        if tier not in TIERS or tier == UNKNOWN:
            raise UsageError(f"--what-if {text}: {tier!r} is not a tier ({', '.join(LATENCY_US)})")
        return Change(text, "move", tier=tier, dimension=dim)
    raise UsageError(f"--what-if {text!r}: expected TIER=GB/s (ib=25), DIM:TIER (tp:nvlink), overlap:DIM "
                     "(overlap:dp), straggler:off or layout:DIM=N,... (layout:tp=4,dp=2)")


@dataclass(frozen=True)
class WhatIf:
    """The estimate: per rank and for the run, step and exposed comm before and after (ns per step)."""

    changes: tuple[str, ...]
    ranks: pl.DataFrame  # rank, step_ns, step_ns_after, exposed_comm_ns, exposed_comm_ns_after
    totals: dict[str, float]  # step_ns, step_ns_after, exposed_comm_ns, exposed_comm_ns_after, saving_ns
    by_dimension: pl.DataFrame  # dimension, exposed_ns_per_step, exposed_ns_per_step_after
    method: str
    warnings: tuple[str, ...] = field(default_factory=tuple)
    checked: tuple[dict[str, Any], ...] = ()  # per kind of change: its error on recorded reruns (:func:`checked`)


KIND_TEXT = {"bandwidth": "TIER=GB/s", "move": "DIM:TIER", "overlap": "overlap:DIM", "straggler": "straggler:off",
             "layout": "layout:..."}


def checked(changes: list[Change], gpu: bool) -> tuple[dict[str, Any], ...]:
    """Per kind of change, how far this kind of estimate was from running the changed job (analyzers/calibration.py,
    measured by ``make zoo-calibrate`` on Gloo CPU jobs): kind, cases, low_pct, high_pct, runs and ``text``, the
    line every view prints; ``useful`` false where the error reached ``calibration.USEFUL_PCT``."""
    from commprof.analyzers import calibration

    out = []
    for kind in dict.fromkeys(c.kind for c in changes if c.kind in KIND_TEXT):
        band = calibration.whatif_band(kind)
        if band is None:
            out.append({"kind": kind, "cases": 0, "low_pct": None, "high_pct": None, "runs": None, "useful": False,
                        "text": f"{KIND_TEXT[kind]} has not been checked against a rerun of the changed job"})
            continue
        worst = max(abs(band["low_pct"]), abs(band["high_pct"]))
        useful = worst < calibration.USEFUL_PCT
        where = band["runs"] + ("; this run is on GPUs, where it was not checked" if gpu else "")
        text = (f"{KIND_TEXT[kind]} against rerunning the changed job: {band['low_pct']:+.0f} % .. "
                f"{band['high_pct']:+.0f} % on {band['cases']} recorded cases ({where}; docs/findings.md)")
        if not useful:
            text += f": errors of {worst:.0f} % make it a direction, not a figure"
        out.append({**band, "kind": kind, "useful": useful, "text": text})
    return tuple(out)


def latency_steps(op: str, n: int, nbytes: int | None) -> int:
    """Latency steps of NCCL's usual algorithm: ring (2(n-1) for all-reduce, n-1 for the others), tree
    (2 log2 n) for small all-reduces, 1 for point-to-point."""
    if op in P2P_OPS:
        return 1
    if n <= 1:
        return 0
    if op == "all_reduce":
        return 2 * math.ceil(math.log2(n)) if (nbytes or 0) < 256 * 1024 and n > 2 else 2 * (n - 1)
    return n - 1


def _steps_expr() -> pl.Expr:
    n = pl.col("group_size").cast(pl.Int64).fill_null(2)
    small = pl.col("bytes").fill_null(0) < 256 * 1024
    log2 = (n.cast(pl.Float64).log(2)).ceil().cast(pl.Int64)
    return (pl.when(pl.col("op").is_in(list(P2P_OPS))).then(1)
            .when(n <= 1).then(0)
            .when((pl.col("op") == "all_reduce") & small & (n > 2)).then(2 * log2)
            .when(pl.col("op") == "all_reduce").then(2 * (n - 1))
            .otherwise(n - 1))


def tier_peak(a: Analysis, tier: str) -> float | None:
    """The peak GB/s of a tier in this run: a group's on that tier, else the defaults for the GPU; on a CPU run
    the bandwidth the run reached on it (``measured_gbps``) unless ``--peak`` names the tier."""
    if not _gpu_run(a) and tier not in a.settings.peaks:
        return measured_gbps(a, tier)
    known = a.process_groups.filter((pl.col("tier") == tier) & pl.col("peak_gbps").is_not_null())["peak_gbps"]
    if known.len():
        return float(known.cast(pl.Float64).max() or 0.0)
    if tier in NETWORK_DEFAULTS:
        return float(NETWORK_DEFAULTS[tier])
    gpu = next(iter(a.ranks["gpu_name"].drop_nulls().to_list()), None)
    nvlink, pcie = gpu_peaks(gpu)
    peaks: dict[str, float | None] = {"nvlink": nvlink, "pcie": pcie}
    return peaks.get(tier)


MEASURED_MIN_BYTES = 64 << 10  # calls whose bandwidth part outweighs their latency on TCP


def _gpu_run(a: Analysis) -> bool:
    return "mode" in a.ranks.columns and "gpu" in set(a.ranks["mode"].drop_nulls().to_list())


def measured_gbps(a: Analysis, tier: str) -> float | None:
    """The bus bandwidth this run reached on ``tier``: the median busbw of its calls of >= 64 KiB (of every
    sized call when none is that large); None when no call ran there."""
    calls = a.collectives.filter((pl.col("tier") == tier) & pl.col("busbw_gbps").is_not_null()
                                 & (pl.col("busbw_gbps") > 0))
    big = calls.filter(pl.col("bytes") >= MEASURED_MIN_BYTES)
    value = (big if big.height else calls)["busbw_gbps"].median()
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def with_measured_peaks(a: Analysis, calls: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """On a CPU run, each call's peak is its tier's measured bandwidth (``tier_peak``; said in ``notes``)."""
    if _gpu_run(a) or not calls.height:
        return calls
    tiers = sorted(set(calls["tier"].drop_nulls().to_list()) - set(a.settings.peaks))
    measured = {t: v for t in tiers if (v := measured_gbps(a, t)) is not None}
    if not measured:
        return calls
    notes.append("a CPU run: each tier's bandwidth is what this run reached there ("
                 + ", ".join(f"{t} {v:.3g} GB/s" for t, v in measured.items()) + ", median busbw of calls >= 64 KiB)")
    return calls.with_columns(pl.col("tier").replace_strict(measured, default=None, return_dtype=pl.Float64)
                              .fill_null(pl.col("peak_gbps")).alias("peak_gbps"))


def new_transfer(calls: pl.DataFrame, tier_after: pl.Expr, peak_after: pl.Expr) -> pl.DataFrame:
    """``transfer_after_ns`` per call: the alpha-beta rescale of its measured transfer onto ``tier_after``
    at ``peak_after`` GB/s (see the module doc); unchanged where a peak is unknown."""
    steps = _steps_expr()
    lat = pl.col("tier").replace_strict(LATENCY_US, default=None, return_dtype=pl.Float64)
    out = calls.with_columns(tier_after.alias("_tier2"), peak_after.alias("_peak2"), steps.alias("_steps"))
    lat2 = pl.col("_tier2").replace_strict(LATENCY_US, default=None, return_dtype=pl.Float64)
    alpha = (pl.col("_steps") * lat.fill_null(0.0) * 1000).clip(upper_bound=pl.col("transfer_ns").cast(pl.Float64))
    beta = pl.col("transfer_ns").cast(pl.Float64) - alpha
    scaled = (pl.col("_steps") * lat2.fill_null(lat).fill_null(0.0) * 1000
              + beta * pl.col("peak_gbps") / pl.col("_peak2"))
    same = (pl.col("_tier2") == pl.col("tier")) & (pl.col("_peak2") == pl.col("peak_gbps"))
    known = pl.col("peak_gbps").is_not_null() & pl.col("_peak2").is_not_null() & (pl.col("_peak2") > 0)
    return out.with_columns(
        pl.when(same | ~known).then(pl.col("transfer_ns").cast(pl.Float64)).otherwise(scaled.clip(0.0))
        .alias("transfer_after_ns")).drop("_tier2", "_peak2", "_steps")


def _covered(u: iv.Union, t: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Length of the union before each time t."""
    starts, ends = u
    cum = np.concatenate([[0], np.cumsum(ends - starts)])
    i = np.searchsorted(starts, t, side="right")
    j = np.maximum(i - 1, 0)
    inside = np.clip(np.minimum(t, ends[j]) - starts[j], 0, None)
    out: np.ndarray[Any, Any] = np.where(i > 0, cum[j] + inside, 0)
    return out


def _hideable(a: Analysis, windows: pl.DataFrame) -> pl.DataFrame:
    """Compute time (ns) inside each (rank, step, pg) window [first_ns, last_ns): what an asynchronous
    group can hide behind."""
    out = []
    wanted = set(windows["rank"].unique().to_list())
    for rank, frame in a.tables.rank_intervals(columns=["kind", "start_ns", "end_ns"], ranks=wanted):
        comp = frame.filter(pl.col("kind") == "compute")
        u = iv.union(comp["start_ns"].to_numpy(), comp["end_ns"].to_numpy())
        mine = windows.filter(pl.col("rank") == rank)
        lo, hi = mine["first_ns"].to_numpy(), mine["last_ns"].to_numpy()
        cover = _covered(u, hi) - _covered(u, lo) if u[0].size else np.zeros(lo.size)
        out.append(mine.select("rank", "step", "pg").with_columns(pl.Series("hideable_ns", cover, pl.Float64)))
    if not out:
        return windows.select("rank", "step", "pg").with_columns(pl.lit(0.0).alias("hideable_ns"))
    return pl.concat(out)


def overlapped_sync(a: Analysis, calls: pl.DataFrame, dims: frozenset[str],
                    micro_batches: float | None = None) -> pl.DataFrame:
    """Per (rank, step, pg) of ``dims``: the exposed time of its calls had they run during the backward
    of the step's last micro-batch: ``BACKWARD_SHARE`` of the step's compute over the micro-batches
    (counted in a pipeline, else 1; ``micro_batches`` overrides), ending where the step's first call of
    the group starts; the calls' gradients become ready evenly through it (call k of K at k/K), the calls
    run one after another on the group's stream, each for its (what-if) duration; what runs past the
    backward's end is exposed. ``calls`` carry ``transfer_after_ns``."""
    if micro_batches is None:
        shape = pipeline_shape(a, calls)
        micro_batches = float(shape[1]) if shape else 1.0
    dur = (pl.col("end_ns") - pl.col("start_ns") - pl.col("transfer_ns") + pl.col("transfer_after_ns"))
    mine = (calls.filter(pl.col("dimension").is_in(list(dims)) & pl.col("step").is_not_null())
            .sort("start_ns").group_by("rank", "step", "pg", maintain_order=True)
            .agg(dur.cast(pl.Float64).alias("_durs")))
    share = BACKWARD_SHARE / max(micro_batches, 1.0)
    compute = a.steps.select("rank", "step", ((pl.col("compute_ns") + pl.col("overlapped_comm_ns")) * share)
                             .cast(pl.Float64).alias("_bwd"))
    mine = mine.join(compute, on=["rank", "step"], how="left")
    exposed = []
    for durs, bwd in zip(mine["_durs"].to_list(), mine["_bwd"].fill_null(0.0).to_list(), strict=True):
        k, end = len(durs), float("-inf")
        for i, d in enumerate(durs, 1):
            end = max(-bwd + i * bwd / k, end) + d
        exposed.append(max(0.0, end))
    return mine.select("rank", "step", "pg").with_columns(pl.Series("sync_exposed_ns", exposed, pl.Float64))


def exposure_after(a: Analysis, calls: pl.DataFrame, overlap_dims: frozenset[str] = frozenset()) -> pl.DataFrame:
    """Per (rank, step, pg): exposed_ns before and after, from ``calls`` carrying ``transfer_after_ns``
    (the analyzed calls of the run; see the module doc for the exposure rules)."""
    dur = (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64)
    per = (calls.filter(pl.col("step").is_not_null())
           .with_columns((pl.col("transfer_ns") - pl.col("transfer_after_ns")).alias("_delta"),
                         (dur - pl.col("transfer_ns") + pl.col("transfer_after_ns")).alias("_dur_after"))
           .sort("start_ns")
           .group_by("rank", "step", "pg")
           .agg(pl.col("_delta").sum().alias("delta_ns"), pl.col("start_ns").min().alias("first_ns"),
                pl.col("end_ns").max().alias("last_ns"), pl.col("_dur_after").last().alias("last_call_ns"),
                pl.col("dimension").first()))
    pgs = a.pg_steps.join(per, on=["rank", "step", "pg"], how="left").with_columns(
        pl.col("delta_ns").fill_null(0.0), pl.col("dimension").fill_null(UNKNOWN))
    comm_after = (pl.col("comm_ns") - pl.col("delta_ns")).clip(0.0)
    is_async = pl.col("overlapped_ns") >= ASYNC_OVERLAP * pl.col("comm_ns")
    grows = pgs.filter(is_async & (pl.col("delta_ns") < 0) & pl.col("first_ns").is_not_null())
    hide = _hideable(a, grows.select("rank", "step", "pg", "first_ns", "last_ns")) if grows.height else None
    if hide is not None:
        pgs = pgs.join(hide, on=["rank", "step", "pg"], how="left")
    else:
        pgs = pgs.with_columns(pl.lit(None, pl.Float64).alias("hideable_ns"))
    overlapped_after = (pl.when(is_async)
                        .then(pl.min_horizontal(comm_after, pl.max_horizontal(pl.col("overlapped_ns"),
                                                                             pl.col("hideable_ns").fill_null(0.0))))
                        .otherwise(pl.min_horizontal(pl.col("overlapped_ns"), comm_after)))
    delta_exposed = (comm_after - overlapped_after) - (pl.col("comm_ns") - pl.col("overlapped_ns"))
    out = pgs.with_columns((pl.col("exposed_ns") + delta_exposed).clip(0.0).alias("exposed_after_ns"))
    if overlap_dims:
        synced = overlapped_sync(a, calls, overlap_dims)
        out = out.join(synced, on=["rank", "step", "pg"], how="left").with_columns(
            pl.when(pl.col("sync_exposed_ns").is_not_null())
            .then(pl.min_horizontal(pl.col("exposed_after_ns"), pl.col("sync_exposed_ns")))
            .otherwise(pl.col("exposed_after_ns")).alias("exposed_after_ns"))
    result: pl.DataFrame = out.select("rank", "step", "pg", "dimension", "exposed_ns", "exposed_after_ns")
    return result


def pipeline_shape(a: Analysis, calls: pl.DataFrame) -> tuple[int, int] | None:
    """(stages p, micro-batches m) of a pipelined run: p the pp groups' size, m the median number of
    receives per rank-step on the first stage (which receives only gradients, one per micro-batch)."""
    pp = a.process_groups.filter((pl.col("dimension") == "pp") & (pl.col("size") > 1))
    if pp.height == 0:
        return None
    recvs = calls.filter((pl.col("dimension") == "pp") & (pl.col("op") == "recv")).group_by("rank", "step").len()
    if recvs.height == 0:
        return None
    medians = recvs.group_by("rank").agg(pl.col("len").median().cast(pl.Float64))["len"]
    micro = round(float(medians.min() or 1.0))  # type: ignore[arg-type]
    return int(pp["size"].max() or 2), max(micro, 1)


def _through_the_pipeline(a: Analysis, calls: pl.DataFrame, pgs: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """In a pipeline (1F1B) a step lasts (m + p - 1) micro-batch times: time a change saves inside a
    stage's micro-batches is saved (m + p - 1) / m times over, the extra coming off the pp waits (the
    bubble) — or added to them when the change costs time. The DP sync runs once per step, after the
    micro-batches, and is not multiplied."""
    shape = pipeline_shape(a, calls)
    if shape is None:
        return pgs
    stages, micro = shape
    amp = (micro + stages - 1) / micro
    saved = pgs.filter(~pl.col("dimension").is_in(["pp", "dp"])).group_by("rank", "step").agg(
        (pl.col("exposed_ns") - pl.col("exposed_after_ns")).sum().alias("_inner"))
    pp = pgs.filter(pl.col("dimension") == "pp").join(saved, on=["rank", "step"], how="left").with_columns(
        pl.col("_inner").fill_null(0.0))
    share = pl.col("exposed_after_ns") / pl.col("exposed_after_ns").sum().over("rank", "step")
    extra = ((amp - 1) * pl.col("_inner") * share.fill_nan(0.0).fill_null(0.0))
    pp = pp.with_columns((pl.col("exposed_after_ns") - extra).clip(0.0).alias("exposed_after_ns")).drop("_inner")
    notes.append(f"pipeline of {stages} stages and about {micro} micro-batches: changes inside the stages "
                 f"count {amp:.2f}x, the difference taken from the pp waits")
    return pl.concat([pgs.filter(pl.col("dimension") != "pp"), pp.select(pgs.columns)])


def estimate(a: Analysis, changes: list[Change], straggler_saving_ns: dict[int, float] | None = None,
             pg_peaks: dict[str, float] | None = None) -> WhatIf:
    """The what-if estimate for ``changes`` (see the module doc). ``straggler_saving_ns``: per straggler
    rank, its lateness per step (from the straggler findings), for ``straggler:off``; ``pg_peaks``: a
    process group's bandwidth (GB/s) in place of its tier's (the link-efficiency finding)."""
    from commprof.analyzers import whatif_layout

    layouts = [c for c in changes if c.kind == "layout"]
    if layouts:
        if len(changes) > 1:
            raise UsageError(f"--what-if {layouts[0].text}: a layout what-if cannot be combined with other changes")
        result: WhatIf = whatif_layout.estimate_layout(a, layouts[0])
        return result
    for c in changes:
        whatif_layout.check_move(a, c)
    warnings: list[str] = []
    notes: list[str] = []
    calls = with_measured_peaks(a, a.collectives.filter(pl.col("step").is_not_null()), notes)
    tier_after, peak_after = pl.col("tier"), pl.col("peak_gbps")
    for pg, gbps in (pg_peaks or {}).items():
        peak_after = pl.when(pl.col("pg") == pg).then(pl.lit(gbps)).otherwise(peak_after)
    for c in changes:
        if c.kind == "retier":
            hit = pl.col("tier") == c.from_tier
            tier_after = pl.when(hit).then(pl.lit(c.tier)).otherwise(tier_after)
            peak_after = pl.when(hit).then(pl.lit(c.gbps, pl.Float64)).otherwise(peak_after)
    for c in changes:
        if c.kind == "move":
            assert c.tier is not None
            peak = _peak_of(a, changes, c.tier)
            if peak is None:
                warnings.append(f"{c.text}: no peak bandwidth known for {c.tier} (pass --peak {c.tier}=GB/s); "
                                "its calls are left as measured")
            hit = pl.col("dimension") == c.dimension
            tier_after = pl.when(hit).then(pl.lit(c.tier)).otherwise(tier_after)
            peak_after = pl.when(hit).then(pl.lit(peak, pl.Float64)).otherwise(peak_after)
    for c in changes:
        if c.kind == "bandwidth":
            peak_after = pl.when(tier_after == c.tier).then(pl.lit(c.gbps)).otherwise(peak_after)
    _warn_unmatched(calls, changes, warnings)
    if not calls.height:
        calls = calls.with_columns(pl.lit(None, pl.Float64).alias("transfer_after_ns"))
    else:
        calls = new_transfer(calls, tier_after, peak_after)
    overlap = frozenset(c.dimension for c in changes if c.kind == "overlap" and c.dimension)
    pgs = exposure_after(a, calls, overlap)
    pgs = _through_the_pipeline(a, calls, pgs, notes)
    late = 0.0
    if any(c.kind == "straggler" for c in changes):
        late = float(sum((straggler_saving_ns or {}).values()))
        if not straggler_saving_ns:
            warnings.append("straggler:off: no straggler finding in this run; nothing changes")
    method = MODEL
    if overlap:
        method += (f"; overlap of {', '.join(sorted(overlap))}: its calls run during the backward (2/3 of the "
                   "step's compute), ready evenly through it")
    if straggler_saving_ns and any(c.kind == "straggler" for c in changes):
        method += "; straggler lateness removed"
    method += "".join(f"; {n}" for n in notes)
    return summarize(a, pgs, tuple(c.text for c in changes), method, warnings, late)


def summarize(a: Analysis, pgs: pl.DataFrame, texts: tuple[str, ...], method: str, warnings: list[str],
              late: float = 0.0) -> WhatIf:
    """The estimate from the per (rank, step, pg) exposure before and after, ``late`` ns of lateness taken
    off every rank-step (straggler:off): step after = step - the exposed time saved, per rank."""
    per_rank_step = pgs.group_by("rank", "step").agg(
        (pl.col("exposed_ns") - pl.col("exposed_after_ns")).sum().alias("_saved"))
    steps = a.steps.join(per_rank_step, on=["rank", "step"], how="left").with_columns(
        pl.col("_saved").fill_null(0.0),
        (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64).alias("_step"))
    exposed = pl.col("exposed_comm_ns").cast(pl.Float64)
    wait_saved = pl.min_horizontal(pl.lit(late), pl.col("exposed_wait_ns").cast(pl.Float64))
    ranks = (steps.with_columns((pl.col("_step") - pl.col("_saved") - late).alias("_after"),
                                (exposed - pl.col("_saved") - wait_saved).clip(0.0).alias("_exp_after"))
             .group_by("rank").agg(pl.col("_step").mean().alias("step_ns"),
                                   pl.col("_after").mean().alias("step_ns_after"),
                                   exposed.mean().alias("exposed_comm_ns"),
                                   pl.col("_exp_after").mean().alias("exposed_comm_ns_after"))
             .sort("rank"))
    n = max(ranks.height, 1)
    totals = {k: float(ranks[k].sum()) / n for k in ("step_ns", "step_ns_after", "exposed_comm_ns",
                                                      "exposed_comm_ns_after")}
    totals["saving_ns"] = totals["step_ns"] - totals["step_ns_after"]
    rank_steps = max(a.steps.height, 1)
    by_dim = (pgs.group_by("dimension").agg((pl.col("exposed_ns").sum() / rank_steps).alias("exposed_ns_per_step"),
                                            (pl.col("exposed_after_ns").sum() / rank_steps)
                                            .alias("exposed_ns_per_step_after"))
              .sort("exposed_ns_per_step", descending=True))
    return WhatIf(texts, ranks, totals, by_dim, method, tuple(warnings))


def _warn_unmatched(calls: pl.DataFrame, changes: list[Change], warnings: list[str]) -> None:
    """A change that touches no call of the run says so, instead of estimating "no change"."""
    dims = set(calls["dimension"].to_list()) if calls.height else set()
    tiers = set(calls["tier"].to_list()) if calls.height else set()
    moved = {c.tier for c in changes if c.kind in ("move", "retier")}
    for c in changes:
        if c.kind in ("move", "overlap") and c.dimension not in dims:
            warnings.append(f"{c.text}: this run has no {c.dimension} calls (dimensions: "
                            f"{', '.join(sorted(d for d in dims if d)) or 'none'}); it changes nothing")
        elif c.kind == "bandwidth" and c.tier not in tiers | moved:
            warnings.append(f"{c.text}: no call of this run runs on {c.tier} (tiers: "
                            f"{', '.join(sorted(t for t in tiers if t)) or 'none'}); it changes nothing")


def _peak_of(a: Analysis, changes: list[Change], tier: str) -> float | None:
    for c in changes:
        if c.kind == "bandwidth" and c.tier == tier:
            return c.gbps
    return tier_peak(a, tier)
