"""A small multi-node "cluster" on one Linux machine, made of network namespaces, for tests and for people.

Why: commprof attributes communication time to links (intra-node vs inter-node vs inter-rack). On one
machine every rank talks over loopback at the same speed, so that attribution is never exercised. Here each
node is a network namespace with its own hostname, address and shaped links, so a real ``torchrun`` job
spans "nodes" whose links really are slower than a node's own loopback.

Topology (nothing is ever added to the root namespace, so no traffic can leave toward the real network)::

    <prefix>-sw (switch namespace): bridge r<R> per rack; with racks > 1 also a bridge "spine",
        linked to each rack bridge by a veth pair up<R> <-> dn<R> shaped at ``rack_gbit``
    <prefix>-n<I> (node namespace): lo up, eth0 = 198.18.<rack>.<I+1>/16 (RFC 2544 benchmarking range),
        veth peer n<I> on its rack's bridge; both directions shaped at ``node_gbit``

Naming: hostnames are ``node0`` .. ``node<N-1>`` across all racks (node i is in rack ``i * racks // nodes``,
see ``Node.rack``); the rack shows in the address's third byte. ``/etc/netns/<ns>/hosts`` maps every hostname to
its address (``ip netns exec`` bind-mounts it over /etc/hosts). Commands run through ``Node.popen``/``Node.run``
get the node's hostname in a private UTS namespace (``unshare --uts``).

Shaping: ``tbf`` needs a bucket of a few hundred KiB or more at these rates (measured, one TCP stream): with
64 KiB a 10 Gbit/s link carried 3.8 Gbit/s and a 4 Gbit/s one 3.55 (veth hands over 64 KiB GSO segments, so
such a bucket holds one packet at a time); 256 KiB or 2 ms worth of bytes, whichever is larger, gives
0.96 of 1, 3.83 of 4 and ~9.5 of 10 Gbit/s. Unshaped, veth carried ~25 Gbit/s and loopback ~34.

Gloo (measured with torch 2.13): with ``GLOO_SOCKET_IFNAME`` unset, Gloo resolves the hostname and binds to
that address, here eth0's, so a multi-node job works out of the box. A script that pins
``GLOO_SOCKET_IFNAME=lo`` (``sample_traces/train_3d.py`` does, but only when the job is on one node) makes its
ranks publish 127.0.0.1 and the other node's ranks fail within seconds ("Connection refused"), as on a real
cluster. c10d's TCPStore logs "The hostname of the client socket cannot be retrieved. err=-3": it
reverse-resolves the peer's IPv4-mapped IPv6 address, which /etc/hosts cannot answer; harmless.

Teardown always happens: ``__exit__``, on a setup failure, and atexit. A run killed outright (SIGKILL) leaves its
namespaces behind; every new Cluster removes those whose owner process is gone, found through the marker
files in /run/commprof-netns/ (``python tests/netns_cluster.py cleanup`` does it by hand).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKERS = Path("/run/commprof-netns")
ETC_NETNS = Path("/etc/netns")
TOOLS = ("ip", "tc", "unshare", "hostname")
_SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _tool(name: str) -> str:
    """Absolute path, so that a caller's env (PATH without /usr/sbin) cannot break the wrapper."""
    return shutil.which(name) or shutil.which(name, path=_SBIN_PATH) or name


def _sh(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def _ip(*args: str) -> str:
    return _sh(_tool("ip"), *args)


@functools.lru_cache(maxsize=1)
def cluster_unavailable() -> str | None:
    """Why no cluster can be made here (one line), or None: tests skip with this reason."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    missing = [t for t in TOOLS if not shutil.which(t, path=_SBIN_PATH + ":" + os.environ.get("PATH", ""))]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    probe = f"cpprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
        _sh(_tool("tc"), "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1gbit",
            "burst", "256k", "latency", "20ms")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot make a shaped network namespace: {str(exc).splitlines()[0]}"
    finally:
        subprocess.run([_tool("ip"), "netns", "del", probe], capture_output=True)
    return None


# --- leftovers: each cluster writes /run/commprof-netns/<prefix> = "<pid> <start time>" before making anything


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_alive(marker: Path) -> bool:
    try:
        pid, start = marker.read_text().split()
        return _start_time(int(pid)) == start
    except (OSError, ValueError):
        return False


def _namespaces(prefix: str) -> list[str]:
    out = subprocess.run([_tool("ip"), "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]


def _kill_all(ns: str) -> None:
    pids = subprocess.run([_tool("ip"), "netns", "pids", ns], capture_output=True, text=True).stdout
    for pid in pids.split():
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _write(path: Path, text: str) -> None:
    """Write, making the folder; retried because a cluster closing beside us may rmdir an empty folder."""
    for _ in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.write_text(text)
            return
        except FileNotFoundError:
            continue
    path.write_text(text)


def _remove_prefix(prefix: str) -> None:
    """Kill what runs in, then delete, every namespace of one cluster; never raises (teardown must finish)."""
    for ns in _namespaces(prefix):
        _kill_all(ns)
        subprocess.run([_tool("ip"), "netns", "del", ns], capture_output=True)
    for folder in ETC_NETNS.glob(prefix + "-*"):
        shutil.rmtree(folder, ignore_errors=True)
    (MARKERS / prefix).unlink(missing_ok=True)
    for folder in (ETC_NETNS, MARKERS):  # absent on a stock system; rmdir keeps them while another cluster runs
        with contextlib.suppress(OSError):
            folder.rmdir()


def cleanup_stale(everything: bool = False) -> list[str]:
    """Remove the clusters whose owner process is gone (all of them with ``everything``); their prefixes."""
    removed = []
    for marker in sorted(MARKERS.glob("*")) if MARKERS.is_dir() else []:
        if everything or not _owner_alive(marker):
            _remove_prefix(marker.name)
            removed.append(marker.name)
    return removed


# --- the cluster


@dataclass
class Node:
    """One node: a network namespace; commands run in it see ``name`` as their hostname."""

    name: str
    ns: str
    addr: str
    rack: int
    cluster: Cluster = field(repr=False)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run inside the node: its namespace, its hostname, the caller's environment untouched."""
        script = f'{shlex.quote(_tool("hostname"))} "$0" && exec "$@"'
        return [_tool("ip"), "netns", "exec", self.ns, _tool("unshare"), "--uts", "--", "/bin/sh", "-c", script,
                self.name, *argv]

    def popen(self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
              **popen_kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(self.wrap(argv), env=env, cwd=cwd, **popen_kwargs)
        self.cluster.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        """SIGKILL every process in this node (a hung job's launcher and all its workers)."""
        _kill_all(self.ns)

    def run(self, argv: Sequence[str], timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.wrap(argv), timeout=timeout, **kw)


def _burst_bytes(gbit: float) -> int:
    """2 ms worth of bytes, at least 256 KiB: smaller buckets cap the rate below the one asked for."""
    return max(256 * 1024, int(gbit * 1e9 / 8 * 0.002))


class Cluster:
    """``nodes`` namespaces on ``racks`` bridges; a context manager that always tears everything down."""

    def __init__(self, nodes: int = 2, racks: int = 1, node_gbit: float = 4.0, rack_gbit: float = 1.0,
                 prefix: str | None = None) -> None:
        if not 1 <= racks <= nodes <= 250 or min(node_gbit, rack_gbit) <= 0:
            raise ValueError("need 1 <= racks <= nodes <= 250 and positive rates")
        self.prefix = prefix or f"cp{secrets.token_hex(3)[:5]}"
        self.racks, self.node_gbit, self.rack_gbit = racks, node_gbit, rack_gbit
        self.switch_ns = f"{self.prefix}-sw"
        self.nodes = [Node(f"node{i}", f"{self.prefix}-n{i}", f"198.18.{i * racks // nodes}.{i + 1}",
                           i * racks // nodes, self) for i in range(nodes)]
        self.procs: list[subprocess.Popen[Any]] = []
        self._closed = True

    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    def up(self) -> None:
        cleanup_stale()
        _write(MARKERS / self.prefix, f"{os.getpid()} {_start_time(os.getpid())}\n")
        self._closed = False
        atexit.register(self.close)
        try:
            self._build_switch()
            for i, node in enumerate(self.nodes):
                self._build_node(i, node)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill every process in the nodes, delete the namespaces and /etc/netns folders; idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        _remove_prefix(self.prefix)
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def _shape(self, ns: str, dev: str, gbit: float) -> None:
        _sh(_tool("tc"), "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{round(gbit * 1000)}mbit",
            "burst", str(_burst_bytes(gbit)), "latency", "20ms")

    def _bridge_port(self, dev: str, bridge: str) -> None:
        _ip("-n", self.switch_ns, "link", "set", dev, "master", bridge, "up")

    def _build_switch(self) -> None:
        sw = self.switch_ns
        _ip("netns", "add", sw)
        bridges = [f"r{r}" for r in range(self.racks)] + (["spine"] if self.racks > 1 else [])
        for bridge in bridges:
            _ip("-n", sw, "link", "add", bridge, "type", "bridge")
            _ip("-n", sw, "link", "set", bridge, "up")
        for r in range(self.racks if self.racks > 1 else 0):
            _ip("-n", sw, "link", "add", f"up{r}", "type", "veth", "peer", "name", f"dn{r}")
            self._bridge_port(f"up{r}", f"r{r}")
            self._bridge_port(f"dn{r}", "spine")
            self._shape(sw, f"up{r}", self.rack_gbit)
            self._shape(sw, f"dn{r}", self.rack_gbit)

    def _build_node(self, i: int, node: Node) -> None:
        _ip("netns", "add", node.ns)
        _ip("-n", node.ns, "link", "set", "lo", "up")
        _ip("-n", self.switch_ns, "link", "add", f"n{i}", "type", "veth", "peer", "name", "eth0", "netns", node.ns)
        self._bridge_port(f"n{i}", f"r{node.rack}")
        _ip("-n", node.ns, "addr", "add", f"{node.addr}/16", "dev", "eth0")
        _ip("-n", node.ns, "link", "set", "eth0", "up")
        self._shape(node.ns, "eth0", self.node_gbit)
        self._shape(self.switch_ns, f"n{i}", self.node_gbit)
        lines = ["127.0.0.1 localhost", "::1 localhost"] + [f"{n.addr} {n.name}" for n in self.nodes]
        _write(ETC_NETNS / node.ns / "hosts", "\n".join(lines) + "\n")


def make_cluster(**kwargs: Any) -> Iterator[Cluster]:
    """Body of a pytest fixture: ``yield from make_cluster(nodes=2)``; skips where no cluster can be made."""
    why = cluster_unavailable()
    if why:
        import pytest

        pytest.skip(why)
    with Cluster(**kwargs) as cluster:
        yield cluster


# --- throughput: one TCP stream, this file run inside the nodes as receiver and sender


def throughput_gbit(src: Node, dst: Node, seconds: float = 1.5) -> float:
    """Gbit/s of one TCP stream from ``src`` to ``dst`` for ``seconds`` (``src is dst``: over its loopback)."""
    host = "127.0.0.1" if src is dst else dst.addr
    recv = dst.popen([sys.executable, __file__, "_recv"], stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None
        port = recv.stdout.readline().strip()
        src.run([sys.executable, __file__, "_send", host, port, str(seconds)], timeout=seconds + 20, check=True,
                capture_output=True)
        out, _ = recv.communicate(timeout=20)
        return float(out.split()[0])
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


def _recv() -> None:
    with socket.create_server(("", 0)) as server:
        server.settimeout(20)
        print(server.getsockname()[1], flush=True)
        conn, _ = server.accept()
    conn.settimeout(20)
    buf, total, start = bytearray(1 << 20), 0, 0.0
    while n := conn.recv_into(buf):
        start = start or time.perf_counter()
        total += n
    print(f"{total * 8 / (time.perf_counter() - start) / 1e9:.3f}")


def _send(host: str, port: int, seconds: float) -> None:
    data = bytes(1 << 20)
    with socket.create_connection((host, port), timeout=20) as conn:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            conn.sendall(data)


def _check(nodes: int, racks: int, node_gbit: float, rack_gbit: float) -> None:
    with Cluster(nodes, racks, node_gbit, rack_gbit) as cluster:
        print(f"cluster {cluster.prefix}: {nodes} nodes, {racks} racks, node links {node_gbit} Gbit/s, "
              f"rack links {rack_gbit} Gbit/s")
        for node in cluster.nodes:
            seen = node.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
            print(f"  {node.name:8} rack {node.rack}  {node.addr:14} ns {node.ns}  hostname {seen}")
        first = cluster.nodes[0]
        mate = next((n for n in cluster.nodes[1:] if n.rack == first.rack), None)
        other = next((n for n in cluster.nodes if n.rack != first.rack), None)
        pairs = [("intra-node (loopback)", first), ("same rack", mate), ("cross rack", other)]
        for label, dst in pairs:
            if dst is not None:
                print(f"{label:22} {first.name} -> {dst.name}: {throughput_gbit(first, dst):7.2f} Gbit/s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="bring a cluster up, measure its links, tear it down")
    check.add_argument("--nodes", type=int, default=2)
    check.add_argument("--racks", type=int, default=1)
    check.add_argument("--node-gbit", type=float, default=4.0)
    check.add_argument("--rack-gbit", type=float, default=1.0)
    clean = sub.add_parser("cleanup", help="remove clusters left by killed runs")
    clean.add_argument("--all", action="store_true", help="also those of live processes")
    sub.add_parser("_recv")
    send = sub.add_parser("_send")
    send.add_argument("host")
    send.add_argument("port", type=int)
    send.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    if args.cmd == "_recv":
        return _recv()
    if args.cmd == "_send":
        return _send(args.host, args.port, args.seconds)
    why = cluster_unavailable()
    if why:
        sys.exit(f"no cluster here: {why}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `with` tears down on kill
    if args.cmd == "cleanup":
        print("removed:", " ".join(cleanup_stale(args.all)) or "nothing")
    else:
        _check(args.nodes, args.racks, args.node_gbit, args.rack_gbit)


if __name__ == "__main__":
    main()
