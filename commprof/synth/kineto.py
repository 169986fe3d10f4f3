"""A placed timeline -> one rank's Kineto trace, in the schema torch's profiler writes.

GPU kernels sit on ``pid`` = device, ``tid`` = stream; each has a ``cudaLaunchKernel`` runtime event on
the training thread with the same ``correlation``. Every communication call also has a
``record_param_comms`` CPU op carrying the args torch writes; Kineto copies most of them onto the NCCL
kernel. ``ProfilerStep#N`` marks open on the CPU a little before the GPU starts the step's work.
Timestamps are epoch µs (floats); every time here is integer ns on the run's true clock, shifted by
the host's clock offset when written.
"""

from __future__ import annotations

from typing import Any

from commprof.synth.config import SynthConfig
from commprof.synth.engine import Call, Placed, Timeline

EPOCH_NS = 1_760_000_000_000_000_000  # 2025-10-09: traces carry epoch µs
CPU_LEAD_NS = 20_000  # the CPU launches work this far ahead of the GPU
LAUNCH_NS = 4_000
ELEM_BYTES = {"BFloat16": 2, "Float": 4, "Half": 2}
_NCCL_OP = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
            "all_to_all": "SendRecv", "send": "SendRecv", "recv": "SendRecv", "broadcast": "Broadcast"}
_TORCH_OP = {"all_reduce": "allreduce", "all_gather": "_allgather_base", "reduce_scatter": "_reduce_scatter_base",
             "all_to_all": "all_to_all", "send": "send", "recv": "recv", "broadcast": "broadcast"}
_SHORT = {"BFloat16": ("bf16", "bfloat16"), "Float": ("f32", "float"), "Half": ("f16", "half")}
_COMPUTE_KERNELS = {
    "attention": "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>"
                 ", false, true, false, false, true, true, false>(Flash_fwd_params)",
    "mlp": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k"
           "_off_kernel__5x_cublas",
    "moe_mlp": "void cutlass::device_kernel<grouped_gemm_bf16_sm90>(cutlass::GemmGrouped::Params)",
    "optimizer": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>"
                 "(TensorListMetadata<4>, FusedAdamMathFunctor, float*, double, double)",
    "gemm": "void gemm_kernel<float>(float*)",
}


def nccl_kernel_name(call: Call, algo: str, naming: str) -> str:
    op = _NCCL_OP.get(call.op, "AllReduce")
    short, long = _SHORT.get(call.dtype, ("bf16", "bfloat16"))
    proto = "LL" if call.nbytes < 64 * 1024 else "SIMPLE"
    if naming == "dev":
        if op == "SendRecv":
            return "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
        red = "_Sum" if op in ("AllReduce", "ReduceScatter") else ""
        return f"ncclDevKernel_{op}{red}_{short}_{algo}_{proto}(ncclDevKernelArgsStorage<4096ul>)"
    if op == "SendRecv":
        return "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    return f"ncclKernel_{op}_{algo}_{proto}_Sum_{long}(ncclDevComm*, unsigned long, ncclWork*)"


_RANKS_TEXT: dict[int, tuple[tuple[int, ...], str]] = {}


def _ranks_text(ranks: tuple[int, ...]) -> str:
    """``str(list(ranks))`` once per group (every call carries its group's members: 2,048 of them in a DP group
    of a 16,384-rank run); keyed by the tuple's identity, which the group holds for the whole run."""
    hit = _RANKS_TEXT.get(id(ranks))
    if hit is None or hit[0] is not ranks:
        hit = _RANKS_TEXT[id(ranks)] = (ranks, str(list(ranks)))
    return hit[1]


def comm_args(call: Call, rank: int, cpu: bool) -> dict[str, Any]:
    """record_param_comms' args; ``cpu=False``: the subset Kineto copies onto the kernel."""
    elem = ELEM_BYTES.get(call.dtype, 2)
    nelems = call.nbytes // elem
    in_n, out_n = nelems, nelems
    n = len(call.ranks)
    if call.op == "all_gather":
        in_n = nelems // n
    elif call.op == "reduce_scatter":
        out_n = nelems // n
    args: dict[str, Any] = {"Collective name": _TORCH_OP.get(call.op, call.op), "In msg nelems": in_n,
                            "Out msg nelems": out_n, "Group size": n, "dtype": call.dtype,
                            "In split size": "[]", "Out split size": "[]",
                            "Process Group Name": call.pg, "Process Group Description": call.desc,
                            "Process Group Ranks": _ranks_text(call.ranks)}
    if call.peer is not None:
        args["Dst Rank" if call.op == "send" else "Src Rank"] = call.peer
    if call.seq is not None:
        args["Seq"] = call.seq
    if cpu:
        stride = call.ranks[1] - call.ranks[0] if n > 1 else 1
        args.update({"Global rank start": call.ranks[0], "Global rank stride": stride, "Rank": rank,
                     "Is asynchronized op": 0})
    return args


class TraceWriter:
    def __init__(self, cfg: SynthConfig, rank: int, algo_of: Any, pg_config: list[dict[str, Any]]) -> None:
        self.cfg, self.rank, self.algo_of, self.pg_config = cfg, rank, algo_of, pg_config
        self.pid = cfg.pid(rank)
        self.gpu = cfg.local_rank(rank)
        self.offset, self.base = time_base(cfg, rank)
        self.events: list[dict[str, Any]] = []
        self.corr = 1

    def _us(self, t: int) -> float:
        return (t + self.offset) / 1000

    def _x(self, cat: str, name: str, pid: int, tid: int, start: int, end: int, args: dict[str, Any]) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": self._us(start),
                            "dur": (end - start) / 1000, "args": args})

    def _launch(self, start: int, name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        corr = self.corr
        self.corr += 1
        cpu_t = start - CPU_LEAD_NS
        if extra is not None:
            self._x("cpu_op", "record_param_comms", self.pid, self.pid, cpu_t - 3000, cpu_t + LAUNCH_NS + 2000,
                    {"External id": corr, "Record function id": 0, **extra})
        self._x("cuda_runtime", name, self.pid, self.pid, cpu_t, cpu_t + LAUNCH_NS,
                {"External id": corr, "cbid": 211 if name == "cudaLaunchKernel" else 51, "correlation": corr})
        return {"External id": corr, "queued": 0, "device": self.gpu, "context": 1, "correlation": corr}

    def activity(self, a: Placed) -> None:
        if a.kind == "comm":
            assert a.call is not None
            base = self._launch(a.start, "cudaLaunchKernel", comm_args(a.call, self.rank, True))
            name = nccl_kernel_name(a.call, self.algo_of(a.call), self.cfg.kernel_naming)
            self._x("kernel", name, self.gpu, a.stream, a.start, a.end,
                    {**base, "stream": a.stream, "registers per thread": 96, "shared memory": 87568,
                     "grid": [32, 1, 1], "block": [640, 1, 1], **comm_args(a.call, self.rank, False)})
        elif a.kind == "memory":
            base = self._launch(a.start, "cudaMemcpyAsync")
            self._x("gpu_memcpy", a.name, self.gpu, a.stream, a.start, a.end,
                    {**base, "stream": a.stream, "bytes": 16 << 20, "memory bandwidth (GB/s)": 25.0})
        else:
            name = _COMPUTE_KERNELS.get(a.name, a.name)
            span = a.end - a.start
            edges = [a.start + span * i // a.pieces for i in range(a.pieces + 1)]
            for s, e in zip(edges[:-1], edges[1:], strict=True):
                base = self._launch(s, "cudaLaunchKernel")
                self._x("kernel", name, self.gpu, a.stream, s, e,
                        {**base, "stream": a.stream, "registers per thread": 168, "shared memory": 232448,
                         "grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 12})

    def trace(self, line: Timeline) -> dict[str, Any]:
        for a in line.activities:
            self.activity(a)
        marks = mark_bounds(line, round(self.cfg.mark_lead_us * 1000))
        for step, (start, end) in marks.items():
            self._x("user_annotation", f"ProfilerStep#{step}", self.pid, self.pid, start, end,
                    {"External id": self.corr, "Record function id": 0})
            self.corr += 1
        meta = [
            {"name": "process_name", "ph": "M", "ts": self._us(0), "pid": self.pid, "tid": 0,
             "args": {"name": "python3"}},
            {"name": "thread_name", "ph": "M", "ts": self._us(0), "pid": self.pid, "tid": self.pid,
             "args": {"name": "thread 0 (python3)"}},
            {"name": "process_labels", "ph": "M", "ts": self._us(0), "pid": self.gpu, "tid": 0,
             "args": {"labels": f"GPU {self.gpu}"}},
        ]
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": self.gpu, "name": self.cfg.gpu_name, "totalGlobalMem": 85045395456,
                                  "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                                  "numSms": 132, "warpSize": 32}],
            "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.cfg.world_size,
                                "pg_count": len(self.pg_config), "pg_config": self.pg_config,
                                "nccl_version": ".".join(map(str, self.cfg.nccl_version))},
            "record_shapes": 1, "with_stack": 0,
            "traceName": f"synthetic (commprof synth, seed {self.cfg.seed})",
            "displayTimeUnit": "ms", "baseTimeNanoseconds": self.base,
            "host_name": self.cfg.host(self.rank),
            "traceEvents": meta + self.events,
        }


def time_base(cfg: SynthConfig, rank: int) -> tuple[int, int]:
    """(offset added to true-clock ns before writing ts, baseTimeNanoseconds)."""
    clock = cfg.clock_offset_ns(cfg.host_index(rank))
    return (EPOCH_NS + clock, 0) if cfg.epoch_ts else (clock + 10**9, EPOCH_NS)


def mark_bounds(line: Timeline, lead: int) -> dict[int, tuple[int, int]]:
    """ProfilerStep#N spans on the true clock: from a little before the step's GPU work to the next
    step's mark (the last one to the end of the rank's work)."""
    starts = [(step, t - lead) for step, t in line.marks]
    out = {}
    for i, (step, start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else max(line.end, start + 1)
        out[step] = (start, end)
    return out
