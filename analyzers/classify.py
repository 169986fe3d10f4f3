"""The parallel dimension of every process group: tp, cp, ep, dp, pp, world or unknown.

Three sources, in order of trust (DESIGN §3 "Dimension"); the first that decides wins and is recorded
as ``dimension_source`` with a ``confidence`` (0-1):

- ``layout`` (1.0): the user's ``--layout tp=8,pp=4,dp=16[,order=tp-cp-ep-dp-pp]``. Ranks are laid
  out in ``order``, first dimension fastest (Megatron's default order). A group whose ranks equal one
  of the layout's groups gets that dimension; the whole world is ``world``.
- ``name`` (0.95): the group's description (DeviceMesh ``mesh_<dim>``, torchtitan's dims, Megatron-Core's
  ``*_GROUP`` names, ``default_pg``).
- ``structure`` (0.5-0.8): the ranks and the traffic (see ``_structure``).

A group that spans several dimensions (``mesh_dp_cp``, ``TENSOR_AND_DATA_PARALLEL_GROUP``, a layout
group over tp and dp) is reported as the **outermost** of them in Megatron's order tp-cp-ep-dp-pp:
its traffic crosses that dimension's links, the slowest ones in a good layout. So ``dp_cp`` → dp,
``TENSOR_AND_DATA_PARALLEL_GROUP`` → dp, ``MODEL_PARALLEL_GROUP`` (tp×pp) → pp, and
``EMBEDDING_GROUP`` (first and last pipeline stage) → pp.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import polars as pl

from commprof.errors import UsageError
from commprof.vocab import MEGATRON_ORDER, P2P_OPS

LAYOUT_CONFIDENCE = 1.0
NAME_CONFIDENCE = 0.95

REDUCING_OPS = frozenset({"all_reduce", "reduce_scatter", "all_gather"})


# ---------------------------------------------------------------------------------------------- layout

@dataclass(frozen=True)
class Layout:
    """Sizes per dimension, laid out in ``order`` with the first dimension varying fastest."""

    sizes: dict[str, int]
    order: tuple[str, ...] = MEGATRON_ORDER

    @property
    def world_size(self) -> int:
        return math.prod(self.sizes.values())

    def _dims(self) -> list[tuple[str, int]]:
        return [(d, self.sizes.get(d, 1)) for d in self.order]

    def coords(self, rank: int) -> dict[str, int]:
        out = {}
        for dim, size in self._dims():
            out[dim] = rank % size
            rank //= size
        return out

    def groups(self, dims: tuple[str, ...]) -> list[tuple[int, ...]]:
        """The groups that vary along ``dims`` (all other coordinates fixed), each sorted."""
        by_key: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            c = self.coords(rank)
            by_key.setdefault(tuple(c[d] for d in self.order if d not in dims), []).append(rank)
        return [tuple(v) for v in by_key.values()]

    def group_dimensions(self) -> dict[frozenset[int], str]:
        """Every group of the layout -> its dimension: single dimensions first, then groups over several
        dimensions (named after the outermost one); the whole world is ``world``."""
        real = [d for d, size in self._dims() if size > 1]
        # with one real dimension (`--layout dp=8`: plain DDP) the whole world *is* that dimension
        world = real[0] if len(real) == 1 else "world"
        out: dict[frozenset[int], str] = {frozenset(range(self.world_size)): world}
        for n in range(1, len(real)):
            for combo in itertools.combinations(real, n):
                outer = max(combo, key=MEGATRON_ORDER.index)
                for group in self.groups(combo):
                    out.setdefault(frozenset(group), outer)
        return out


def parse_layout(text: str) -> Layout:
    """``tp=8,pp=4,dp=16`` with an optional ``order=tp-cp-ep-dp-pp`` -> Layout. UsageError when a part
    is malformed, a dimension is unknown or repeated, or the order leaves out a given dimension."""
    sizes: dict[str, int] = {}
    order: tuple[str, ...] = MEGATRON_ORDER
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise UsageError(f"--layout: {part!r} is not dim=size (e.g. tp=8,pp=4,dp=16)")
        if key == "order":
            order = tuple(d.strip().lower() for d in re.split(r"[-,>/ ]+", value) if d.strip())
            bad = [d for d in order if d not in MEGATRON_ORDER]
            if bad or len(set(order)) != len(order):
                raise UsageError(f"--layout: order {value!r} must list distinct dimensions out of "
                                 f"{', '.join(MEGATRON_ORDER)}")
            continue
        if key not in MEGATRON_ORDER:
            raise UsageError(f"--layout: unknown dimension {key!r}; known: {', '.join(MEGATRON_ORDER)} "
                             "(FSDP/ZeRO shard and replicate are dp)")
        if key in sizes:
            raise UsageError(f"--layout: {key} given twice")
        try:
            size = int(value)
        except ValueError:
            raise UsageError(f"--layout: size of {key} must be a whole number, not {value!r}") from None
        if size < 1:
            raise UsageError(f"--layout: size of {key} must be at least 1, not {size}")
        sizes[key] = size
    if not sizes:
        raise UsageError("--layout: give at least one dim=size (e.g. tp=8,pp=4,dp=16)")
    missing = [d for d in sizes if d not in order]
    if missing:
        raise UsageError(f"--layout: order {'-'.join(order)} leaves out {', '.join(missing)}")
    return Layout(sizes, order)


def check_layout(layout: Layout, world_size: int | None) -> None:
    if world_size is not None and layout.world_size != world_size:
        detail = "×".join(f"{d}={s}" for d, s in layout.sizes.items())
        raise UsageError(f"--layout: {detail} = {layout.world_size} ranks, but the run has world size {world_size}")


# ----------------------------------------------------------------------------------------------- names

# Megatron-Core's group names (parallel_state.py), as PyTorch >= 2.4 records them in pg_desc.
MEGATRON_NAMES = {
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "DATA_PARALLEL_GROUP": "dp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_PARALLEL_GROUP": "tp",
    "EXPERT_DATA_PARALLEL_GROUP": "dp",
    "TENSOR_AND_DATA_PARALLEL_GROUP": "dp",  # spans tp and dp: the outermost, dp
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "cp",
    "TENSOR_AND_EXPERT_PARALLEL_GROUP": "ep",
    "MODEL_PARALLEL_GROUP": "pp",  # tp × pp
    "EMBEDDING_GROUP": "pp",  # first and last pipeline stage: rides the pipeline's links
    "POSITION_EMBEDDING_GROUP": "pp",
}
# Words in other Megatron-style names -> the dimensions they mention (the outermost one wins).
_MEGATRON_WORDS = (("DATA_PARALLEL", "dp"), ("PIPELINE", "pp"), ("EMBEDDING", "pp"), ("EXPERT_MODEL", "ep"),
                   ("EXPERT_PARALLEL", "ep"), ("CONTEXT", "cp"), ("TENSOR", "tp"))
# DeviceMesh dim names (torchtitan and others) -> dimension.
_MESH_TOKENS = {"tp": "tp", "etp": "tp", "cp": "cp", "sp": "cp", "ep": "ep", "pp": "pp", "dp": "dp",
                "fsdp": "dp", "hsdp": "dp", "ddp": "dp", "replicate": "dp", "shard": "dp", "efsdp": "dp",
                "edp": "dp"}
WORLD_NAMES = frozenset({"default_pg", "world", "global"})


def dimension_from_name(desc: str | None) -> str | None:
    """The dimension a group's description names, or None when it names none."""
    if not desc:
        return None
    name = desc.strip()
    if name.lower() in WORLD_NAMES:
        return "world"
    if name in MEGATRON_NAMES:
        return MEGATRON_NAMES[name]
    if name.isupper() and name.endswith(("_GROUP", "_GROUPS", "_GROUP_WITH_CP")):
        found = [dim for word, dim in _MEGATRON_WORDS if word in name]
        if "MODEL_PARALLEL" in name and not re.search(r"(TENSOR|EXPERT|PIPELINE)_MODEL_PARALLEL", name):
            found += ["tp", "pp"]
        return _outermost(found)
    low = name.lower()
    tokens = re.split(r"[_\-]", low.removeprefix("mesh_"))
    # DeviceMesh names its groups mesh_<dim names>; a bare name made only of such dims (torchtitan's
    # "dp_shard", "dp_replicate") reads the same
    if low.startswith("mesh_") or all(t in _MESH_TOKENS for t in tokens):
        return _outermost([_MESH_TOKENS[t] for t in tokens if t in _MESH_TOKENS])
    return None


def _outermost(dims: list[str]) -> str | None:
    return max(dims, key=MEGATRON_ORDER.index) if dims else None


# ------------------------------------------------------------------------------------------- structure

def group_traffic(collectives: pl.DataFrame, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per process group: calls per rank-step, share of point-to-point and all-to-all calls, and the
    mean message size of its reducing collectives (all-reduce, reduce-scatter, all-gather)."""
    schema = {"pg": pl.String, "calls_per_step": pl.Float64, "p2p_share": pl.Float64,
              "a2a_share": pl.Float64, "reducing_bytes": pl.Float64, "reducing_share": pl.Float64,
              "reducing_per_step": pl.Float64, "overlap_share": pl.Float64, "after_compute_share": pl.Float64}
    if collectives.height == 0 or "pg" not in collectives.columns:
        return pl.DataFrame(schema=schema)
    coll = collectives.filter(pl.col("pg").is_not_null())
    if "step" in coll.columns and coll["step"].is_not_null().any():
        coll = coll.filter(pl.col("step").is_not_null())
    per_rank = (steps.group_by("rank").len().rename({"len": "n_steps"})
                if steps is not None and steps.height else None)
    pg_ranks = coll.select("pg", "rank").unique()
    if per_rank is not None:
        rank_steps = (pg_ranks.join(per_rank, on="rank", how="left")
                      .group_by("pg").agg(pl.col("n_steps").fill_null(1).sum().alias("_rs")))
    else:
        rank_steps = pg_ranks.group_by("pg").agg(pl.len().alias("_rs"))
    reducing = pl.col("op").is_in(list(REDUCING_OPS))
    # how much of its reducing calls' time ran beside compute (DDP's buckets overlap backward); known only
    # once the overlap step has split each call into overlapped and exposed time
    if {"overlapped_ns", "exposed_ns"} <= set(coll.columns):
        hidden = pl.col("overlapped_ns").filter(reducing).sum()
        overlap = (hidden / (hidden + pl.col("exposed_ns").filter(reducing).sum())).alias("overlap_share")
    else:
        overlap = pl.lit(None, dtype=pl.Float64).alias("overlap_share")
    return (
        coll.group_by("pg")
        .agg(
            pl.len().alias("_calls"),
            pl.col("op").is_in(list(P2P_OPS)).mean().alias("p2p_share"),
            (pl.col("op") == "all_to_all").mean().alias("a2a_share"),
            pl.col("bytes").filter(reducing).mean().cast(pl.Float64).alias("reducing_bytes"),
            reducing.filter(pl.col("op") != "barrier").mean().alias("reducing_share"),
            reducing.sum().alias("_reducing"),
            overlap,
        )
        .join(rank_steps, on="pg", how="left")
        .join(_after_compute(coll, steps), on="pg", how="left")
        .with_columns((pl.col("_calls") / pl.col("_rs").clip(lower_bound=1)).alias("calls_per_step"),
                      (pl.col("_reducing") / pl.col("_rs").clip(lower_bound=1)).alias("reducing_per_step"),
                      pl.col("overlap_share").fill_nan(None).cast(pl.Float64))
        .select(list(schema))
    )


AFTER_COMPUTE_LEAD = 0.05  # the group's first reducing call of the step comes 5 % of it in at least
AFTER_COMPUTE_RATIO = 2.0  # and twice as long after the step's start as its last ends before the step's end


def _after_compute(coll: pl.DataFrame, steps: pl.DataFrame | None) -> pl.DataFrame:
    """Per group, the share of its rank-steps whose reducing calls all come after the step's compute: the
    first starts twice as long after the step's start as the last ends before its end (and at least
    AFTER_COMPUTE_LEAD of the step in). That is a gradient sync after the backward (one flat all-reduce, or
    one per tensor), followed by the optimizer step only; tensor-parallel all-reduces start in the first
    layer's forward and go on until the backward reaches it (recorded Megatron-style TP on Gloo: first call
    2-10 % of the step in, last 6-60 % before its end; a DP sync after the backward: 10-85 % in, 0-15 % before
    the end)."""
    schema = {"pg": pl.String, "after_compute_share": pl.Float64}
    needed = {"rank", "step", "start_ns", "end_ns"}
    if steps is None or steps.height == 0 or not needed <= set(steps.columns) or "step" not in coll.columns:
        return pl.DataFrame(schema=schema)
    blocks = (coll.filter(pl.col("op").is_in(list(REDUCING_OPS)) & pl.col("step").is_not_null())
              .group_by("pg", "rank", "step")
              .agg(pl.col("start_ns").min().alias("_first"), pl.col("end_ns").max().alias("_last"))
              .join(steps.select("rank", "step", pl.col("start_ns").alias("_s0"), pl.col("end_ns").alias("_s1")),
                    on=["rank", "step"], how="inner"))
    lead, tail = pl.col("_first") - pl.col("_s0"), pl.col("_s1") - pl.col("_last")
    after = (lead > AFTER_COMPUTE_RATIO * tail) & (lead >= AFTER_COMPUTE_LEAD * (pl.col("_s1") - pl.col("_s0")))
    return blocks.group_by("pg").agg(after.mean().cast(pl.Float64).alias("after_compute_share")).select(list(schema))


def rank_pattern(ranks: list[int]) -> str:
    """``contiguous`` (stride 1), ``strided`` (evenly spaced, stride > 1) or ``irregular``."""
    rs = sorted(set(ranks))
    if len(rs) < 2:
        return "irregular"
    stride = rs[1] - rs[0]
    if any(b - a != stride for a, b in zip(rs, rs[1:], strict=False)):
        return "irregular"
    return "contiguous" if stride == 1 else "strided"


@dataclass(frozen=True)
class Verdict:
    dimension: str
    source: str | None
    confidence: float | None


UNKNOWN_VERDICT = Verdict("unknown", None, None)


def _vote(value: float | None, median: float | None, high: str, low: str) -> str | None:
    if value is None or median is None or math.isnan(value) or value == median:
        return None
    return high if value > median else low


def _structure(ranks: list[int], world_size: int | None, nodes: int | None, multi_node: bool,
               traffic: dict[str, float | None] | None, medians: dict[str, float | None]) -> Verdict:
    """Rules, first match wins:

    - the whole world -> world (0.8);
    - only point-to-point calls -> pp; all-to-all at least half of the calls -> ep (0.6, +0.1 for each
      supporting sign: pp strided or across nodes; ep called more than once per step);
    - otherwise tp against dp by votes: rank pattern (contiguous -> tp, strided -> dp), calls per
      rank-step against the median of such groups (more -> tp, fewer -> dp), mean size of its
      all-reduce / reduce-scatter / all-gather against the median (smaller -> tp, larger, gradient-sized
      -> dp), and, in a multi-node run, one node -> tp, several -> dp. The majority wins (a tie goes to
      the rank pattern); confidence 0.5 + 0.3 × (2 × agreeing / votes - 1), so 0.8 when all agree.
    """
    if world_size and len(set(ranks)) == world_size and world_size > 1:
        return Verdict("world", "structure", 0.8)
    pattern = rank_pattern(ranks)
    t = traffic or {}
    if t.get("p2p_share") == 1.0:
        signs = [pattern != "contiguous", bool(nodes and nodes > 1)]
        return Verdict("pp", "structure", round(0.6 + 0.1 * sum(signs), 2))
    if (t.get("a2a_share") or 0.0) >= 0.5:
        return Verdict("ep", "structure", round(0.6 + 0.1 * ((t.get("calls_per_step") or 0) > 1), 2))
    votes = [{"contiguous": "tp", "strided": "dp"}.get(pattern),
             _vote(t.get("calls_per_step"), medians.get("calls_per_step"), "tp", "dp"),
             _vote(t.get("reducing_bytes"), medians.get("reducing_bytes"), "dp", "tp")]
    if multi_node and nodes:
        votes.append("tp" if nodes == 1 else "dp")
    cast = [v for v in votes if v is not None]
    if not cast:
        return UNKNOWN_VERDICT
    tp, dp = cast.count("tp"), cast.count("dp")
    winner = "tp" if tp > dp else "dp" if dp > tp else (votes[0] or "unknown")
    if winner == "unknown":
        return UNKNOWN_VERDICT
    agree = cast.count(winner)
    return Verdict(winner, "structure", round(0.5 + 0.3 * (2 * agree / len(cast) - 1), 2))


GRADIENT_BYTES = 64 * 1024  # a mean reducing call this large carries gradients, not a loss or a metric
WORLD_DP_OVERLAP = 0.05  # share of its reducing time hidden behind compute: the buckets overlap backward
WORLD_DP_AFTER = 0.8  # or: in >= 80 % of rank-steps its calls all come after the step's compute


def world_as_dp(traffic: dict[str, float | None] | None, other_data_groups: bool) -> Verdict | None:
    """A world group that is the job's data-parallel group (plain DDP, or FSDP over all ranks): no other
    group moves data, at least 80% of its calls (barriers aside) are all-reduce / reduce-scatter /
    all-gather, they are gradient-sized (mean >= 64 KiB), and either some of their time overlaps compute
    (DDP's buckets during the backward) or they all come after the step's compute (a gradient sync after
    the backward: one flat all-reduce, or one per tensor). The tensor-parallel all-reduces of a TP-only job
    are as large but sit between the layers' compute on the critical path, from the first forward on.
    Confidence 0.6, +0.1 when bucketed (two or more such calls per rank-step), +0.1 when most of their
    time is hidden."""
    t = traffic or {}
    share, size, overlap = t.get("reducing_share"), t.get("reducing_bytes"), t.get("overlap_share")
    if other_data_groups or share is None or size is None or overlap is None:
        return None
    after = (t.get("after_compute_share") or 0.0) >= WORLD_DP_AFTER
    if share < 0.8 or size < GRADIENT_BYTES or (overlap < WORLD_DP_OVERLAP and not after):
        return None
    signs = [(t.get("reducing_per_step") or 0) >= 2, overlap >= 0.5]
    return Verdict("dp", "structure", round(0.6 + 0.1 * sum(signs), 2))


# --------------------------------------------------------------------------------------------- classify

def classify_dimensions(
    pgs: pl.DataFrame,
    collectives: pl.DataFrame | None = None,
    steps: pl.DataFrame | None = None,
    world_size: int | None = None,
    layout: Layout | None = None,
    nodes_spanned: list[int | None] | None = None,
) -> pl.DataFrame:
    """``pgs`` (pg, desc, ranks, ...) with dimension, dimension_source and confidence columns."""
    layout_groups = layout.group_dimensions() if layout is not None else {}
    # read only for the groups listed: none listed (a trace without process-group names), none made
    traffic = {r["pg"]: r for r in group_traffic(collectives, steps).iter_rows(named=True)} \
        if collectives is not None and pgs.height else {}
    nodes = nodes_spanned if nodes_spanned is not None else [None] * pgs.height
    multi_node = any((n or 0) > 1 for n in nodes)
    all_ranks = pgs["ranks"].to_list()
    # medians over the groups that structure will weigh tp against dp: not world, not p2p, not a2a
    candidates = [traffic[pg] for pg, ranks in zip(pgs["pg"].to_list(), all_ranks, strict=True)
                  if pg in traffic and ranks and len(set(ranks)) != world_size
                  and (traffic[pg]["p2p_share"] or 0) < 1 and (traffic[pg]["a2a_share"] or 0) < 0.5]
    medians = {k: _median([c[k] for c in candidates]) for k in ("calls_per_step", "reducing_bytes")}
    # groups other than the world that move data (not only barriers): with one, the world is not the dp group
    data_groups = {pg for pg, ranks in zip(pgs["pg"].to_list(), all_ranks, strict=True)
                   if pg in traffic and ranks and len(set(ranks)) > 1 and len(set(ranks)) != world_size
                   and (traffic[pg]["reducing_share"] is not None or (traffic[pg]["p2p_share"] or 0) > 0)}
    verdicts = []
    for pg, desc, ranks, n in zip(pgs["pg"].to_list(), pgs["desc"].to_list(), all_ranks, nodes, strict=True):
        ranks = list(ranks or [])
        if ranks and frozenset(ranks) in layout_groups:
            verdicts.append(Verdict(layout_groups[frozenset(ranks)], "layout", LAYOUT_CONFIDENCE))
            continue
        named = dimension_from_name(desc)
        verdict = (Verdict(named, "name", NAME_CONFIDENCE) if named is not None
                   else _structure(ranks, world_size, n, multi_node, traffic.get(pg), medians) if ranks
                   else UNKNOWN_VERDICT)
        if verdict.dimension == "world":
            # "world" names who is in it, not what it is for: a world group doing DDP's work is dp
            verdict = world_as_dp(traffic.get(pg), bool(data_groups - {pg})) or verdict
        verdicts.append(verdict)
    return pgs.with_columns(
        pl.Series("dimension", [v.dimension for v in verdicts], dtype=pl.String),
        pl.Series("dimension_source", [v.source for v in verdicts], dtype=pl.String),
        pl.Series("confidence", [v.confidence for v in verdicts], dtype=pl.Float64),
    )


def _median(values: list[float | None]) -> float | None:
    known = sorted(v for v in values if v is not None and not math.isnan(v))
    if not known:
        return None
    mid = len(known) // 2
    return known[mid] if len(known) % 2 else (known[mid - 1] + known[mid]) / 2
