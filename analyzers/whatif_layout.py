"""What-if of another parallel layout (``--what-if layout:tp=4,dp=2``), and the feasibility checks of the
tier moves (a group larger than a node cannot move onto the links inside one). docs/findings.md, "What-if".

The layout model re-derives each dimension's traffic from the measured calls, at the same world size
(the run's model and global batch spread over the same number of ranks):

* **Bytes per call.** TP, PP, CP and EP calls carry activations: their bytes scale with the tokens one
  rank holds, ``1 / (cp · ep · dp)`` (TP and PP split the model, not the batch). DP calls carry gradients
  (or parameters, for FSDP): their bytes scale with the parameters per rank, ``1 / (tp · pp)``. Each
  dimension keeps its number of calls per step (layers per stage and buckets unchanged).
* **Placement.** The new groups are laid out Megatron-style (``tp-cp-ep-dp-pp``, first fastest) on the
  run's ranks and nodes: a group inside one node runs on the run's intra-node tier, one across nodes on
  its network tier.
* **Transfer.** Alpha-beta as for the tier moves (analyzers/whatif.py): the latency part takes the new
  group size's steps on the new tier; the bandwidth part scales by the bytes, the busbw factor of the new
  group size, and the peaks' ratio. A call's wait for late ranks is kept.
* **Exposure.** As whatif.exposure_after, except for TP, CP and EP calls: on the layer's critical path,
  they keep the share of their time that was exposed.
* **Compute** per rank is kept as measured: at the same world size each rank does 1/W of the work
  whatever the split (the efficiency of other GEMM shapes is not modelled). The pipeline's stage count
  must stay (its bubble depends on micro-batches the what-if cannot change), and CP / EP sizes too.
* **EP folded into the dense dimensions** (Megatron-Core's MoE layout: the expert groups are carved out
  of the ranks that tp·cp·dp·pp already spans, so the sizes multiply past the world): the experts' layout
  is its own, not given by the dense one. EP keeps its size, its groups and their tier as measured, and
  its bytes per call scale with the tokens one rank holds in the MoE layer, ``1 / (tp · cp · dp)``
  (sequence parallelism: a TP rank dispatches its own share of the tokens) — at the same world size and
  pipeline depth that is 1. The dense tokens per rank are then ``1 / (cp · dp)``.

What cannot be estimated from the run is refused in one line (a UsageError): a dimension the run has no
traffic of to scale from, another world size, another pipeline depth.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

import polars as pl

from commprof.analyzers import whatif
from commprof.analyzers.bandwidth import busbw_factor_expr
from commprof.analyzers.classify import Layout
from commprof.errors import UsageError
from commprof.vocab import MEGATRON_ORDER

if TYPE_CHECKING:
    from commprof.analyzers.pipeline import Analysis

INTRA_TIERS = ("nvlink", "pcie", "shm", "loopback")  # links that join only the GPUs (processes) of one node
ACTIVATION_DIMS = ("tp", "pp", "cp", "ep")  # their calls carry activations: bytes ~ tokens per rank
FIXED_DIMS = ("cp", "ep", "pp")  # sizes the layout what-if keeps (see the module doc)


def gpus_per_node(a: Analysis) -> int:
    """The most ranks one node (host) holds in this run."""
    per = a.ranks.group_by("node").len()["len"] if "node" in a.ranks.columns else pl.Series([], dtype=pl.UInt32)
    return int(per.max() or 1) if per.len() else 1  # type: ignore[arg-type]


def node_count(a: Analysis) -> int:
    return int(a.ranks["node"].n_unique()) if "node" in a.ranks.columns and a.ranks.height else 1


def run_sizes(a: Analysis) -> dict[str, int]:
    """The run's size per classified dimension (its largest group), dimensions of size 1 left out."""
    pgs = a.process_groups.filter((pl.col("size") > 1) & pl.col("dimension").is_in(list(MEGATRON_ORDER)))
    return {str(d): int(s) for d, s in pgs.group_by("dimension").agg(pl.col("size").max()).iter_rows()}


def check_move(a: Analysis, change: whatif.Change) -> None:
    """A dimension's groups moved onto a tier that joins only one node's GPUs must fit a node."""
    if change.kind != "move" or change.tier not in INTRA_TIERS or node_count(a) < 2:
        return
    size = run_sizes(a).get(str(change.dimension), 0)
    gpn = gpus_per_node(a)
    if size > gpn:
        raise UsageError(f"--what-if {change.text}: cannot happen: {change.dimension} groups have {size} ranks and "
                         f"a node has {gpn}; {change.tier} joins only the GPUs of one node (try "
                         f"--what-if layout:{change.dimension}={math.gcd(size, gpn)},...)")


def _tiers(a: Analysis) -> tuple[str | None, str | None]:
    """The run's intra-node and network tiers: the most common among its groups inside one node / across."""
    pgs = a.process_groups.filter((pl.col("size") > 1) & pl.col("tier").is_not_null())
    inside = Counter(pgs.filter(pl.col("nodes_spanned") <= 1)["tier"].to_list()).most_common(1)
    across = Counter(pgs.filter(pl.col("nodes_spanned") > 1)["tier"].to_list()).most_common(1)
    return (inside[0][0] if inside else None), (across[0][0] if across else None)


def _placement(a: Analysis, layout: Layout, warnings: list[str]) -> dict[str, str]:
    """The tier of each dimension's groups in ``layout``, laid out on this run's ranks and nodes."""
    node = dict(zip(a.ranks["rank"].to_list(), a.ranks["node"].to_list(), strict=True))
    intra, net = _tiers(a)
    gpu = "gpu" in set(a.ranks["mode"].to_list()) if "mode" in a.ranks.columns else True
    out = {}
    for dim, size in layout.sizes.items():
        if size <= 1:
            continue
        spans = any(len({node.get(r) for r in g}) > 1 for g in layout.groups((dim,)))
        tier = net if spans else intra
        if tier is None:
            tier = (a.settings.network or "ib") if spans else ("nvlink" if gpu else "loopback")
            warnings.append(f"{dim} groups {'across nodes' if spans else 'inside a node'}: no group of the run "
                            f"runs there; taken as {tier}")
        out[dim] = tier
    return out


def _refuse(text: str, why: str) -> UsageError:
    return UsageError(f"--what-if {text}: cannot be estimated from this run: {why}")


def folded_ep(sizes: dict[str, int], world: int) -> bool:
    """EP folded into the dense dimensions (module doc): its sizes multiply past the world, the dense ones
    alone make it, and the expert groups fit in the ranks of one pipeline stage."""
    dense = math.prod(n for d, n in sizes.items() if d != "ep")
    return (sizes.get("ep", 1) > 1 and math.prod(sizes.values()) != world and dense == world
            and (world // sizes.get("pp", 1)) % sizes["ep"] == 0)


def sizes_after(text: str, old: dict[str, int], given: dict[str, int], world: int) -> tuple[dict[str, int], bool]:
    """The layout after the change (every dimension of size > 1) and whether EP is folded in it. A folded
    EP keeps its size when the change does not name it."""
    folded = folded_ep(old, world)
    new = dict(given)
    if folded:
        new.setdefault("ep", old["ep"])
    _check(text, old, new, world, folded)
    return new, folded


def _check(text: str, old: dict[str, int], new: dict[str, int], world: int, folded: bool = False) -> None:
    if not old:
        raise _refuse(text, "its groups have no known dimension (pass --layout)")
    counted = {d: n for d, n in new.items() if not (folded and d == "ep")}
    if math.prod(counted.values()) != world:
        ep = f" (ep={old['ep']} is folded into them, as Megatron lays out MoE experts)" if folded else ""
        raise _refuse(text, f"{' x '.join(f'{d}={n}' for d, n in counted.items())} is "
                            f"{math.prod(counted.values())} ranks, the run has {world}{ep}")
    for dim in MEGATRON_ORDER:
        before, after = old.get(dim, 1), new.get(dim, 1)
        if after > 1 and before == 1:
            what = ("gradient bytes per rank" if dim == "dp" else "activation bytes per rank")
            raise _refuse(text, f"it has no {dim} traffic to scale the new {dim} groups' traffic from (the {what} "
                                "are not in the trace)")
        if dim in FIXED_DIMS and after != before:
            why = ("the pipeline bubble depends on micro-batches the what-if cannot change" if dim == "pp"
                   else f"changing the {dim} size is not modelled")
            raise _refuse(text, f"keep {dim}={before}: {why}")


def factors(old: dict[str, int], new: dict[str, int], folded: bool = False) -> dict[str, float]:
    """Per dimension: the ratio of its bytes per call after to before (module doc)."""
    def size(sizes: dict[str, int], *dims: str) -> int:
        return math.prod(sizes.get(d, 1) for d in dims)

    split = ("cp", "dp") if folded else ("cp", "ep", "dp")  # the dimensions that split the batch
    tokens = size(old, *split) / size(new, *split)
    params = size(old, "tp", "pp") / size(new, "tp", "pp")
    out = {**{d: tokens for d in ACTIVATION_DIMS}, "dp": params}
    if folded:  # the MoE layer's tokens per rank: a TP rank dispatches its share (sequence parallelism)
        out["ep"] = size(old, "tp", "cp", "dp") / size(new, "tp", "cp", "dp")
    return out


def _blocking_share_kept(calls: pl.DataFrame, pgs: pl.DataFrame) -> pl.DataFrame:
    """TP, CP and EP calls sit on the layer's critical path (the next op reads their result): resized, they
    keep the share of their time that ran beside compute, instead of hiding behind the compute that ran
    beside them before (the asynchronous-group rule of whatif.exposure_after, right for DP buckets)."""
    dur = (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64)
    per = (calls.filter(pl.col("dimension").is_in(["tp", "cp", "ep"]))
           .group_by("rank", "step", "pg")
           .agg(dur.sum().alias("_before"), (dur - pl.col("transfer_ns") + pl.col("transfer_after_ns")).sum()
                .alias("_after")))
    ratio = (pl.col("_after") / pl.col("_before")).fill_nan(1.0)
    return (pgs.join(per, on=["rank", "step", "pg"], how="left")
            .with_columns(pl.when(pl.col("_before").is_not_null() & (pl.col("_before") > 0))
                          .then(pl.col("exposed_ns") * ratio.clip(0.0)).otherwise(pl.col("exposed_after_ns"))
                          .alias("exposed_after_ns"))
            .drop("_before", "_after"))


def estimate_layout(a: Analysis, change: whatif.Change) -> whatif.WhatIf:
    """The step time of the run laid out as ``change.sizes`` (module doc)."""
    warnings: list[str] = []
    old = run_sizes(a)
    world = int(a.ranks["world_size"].max() or a.ranks.height) if "world_size" in a.ranks.columns else a.ranks.height
    if a.ranks.height != world or a.ranks["node"].null_count():
        raise _refuse(change.text, f"it needs every rank and its node ({a.ranks.height} of {world} ranks traced)")
    new, folded = sizes_after(change.text, old, {d: n for d, n in change.sizes if n > 1}, world)
    # a folded EP keeps its groups and tier as measured: the dense layout places the others
    layout = Layout({d: n for d, n in new.items() if not (folded and d == "ep")}, change.order or MEGATRON_ORDER)
    tiers = _placement(a, layout, warnings)
    peaks = {t: whatif.tier_peak(a, t) for t in set(tiers.values())}
    notes: list[str] = []
    calls = whatif.with_measured_peaks(a, a.collectives.filter(pl.col("step").is_not_null()), notes)
    moved = {d: t for d, t in tiers.items() if d in old}
    for name, tier in moved.items():
        now = set(calls.filter(pl.col("dimension") == name)["tier"].drop_nulls().to_list())
        if now != {tier} and (peaks[tier] is None or calls.filter((pl.col("dimension") == name)
                                                                  & pl.col("peak_gbps").is_null()).height):
            raise _refuse(change.text, f"{name} would move onto {tier} and a peak bandwidth is not known for it or "
                                       f"its tier now (pass --peak {tier}=GB/s)")
    f = factors(old, new, folded)
    dim = pl.col("dimension")
    scale = dim.replace_strict(f, default=1.0, return_dtype=pl.Float64)
    n_after = dim.replace_strict({d: new.get(d, 1) for d in old}, default=None, return_dtype=pl.Int64)
    calls = calls.with_columns(n_after.fill_null(pl.col("group_size").cast(pl.Int64)).alias("_n2"),
                               dim.replace_strict(moved, default=None, return_dtype=pl.String)
                               .fill_null(pl.col("tier")).alias("_t2"))
    calls = calls.with_columns(pl.col("_t2").replace_strict(peaks, default=None, return_dtype=pl.Float64)
                               .fill_null(pl.col("peak_gbps")).alias("_p2"))
    lat = pl.col("tier").replace_strict(whatif.LATENCY_US, default=0.0, return_dtype=pl.Float64) * 1000
    lat2 = pl.col("_t2").replace_strict(whatif.LATENCY_US, default=0.0, return_dtype=pl.Float64) * 1000
    transfer = pl.col("transfer_ns").cast(pl.Float64)
    alpha = (whatif._steps_expr() * lat).clip(upper_bound=transfer)
    bus = (busbw_factor_expr(pl.col("op"), pl.col("_n2").cast(pl.Float64))
           / busbw_factor_expr(pl.col("op"), pl.col("group_size").cast(pl.Float64))).fill_nan(1.0).fill_null(1.0)
    peak = pl.when(pl.col("_t2") == pl.col("tier")).then(1.0).otherwise(pl.col("peak_gbps") / pl.col("_p2"))
    calls = calls.with_columns(((transfer - alpha) * scale * bus * peak.fill_null(1.0)).alias("_beta2"))
    after = calls.with_columns(pl.col("_n2").alias("group_size"),
                               (pl.col("bytes").cast(pl.Float64) * scale).alias("bytes"))
    alpha2 = whatif._steps_expr() * lat2
    calls = calls.with_columns(after.select((alpha2 + pl.col("_beta2")).alias("transfer_after_ns")).to_series())
    # a dimension gone (size 1 now): its calls and their waits vanish (the duration after is 0)
    gone = dim.is_in([d for d in old if d not in new])
    calls = calls.with_columns(pl.when(gone).then(transfer - (pl.col("end_ns") - pl.col("start_ns")))
                               .otherwise(pl.col("transfer_after_ns")).alias("transfer_after_ns"))
    calls = calls.drop("_n2", "_t2", "_p2", "_beta2")
    pgs = _blocking_share_kept(calls, whatif.exposure_after(a, calls))
    pgs = whatif._through_the_pipeline(a, calls, pgs, notes)
    before = ",".join(f"{d}={old[d]}" for d in MEGATRON_ORDER if d in old)
    method = (f"layout {before} -> {','.join(f'{d}={new[d]}' for d in MEGATRON_ORDER if d in new)}: groups placed "
              f"Megatron-style ({', '.join(f'{d} on {t}' for d, t in tiers.items())}); bytes per call x "
              f"{f['tp']:.3g} for activations (tp/pp/cp{'' if folded else '/ep'}: tokens per rank) and x "
              f"{f['dp']:.3g} for dp (parameters per rank)"
              + (f"; ep={new['ep']} folded into the dense ranks (Megatron MoE): its groups and tier kept as "
                 f"measured, bytes per call x {f['ep']:.3g} (tokens per rank in the MoE layer)" if folded else "")
              + ", same calls per step; alpha-beta transfer on the new bytes, group sizes "
              "and tiers (latency steps x tier latency + bus bytes / bandwidth); exposure re-derived per rank, "
              "step and group (tp/cp/ep keep their exposed share); compute per rank kept as measured (same world "
              "size: each rank does 1/W of the work; the efficiency of other GEMM shapes is not modelled)"
              + "".join(f"; {n}" for n in notes))
    return whatif.summarize(a, pgs, (change.text,), method, warnings)
