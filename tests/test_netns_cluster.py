"""The namespace cluster of tests/netns_cluster.py really behaves as separate nodes on shaped links, carries a
real 2-node x 2-rank torchrun job, and leaves nothing behind.

One 4-node, 2-rack cluster serves the module (node0, node1 in rack 0; node2, node3 in rack 1); the teardown
tests make their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_cluster import ETC_NETNS, MARKERS, Cluster, Node, cluster_unavailable, make_cluster, throughput_gbit

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]

TRAIN_3D = Path(__file__).resolve().parents[1] / "sample_traces" / "train_3d.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
JOB_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from make_cluster(nodes=4, racks=2, node_gbit=4.0, rack_gbit=1.0)


def leftovers(prefix: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return ([n for n in names if n.startswith(prefix)] + [str(p) for p in ETC_NETNS.glob(prefix + "*")]
            + [str(p) for p in MARKERS.glob(prefix + "*")])


def test_each_node_has_its_hostname_and_resolves_the_others(cluster: Cluster) -> None:
    names = [n.name for n in cluster.nodes]
    code = ("import json, socket, sys; names = sys.argv[1:]; "
            "print(json.dumps([socket.gethostname()] + [socket.gethostbyname(n) for n in names]))")
    for node in cluster.nodes:
        assert node.run(["hostname"], capture_output=True, text=True).stdout.strip() == node.name
        done = node.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        seen, *addrs = json.loads(done.stdout)
        assert seen == node.name
        assert addrs == [n.addr for n in cluster.nodes]
    assert [n.rack for n in cluster.nodes] == [0, 0, 1, 1]


def test_links_are_shaped_below_loopback(cluster: Cluster) -> None:
    node0, node1, node2 = cluster.nodes[:3]
    intra = throughput_gbit(node0, node0)
    same_rack = throughput_gbit(node0, node1)
    cross_rack = throughput_gbit(node0, node2)
    figures = f"intra {intra:.2f}, same rack {same_rack:.2f}, cross rack {cross_rack:.2f} Gbit/s"
    assert same_rack < intra / 2, figures
    assert 0.3 * cluster.node_gbit <= same_rack <= 1.5 * cluster.node_gbit, figures
    assert cross_rack < 0.6 * same_rack, figures
    assert 0.3 * cluster.rack_gbit <= cross_rack <= 1.5 * cluster.rack_gbit, figures


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMPROF_", "NCCL_", "TORCH_FR_", "GLOO_"))}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    env["OMP_NUM_THREADS"] = "1"  # GLOO_SOCKET_IFNAME unset: Gloo binds to the hostname's address (eth0's)
    return env


def test_torchrun_across_two_nodes(cluster: Cluster, tmp_path: Path) -> None:
    nodes = cluster.nodes[:2]
    procs, logs = [], [tmp_path / f"node{r}.log" for r in range(2)]
    for rank, (node, log) in enumerate(zip(nodes, logs, strict=True)):
        argv = [str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(rank),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{nodes[0].name}:29400", "--rdzv-id", tmp_path.name,
                str(TRAIN_3D), "--tp", "2", "--dp", "2"]
        with log.open("w") as out:
            procs.append(node.popen(argv, env=job_env(), cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        for node in nodes:
            node.kill_all()
        codes = [p.wait() for p in procs]
        codes.append(-1)
    tails = "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in logs)
    assert codes == [0, 0], f"exit codes {codes} (-1: timed out after {JOB_TIMEOUT_S} s)\n{tails}"


def test_teardown_kills_processes_and_removes_everything() -> None:
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    with Cluster(nodes=2) as small:
        sleeper = small.nodes[1].popen(["sleep", "60"])
        prefix = small.prefix
        assert leftovers(prefix)
    assert sleeper.returncode is not None
    assert leftovers(prefix) == []


def test_failed_setup_and_killed_runs_leave_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    build_node = Cluster._build_node

    def fail_on_second(self: Cluster, i: int, node: Node) -> None:
        if i == 1:
            raise RuntimeError("setup broke half way")
        build_node(self, i, node)

    monkeypatch.setattr(Cluster, "_build_node", fail_on_second)
    broken = Cluster(nodes=3)
    with pytest.raises(RuntimeError, match="half way"):
        broken.up()
    monkeypatch.undo()
    assert leftovers(broken.prefix) == []
    # a run killed outright: its marker names a process that is gone; the next cluster removes its namespace
    stale = "cp" + os.urandom(3).hex()[:5]
    MARKERS.mkdir(parents=True, exist_ok=True)
    (MARKERS / stale).write_text("999999999 0\n")
    subprocess.run(["ip", "netns", "add", f"{stale}-n0"], check=True)
    with Cluster(nodes=1):
        assert leftovers(stale) == []
