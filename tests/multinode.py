"""Jobs across the namespace cluster (tests/netns_cluster.py) under ``commprof record``, in the three shapes
clusters launch them:

- ``torchrun_per_node``: one ``commprof record -o OUT -- torchrun --nnodes N --node-rank I --rdzv-backend c10d
  ...`` per node (SLURM with ``--ntasks-per-node=1``, Kubernetes PyTorchJob), ``OUT`` shared by all nodes or one
  folder per node (``separate=True``: local disks, joined when analyzed);
- ``srun_per_rank``: one ``commprof record -o OUT -- python train.py`` per rank with the environment ``srun``
  gives each task (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, …):
  SLURM itself cannot run here, so its launch is stood in by that environment, each task started in its node;
- ``mpirun_per_rank``: a real Open MPI ``mpirun -np N --host node0:2,node1:2 commprof record -o OUT -- python
  train.py`` started in node0, reaching the other nodes through an rsh agent that enters their namespace (what
  ssh would do on a cluster).

Every launcher is started inside its node (its hostname, its loopback, its shaped link), all at once, and waited
for with a deadline; a job that hangs is killed and its logs are shown.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netns_cluster import Cluster, Node

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "sample_traces" / "train_3d.py"
BIN = Path(sys.executable).parent
PER_NODE = 2
PORTS = iter(range(29400 + (os.getpid() % 200) * 5, 65000))


@dataclass
class Launch:
    """What a job's launchers did: their exit codes and their output (for failure messages)."""

    codes: list[int]
    logs: list[str]
    out: list[Path]  # the run folder(s) recorded into

    def explain(self) -> str:
        return "\n".join(f"--- launcher {i} (exit {c}) ---\n{log[-3000:]}"
                         for i, (c, log) in enumerate(zip(self.codes, self.logs, strict=True)))


def job_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMMPROF_", "TORCH_FR_", "SLURM_", "OMPI_", "PMIX_", "PET_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME")}
    env.update(OMP_NUM_THREADS="1", KINETO_LOG_LEVEL="6", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    env.update(extra)
    return env


# 8 recorded steps: lateness judged over 3 steps of 2-rank groups reads CPU-scheduling jitter on 2 cores as a
# straggler (a rank last in 3 of 3 steps happens by luck 1 time in 4); over 8 steps it does not
WINDOW = ("--wait", "1", "--warmup", "1", "--active", "8")


def record_argv(out: Path, *command: str, extra: tuple[str, ...] = WINDOW) -> list[str]:
    return [str(BIN / "commprof"), "record", "-o", str(out), "--no-analyze", *extra, "--", *command]


def train_args(nodes: int, tp: int = 2, steps: int = 12, tp_across: bool = False) -> list[str]:
    dp = nodes * PER_NODE // tp
    return [str(TRAIN), "--tp", str(tp), "--dp", str(dp), "--steps", str(steps)] + (
        ["--tp-across-nodes"] if tp_across else [])


def wait_all(procs: list[subprocess.Popen[str]], cluster: Cluster, out: list[Path], timeout: float) -> Launch:
    deadline = time.monotonic() + timeout
    codes = [_wait(proc, cluster, deadline) for proc in procs]
    logs = [proc.stdout.read() if proc.stdout else "" for proc in procs]
    return Launch(codes, logs, out)


def _wait(proc: subprocess.Popen[str], cluster: Cluster, deadline: float) -> int:
    """The launcher's exit code; past the deadline every process of every node is killed (a hung job)."""
    try:
        return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for node in cluster.nodes:
            node.kill_all()
        return proc.wait(timeout=30)


def _start(node: Node, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return node.popen(argv, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def torchrun_per_node(cluster: Cluster, out: Path, *, separate: bool = False, train: list[str] | None = None,
                      nodes: list[Node] | None = None, record_extra: tuple[str, ...] = WINDOW,
                      timeout: float = 150, env: dict[str, str] | None = None) -> Launch:
    nodes = nodes or cluster.nodes
    port = next(PORTS)
    train = train or train_args(len(nodes))
    procs, outs = [], []
    for i, node in enumerate(nodes):
        target = out / node.name if separate else out
        outs.append(target)
        torchrun = [str(BIN / "torchrun"), "--nnodes", str(len(nodes)), "--nproc-per-node", str(PER_NODE),
                    "--node-rank", str(i), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{nodes[0].name}:{port}",
                    "--rdzv-id", f"job{port}", *train]
        procs.append(_start(node, record_argv(target, *torchrun, extra=record_extra), env or job_env()))
    return wait_all(procs, cluster, outs, timeout)


def srun_per_rank(cluster: Cluster, out: Path, *, train: list[str] | None = None, timeout: float = 150) -> Launch:
    nodes = cluster.nodes
    world = len(nodes) * PER_NODE
    port = next(PORTS)
    train = train or train_args(len(nodes))
    procs = []
    for i, node in enumerate(nodes):
        for local in range(PER_NODE):
            rank = i * PER_NODE + local
            env = job_env(SLURM_JOB_ID=str(port), SLURM_STEP_ID="0", SLURM_PROCID=str(rank), SLURM_NTASKS=str(world),
                          SLURM_LOCALID=str(local), SLURM_NODEID=str(i), SLURM_NNODES=str(len(nodes)),
                          SLURM_NTASKS_PER_NODE=str(PER_NODE), MASTER_ADDR=nodes[0].name, MASTER_PORT=str(port))
            procs.append(_start(node, record_argv(out, sys.executable, *train), env))
    return wait_all(procs, cluster, [out], timeout)


def mpirun_available() -> str | None:
    """Why a real mpirun cannot run here, or None."""
    return None if shutil.which("mpirun") else "Open MPI's mpirun is not installed (Debian: openmpi-bin)"


def _rsh_agent(cluster: Cluster, folder: Path) -> Path:
    """An ssh stand-in for Open MPI: ``agent [options] HOST COMMAND...`` runs COMMAND in HOST's namespace."""
    cases = "\n".join(f'  {n.name}) exec {shlex.join(n.wrap(["/bin/sh", "-c"]))} "$*" ;;' for n in cluster.nodes)
    script = folder / "rsh-agent.sh"
    script.write_text(f"""#!/bin/sh
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
case $host in
{cases}
esac
echo "rsh-agent: unknown host $host" >&2; exit 255
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def mpirun_per_rank(cluster: Cluster, out: Path, *, train: list[str] | None = None, timeout: float = 150) -> Launch:
    nodes = cluster.nodes
    port = next(PORTS)
    train = train or train_args(len(nodes))
    agent = _rsh_agent(cluster, out.parent)
    env = job_env(MASTER_ADDR=nodes[0].name, MASTER_PORT=str(port))
    passed = [a for name in ("PATH", "OMP_NUM_THREADS", "KINETO_LOG_LEVEL", "MASTER_ADDR", "MASTER_PORT", "HOME")
              for a in ("-x", name)]
    argv = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
            str(len(nodes) * PER_NODE), "--host", ",".join(f"{n.name}:{PER_NODE}" for n in nodes),
            "--mca", "plm_rsh_agent", str(agent), "--mca", "oob_tcp_if_include", "eth0",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "btl", "self,tcp", *passed,
            *record_argv(out, sys.executable, *train)]
    return wait_all([_start(nodes[0], argv, env)], cluster, [out], timeout)


def analyze_json(*paths: Path | str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    done = subprocess.run([str(BIN / "commprof"), "analyze", *map(str, paths), "--format", "json", *extra],
                          capture_output=True, text=True, timeout=300, env=job_env())
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def groups_by_desc(report: dict[str, Any]) -> dict[tuple[str, tuple[int, ...]], dict[str, Any]]:
    return {(g["desc"], tuple(g["ranks"])): g for g in report["process_groups"]}


SHAPES = {"shared": torchrun_per_node, "srun": srun_per_rank, "mpirun": mpirun_per_rank}


def main(argv: list[str] | None = None) -> int:
    """``make cluster-demo``: record sample_traces/train_3d.py across a namespace cluster and print its analysis."""
    import argparse

    from netns_cluster import cluster_unavailable

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--racks", type=int, default=1)
    parser.add_argument("--shape", choices=[*SHAPES, "separate"], default="shared")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "cluster-demo")
    parser.add_argument("--tp", type=int, default=2, help="TP group size (dp takes the rest)")
    parser.add_argument("--tp-across-nodes", action="store_true", help="TP groups spread over the nodes")
    args = parser.parse_args(argv)
    why = cluster_unavailable()
    if why:
        print(f"cluster-demo: cannot make the namespace cluster here: {why}", file=sys.stderr)
        return 2
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    train = train_args(args.nodes, tp=args.tp, tp_across=args.tp_across_nodes)
    with Cluster(nodes=args.nodes, racks=args.racks) as cluster:
        print(f"cluster-demo: {args.nodes} nodes x {PER_NODE} ranks ({', '.join(n.name for n in cluster.nodes)}), "
              f"{cluster.node_gbit} Gbit/s links; recording {' '.join(train)} ({args.shape}) into {args.out}")
        if args.shape == "separate":
            launch = torchrun_per_node(cluster, args.out, separate=True, train=train)
        else:
            launch = SHAPES[args.shape](cluster, args.out / "run", train=train)
    if any(launch.codes):
        print(launch.explain(), file=sys.stderr)
        return 1
    target = [args.out] if args.shape == "separate" else [args.out / "run"]
    return subprocess.run([str(BIN / "commprof"), "analyze", *map(str, target)], env=job_env()).returncode


if __name__ == "__main__":
    sys.exit(main())
