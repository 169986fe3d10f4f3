"""Finding rules on NCCL's set-up (read from its logs and the topology capture) and on desync (ranks of a
group whose collectives differ, from the traces and from Flight Recorder dumps)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import polars as pl

from commprof.analyzers import whatif
from commprof.analyzers.findings import Finding
from commprof.analyzers.findings_rules import EXPECTED_EFFICIENCY, LARGE_BYTES, severity
from commprof.vocab import P2P_OPS

if TYPE_CHECKING:
    from commprof.analyzers.findings_rules import Ctx

NVLS_GPUS = re.compile(r"\bH100\b|\bH200\b|\bH20\b|\bGH200\b|\bG?B[123]00\b")  # NVLink SHARP: Hopper and later
# ops whose members must pass the same size (all-to-all splits, gather/scatter and p2p may differ)
SAME_SIZE_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter")


def _hosts_text(hosts: list[str]) -> str:
    return ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")


def rule_socket_fallback(c: Ctx) -> list[Finding]:
    setup = c.a.tables.sidecars.nccl_setup
    ports = c.a.tables.sidecars.ib_ports
    if setup.height == 0:
        return []
    sockets = setup.filter((pl.col("socket_links") > 0) | pl.col("networks").list.contains("Socket"))
    with_ib = set(ports["host"].to_list()) | set(setup.filter(pl.col("ib_nics") > 0)["host"].to_list())
    hosts = sorted(h for h in sockets["host"].to_list() if h in with_ib)
    if not hosts:
        return []
    mine = ports.filter(pl.col("host").is_in(hosts))
    layer = str(mine["link_layer"][0]) if mine.height else "InfiniBand"
    net = "roce" if layer.lower().startswith("eth") else "ib"
    nic = float(mine["gbps"].max() or 0) if mine.height else whatif.tier_peak(c.a, net) or 50.0
    eth = c.calls.filter((pl.col("tier") == "ethernet") & (pl.col("bytes") >= LARGE_BYTES))
    dur = (eth["end_ns"] - eth["start_ns"]).cast(pl.Float64)
    eff = float((eth["efficiency"].fill_null(0) * dur).sum() / max(float(dur.sum()), 1.0)) if eth.height else 0.0
    # the what-if rescales by peak ratio, keeping the efficiency reached: aim at what IB reaches instead
    target = nic * (EXPECTED_EFFICIENCY / eff if eff > 0 else 1.0)
    exposed = float(c.a.by_tier.filter(pl.col("tier") == "ethernet")["exposed_ns_per_step"].sum())
    change = whatif.Change(f"ethernet->{net}={nic:g}", "retier", tier=net, gbps=target, from_tier="ethernet")
    saving = min(c.saving([change]), exposed)
    return [Finding(
        id="nccl_socket_fallback", key="nccl_socket_fallback", severity="high" if saving > 0.03 * c.step_ns
        else severity(saving, c.step_ns) if saving else "medium",
        title=f"NCCL runs over TCP sockets on {len(hosts)} host(s) that have {layer} NICs",
        detail=f"NCCL's logs on {_hosts_text(hosts)} say 'Using network Socket' / NET/Socket connections, while "
               f"the topology capture lists active {layer} ports ({nic:.0f} GB/s); inter-node traffic exposes "
               f"{exposed / 1e6:.2f} ms per step at socket speed.",
        action="make NCCL use the NICs: unset NCCL_IB_DISABLE / NCCL_NET=Socket, install the IB verbs "
               "(rdma-core) or the AWS-OFI / net plugin in the container, set NCCL_IB_HCA to the HCAs, and check "
               "'NET/IB : Using' in NCCL_DEBUG=INFO",
        saving_ns_per_step=round(saving),
        saving_model=f"what-if the ethernet-tier calls on {net} at {nic:.0f} GB/s and {EXPECTED_EFFICIENCY:.0%} "
                     f"efficiency: {whatif.MODEL}",
        tier="ethernet", numbers={"nic_gbps": nic, "exposed_ns_per_step": exposed, "socket_efficiency": eff},
        pgs=tuple(sorted(set(eth["pg"].to_list())))[:16])]


def rule_gdr_disabled(c: Ctx) -> list[Finding]:
    setup = c.a.tables.sidecars.nccl_setup
    bad = setup.filter((pl.col("gdr_disabled_nics") > 0) | ((pl.col("ib_links") > 0) & (pl.col("gdr_links") == 0)))
    if bad.height == 0:
        return []
    hosts = sorted(bad["host"].to_list())
    return [Finding(
        id="nccl_gdr_disabled", key="nccl_gdr_disabled", severity="medium",
        title=f"GPUDirect RDMA is off on {len(hosts)} host(s): network transfers bounce through host memory",
        detail=f"NCCL on {_hosts_text(hosts)} logs 'GPU Direct RDMA Disabled' or IB connections without GDRDMA; "
               "transfers are staged through CPU memory (more PCIe traffic, lower bandwidth, CPU load).",
        action="load nvidia-peermem (or use dma-buf with a recent driver/kernel), check NCCL_NET_GDR_LEVEL and "
               "that GPU and NIC share a PCIe switch (nvidia-smi topo -m: PIX/PXB)",
        saving_ns_per_step=0, saving_model="not estimated: its cost depends on the PCIe topology and load",
        tier="ib", numbers={"hosts": float(len(hosts))})]


def rule_p2p_disabled(c: Ctx) -> list[Finding]:
    setup = c.a.tables.sidecars.nccl_setup
    bad = setup.filter((pl.col("shm_links") > 0) & (pl.col("p2p_links") == 0) & (pl.col("processes") > 1))
    if bad.height == 0:
        return []
    hosts = sorted(bad["host"].to_list())
    shm = float(c.a.by_tier.filter(pl.col("tier") == "shm")["exposed_ns_per_step"].sum())
    return [Finding(
        id="nccl_p2p_disabled", key="nccl_p2p_disabled", severity="medium" if shm < 0.03 * c.step_ns else "high",
        title=f"P2P between GPUs is off on {len(hosts)} host(s): NCCL goes through host shared memory (SHM)",
        detail=f"GPUs of one host on {_hosts_text(hosts)} connect via SHM, none via P2P/NVLink; intra-node groups "
               f"expose {shm / 1e6:.2f} ms per step on shm.",
        action="unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, give the container IPC (--ipc=host) and all GPUs of the "
               "node, check ACS/IOMMU settings that block peer access",
        saving_ns_per_step=0, saving_model="not estimated: shm has no peak to rescale from (pass --what-if with "
                                           "the intra-node tier to see one)",
        tier="shm", numbers={"exposed_ns_per_step": shm})]


def rule_nvls_unavailable(c: Ctx) -> list[Finding]:
    setup = c.a.tables.sidecars.nccl_setup
    gpu = next(iter(c.a.ranks["gpu_name"].drop_nulls().to_list()), "")
    nvlink = c.a.process_groups.filter(pl.col("tier") == "nvlink").height > 0
    bad = setup.filter(pl.col("nvls_available") == False)  # noqa: E712 (null: not logged)
    if bad.height == 0 or not nvlink or not NVLS_GPUS.search(str(gpu)):
        return []
    hosts = sorted(bad["host"].to_list())
    return [Finding(
        id="nvls_unavailable", key="nvls_unavailable", severity="low",
        title=f"NVLink SHARP (NVLS) is unavailable on {len(hosts)} host(s) of {gpu} GPUs",
        detail=f"NCCL on {_hosts_text(hosts)} logs 'NVLS multicast support is not available'; NVSwitch "
               "all-reduce offload would cut intra-node all-reduce traffic.",
        action="run nvidia-fabricmanager, use a driver and NCCL >= 2.17 with CUDA multicast (IMEX on NVL systems); "
               "check NCCL_NVLS_ENABLE is not 0",
        saving_ns_per_step=0, saving_model="not estimated", tier="nvlink", numbers={"hosts": float(len(hosts))})]


def _odd(frame: pl.DataFrame, key: str, value: str) -> pl.DataFrame:
    """Rows whose ``value`` is not the majority's within their ``key``."""
    counts = frame.group_by(key, value).len()
    major = counts.sort("len", descending=True).group_by(key, maintain_order=True).first().select(
        key, pl.col(value).alias("_major"))
    return frame.join(major, on=key).filter(pl.col(value).ne_missing(pl.col("_major")))


def rule_desync(c: Ctx) -> list[Finding]:
    out = []
    calls = c.a.collectives.filter(pl.col("match_key").is_not_null() & ~pl.col("op").is_in(list(P2P_OPS))
                                   & (pl.col("matched_ranks") > 1)).select("rank", "pg", "match_key", "op", "step",
                                                                            "bytes")
    # no blame on a rank whose clock or run is in doubt (analyzers/sanity.py): its calls pair by accident
    if calls.height == 0:  # e.g. one rank: no matched call (the queries below would find nothing)
        return _desync_flight_recorder(c)
    calls = calls.filter(~pl.col("rank").is_in(list(c.doubtful)).any().over("match_key"))
    ops = _odd(calls, "match_key", "op")
    sized = calls.filter(pl.col("op").is_in(SAME_SIZE_OPS) & pl.col("bytes").is_not_null())
    sizes = _odd(sized.filter(pl.col("op").n_unique().over("match_key") == 1), "match_key", "bytes")
    bad = pl.concat([ops.select("rank", "pg", "match_key", "op", "step"),
                     sizes.select("rank", "pg", "match_key", "op", "step")])
    if bad.height:
        ranks = tuple(sorted(set(bad["rank"].to_list())))
        first = bad.sort("match_key").row(0, named=True)
        peers = calls.filter(pl.col("match_key") == first["match_key"])
        out.append(Finding(
            id="desync", key=f"desync:trace:{','.join(map(str, ranks[:8]))}", severity="high",
            title=f"desync: rank(s) {', '.join(map(str, ranks[:8]))} called a different collective than their "
                  f"group at {bad['match_key'].n_unique()} call(s)",
            detail=f"at call '{first['match_key']}' (process group {first['pg']}) rank {first['rank']} ran "
                   f"{first['op']} while its peers ran "
                   f"{', '.join(sorted(set(peers['op'].to_list()) - {first['op']}) or sorted(set(peers['op'])))}"
                   f" (ops or sizes differ across the members of one matched call). NCCL matches calls by order: "
                   "such a run hangs or silently corrupts tensors.",
            action="make every rank of the group issue the same collectives in the same order with the same "
                   "shapes: look for rank-dependent branches (if rank == 0), uneven data, or skipped steps; "
                   "TORCH_DISTRIBUTED_DEBUG=DETAIL checks it at run time",
            saving_ns_per_step=0, saving_model="not a time saving: a correctness fault (hang or wrong results)",
            ranks=ranks, pgs=tuple(sorted(set(bad["pg"].to_list())))[:16],
            steps=tuple(sorted({int(s) for s in bad["step"].drop_nulls().to_list()})),
            numbers={"calls": float(bad["match_key"].n_unique())}))
    out.extend(_desync_flight_recorder(c))
    return out


def _desync_flight_recorder(c: Ctx) -> list[Finding]:
    fr = c.a.tables.sidecars.flight_recorder.filter(~pl.col("is_p2p").fill_null(False) & pl.col("seq").is_not_null()
                                                    & (pl.col("seq") > 0) & ~pl.col("rank").is_in(list(c.doubtful)))
    if fr.height == 0:
        return []
    fr = fr.with_columns(pl.format("{} seq {}", "pg", "seq").alias("key"))
    # sizes as JSON text: compare only what every rank's entry states
    ops = _odd(fr, "key", "op")
    sizes = _odd(fr.filter((pl.col("op").n_unique().over("key") == 1) & pl.col("op").is_in(SAME_SIZE_OPS)),
                 "key", "sizes")
    last = fr.group_by("pg", "rank").agg(pl.col("seq").max().alias("last"))
    behind = last.with_columns(pl.col("last").max().over("pg").alias("_max")).filter(pl.col("last") < pl.col("_max"))
    if (c.a.doubtful_ranks["check"] == "ended").any():
        # a rank died without a last word (its node): the others stopped on that failure, each where it was, so
        # where their dumps end says nothing of a hang (sanity.py); a different collective at one seq still does
        behind = behind.clear()
    out = []
    bad = pl.concat([ops.select("rank", "pg", "key", "op"), sizes.select("rank", "pg", "key", "op")])
    if bad.height:
        ranks = tuple(sorted(set(bad["rank"].to_list())))
        first = bad.sort("key").row(0, named=True)
        out.append(Finding(
            id="desync", key=f"desync:flight_recorder:{','.join(map(str, ranks[:8]))}", severity="high",
            title=f"desync in the Flight Recorder dumps: rank(s) {', '.join(map(str, ranks[:8]))} recorded a "
                  f"different collective at {bad['key'].n_unique()} sequence number(s)",
            detail=f"at '{first['key']}' (process group {first['pg']}, collective_seq_id) rank {first['rank']} "
                   f"recorded {first['op']}{_sizes_note(fr, first['key'])}.",
            action="the first mismatching sequence number is where the ranks diverged: read that rank's stack "
                   "(py-spy dump, or the dump's frames) for a rank-dependent branch",
            saving_ns_per_step=0, saving_model="not a time saving: a correctness fault (hang or wrong results)",
            ranks=ranks, pgs=tuple(sorted(set(bad["pg"].to_list())))[:16],
            numbers={"sequence_numbers": float(bad["key"].n_unique())}))
    if behind.height:
        ranks = tuple(sorted(set(behind["rank"].to_list())))
        pgs = tuple(sorted(set(behind["pg"].to_list())))
        out.append(Finding(
            id="desync", key=f"desync:behind:{','.join(map(str, ranks[:8]))}", severity="high",
            title=f"rank(s) {', '.join(map(str, ranks[:8]))} stopped behind their group in the Flight Recorder "
                  f"dumps (group(s) {', '.join(pgs[:4])})",
            detail="their last recorded sequence number is lower than their peers': the peers wait in a collective "
                   "these ranks never entered — the usual cause of an NCCL watchdog timeout.",
            action="look at what those ranks were doing instead (their stacks, the dump's last entries): an "
                   "exception, a data-loader stall, a rank-dependent branch that skips a collective",
            saving_ns_per_step=0, saving_model="not a time saving: a hang",
            ranks=ranks, pgs=pgs, numbers={"ranks_behind": float(len(ranks))}))
    return out


def _sizes_note(fr: pl.DataFrame, key: str) -> str:
    rows = fr.filter(pl.col("key") == key).select("rank", "op", "sizes").to_dicts()
    seen: dict[str, list[int]] = {}
    for r in rows:
        seen.setdefault(f"{r['op']} {json.loads(r['sizes']) if r['sizes'] else '?'}", []).append(int(r["rank"]))
    ordered = sorted(seen.items(), key=lambda kv: -len(kv[1]))
    return "; members: " + "; ".join(f"{k} on {len(v)} rank(s)" for k, v in ordered)


SETUP_RULES = (rule_socket_fallback, rule_gdr_disabled, rule_p2p_disabled, rule_nvls_unavailable, rule_desync)
