"""Findings on `commprof synth` runs with injected faults: the fault is the top finding of its kind, its
estimated saving is within 20 % of the saving measured by regenerating the run without the fault, and a
clean run has no finding above info; a what-if lands within 10 % of the run regenerated with the change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import commprof
from commprof.analyzers.pipeline import Analysis, AnalysisSettings
from commprof.synth import SynthConfig, generate

N16 = dict(nodes=2, gpus_per_node=8, sizes={"tp": 8, "dp": 2}, steps=2, micro_batches=2, layers=4, dp_buckets=4)
N64 = dict(nodes=8, gpus_per_node=8, sizes={"tp": 8, "dp": 8}, steps=2, micro_batches=1, layers=8, dp_buckets=4)
PP16 = dict(nodes=2, gpus_per_node=8, sizes={"tp": 4, "dp": 2, "pp": 2}, steps=2, micro_batches=2, layers=2)
PP64 = dict(nodes=8, gpus_per_node=8, sizes={"tp": 4, "dp": 8, "pp": 2}, steps=2, micro_batches=2, layers=2)
# DP sync after the backward: hidden behind it, it would run beside the all-to-alls, and their exposed time
# would be shared between the two (the model's saving then overshoots: 1.98 ms claimed, 1.54 measured)
EP64 = dict(nodes=8, gpus_per_node=8, sizes={"ep": 8, "dp": 8}, steps=2, micro_batches=1, layers=2, model_size_b=1.0,
            dp_overlap=False)
# TP groups larger than a node (8 ranks on nodes of 4 GPUs): no other dimension to swap them with
TP8_ON_4 = dict(nodes=4, gpus_per_node=4, sizes={"tp": 8, "dp": 2}, steps=2, micro_batches=2, layers=4, seed=3)
EP16 = dict(nodes=2, gpus_per_node=8, sizes={"ep": 8, "dp": 2}, steps=2, micro_batches=2, layers=2, model_size_b=1.0)

# name: (finding id, base config, the fault, the fix: what the regenerated run changes instead)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # a straggler is named above info from the step count its work witness can judge (7 steps with 8 ranks compared)
    "16-straggler-s1": ("straggler", {**N16, "seed": 1, "steps": 8}, {"straggler": 5, "straggler_us": 3000}, {}),
    "16-tp-across-s2": ("tp_across_nodes", {**N16, "seed": 2}, {"tp_across_nodes": True}, {}),
    "16-dp-off-s3": ("dp_sync_exposed", {**N16, "seed": 3}, {"dp_overlap": False}, {}),
    "16-slow-link-s4": ("link_efficiency", {**N16, "seed": 4}, {"slow_link": "gpu-node-01"}, {}),
    "16-socket-s5": ("nccl_socket_fallback", {**N16, "seed": 5}, {"socket_fallback": True}, {}),
    "16-pp-mb-s6": ("pipeline_bubble", {**PP16, "seed": 6}, {},
                    {"micro_batches": 8, "tokens": 1024}),  # 4x the micro-batches, same global batch
    # more seeds (and another delay, rank, bucket count) for the faults whose models have the most to guess
    "16-straggler-s21": ("straggler", {**N16, "seed": 21, "steps": 8}, {"straggler": 12, "straggler_us": 1500}, {}),
    "16-dp-off-s22": ("dp_sync_exposed", {**N16, "seed": 22, "dp_buckets": 2}, {"dp_overlap": False}, {}),
    "16-pp-mb-s23": ("pipeline_bubble", {**PP16, "seed": 23}, {}, {"micro_batches": 8, "tokens": 1024}),
    "16-a2a-s24": ("alltoall_imbalance", {**EP16, "seed": 24}, {"alltoall_imbalance": 2.0}, {}),
    "16-tp-across-pp-s13": ("tp_across_nodes", {**PP16, "seed": 13}, {"tp_across_nodes": True}, {}),
    "16-a2a-s7": ("alltoall_imbalance", {**EP16, "seed": 7}, {"alltoall_imbalance": 3.0}, {}),
    # the 64-rank cases share one seed, so that their fixed run is one clean run generated once
    "64-straggler-s8": ("straggler", {**N64, "seed": 8, "steps": 8}, {"straggler": 37, "straggler_us": 5000}, {}),
    "64-tp-across-s8": ("tp_across_nodes", {**N64, "seed": 8}, {"tp_across_nodes": True}, {}),
    "64-dp-off-s8": ("dp_sync_exposed", {**N64, "seed": 8}, {"dp_overlap": False}, {}),  # sync > backward
    "64-socket-s8": ("nccl_socket_fallback", {**N64, "seed": 8}, {"socket_fallback": True}, {}),
    "64-pp-mb-s14": ("pipeline_bubble", {**PP64, "seed": 14}, {}, {"micro_batches": 8, "tokens": 1024}),
    "64-a2a-s15": ("alltoall_imbalance", {**EP64, "seed": 15}, {"alltoall_imbalance": 3.0}, {}),
    "64-slow-link-s8": ("link_efficiency", {**N64, "seed": 8}, {"slow_link": "gpu-node-05"}, {}),
}


_MEMO: dict[str, Analysis] = {}


def _analyze(tmp: Path, name: str, cfg: dict[str, Any], what_if: tuple[str, ...] = ()) -> Analysis:
    """The analysis of the run ``cfg`` generates (once per config and what-if in this module)."""
    key = repr((sorted(cfg.items()), what_if))
    if key not in _MEMO:
        path = tmp / name
        generate(SynthConfig(**cfg), path, compresslevel=1)
        _MEMO[key] = commprof.analyze(str(path), AnalysisSettings(what_if=what_if))
    return _MEMO[key]


def _step(a: Analysis) -> float:
    return float(a.totals["step_ns"])


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Analysis, Analysis]:
    kind, base, fault, fix = CASES[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    return kind, _analyze(tmp, "fault", {**base, **fault}), _analyze(tmp, "fixed", {**base, **fix})


@pytest.mark.parametrize("name", sorted(n for n in CASES if "straggler" in n or "slow-link" in n))
def test_the_finding_names_its_subject(name: str, tmp_path: Path) -> None:
    kind, base, fault, _ = CASES[name]
    top = next(f for f in _analyze(tmp_path, "fault", {**base, **fault}).finding_list if f.id == kind)
    if "straggler" in fault:
        assert top.ranks == (fault["straggler"],) and top.dimension == "tp"
    else:
        assert top.key == f"link_efficiency:ib:{fault['slow_link']}" and fault["slow_link"] in top.title


def test_fault_is_the_top_finding_of_its_kind_and_its_saving_is_measured(case: tuple[str, Analysis, Analysis]) -> None:
    kind, faulty, fixed = case
    mine = [f for f in faulty.finding_list if f.id == kind]
    assert mine, [f.key for f in faulty.finding_list]
    top = mine[0]
    assert top.severity != "info"
    measured = _step(faulty) - _step(fixed)
    assert measured > 0
    assert top.saving_ns_per_step == pytest.approx(measured, rel=0.2), (top.key, top.saving_model)


def test_no_finding_claims_more_than_the_exposed_time_it_is_about(case: tuple[str, Analysis, Analysis]) -> None:
    _, faulty, _ = case
    for f in faulty.finding_list:
        assert f.saving_ns_per_step <= faulty.totals["exposed_comm_ns"] + 1, f.key
        if "exposed_ns_per_step" in f.numbers:
            assert f.saving_ns_per_step <= f.numbers["exposed_ns_per_step"] + 1, f.key


CLEAN = {"16-tp8dp2-s1": (N16, 1), "16-tp8dp2-s12": (N16, 12), "16-tp4dp2pp2-s1": (PP16, 1),
         "16-tp4dp2pp2-s12": (PP16, 12), "16-ep8dp2-s1": (EP16, 1), "16-ep8dp2-s12": (EP16, 12),
         # the 64-rank fixed runs of the cases above (generated once per module)
         "64-tp8dp8-s8": (N64, 8), "64-tp4dp8pp2-s14": (PP64, 14), "64-ep8dp8-s15": ({**EP64, "dp_overlap": True}, 15)}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_run_has_no_finding_above_info(name: str, tmp_path: Path) -> None:
    base, seed = CLEAN[name]
    a = _analyze(tmp_path, "clean", {**base, "seed": seed})
    assert a.findings_computed
    loud = [f.key for f in a.finding_list if f.severity != "info" and f.id != "pipeline_bubble"]
    assert loud == []


WHAT_IF: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...], dict[str, Any]]] = {
    # name: (base, measured run, --what-if, regenerated run)
    "tp-to-nvlink": ({**N16, "seed": 2}, {"tp_across_nodes": True}, ("tp:nvlink", "dp:ib"), {}),
    "tp-to-nvlink-pipeline": ({**PP16, "seed": 3}, {"tp_across_nodes": True, "straggler": 6, "straggler_us": 3000},
                              ("tp:nvlink", "pp:ib"), {"straggler": 6, "straggler_us": 3000}),
    "overlap-dp": ({**N16, "seed": 3}, {"dp_overlap": False}, ("overlap:dp",), {}),
    "ib-slower": ({**N16, "seed": 4}, {}, ("ib=12.5",), {"slow_link": "gpu-node-01"}),
    "straggler-off": ({**N16, "seed": 1}, {"straggler": 5, "straggler_us": 3000}, ("straggler:off",), {}),
    "combined": ({**N16, "seed": 5}, {"tp_across_nodes": True, "straggler": 3, "straggler_us": 2000},
                 ("tp:nvlink", "dp:ib", "straggler:off"), {}),
    # tp=8 on nodes of 4 -> tp=4,dp=4 at the same global batch (synth's tokens are per DP rank: halved)
    "layout-tp8-to-tp4": (TP8_ON_4, {}, ("layout:tp=4,dp=4",), {"sizes": {"tp": 4, "dp": 4}, "tokens": 2048}),
}


@pytest.mark.parametrize("name", sorted(WHAT_IF))
def test_what_if_lands_within_10_pct_of_the_regenerated_run(name: str, tmp_path: Path) -> None:
    base, measured, changes, regenerated = WHAT_IF[name]
    a = _analyze(tmp_path, "measured", {**base, **measured}, changes)
    b = _analyze(tmp_path, "regenerated", {**base, **regenerated})
    assert a.what_if is not None and a.what_if.changes == changes
    assert a.what_if.totals["step_ns_after"] == pytest.approx(_step(b), rel=0.1)
    assert "alpha-beta" in a.what_if.method


@pytest.mark.parametrize(("base", "rank"), [(N16, 3), (N64, 45)], ids=["16", "64"])
def test_desync_from_traces_and_flight_recorder(tmp_path: Path, base: dict[str, Any], rank: int) -> None:
    a = _analyze(tmp_path, "desync", {**base, "seed": 4, "desync": rank, "flight_recorder": True})
    desync = [f for f in a.finding_list if f.id == "desync"]
    assert {f.key.split(":")[1] for f in desync} == {"trace", "flight_recorder"}
    assert all(f.ranks == (rank,) and f.severity == "high" for f in desync)
    assert desync[0].saving_ns_per_step == 0 and desync[0].saving_model.startswith("not a time saving")
    clean = _analyze(tmp_path, "clean", {**base, "seed": 4, "flight_recorder": True})
    assert not [f for f in clean.finding_list if f.id == "desync"]


def test_nccl_setup_faults_from_the_logs(tmp_path: Path) -> None:
    a = _analyze(tmp_path, "gdr", {**N16, "seed": 2, "nccl_faults": ("gdr-off", "nvls-off")})
    assert {"nccl_gdr_disabled", "nvls_unavailable"} <= {f.id for f in a.finding_list}
    b = _analyze(tmp_path, "p2p", {**N16, "seed": 2, "nccl_faults": ("p2p-off",)})
    assert "nccl_p2p_disabled" in {f.id for f in b.finding_list}
    plain_ethernet = _analyze(tmp_path, "eth", {**N16, "seed": 2, "network": "ethernet"})
    assert "nccl_socket_fallback" not in {f.id for f in plain_ethernet.finding_list}  # no IB NICs to fall back from


def test_truth_expected_findings_are_found(tmp_path: Path) -> None:
    cfg = {**N16, "seed": 9, "straggler": 2, "straggler_us": 3000, "desync": 6}
    truth = generate(SynthConfig(**cfg), tmp_path / "run", compresslevel=1)
    found = {f.id for f in commprof.analyze(str(tmp_path / "run")).finding_list}
    assert {f["id"] for f in truth["findings"]["expected"]} <= found


def test_small_latency_bound_messages(tmp_path: Path) -> None:
    """A 0.1B model on 32 tokens: 64 tree all-reduces of 90 KB per step on NVLink at 25 GB/s of 450."""
    a = _analyze(tmp_path, "small", dict(nodes=1, gpus_per_node=8, sizes={"tp": 8}, steps=2, micro_batches=4,
                                         layers=4, model_size_b=0.1, tokens=32, seed=1))
    (f,) = [f for f in a.finding_list if f.id == "small_messages"]
    assert (f.key, f.dimension, f.tier, f.numbers["calls_per_step"]) == ("small_messages:tp:nvlink", "tp", "nvlink", 64)
    assert 0 < f.saving_ns_per_step <= f.numbers["exposed_transfer_ns_per_step"]
    # TP all-reduces sit on each layer's critical path: no bucket or coalescing manager merges them (issue 36); the
    # fix is more tokens per call, and its saving is what twice the tokens per call (half the micro-batches at the
    # same global batch) buys: regenerated, the step drops by 0.243 ms, estimated 0.189 ms (0.78x)
    assert "bucket" not in f.action.replace("no bucket or coalescing", "") and "coalesce them" not in f.action
    assert "more tokens per call" in f.action and "smaller tp degree" in f.action
    fixed = _analyze(tmp_path, "small2x", dict(nodes=1, gpus_per_node=8, sizes={"tp": 8}, steps=2, micro_batches=2,
                                               layers=4, model_size_b=0.1, tokens=64, seed=1))
    assert 0.5 <= f.saving_ns_per_step / (_step(a) - _step(fixed)) <= 1.5


def test_a_group_larger_than_a_node_names_the_layout_to_use(tmp_path: Path) -> None:
    """tp=8 on nodes of 4: the layout what-if estimates tp=4,dp=4 (regenerated at the same global batch the
    step drops by 40.5 ms; the estimate says 46.0 ms, +13 %: the grown dp sync hides a little more behind
    the backward than it does in the regenerated run). Without dp traffic to scale, the saving is not
    estimated, with why."""
    a = _analyze(tmp_path, "tp8", TP8_ON_4)
    (f,) = [f for f in a.finding_list if f.id == "group_larger_than_node"]
    assert (f.key, f.dimension, f.tier, f.severity) == ("group_larger_than_node:tp", "tp", "ib", "high")
    assert "tp=4,dp=4" in f.action and f.saving_model.startswith("what-if layout:tp=4,dp=4")
    fixed = _analyze(tmp_path, "tp4", {**TP8_ON_4, "sizes": {"tp": 4, "dp": 4}, "tokens": 2048})
    assert f.saving_ns_per_step == pytest.approx(_step(a) - _step(fixed), rel=0.2)
    assert not [f for f in a.finding_list if f.id == "tp_across_nodes"]  # nothing to swap tp with
    only_tp = _analyze(tmp_path, "tp8only", dict(nodes=2, gpus_per_node=4, sizes={"tp": 8}, steps=2, seed=1))
    (g,) = only_tp.finding_list
    assert (g.id, g.severity, g.saving_ns_per_step) == ("group_larger_than_node", "high", 0)
    assert g.saving_model.startswith("not estimated: it has no dp traffic") and "tp=4,dp=2 or tp=4,pp=2" in g.action


def test_barriers_dominating_exposed_time(tmp_path: Path) -> None:
    from commprof.synth import TraceBuilder

    pg = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}]
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, pg_config=pg)
        for k in range(3):  # per 2 ms step: 1.2 ms compute, a 0.1 ms all-reduce, a 0.6 ms barrier
            s = (k + 1) * 2000
            b.step(k + 1, s, s + 2000).compute(s, s + 1200)
            for seq, (name, t0, t1) in enumerate((("allreduce", 1200, 1300), ("barrier", 1300, 1900))):
                b.nccl(s + t0, s + t1, **{"Process Group Name": "0", "Seq": 2 * k + seq, "Collective name": name,
                                          "In msg nelems": 1 << 20, "dtype": "Float", "Group size": 2})
        b.write(tmp_path / f"rank-{rank}.json")
    (f,) = commprof.analyze(str(tmp_path)).finding_list
    assert (f.id, f.severity, f.saving_ns_per_step) == ("host_sync", "high", 600_000)
    assert f.numbers["share_of_exposed"] == pytest.approx(6 / 7)


def _gloo_run(tmp: Path, sizes: tuple[int, ...], calls: int = 16) -> Path:
    """Two Gloo ranks, 3 steps of 2 ms compute then ``calls`` blocking all-reduces cycling through ``sizes``
    (floats), each 100 µs + bytes at 1 GB/s: latency-bound on a tier without a peak."""
    from commprof.synth import TraceBuilder

    for rank in (0, 1):
        b = TraceBuilder(rank=rank, backend="gloo", world_size=2).thread_name(2000, "pt_gloo_runloop")
        t = 0.0
        for step in range(1, 4):
            start = t
            b.cpu("aten::mm", t, t + 2000)
            t += 2000
            for k in range(calls):
                dur = 100 + 4 * sizes[k % len(sizes)] / 1000
                b.cpu("c10d::allreduce_", t, t + 1).cpu("c10d::wait", t + 1, t + dur, cat="cpu_op")
                b.gloo("all_reduce", t + 1, t + dur, tid=2000, nelems=sizes[k % len(sizes)])
                t += dur + 1
            b.step(step, start, t)
        b.write(tmp / f"rank-{rank}.json")
    return tmp


def test_small_messages_without_a_peak_are_judged_from_their_sizes(tmp_path: Path) -> None:
    """16 all-reduces per step of 16 and 128 KB at 100 µs + bytes / 1 GB/s: the fit finds alpha ~100 µs and
    coalescing them into one call saves 15 x alpha = 1.5 ms per step; one size only cannot be fitted: a
    warning says why, no finding."""
    a = commprof.analyze(str(_gloo_run(tmp_path / "two", (4096, 32768))))
    (f,) = [f for f in a.finding_list if f.id == "small_messages"]
    assert f.numbers["calls_per_step"] == 16 and f.numbers["calls_after_per_step"] == 1
    assert f.numbers["alpha_ns"] == pytest.approx(100_000, rel=0.05)
    assert f.saving_ns_per_step == pytest.approx(15 * 100_000, rel=0.05)
    one = commprof.analyze(str(_gloo_run(tmp_path / "one", (4096,))))
    assert not [f for f in one.finding_list if f.id == "small_messages"]
    (w,) = [w for w in one.warnings if w.startswith("small_messages")]
    assert f"not judged on {f.tier}" in w and "span less than 4x" in w and "--peak" in w


def test_a_barrier_is_flagged_by_its_cost_and_saves_only_its_own_part(tmp_path: Path) -> None:
    """Per 4 ms step a 2 ms all-reduce and a barrier that rank 0 enters 400 µs before rank 1: the barrier is
    13 % of the exposed comm (under the old 25 % share) but 7.5 % of the step; removing it saves its own
    100 µs, not rank 0's 400 µs wait, which would move to the next collective."""
    from commprof.synth import TraceBuilder

    pg = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}]
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, pg_config=pg)
        for k in range(3):
            s = (k + 1) * 4000
            b.step(k + 1, s, s + 4000).compute(s, s + 1200)
            if rank == 1:
                b.compute(s + 3200, s + 3600)
            calls = (("allreduce", 1200, 3200), ("barrier", 3200 + 400 * rank, 3700))
            for seq, (name, t0, t1) in enumerate(calls):
                b.nccl(s + t0, s + t1, **{"Process Group Name": "0", "Seq": 2 * k + seq, "Collective name": name,
                                          "In msg nelems": 1 << 20, "dtype": "Float", "Group size": 2})
        b.write(tmp_path / f"rank-{rank}.json")
    a = commprof.analyze(str(tmp_path))
    (f,) = [f for f in a.finding_list if f.id == "host_sync"]
    assert f.numbers["share_of_exposed"] < 0.25 and f.numbers["exposed_ns_per_step"] == pytest.approx(300_000)
    assert f.numbers["exposed_wait_ns_per_step"] == pytest.approx(200_000)
    assert (f.severity, f.saving_ns_per_step) == ("low", 100_000)


def test_overlap_savings_are_not_promised_on_a_cpu_run() -> None:
    """A recorded Gloo run (CPU): the DP sync is exposed, but overlapping it would take the cores the backward
    runs on (the A/B on 2 cores bought nothing): the finding names it at info, saving not estimated, and says
    why."""
    a = commprof.analyze(str(Path(__file__).resolve().parents[1] / "sample_traces" / "tp2_dp2"))
    (f,) = [f for f in a.finding_list if f.id == "dp_sync_exposed"]
    assert (f.severity, f.saving_ns_per_step) == ("info", 0)
    assert f.saving_model.startswith("not estimated on a CPU run") and "same cores" in f.detail


def test_zero_byte_all_to_alls_are_not_small_messages_and_savings_share_the_time(tmp_path: Path) -> None:
    """An all-to-all of 4 members with one hot expert at 4x the mean: the other three move 0 bytes. Those
    calls are no "small messages at 0.0 GB/s" (issue 25: 37.75 ms claimed of the ep comm's 52.66 ms exposed,
    on top of the imbalance finding's 38.48 ms); and the findings naming a dimension never promise more
    than its exposed time together."""
    a = _analyze(tmp_path, "a2a0", dict(nodes=2, gpus_per_node=8, sizes={"tp": 2, "ep": 4, "dp": 2}, steps=2,
                                        micro_batches=2, layers=2, alltoall_imbalance=4.0, seed=2))
    assert a.collectives.filter((a.collectives["op"] == "all_to_all") & (a.collectives["bytes"] == 0)).height > 0
    assert [f.key for f in a.finding_list if f.id == "small_messages"] == []
    assert "alltoall_imbalance:ep" in {f.key for f in a.finding_list}
    exposed = dict(zip(a.by_dimension["dimension"], a.by_dimension["exposed_ns_per_step"], strict=True))
    for dim, limit in exposed.items():
        assert sum(f.saving_ns_per_step for f in a.finding_list if f.dimension == dim) <= limit + 1, dim
    assert sum(f.saving_ns_per_step for f in a.finding_list) <= a.totals["exposed_comm_ns"] + 1


def test_savings_on_the_same_time_are_capped_at_it() -> None:
    """Two findings on 50 ms of exposed ep time claiming 38 + 37 ms: the larger keeps its estimate, the other
    gets the 12 ms left (and says so, at the severity that leaves); the run's 80 ms exposed caps them all: a
    finding without a dimension gets the 30 ms left, and nothing is left for the smallest."""
    from commprof.analyzers.findings import Finding
    from commprof.analyzers.findings_rules import cap_shared_savings

    def finding(key: str, saving: int, dimension: str | None) -> Finding:
        return Finding(id="small_messages", key=key, severity="high", title=key, detail="", action="",
                       saving_ns_per_step=saving, saving_model="model", dimension=dimension)

    found = [finding("b", 37_000_000, "ep"), finding("a", 38_000_000, "ep"), finding("c", 5_000_000, "tp"),
             finding("d", 35_000_000, None)]
    out = {f.key: f for f in cap_shared_savings(found, {"ep": 50e6, "tp": 10e6}, 80e6, 1000e6)}
    assert {k: f.saving_ns_per_step for k, f in out.items()} == {"a": 38_000_000, "b": 12_000_000, "c": 0,
                                                                 "d": 30_000_000}
    assert out["a"].saving_model == "model" and "capped at 12.00 ms" in out["b"].saving_model
    assert (out["a"].severity, out["b"].severity, out["d"].severity, out["c"].severity) == (
        "high", "low", "medium", "info")
