"""One handler per NCCL line family. Each returns the family name it parsed, or a skip kind
starting with ``!`` (``!malformed``: the family was recognised but the line is cut or garbled).

Handlers only run after ``dispatch`` picked them with substring tests, which keeps regex work to
the lines that need it.
"""

from __future__ import annotations

from commprof.ingest.nccl_logs import evidence as ev
from commprof.ingest.nccl_logs import patterns as pt
from commprof.ingest.nccl_logs.records import CommRank, Link, Nic, Pending, Process, Tuning
from commprof.ingest.nccl_logs.state import Head, State

MALFORMED = "!malformed"
OTHER = "!other_nccl"
P2P_KINDS = ("direct pointer", "IPC", "CUMEM", "MNNVL")


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None


def init(st: State, h: Head, msg: str, file: str, line_no: int) -> str:
    m = pt.INIT.search(msg)
    if m is None:
        return MALFORMED
    proc, ptr = h.process, m["ptr"]
    rank, nranks = int(m["rank"]), int(m["nranks"])
    rec = proc.comm_by_ptr.get(ptr)
    if m["what"] != "Init":
        if rec is not None:
            rec.destroyed = True
        return "destroy"
    starting = m["state"] == "START"
    if rec is None or rec.destroyed or (starting and rec.init_complete) or rec.rank != rank or rec.nranks != nranks:
        rec = st.new_comm(proc, ptr, rank, nranks, file, line_no)
    rec.cuda_dev = int(m["cuda"])
    rec.nvml_dev = _int(m["nvml"])
    rec.bus_id = m["bus"]
    if m["func"]:
        rec.init_func = m["func"]
    if m["commid"]:
        rec.comm_id = m["commid"]
    if m["parent"]:
        rec.parent_ptr = m["parent"]
        if rec.parent is None:
            rec.parent = proc.comm_by_ptr.get(m["parent"])
        rec.init_func = rec.init_func or "ncclCommSplit"
    if m["split"] is not None:
        rec.split_count = int(m["split"])
    if m["color"] is not None:
        rec.color, rec.key = int(m["color"]), int(m["key"])
    if not starting:
        rec.init_complete = True
    st.touch(rec, proc, h.tid)
    return "init"


def comm_nodes(st: State, h: Head, msg: str, file: str, line_no: int) -> str:
    m = pt.COMM_NODES.search(msg)
    if m is None:
        return MALFORMED
    proc, rank, nranks = h.process, int(m["rank"]), int(m["nranks"])
    rec = proc.comm_by_ptr.get(m["ptr"])
    if rec is None or rec.rank != rank or rec.nranks != nranks:
        rec = st.new_comm(proc, m["ptr"], rank, nranks, file, line_no)
    rec.nnodes, rec.local_ranks, rec.local_rank = int(m["nnodes"]), int(m["lranks"]), int(m["lrank"])
    rec.mnnvl = _int(m["mnnvl"])
    st.touch(rec, proc, h.tid)
    return "comm_nodes"


def _p2p(via: str, link: Link) -> bool:
    rest = via[4:]
    link.read = "/read" in rest
    link.ce = rest.endswith("/CE")
    if rest.startswith("indirect"):
        m = pt.P2P_INDIRECT.match(rest)
        if m is None:
            return False
        link.detail, link.proxy_rank = "indirect", int(m.group(1))
        return True
    kind = rest.split("/", 1)[0]
    if kind not in P2P_KINDS:
        return False
    link.detail = kind
    return True


def connection(st: State, h: Head, msg: str, file: str, line_no: int) -> str:
    m = pt.CONNECTION.search(msg)
    if m is None:
        return MALFORMED
    src, dst, direction = int(m["src"]), int(m["dst"]), m["dir"] or "send"
    via = m["via"]
    link = Link(
        comm=None,
        process=h.process,
        file=file,
        line_no=line_no,
        channel=int(m["ch"]),
        conn_index=_int(m["conn"]),
        from_rank=src,
        to_rank=dst,
        from_dev=m["sdev"],
        to_dev=m["ddev"],
        direction=direction,
        transport="",
        detail="",
        dev=h.dev,
        ptr_hint=m["ptr"],
        nranks_hint=_int(m["nranks"]),
    )
    if via.startswith("P2P/"):
        link.transport = "p2p"
        if not _p2p(via, link):
            return MALFORMED
    elif via.startswith("SHM/"):
        link.transport, link.detail = "shm", via[4:]
        if link.detail not in ("direct", "direct/direct", "CE/direct", "direct/CE", "CE/CE", "CE"):
            return MALFORMED
    elif via.startswith("NET/"):
        n = pt.NET_VIA.match(via)
        if n is None:
            return MALFORMED
        flags = n["flags"]
        link.transport, link.detail, link.nic_dev = "net", n["name"], int(n["dev"])
        link.proxy_rank = _int(n["proxy"])
        link.gdrdma, link.gdr_pci, link.shared = "/GDRDMA" in flags, "(PCI)" in flags, "/Shared" in flags
    else:
        return MALFORMED
    me = dst if direction == "receive" else src
    if link.ptr_hint is None:
        st.place(h.process, h.tid, Pending("link", link, me, max(src, dst)), lazy=True)
    else:  # the line names its communicator: no guessing; an unknown one is inferred later
        rec = h.process.comm_by_ptr.get(link.ptr_hint)
        link.comm = rec if rec is not None and rec.rank == me else None
    st.links.append(link)
    return "connection"


def collnet(st: State, h: Head, msg: str, file: str, line_no: int) -> str:
    m = pt.COLLNET.search(msg)
    if m is None:
        return MALFORMED
    rank, flags = int(m["rank"]), m["flags"]
    link = Link(
        comm=None,
        process=h.process,
        file=file,
        line_no=line_no,
        channel=int(m["ch"]),
        conn_index=_int(m["conn"]),
        from_rank=rank,
        to_rank=None,
        from_dev=None,
        to_dev=None,
        direction=m["dir"],
        transport="collnet",
        detail=m["name"],
        nic_dev=int(m["dev"]),
        gdrdma="/GDRDMA" in flags,
        shared="/Shared" in flags,
    )
    st.place(h.process, h.tid, Pending("link", link, rank, rank), lazy=True)
    st.links.append(link)
    return "collnet"


def ring_order(st: State, h: Head, msg: str) -> str:
    m = pt.RING_ORDER.match(msg)
    if m is None:
        return MALFORMED
    ranks = [int(r) for r in m.group(3).split()]
    if not ranks:
        return MALFORMED
    h.process.rank_bound = max(h.process.rank_bound, max(ranks) + 1)
    item = Pending("ring", me=0, top=max(ranks), value=(int(m.group(1)), int(m.group(2))), ranks=ranks)
    st.place(h.process, h.tid, item)
    return "ring_order"


def pattern(st: State, h: Head, msg: str) -> str:
    m = pt.PATTERN.search(msg)
    if m is None:
        return MALFORMED
    h.process.graph_intra.add(m.group(6))
    h.process.graph_inter.add(m.group(7))
    st.place(h.process, h.tid, Pending("pattern", value=(int(m.group(1)), m.group(6), m.group(7))))
    return "graph_pattern"


def channel_counts(st: State, h: Head, msg: str) -> str:
    m = pt.CHANNEL_COUNTS.search(msg)
    if m is None:
        return MALFORMED
    counts = (int(m.group(1)), _int(m.group(2)), int(m.group(3)), int(m.group(4)))
    st.place(h.process, h.tid, Pending("channels", value=counts))
    return "channels"


def init_timings(st: State, h: Head, msg: str) -> str:
    m = pt.INIT_TIMINGS.search(msg)
    if m is None:
        return MALFORMED
    rank, nranks = int(m.group(1)), int(m.group(2))
    h.process.rank_bound = max(h.process.rank_bound, nranks)
    st.place(h.process, h.tid, Pending("timings", me=rank, top=nranks - 1, value=(float(m.group(3)),)))
    return "init_timings"


def connected(st: State, h: Head, msg: str) -> str:
    rec = st.current(h.process, h.tid)
    m = pt.CONNECTED_RINGS.search(msg)
    if rec is not None and m is not None and m.group(1) is not None:
        rec.ring_pxn, rec.ring_gdr = int(m.group(1)), int(m.group(2))
    if rec is not None and "NVLS" in msg:
        _mark_nvls(st, rec, h.process)
    return "connected"


def _mark_nvls(st: State, rec: CommRank, proc: Process) -> None:
    if rec.nvls:
        return
    rec.nvls = True
    st.links.append(
        Link(
            comm=rec,
            process=proc,
            file=rec.file,
            line_no=rec.line_no,
            channel=-1,
            conn_index=None,
            from_rank=rec.rank,
            to_rank=None,
            from_dev=None,
            to_dev=None,
            direction="send",
            transport="nvls",
            detail="multicast",
        )
    )


def nvls(st: State, h: Head, msg: str) -> str:
    sup = pt.NVLS_SUPPORT.search(msg)
    if sup is not None:
        h.process.nvls_available = sup.group(1) is None
        return "nvls"
    nv = pt.NVLS_COMM.search(msg)
    if nv is not None:
        h.process.nvls_available = True  # NVLS buffers were set up: this host has NVSwitch
        rec = st.by_ptr(h.process, nv.group(1))
        if rec is not None:
            _mark_nvls(st, rec, h.process)
        return "nvls"
    if msg.startswith("Connected NVLS"):
        return connected(st, h, msg)
    return OTHER


def _nic_family(net: str) -> str:
    low = net.lower()
    return "socket" if low == "socket" else "ib" if low.startswith("ib") else low


def net_line(st: State, h: Head, msg: str) -> str:
    proc = h.process
    if ": Using " in msg:
        m = pt.NET_USING.search(msg)
        if m is None:
            return MALFORMED
        net, devs = m["net"], m["devs"].split(";", 1)[0]
        family = _nic_family(net)
        nics: dict[int, Nic] = {}
        if family == "socket":
            for d in pt.SOCKET_DEV.finditer(devs):
                nics[int(d.group(1))] = Nic(net, int(d.group(1)), d.group(2), address=d.group(3), link_layer="ETH")
        else:
            for d in pt.IB_DEV.finditer(devs):
                nics[int(d.group(1))] = Nic(net, int(d.group(1)), d.group(2), int(d.group(3)), d.group(4))
        if not nics:
            return MALFORMED
        proc.nics[family] = nics
        return "nic_list"
    if "speed=" in msg:
        det = pt.NIC_DETAIL.search(msg)
        if det is None:
            return MALFORMED
        table = proc.nics.setdefault(_nic_family(det["net"]), {})
        idx = int(det["idx"])
        nic = table.get(idx) or Nic(det["net"], idx, det["name"], int(det["port"]))
        table[idx] = nic
        nic.link_layer, nic.speed_mbps = det["ll"], int(det["speed"])
        return "nic_detail"
    if "GPU Direct RDMA" in msg:
        return gdr(st, h, msg)
    return OTHER


def gdr(st: State, h: Head, msg: str) -> str:
    m = pt.GDR.search(msg)
    if m is None:
        return MALFORMED
    table = h.process.nics.setdefault("ib", {})
    idx = int(m.group(2))
    nic = table.get(idx)
    if nic is None:
        quoted = msg.rsplit("'", 2)
        nic = table[idx] = Nic("IB", idx, quoted[1] if len(quoted) == 3 else f"hca{idx}")
    nic.gdr = m.group(1) == "Enabled"
    return "gdr"


def socket_speed(st: State, h: Head, msg: str) -> str:
    m = pt.FOUND_IFACE.search(msg)
    if m is None:
        return MALFORMED
    table = h.process.nics.setdefault("socket", {})
    nic = next((n for n in table.values() if n.name == m.group(1)), None)
    if nic is None:
        nic = table[len(table)] = Nic("Socket", len(table), m.group(1), link_layer="ETH")
    nic.speed_mbps = int(m.group(2))
    return "nic_detail"


def using_network(st: State, h: Head, msg: str) -> str:
    m = pt.USING_NETWORK.search(msg)
    if m is None:
        return MALFORMED
    h.process.net_name = m.group(1)
    return "network"


def gpu_model(st: State, line: str, file: str) -> str:
    """A GPU name outside NCCL's own lines: nccl-tests' rank table ("... on host device 0 [0x07]
    NVIDIA A100-SXM4-80GB"), ``nvidia-smi -L`` ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)")."""
    m = ev.GPU_NAME.search(line)
    if m is None:
        return "!foreign"
    host = pt.NCCL_TESTS_HOST.search(line)
    st.gpu_models.setdefault(host.group(1) if host else None, set()).add(m.group(0).strip())
    return "gpu_model"


def version(st: State, h: Head | None, msg: str, file: str) -> str:
    g = pt.GIT_VERSION.search(msg)
    if g is not None and h is not None:
        h.process.git_version = " ".join(x for x in g.groups() if x)
        return "version"
    m = pt.VERSION.search(msg)
    if m is None:
        return MALFORMED
    if h is None:
        st.bare_versions.setdefault(file, m.group(1))
    else:
        h.process.version = m.group(1)
    return "version"


def tuning(st: State, h: Head, msg: str) -> str:
    fields = pt.tuning_fields(msg)
    if fields is None:
        return MALFORMED
    op, nbytes, algo, proto, time_us, lo, hi = fields
    rec = st.current(h.process, h.tid)
    if op is None:
        last = h.process.last_coll_by_tid.get(h.tid, "")
        op = last[: last.find(":")] if ":" in last else None
    st.tuning.append(Tuning(rec, op, nbytes, algo, proto, time_us, lo, hi))
    return "tuning"


def topology(st: State, h: Head, msg: str) -> str:
    proc = h.process
    if msg.startswith("=== System"):
        proc.topo_printed = True
        return "topology"
    m = pt.TOPO_LINK.match(msg)
    if m is not None:
        proc.topo_printed = True
        if m.group(1) == "NVL":
            proc.topo_nvlink = True
        if m.group(3) == "GPU" and m.group(1) == "PCI":
            proc.topo_gpus += 1
    return "topology"
