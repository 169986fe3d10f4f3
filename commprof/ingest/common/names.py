"""Naming rules shared by ingest and analyzers: which events are communication, which op a name means,
how many bytes an element of a dtype has."""

from __future__ import annotations

import re
from functools import lru_cache

from commprof.ingest.common import comm_kernels

COMM_KERNEL_PREFIXES = ("nccl", "rccl")
# CPU ops that are collectives. The first group run the transfer on the CPU (Gloo, MPI, UCC, oneCCL's
# CPU work); the second only enqueue a device collective, so on a trace without the device side their
# duration is a launch time, not a transfer (``ENQUEUE_OP_PREFIXES``).
ENQUEUE_OP_PREFIXES = ("nccl:", "rccl:", "hccl:", "xccl:", "oneccl_bindings_for_pytorch::xpu::")
COMM_OP_PREFIXES = ("gloo:", "mpi:", "ucc:", "ccl:", "oneccl_bindings_for_pytorch::cpu_work::", *ENQUEUE_OP_PREFIXES)
# CPU ops around a collective call that name it (``c10d::alltoall_base_``), used when the kernel's own
# name does not say which collective it is (NCCL runs all-to-all as grouped send/recv).
CALL_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", *ENQUEUE_OP_PREFIXES)

# Words that make a kernel look like communication (warned about when neither NCCL's prefixes nor the
# catalogue of other libraries' kernels, comm_kernels.py, claims it).
_LOOKS_LIKE_COMM = re.compile(
    r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|send_?recv", re.IGNORECASE
)
# the verbs of expert-parallel and symmetric-memory kernels, looked for in the function's own qualified name
# only (CUB's DeviceReduceByKeyKernel<cub::DispatchReduceByKey<...>> is not a dispatch)
_LOOKS_LIKE_LIBRARY_COMM = re.compile(
    r"dispatch|combine|notify|(?:one|two)_?shot|multimem|nvshmem|symm_?mem|userbuffers", re.IGNORECASE)
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
    return name.startswith(COMM_KERNEL_PREFIXES) or comm_kernels.describe(name) is not None


def looks_like_comm(name: str) -> bool:
    """A name that reads like a collective although no rule classifies it as one (the local work the
    catalogue knows inside communication libraries, DeepEP's get_dispatch_layout for one, excepted)."""
    qualified = comm_kernels.qualified(name)
    return ((_LOOKS_LIKE_COMM.search(name) is not None or _LOOKS_LIKE_LIBRARY_COMM.search(qualified) is not None)
            and comm_kernels.COMPUTE_IN_COMM_LIBRARIES.search(qualified) is None)


def kernel_op(name: str) -> str:
    """The collective a communication kernel runs, from its name (a family the user declared says it)."""
    return _kernel_op(name, comm_kernels.current())


@lru_cache(maxsize=4096)  # kernel and op names repeat by the thousand within a trace
def _kernel_op(name: str, declared: tuple[comm_kernels.Declared, ...]) -> str:
    if declared:  # the user's word first, NCCL's own kernels included
        known = comm_kernels.describe(name, declared)
        if known is not None and known.is_declared:
            return known.op
    if name.startswith(COMM_KERNEL_PREFIXES):
        op = normalize_op(name)
        if op != "unknown":
            return op
    known = comm_kernels.describe(name, declared)  # NCCL EP's JIT kernels start with "nccl" too
    if known is not None and known.op:
        return known.op
    base = _function_name(name)
    low = base.lower()
    # a name the catalogue claims only by the words of the rule before it (comm_kernels._WORDS)
    if "lamport" in low or "fusion" in low or "quick" in low:
        return "all_reduce"
    if low.endswith(("dispatch", "combine")) or "deep_ep" in name.lower():
        return "all_to_all"
    return normalize_op(base)


def _function_name(name: str) -> str:
    """``void ns::kernel<T, 8>(args)`` -> ``kernel``."""
    text = name.removeprefix("void ").strip()
    for stop in ("<", "("):
        cut = text.find(stop)
        if cut > 0:
            text = text[:cut]
    return text.rsplit("::", 1)[-1] if not text.startswith("deep_ep") else text


def is_comm_op(name: str) -> bool:
    return name.startswith(COMM_OP_PREFIXES)


def is_enqueue_op(name: str) -> bool:
    """A CPU op that only hands a collective to a device backend (its duration is not the transfer)."""
    return name.startswith(ENQUEUE_OP_PREFIXES)


def is_wait_op(name: str) -> bool:
    return name.startswith(_WAIT_PREFIXES) or name in _WAIT_NAMES


@lru_cache(maxsize=4096)
def normalize_op(name: str) -> str:
    """``allreduce``, ``nccl:all_reduce``, ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``all_reduce``."""
    match = _KERNEL_OP.search(name)
    text = match.group(1) if match else name.rsplit("::", 1)[-1].split(":", 1)[-1]
    key = text.lower().replace("_", "")
    for needle, op in _OP_KEYS:
        if needle in key:
            return op
    return "unknown"


def dtype_size(dtype: str | None) -> int | None:
    if not dtype:
        return None
    return DTYPE_BYTES.get(dtype.strip().lower())
