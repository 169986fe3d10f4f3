"""Build Kineto traces by hand, for runs whose exact answers are known by construction.

Everything made here is *synthetic*: tests use it as an oracle for the definitions, and the traces
say so in their ``traceName``. Times are given in µs, as Kineto writes them.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPU_PID = 1000
MAIN_TID = 1000


@dataclass
class TraceBuilder:
    rank: int | None = 0
    world_size: int = 2
    backend: str = "nccl"
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    gpu: int = 0
    base_ns: int = 1_700_000_000_000_000_000
    host: str | None = "synthetic-host"
    # When set, every kernel and memcpy also gets its CUDA runtime launch (``cudaLaunchKernel`` /
    # ``cudaMemcpyAsync``, same ``correlation``) on the main thread this many µs before it starts, as real
    # GPU traces have: --hta-compat keeps a kernel by its launch time and drops kernels without one.
    launch_lead_us: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def _x(self, cat: str, name: str, start: float, dur: float, pid: Any, tid: Any, args: dict[str, Any]) -> None:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": start, "dur": dur, "args": args}
        )

    def step(self, number: int, start: float, end: float, tid: int = MAIN_TID) -> TraceBuilder:
        self._x("user_annotation", f"ProfilerStep#{number}", start, end - start, CPU_PID, tid, {})
        return self

    def _launch(self, runtime_call: str, start: float) -> int:
        """The next correlation id; with ``launch_lead_us`` set, the launching runtime call too."""
        corr = len(self.events)
        if self.launch_lead_us is not None:
            at = start - self.launch_lead_us
            self._x("cuda_runtime", runtime_call, at, min(1.0, self.launch_lead_us), CPU_PID, MAIN_TID,
                    {"correlation": corr})
        return corr

    def kernel(self, name: str, start: float, end: float, stream: int = 7, **args: Any) -> TraceBuilder:
        corr = self._launch("cudaLaunchKernel", start)
        self._x("kernel", name, start, end - start, self.gpu, stream,
                {"device": self.gpu, "stream": stream, "correlation": corr, **args})
        return self

    def compute(self, start: float, end: float, stream: int = 7) -> TraceBuilder:
        return self.kernel("void gemm_kernel<float>(float*)", start, end, stream)

    def nccl(self, start: float, end: float, stream: int = 20, op: str = "AllReduce", dev: bool = False,
             **args: Any) -> TraceBuilder:
        name = f"ncclDevKernel_{op}_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)" if dev else \
            f"ncclKernel_{op}_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
        return self.kernel(name, start, end, stream, **args)

    def memcpy(self, start: float, end: float, stream: int = 7) -> TraceBuilder:
        corr = self._launch("cudaMemcpyAsync", start)
        self._x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", start, end - start, self.gpu, stream,
                {"device": self.gpu, "stream": stream, "correlation": corr})
        return self

    def cpu(self, name: str, start: float, end: float, tid: int = MAIN_TID, cat: str = "cpu_op",
            **args: Any) -> TraceBuilder:
        self._x(cat, name, start, end - start, CPU_PID, tid, args)
        return self

    def gloo(self, op: str, start: float, end: float, tid: int, nelems: int, dtype: str = "float") -> TraceBuilder:
        return self.cpu(f"gloo:{op}", start, end, tid, cat="user_annotation",
                        **{"Input Dims": [[nelems]], "Input type": [dtype]})

    def thread_name(self, tid: int, name: str) -> TraceBuilder:
        self.events.append({"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": tid,
                            "args": {"name": f"thread {tid} ({name})"}})
        return self

    def to_dict(self) -> dict[str, Any]:
        trace: dict[str, Any] = {"schemaVersion": 1, "traceName": "synthetic", "baseTimeNanoseconds": self.base_ns}
        if self.rank is not None:
            trace["distributedInfo"] = {
                "backend": self.backend, "rank": self.rank, "world_size": self.world_size,
                "pg_count": len(self.pg_config), "pg_config": self.pg_config,
            }
        if self.host:
            trace["host_name"] = self.host
        trace["traceEvents"] = [
            {"ph": "M", "name": "process_labels", "pid": self.gpu, "tid": 0, "args": {"labels": f"GPU {self.gpu}"}},
            *self.events,
        ]
        return trace

    def write(self, path: Path) -> Path:
        data = json.dumps(self.to_dict()).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def ns(us: float) -> int:
    """µs as written in a trace -> the ns that ingest reports (relative to the builder's base)."""
    return round(us * 1000)
