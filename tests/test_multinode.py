"""A job across nodes is one run (issue 35), on a real cluster of network namespaces (tests/netns_cluster.py):
every launch shape clusters use (torchrun per node into one shared folder or one folder per node; srun and a real
mpirun, one launcher per rank), 2 nodes x 2 ranks and 4 nodes x 2 ranks on two racks of sample_traces/train_3d.py
(TP=2 inside each node, DP across nodes). Each must keep the job's exit code, every rank's trace, and analyze as
one run: groups with their dimensions, the crossing groups on the network tier and the in-node ones on the node's
loopback, as many hosts as nodes, no desync or straggler the job does not have. Then what goes wrong on clusters:
a node killed mid-run, a node folder missing, another job given the same folder, nodes with different versions.

Skips (with the reason) where namespaces cannot be made: not root, no ip/tc/unshare.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multinode import (
    BIN,
    PER_NODE,
    Launch,
    analyze_json,
    groups_by_desc,
    job_env,
    mpirun_available,
    mpirun_per_rank,
    record_argv,
    srun_per_rank,
    torchrun_per_node,
    train_args,
)
from netns_cluster import Cluster, cluster_unavailable

pytestmark = [pytest.mark.torchrun, pytest.mark.slow, pytest.mark.multinode]

# findings a job can only have when a rank really is late or out of step; train_3d.py has neither
FALSE_ALARMS = ("desync", "straggler")


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Cluster]:
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    with Cluster(nodes=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def four_nodes() -> Iterator[Cluster]:
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    with Cluster(nodes=4, racks=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("multinode")


@pytest.fixture(scope="module")
def shared_two(two_nodes: Cluster, base: Path) -> tuple[Launch, dict[str, Any]]:
    """2 nodes x 2 ranks, torchrun per node, one shared folder: recorded once, read by several tests."""
    launch = torchrun_per_node(two_nodes, base / "shared-2")
    assert launch.codes == [0, 0], launch.explain()
    return launch, analyze_json(base / "shared-2")


def assert_one_run(report: dict[str, Any], nodes: int, launch: Launch | None = None) -> None:
    """The whole job as one run, classified as it was laid out."""
    world = nodes * PER_NODE
    why = launch.explain() if launch else ""
    assert report["run"]["world_size"] == world and report["run"]["ranks_analyzed"] == world, why
    assert len(report["run"]["hosts"]) == nodes, report["run"]["hosts"]
    groups = groups_by_desc(report)
    for n in range(nodes):
        tp = groups[("mesh_tp", (2 * n, 2 * n + 1))]
        assert (tp["dimension"], tp["tier"], tp["nodes_spanned"]) == ("tp", "loopback", 1), tp
        assert tp["calls"] > 0 and tp["bytes_per_step"] > 0
    for d in range(PER_NODE):
        dp = groups[("mesh_dp", tuple(range(d, world, 2)))]
        assert (dp["dimension"], dp["tier"], dp["nodes_spanned"]) == ("dp", "ethernet", nodes), dp
        assert dp["tier_source"] == "hosts" and dp["calls"] > 0
    world_group = groups[("default_pg", tuple(range(world)))]
    assert (world_group["dimension"], world_group["tier"]) == ("world", "ethernet")
    assert not [g for g in report["process_groups"] if g["calls"] and g["dimension"] in (None, "unknown")]
    alarms = [f for f in report["findings"] if f["id"] in FALSE_ALARMS and f["severity"] != "info"]
    assert not alarms, [f["title"] for f in alarms]
    assert not any("traces for" in w for w in report["warnings"]), report["warnings"]


def assert_every_trace(launch: Launch, world: int) -> None:
    folders = dict.fromkeys(launch.out)  # a shared folder once
    traces = sorted(p.name for out in folders for p in (out / "raw" / "traces").glob("rank-*.json.gz"))
    assert traces == sorted(f"rank-{r}.json.gz" for r in range(world)), (traces, launch.explain())


# --- 2 nodes x 2 ranks: every launch shape ---------------------------------------------------------------


def test_torchrun_per_node_into_one_shared_folder(shared_two: tuple[Launch, dict[str, Any]]) -> None:
    launch, report = shared_two
    assert_every_trace(launch, 4)
    assert report["run"]["kind"] == "run"
    assert_one_run(report, 2, launch)
    manifest = json.loads((launch.out[0] / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["exit_code"] == 0
    assert sorted(n["host"] for n in manifest["nodes"]) == ["node0", "node1"]
    assert sorted(n["ranks"] for n in manifest["nodes"]) == [[0, 1], [2, 3]]
    assert manifest["job"]["key"].startswith("rdzv:node0:")
    said = "\n".join(launch.logs)
    assert "joined the recording of job torchrun rendezvous" in said  # the second launcher says it joined


def test_srun_one_launcher_per_rank(two_nodes: Cluster, base: Path) -> None:
    launch = srun_per_rank(two_nodes, base / "srun-2")
    assert launch.codes == [0] * 4, launch.explain()
    assert_every_trace(launch, 4)
    manifest = json.loads((base / "srun-2" / "manifest.json").read_text())
    assert len(manifest["nodes"]) == 4 and manifest["job"]["key"].startswith("slurm:")
    assert_one_run(analyze_json(base / "srun-2"), 2, launch)


def test_mpirun_one_launcher_per_rank(two_nodes: Cluster, base: Path) -> None:
    why = mpirun_available()
    if why:
        pytest.skip(why)
    launch = mpirun_per_rank(two_nodes, base / "mpi-2")
    assert launch.codes == [0], launch.explain()
    assert_every_trace(launch, 4)
    manifest = json.loads((base / "mpi-2" / "manifest.json").read_text())
    assert len(manifest["nodes"]) == 4 and manifest["job"]["key"].startswith("mpi:")
    assert {r["host"] for r in manifest["ranks"]} == {"node0", "node1"}
    assert_one_run(analyze_json(base / "mpi-2"), 2, launch)


def test_one_folder_per_node_joined_when_analyzed(two_nodes: Cluster, base: Path) -> None:
    launch = torchrun_per_node(two_nodes, base / "local-2", separate=True)
    assert launch.codes == [0, 0], launch.explain()
    assert_every_trace(launch, 4)
    node0, node1 = launch.out
    by_parent = analyze_json(base / "local-2")
    by_paths = analyze_json(node0, node1)
    assert by_parent["run"]["kind"] == by_paths["run"]["kind"] == "job"
    assert_one_run(by_parent, 2, launch)
    assert_one_run(by_paths, 2, launch)
    assert groups_by_desc(by_parent).keys() == groups_by_desc(by_paths).keys()
    # each node's launcher said what it recorded and how to analyze the whole job
    assert any("analyze the nodes' folders together" in log for log in launch.logs), launch.explain()
    # every command opens the node folders as one run
    commprof = str(BIN / "commprof")
    check = subprocess.run([commprof, "check", str(node0), str(node1), "--format", "json"], capture_output=True,
                           text=True, env=job_env(), timeout=120)
    assert check.returncode in (0, 1), check.stderr
    assert json.loads(check.stdout)["report"]["run"]["ranks_analyzed"] == 4
    trace = base / "local-2.perfetto.json"
    export = subprocess.run([commprof, "export", str(node0), str(node1), "--perfetto", str(trace)],
                            capture_output=True, text=True, env=job_env(), timeout=120)
    assert export.returncode == 0 and "4 ranks" in export.stderr, export.stderr
    diff = subprocess.run([commprof, "diff", str(base / "local-2"), str(node0), str(node1), "--format", "json"],
                          capture_output=True, text=True, env=job_env(), timeout=120)
    assert diff.returncode == 0, diff.stderr  # the parent, and the two node folders as one run: two runs
    from commprof.cli.dashboard import load_runs

    runs, failures, keys = load_runs([str(node0), str(node1)])
    assert not failures and len(runs) == 1 and next(iter(runs.values())).source.kind == "job"


# --- the same job on one node and on two: the same groups, dimensions, calls and bytes -------------------------


def test_the_same_job_on_one_node_and_on_two(two_nodes: Cluster, base: Path,
                                             shared_two: tuple[Launch, dict[str, Any]]) -> None:
    port = 29390
    one = two_nodes.nodes[0].popen(
        record_argv(base / "one-node", str(BIN / "torchrun"), "--nproc-per-node", "4", "--master-port", str(port),
                    *train_args(2)),
        env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = one.communicate(timeout=150)[0]
    assert one.returncode == 0, out[-3000:]
    alone = groups_by_desc(analyze_json(base / "one-node"))
    spread = groups_by_desc(shared_two[1])
    assert alone.keys() == spread.keys()
    for key, group in alone.items():
        other = spread[key]
        assert (group["dimension"], group["op_mix"], group["calls"], group["bytes_per_step"]) == (
            other["dimension"], other["op_mix"], other["calls"], other["bytes_per_step"]), key
        assert group["tier"] == "loopback"  # one host: everything on its loopback


# --- 4 nodes x 2 ranks on two racks -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["shared", "separate", "srun", "mpirun"])
def test_four_nodes(four_nodes: Cluster, base: Path, shape: str) -> None:
    out = base / f"{shape}-4"
    if shape == "mpirun":
        why = mpirun_available()
        if why:
            pytest.skip(why)
        launch = mpirun_per_rank(four_nodes, out, timeout=240)
    elif shape == "srun":
        launch = srun_per_rank(four_nodes, out, timeout=240)
    else:
        launch = torchrun_per_node(four_nodes, out, separate=shape == "separate", timeout=240)
    assert not any(launch.codes), launch.explain()
    assert_every_trace(launch, 8)
    assert_one_run(analyze_json(out), 4, launch)


# --- what goes wrong on clusters --------------------------------------------------------------------------


def test_a_node_folder_missing_is_said_plainly(two_nodes: Cluster, base: Path) -> None:
    launch = torchrun_per_node(two_nodes, base / "missing", separate=True)
    assert launch.codes == [0, 0], launch.explain()
    report = analyze_json(launch.out[0])  # node1's folder never copied off its disk
    said = " ".join(report["warnings"])
    assert "traces for 2 of 4 ranks" in said and "ranks 2-3 (node rank 1 of 2, 2 ranks a node)" in said, said
    assert not [f for f in report["findings"] if f["id"] in FALSE_ALARMS and f["severity"] != "info"], \
        report["findings"]


def test_a_node_killed_mid_run(two_nodes: Cluster, base: Path) -> None:
    """node1 dies (every process, SIGKILL) once its traces are written: node0's job fails, its launcher passes the
    failure on, and the folder still analyzes with every trace, saying what happened."""
    out = base / "killed"
    node0, node1 = two_nodes.nodes
    result: dict[str, Launch] = {}

    def kill_when_traced() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if {p.name for p in (out / "raw" / "traces").glob("rank-*.json.gz")} >= {"rank-2.json.gz",
                                                                                        "rank-3.json.gz"}:
                time.sleep(0.5)
                node1.kill_all()
                return
            time.sleep(0.2)

    import threading

    killer = threading.Thread(target=kill_when_traced)
    killer.start()
    result["launch"] = torchrun_per_node(two_nodes, out, train=train_args(2, steps=400), timeout=200)
    killer.join()
    launch = result["launch"]
    assert launch.codes[0] != 0 and launch.codes[1] == -9, launch.explain()  # node0's torchrun failed; node1 killed
    assert "Traceback" not in launch.logs[0].split("commprof: run directory")[-1]
    report = analyze_json(out)
    said = " ".join(report["warnings"])
    assert report["run"]["ranks_analyzed"] == 4
    assert "the recorded command failed on node0 (ranks 0-1" in said, said
    assert "the launcher on node1 (ranks 2-3) never finished" in said or "the launcher on node1 never" in said, said
    assert not [f for f in report["findings"] if f["id"] in FALSE_ALARMS and f["severity"] != "info"]


def test_another_job_is_refused_before_it_starts(two_nodes: Cluster, base: Path,
                                                 shared_two: tuple[Launch, dict[str, Any]]) -> None:
    folder = shared_two[0].out[0]
    before = sorted(p.relative_to(folder) for p in folder.rglob("*") if "tables" not in p.parts)
    marker = base / "started"
    other = two_nodes.nodes[0].run(
        record_argv(folder, str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
                    "c10d", "--rdzv-endpoint", "node0:29391", "--rdzv-id", "other", "--no-python", "touch",
                    str(marker)), env=job_env(), timeout=60, capture_output=True, text=True)
    assert other.returncode == 2, other.stderr
    assert "output directory already holds job torchrun rendezvous node0:" in other.stderr
    assert not marker.exists()
    after = sorted(p.relative_to(folder) for p in folder.rglob("*") if "tables" not in p.parts)
    assert before == after  # nothing of the first job touched


def test_nodes_with_different_versions_are_a_warning(two_nodes: Cluster, base: Path,
                                                     shared_two: tuple[Launch, dict[str, Any]]) -> None:
    """A node with another torch (a stale image on one node): its launcher part says so. Another torch cannot be
    installed here, so node1's part is edited to what such a node writes."""
    folder = base / "versions"
    shutil.copytree(shared_two[0].out[0], folder, ignore=shutil.ignore_patterns("tables"))
    for part in (folder / "raw" / "launchers").glob("node1-*.json"):
        doc = json.loads(part.read_text())
        doc["versions"]["torch"] = "2.12.1"
        doc["env"]["NCCL_ALGO"] = {"value": "Tree", "source": "user"}
        part.write_text(json.dumps(doc))
    report = analyze_json(folder)
    said = " ".join(report["warnings"])
    assert "nodes run different torch versions" in said and "2.12.1 on node1" in said, said
    assert "nodes set NCCL_ALGO differently" in said, said
    assert_one_run(report, 2)


# --- tiers measured, not assumed: racks ---------------------------------------------------------------------------


def test_groups_across_racks(base: Path) -> None:
    """4 nodes on 2 racks, the spine shaped to 0.2 Gbit/s (the racks' own links 4): tp=4 keeps each TP group in
    one rack (2 nodes), DP crosses the racks. With SLURM's topology.conf (found beside SLURM_CONF by record and
    copied into the run), DP is on tier spine and TP on the network of its rack; without it, the host pairs
    measured tell the two levels apart."""
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    slurm = base / "slurm"
    slurm.mkdir()
    (slurm / "topology.conf").write_text("# two racks under one spine\nSwitchName=leaf0 Nodes=node[0-1]\n"
                                         "SwitchName=leaf1 Nodes=node[2-3]\nSwitchName=spine Switches=leaf[0-1]\n")
    with Cluster(nodes=4, racks=2, node_gbit=4.0, rack_gbit=0.2) as cluster:
        launch = torchrun_per_node(cluster, base / "racks", train=train_args(4, tp=4) + ["--batch", "256"],
                                   env=job_env(SLURM_CONF=str(slurm / "slurm.conf")), timeout=240)
    assert not any(launch.codes), launch.explain()
    assert (base / "racks" / "raw" / "topology" / "topology.conf").is_file()
    report = analyze_json(base / "racks")
    groups = groups_by_desc(report)
    for members in ((0, 4), (1, 5), (2, 6), (3, 7)):
        dp = groups[("mesh_dp", members)]
        assert (dp["tier"], dp["tier_source"]) == ("spine", "switches"), dp
    for members in ((0, 1, 2, 3), (4, 5, 6, 7)):
        tp = groups[("mesh_tp", members)]
        assert (tp["tier"], tp["tier_source"], tp["nodes_spanned"]) == ("ethernet", "hosts", 2), tp
    pairs = {(p["host_a"], p["host_b"]): p["busbw_gbps"] for p in report["skew"]["host_pairs"]}
    in_rack = [pairs[("node0", "node1")], pairs[("node2", "node3")]]
    across = [pairs[("node0", "node2")], pairs[("node1", "node3")]]
    assert max(across) < 0.5 * min(in_rack), pairs
    (base / "racks" / "raw" / "topology" / "topology.conf").unlink()
    unlabelled = groups_by_desc(analyze_json(base / "racks"))
    assert unlabelled[("mesh_dp", (0, 4))]["tier"] == "ethernet"  # no switch topology: the hosts' tier


# --- 3-D parallelism's rule of thumb: TP belongs inside the node --------------------------------------------------


def test_tp_across_nodes_is_found_and_its_fix_estimated(base: Path,
                                                        shared_two: tuple[Launch, dict[str, Any]]) -> None:
    """The same training with only the rank order changed (TP slowest: TP across the nodes, DP inside them), on
    0.5 Gbit/s links with a TP all-reduce of 512 KiB x 4 per step: the tp_across_nodes finding, with a saving,
    and the layout what-if for Megatron's placement. The calibration against measured runs is make zoo-layout's
    (docs/findings.md); the Megatron-ordered run (shared_two) never gets the finding."""
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    assert not [f for f in shared_two[1]["findings"] if f["id"] == "tp_across_nodes"]
    with Cluster(nodes=2, node_gbit=0.5) as cluster:
        launch = torchrun_per_node(cluster, base / "tp-across", train=train_args(2, tp_across=True) + [
            "--batch", "512", "--tp-layers", "4"])
    assert launch.codes == [0, 0], launch.explain()
    report = analyze_json(base / "tp-across", extra=("--what-if", "layout:tp=2,dp=2"))
    groups = groups_by_desc(report)
    assert (groups[("mesh_tp", (0, 2))]["tier"], groups[("mesh_dp", (0, 1))]["tier"]) == ("ethernet", "loopback")
    found = [f for f in report["findings"] if f["id"] == "tp_across_nodes"]
    assert found and found[0]["saving_ns_per_step"] > 0, report["findings"]
    assert "what-if tp:loopback dp:ethernet" in found[0]["saving_model"]
    what_if = report["what_if"]
    assert what_if["totals"]["step_ns_after"] < what_if["totals"]["step_ns"]
    assert "a CPU run: each tier's bandwidth is what this run reached there" in what_if["method"]
