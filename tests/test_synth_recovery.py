"""`commprof synth` runs: the analysis recovers truth.json (computed by the generator from its own
schedule), across seeds, layouts, NCCL versions and faults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import commprof
from commprof.synth import SynthConfig, generate
from commprof.synth.config import parse_version

CASES: dict[str, dict[str, Any]] = {
    "16r-2n-tp8-dp2-straggler": dict(nodes=2, gpus_per_node=8, sizes={"tp": 8, "dp": 2}, straggler=5, seed=1),
    "8r-1n-tp2-cp2-ep2-pcie-2.18": dict(nodes=1, gpus_per_node=8, sizes={"tp": 2, "cp": 2, "ep": 2}, intra="pcie",
                                        nccl_version=parse_version("2.18.1"), group_names="mesh", seed=2),
    "64r-8n-tp4-cp2-dp2-pp4-roce-2.27": dict(nodes=8, gpus_per_node=8, sizes={"tp": 4, "cp": 2, "dp": 2, "pp": 4},
                                             network="roce", nccl_version=parse_version("2.27.3"), straggler=13,
                                             straggler_us=500, clock_offsets_us=(0, 40, -25, 10, 5, 0, 3, 7),
                                             micro_batches=2, layers=1, seed=3),
    "64r-4n-tp8-ep2-dp4-ethernet-fsdp-2.30": dict(nodes=4, gpus_per_node=16, sizes={"tp": 8, "ep": 2, "dp": 4},
                                                  network="ethernet", nccl_version=parse_version("2.30.7"),
                                                  fsdp=True, dp_overlap=False, slow_link="gpu-node-02",
                                                  micro_batches=1, layers=1, dp_buckets=2, seed=4),
    "16r-2n-tp-across-nodes-pp2-2.24": dict(nodes=2, gpus_per_node=8, sizes={"tp": 4, "dp": 2, "pp": 2},
                                            tp_across_nodes=True, nccl_version=parse_version("2.24.3"), seed=5),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any],
                                                                                               dict[str, Any]]:
    cfg = SynthConfig(steps=2, **CASES[request.param])
    path = tmp_path_factory.mktemp("synth") / request.param
    truth = generate(cfg, path, compresslevel=1)
    return path, truth, commprof.analyze_run(path)


def test_truth_file_and_manifest(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    path, truth, _ = run
    assert json.loads((path / "truth.json").read_text()) == json.loads(json.dumps(truth))
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["synthetic"] is True and manifest["world_size"] == len(truth["ranks"])
    for r in truth["ranks"]:  # the five parts add up to the step
        parts = sum(r[k] for k in ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"))
        assert parts == pytest.approx(r["step_ns"], abs=1)
        assert r["exposed_wait_ns"] + r["exposed_transfer_ns"] == pytest.approx(r["exposed_comm_ns"], abs=1)


def test_exposed_and_overlapped_per_rank(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, truth, report = run
    got = {r["rank"]: r for r in report["ranks"]}
    assert sorted(got) == [r["rank"] for r in truth["ranks"]]
    for want in truth["ranks"]:
        for key in ("exposed_comm_ns", "overlapped_comm_ns", "compute_ns"):
            assert got[want["rank"]][key] == pytest.approx(want[key], rel=0.01, abs=1000), (want["rank"], key)


def test_dimension_and_tier_of_every_group(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, truth, report = run
    got = {tuple(p["ranks"]): p for p in report["process_groups"]}
    for want in truth["process_groups"]:
        pg = got[tuple(want["ranks"])]
        assert (pg["dimension"], pg["tier"], pg["tier_source"]) == (want["dimension"], want["tier"], "nccl_log"), want


def test_straggler_is_named(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    """The straggler: the rank whose peers have the largest extra exposed comm over its own, in the
    groups of the innermost dimension (pipeline position shifts exposed time between stages)."""
    _, truth, report = run
    if truth["straggler"] is None:
        pytest.skip("no straggler in this case")
    exposed = {r["rank"]: r["exposed_comm_ns"] for r in report["ranks"]}
    dims = {p["dimension"] for p in report["process_groups"]}
    inner = next(d for d in ("tp", "cp", "ep", "dp", "pp") if d in dims)
    groups = [p["ranks"] for p in report["process_groups"] if p["dimension"] == inner]

    def peers_extra(rank: int) -> float:
        g = next(g for g in groups if rank in g)
        return sum(exposed[p] for p in g if p != rank) / (len(g) - 1) - exposed[rank]

    assert max(exposed, key=peers_extra) == truth["straggler"]


def test_expected_findings_follow_the_options(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    path, truth, _ = run
    ids = {f["id"] for f in truth["findings"]["expected"]}
    name = path.name
    assert ("straggler" in ids) == (truth["straggler"] is not None)
    assert ("tp_across_nodes" in ids) == ("across" in name)
    assert ("nccl_socket_fallback" in ids) == ("socket-fallback" in name)  # plain ethernet is no fault
    assert ids.isdisjoint(truth["findings"]["absent"])
