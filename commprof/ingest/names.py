"""Naming rules shared by ingest and analyzers: which events are communication, which op a name means,
how many bytes an element of a dtype has."""

from __future__ import annotations

import re

COMM_KERNEL_PREFIXES = ("nccl", "rccl")
COMM_OP_PREFIXES = ("gloo:", "nccl:", "rccl:", "mpi:", "ucc:", "xccl:")
MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset", "memcpy", "memset"})
DEVICE_CATEGORIES = frozenset({"kernel", *MEMORY_CATEGORIES})
CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "operator"})

# CPU ops that hand work to a communication backend or block on it. They are neither compute
# nor communication: on CPU runs their time is subtracted from the compute that encloses them.
_WAIT_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "record_param_comms")
_WAIT_NAMES = frozenset({"aten::wait", "cudaStreamSynchronize", "cudaDeviceSynchronize"})

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_KERNEL_OP = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)

# Checked in order: the longer names first so that "reducescatter" is not read as "reduce".
_OP_KEYS = (
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("allreduce", "all_reduce"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("barrier", "barrier"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
)

DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8,
    "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2,
    "int": 4, "int32": 4, "unsigned int": 4, "uint32": 4,
    "long": 8, "long int": 8, "int64": 8, "long long": 8, "unsigned long": 8, "uint64": 8,
    "short": 2, "int16": 2, "uint16": 2,
    "char": 1, "signed char": 1, "int8": 1, "byte": 1, "unsigned char": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "complexfloat": 8, "c10::complex<float>": 8, "complexdouble": 16, "c10::complex<double>": 16,
}


def is_comm_kernel(name: str) -> bool:
    return name.startswith(COMM_KERNEL_PREFIXES)


def is_comm_op(name: str) -> bool:
    return name.startswith(COMM_OP_PREFIXES)


def is_wait_op(name: str) -> bool:
    return name.startswith(_WAIT_PREFIXES) or name in _WAIT_NAMES


def normalize_op(name: str) -> str:
    """``allreduce``, ``nccl:all_reduce``, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``all_reduce``."""
    match = _KERNEL_OP.search(name)
    text = match.group(1) if match else name.split(":", 1)[-1]
    key = text.lower().replace("_", "")
    for needle, op in _OP_KEYS:
        if needle in key:
            return op
    return "unknown"


def dtype_size(dtype: str | None) -> int | None:
    if not dtype:
        return None
    return DTYPE_BYTES.get(dtype.strip().lower())
