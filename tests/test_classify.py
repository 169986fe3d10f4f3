"""Dimension of each process group (analyzers/classify.py): layout, names, structure."""

from __future__ import annotations

import polars as pl
import pytest

from commprof.analyzers.classify import (
    Layout,
    check_layout,
    classify_dimensions,
    dimension_from_name,
    parse_layout,
    rank_pattern,
)
from commprof.errors import UsageError

# ------------------------------------------------------------------------------------------- layout


def test_parse_layout_default_order_is_megatrons() -> None:
    layout = parse_layout("tp=8, pp=4 ,dp=16")
    assert layout.sizes == {"tp": 8, "pp": 4, "dp": 16}
    assert layout.order == ("tp", "cp", "ep", "dp", "pp")
    assert layout.world_size == 512


def test_parse_layout_order() -> None:
    assert parse_layout("tp=2,dp=2,order=dp-tp").order == ("dp", "tp")


@pytest.mark.parametrize(("text", "message"), [
    ("xp=4", "unknown dimension 'xp'"),
    ("tp=two", "whole number"),
    ("tp=0", "at least 1"),
    ("tp=2,tp=2", "tp given twice"),
    ("tp", "not dim=size"),
    ("", "at least one"),
    ("tp=2,order=tp-zz", "order"),
    ("tp=2,dp=2,order=dp-pp", "leaves out tp"),
])
def test_parse_layout_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_layout(text)


def test_layout_product_must_equal_world_size() -> None:
    check_layout(parse_layout("tp=2,dp=2"), 4)
    check_layout(parse_layout("tp=2,dp=2"), None)  # unknown world size: nothing to check
    with pytest.raises(UsageError, match="tp=2×dp=4 = 8 ranks, but the run has world size 4"):
        check_layout(parse_layout("tp=2,dp=4"), 4)


def test_megatron_order_groups() -> None:
    """tp fastest, then cp, ep, dp, pp: rank = t + tp*(c + cp*(d + dp*p))."""
    layout = parse_layout("tp=2,cp=2,dp=2,pp=2")
    assert layout.coords(13) == {"tp": 1, "cp": 0, "ep": 0, "dp": 1, "pp": 1}
    groups = {frozenset(g) for g in layout.groups(("tp",))}
    assert frozenset({0, 1}) in groups and frozenset({14, 15}) in groups
    assert frozenset({0, 2}) in {frozenset(g) for g in layout.groups(("cp",))}
    assert frozenset({0, 4}) in {frozenset(g) for g in layout.groups(("dp",))}
    assert frozenset({0, 8}) in {frozenset(g) for g in layout.groups(("pp",))}
    dims = layout.group_dimensions()
    assert dims[frozenset({1, 9})] == "pp"
    assert dims[frozenset({0, 2, 4, 6})] == "dp"  # dp × cp (DATA_PARALLEL_GROUP_WITH_CP): outermost
    assert dims[frozenset({0, 1, 8, 9})] == "pp"  # tp × pp (MODEL_PARALLEL_GROUP)
    assert dims[frozenset(range(16))] == "world"


def test_layout_with_one_dimension_names_the_world() -> None:
    """`--layout dp=4` (plain DDP): the world group is the data-parallel group."""
    assert Layout({"dp": 4}).group_dimensions() == {frozenset(range(4)): "dp"}
    assert Layout({"tp": 1, "dp": 4}).group_dimensions()[frozenset(range(4))] == "dp"
    assert Layout({"tp": 2, "dp": 2}).group_dimensions()[frozenset(range(4))] == "world"


def test_layout_custom_order() -> None:
    layout = Layout({"tp": 2, "dp": 2}, ("dp", "tp"))
    dims = layout.group_dimensions()
    assert dims[frozenset({0, 1})] == "dp"
    assert dims[frozenset({0, 2})] == "tp"


# -------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(("desc", "dim"), [
    ("default_pg", "world"),
    ("mesh_tp", "tp"), ("mesh_dp", "dp"), ("mesh_pp", "pp"), ("mesh_cp", "cp"), ("mesh_ep", "ep"),
    ("mesh_dp_cp", "dp"), ("mesh_dp_replicate", "dp"), ("mesh_dp_shard", "dp"), ("mesh_dp_shard_cp", "dp"),
    ("mesh_dp_shard_mod_ep", "dp"), ("mesh_etp", "tp"),
    ("TENSOR_MODEL_PARALLEL_GROUP", "tp"), ("PIPELINE_MODEL_PARALLEL_GROUP", "pp"),
    ("DATA_PARALLEL_GROUP", "dp"), ("DATA_PARALLEL_GROUP_WITH_CP", "dp"), ("CONTEXT_PARALLEL_GROUP", "cp"),
    ("EXPERT_MODEL_PARALLEL_GROUP", "ep"), ("EXPERT_TENSOR_PARALLEL_GROUP", "tp"),
    ("EXPERT_DATA_PARALLEL_GROUP", "dp"), ("TENSOR_AND_DATA_PARALLEL_GROUP", "dp"), ("EMBEDDING_GROUP", "pp"),
    ("MODEL_PARALLEL_GROUP", "pp"), ("INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP", "dp"),
    ("dp_shard", "dp"), ("dp_replicate", "dp"), ("fsdp", "dp"),  # bare DeviceMesh dim names
    ("undefined", None), ("", None), (None, None), ("mesh_foo", None), ("my_group", None), ("pp-0", None),
])
def test_dimension_from_name(desc: str | None, dim: str | None) -> None:
    assert dimension_from_name(desc) == dim


# ---------------------------------------------------------------------------------------- structure


def _groups(rows: list[tuple[str, str | None, list[int]]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"pg": [r[0] for r in rows], "desc": [r[1] for r in rows], "ranks": [r[2] for r in rows],
         "size": [len(r[2]) for r in rows], "backend": ["nccl"] * len(rows)},
        schema={"pg": pl.String, "desc": pl.String, "ranks": pl.List(pl.Int32), "size": pl.Int32,
                "backend": pl.String},
    )


def _calls(spec: dict[str, list[tuple[str, int, int]]], ranks: dict[str, list[int]]) -> pl.DataFrame:
    """pg -> [(op, bytes, calls per rank in the one step)] as a collectives table (step 0)."""
    rows = []
    for pg, ops in spec.items():
        for op, nbytes, n in ops:
            for rank in ranks[pg]:
                rows += [{"rank": rank, "pg": pg, "op": op, "bytes": nbytes, "step": 0}] * n
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "pg": pl.String, "op": pl.String, "bytes": pl.Int64,
                                      "step": pl.Int64})


def _verdicts(frame: pl.DataFrame) -> dict[str, tuple[str, str | None, float | None]]:
    return {r["pg"]: (r["dimension"], r["dimension_source"], r["confidence"]) for r in frame.iter_rows(named=True)}


def test_rank_pattern() -> None:
    assert rank_pattern([2, 3, 4, 5]) == "contiguous"
    assert rank_pattern([1, 5, 9]) == "strided"
    assert rank_pattern([0, 1, 5]) == "irregular"
    assert rank_pattern([3]) == "irregular"


def test_structure_tp_dp_pp_ep_world() -> None:
    """8 ranks, 2 nodes of 4: tp [0,1] contiguous, frequent, small, one node; dp [0,4] strided, rare,
    large, across nodes; pp [0,2] send/recv only; ep [0,1,2,3] all-to-all; world."""
    ranks = {"tp": [0, 1], "dp": [0, 4], "pp": [0, 2], "ep": [0, 1, 2, 3], "w": list(range(8))}
    pgs = _groups([(k, None, v) for k, v in ranks.items()])
    calls = _calls({
        "tp": [("all_reduce", 1 << 20, 24)],
        "dp": [("all_reduce", 256 << 20, 1)],
        "pp": [("send", 8 << 20, 4), ("recv", 8 << 20, 4)],
        "ep": [("all_to_all", 4 << 20, 8), ("all_reduce", 1024, 1)],
        "w": [("all_reduce", 8, 1)],
    }, ranks)
    out = _verdicts(classify_dimensions(pgs, calls, None, 8, None, [1, 2, 1, 1, 2]))
    assert out == {
        "tp": ("tp", "structure", 0.8),  # 4 of 4 signs agree
        "dp": ("dp", "structure", 0.8),
        "pp": ("pp", "structure", 0.7),  # strided, but inside one node
        "ep": ("ep", "structure", 0.7),  # more than once per step
        "w": ("world", "structure", 0.8),
    }


def test_structure_confidence_drops_when_signs_disagree() -> None:
    """A contiguous group that is called rarely with big messages (a DP group when tp=1): the pattern
    says tp, frequency and size say dp -> dp, with 2 of 3 signs."""
    ranks = {"a": [0, 1, 2, 3], "b": [4, 5], "c": [6, 7]}
    pgs = _groups([(k, None, v) for k, v in ranks.items()])
    calls = _calls({"a": [("all_reduce", 512 << 20, 1)], "b": [("all_reduce", 1 << 20, 30)],
                    "c": [("all_reduce", 1 << 20, 30)]}, ranks)
    out = _verdicts(classify_dimensions(pgs, calls, None, 16))
    assert out["a"] == ("dp", "structure", 0.6)
    assert out["b"] == ("tp", "structure", 0.8)


def test_structure_without_traffic_uses_the_pattern_only() -> None:
    pgs = _groups([("a", None, [0, 1]), ("b", None, [0, 2]), ("c", None, [0, 1, 3])])
    out = _verdicts(classify_dimensions(pgs, None, None, 4))
    assert out == {"a": ("tp", "structure", 0.8), "b": ("dp", "structure", 0.8), "c": ("unknown", None, None)}


def test_order_of_trust_layout_then_name_then_structure() -> None:
    pgs = _groups([("0", "mesh_tp", [0, 2]), ("1", "mesh_tp", [0, 1]), ("2", None, [0, 1, 2, 3]),
                   ("3", "undefined", [1, 3])])
    plain = _verdicts(classify_dimensions(pgs, None, None, 4))
    assert plain["0"] == ("tp", "name", 0.95)
    assert plain["2"] == ("world", "structure", 0.8)
    assert plain["3"] == ("dp", "structure", 0.8)
    laid = _verdicts(classify_dimensions(pgs, None, None, 4, parse_layout("tp=2,dp=2")))
    assert laid == {"0": ("dp", "layout", 1.0), "1": ("tp", "layout", 1.0), "2": ("world", "layout", 1.0),
                    "3": ("dp", "layout", 1.0)}
