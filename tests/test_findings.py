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
PP64 = dict(nodes=8, gpus_per_node=8, sizes={"tp": 4, "dp": 8, "pp": 2}, steps=2, micro_batches=2, layers=1)
# DP sync after the backward: hidden behind it, it would run beside the all-to-alls, and their exposed time
# would be shared between the two (the model's saving then overshoots: 1.98 ms claimed, 1.54 measured)
EP64 = dict(nodes=8, gpus_per_node=8, sizes={"ep": 8, "dp": 8}, steps=2, micro_batches=1, layers=2, model_size_b=1.0,
            dp_overlap=False)
EP16 = dict(nodes=2, gpus_per_node=8, sizes={"ep": 8, "dp": 2}, steps=2, micro_batches=2, layers=2, model_size_b=1.0)

# name: (finding id, base config, the fault, the fix: what the regenerated run changes instead)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "16-straggler-s1": ("straggler", {**N16, "seed": 1}, {"straggler": 5, "straggler_us": 3000}, {}),
    "16-tp-across-s2": ("tp_across_nodes", {**N16, "seed": 2}, {"tp_across_nodes": True}, {}),
    "16-dp-off-s3": ("dp_sync_exposed", {**N16, "seed": 3}, {"dp_overlap": False}, {}),
    "16-slow-link-s4": ("link_efficiency", {**N16, "seed": 4}, {"slow_link": "gpu-node-01"}, {}),
    "16-socket-s5": ("nccl_socket_fallback", {**N16, "seed": 5}, {"socket_fallback": True}, {}),
    "16-pp-mb-s6": ("pipeline_bubble", {**PP16, "seed": 6}, {},
                    {"micro_batches": 8, "tokens": 1024}),  # 4x the micro-batches, same global batch
    "16-tp-across-pp-s13": ("tp_across_nodes", {**PP16, "seed": 13}, {"tp_across_nodes": True}, {}),
    "16-a2a-s7": ("alltoall_imbalance", {**EP16, "seed": 7}, {"alltoall_imbalance": 3.0}, {}),
    # the 64-rank cases share one seed, so that their fixed run is one clean run generated once
    "64-straggler-s8": ("straggler", {**N64, "seed": 8}, {"straggler": 37, "straggler_us": 5000}, {}),
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


def test_fault_is_the_top_finding_of_its_kind_and_its_saving_is_measured(case: tuple[str, Analysis, Analysis]) -> None:
    kind, faulty, fixed = case
    mine = [f for f in faulty.findings if f.id == kind]
    assert mine, [f.key for f in faulty.findings]
    top = mine[0]
    assert top.severity != "info"
    measured = _step(faulty) - _step(fixed)
    assert measured > 0
    assert top.saving_ns_per_step == pytest.approx(measured, rel=0.2), (top.key, top.saving_model)


def test_no_finding_claims_more_than_the_exposed_time_it_is_about(case: tuple[str, Analysis, Analysis]) -> None:
    _, faulty, _ = case
    for f in faulty.findings:
        assert f.saving_ns_per_step <= faulty.totals["exposed_comm_ns"] + 1, f.key
        if "exposed_ns_per_step" in f.numbers:
            assert f.saving_ns_per_step <= f.numbers["exposed_ns_per_step"] + 1, f.key


@pytest.mark.parametrize("seed", [1, 12])
@pytest.mark.parametrize("base", [N16, PP16, EP16], ids=["tp8dp2", "tp4dp2pp2", "ep8dp2"])
def test_clean_run_has_no_finding_above_info(base: dict[str, Any], seed: int, tmp_path: Path) -> None:
    a = _analyze(tmp_path, "clean", {**base, "seed": seed})
    assert a.findings_computed
    loud = [f.key for f in a.findings if f.severity != "info" and f.id != "pipeline_bubble"]
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
    desync = [f for f in a.findings if f.id == "desync"]
    assert {f.key.split(":")[1] for f in desync} == {"trace", "flight_recorder"}
    assert all(f.ranks == (rank,) and f.severity == "high" for f in desync)
    assert desync[0].saving_ns_per_step == 0 and desync[0].saving_model.startswith("not a time saving")
    clean = _analyze(tmp_path, "clean", {**base, "seed": 4, "flight_recorder": True})
    assert not [f for f in clean.findings if f.id == "desync"]


def test_nccl_setup_faults_from_the_logs(tmp_path: Path) -> None:
    a = _analyze(tmp_path, "gdr", {**N16, "seed": 2, "nccl_faults": ("gdr-off", "nvls-off")})
    assert {"nccl_gdr_disabled", "nvls_unavailable"} <= {f.id for f in a.findings}
    b = _analyze(tmp_path, "p2p", {**N16, "seed": 2, "nccl_faults": ("p2p-off",)})
    assert "nccl_p2p_disabled" in {f.id for f in b.findings}
    plain_ethernet = _analyze(tmp_path, "eth", {**N16, "seed": 2, "network": "ethernet"})
    assert "nccl_socket_fallback" not in {f.id for f in plain_ethernet.findings}  # no IB NICs to fall back from


def test_truth_expected_findings_are_found(tmp_path: Path) -> None:
    cfg = {**N16, "seed": 9, "straggler": 2, "straggler_us": 3000, "desync": 6}
    truth = generate(SynthConfig(**cfg), tmp_path / "run", compresslevel=1)
    found = {f.id for f in commprof.analyze(str(tmp_path / "run")).findings}
    assert {f["id"] for f in truth["findings"]["expected"]} <= found
