"""The device kernels of communication libraries other than NCCL/RCCL: which library, which operation, and
what the name says about the path. docs/inputs.md ("Communication kernels beyond NCCL") lists them.

Names are matched on the kernel's qualified function name: ``void ns::sub::name<T, 8>(args)`` (Kineto) and
``void ns::sub::name<(int)8>(args)`` (nsys) both become ``ns::sub::name`` (``(anonymous namespace)::`` kept).
Namespaces are matched at a ``::`` boundary, so ``cdpsk::ep::`` (a CUB scan in DeepSeek's build) is not
``dpsk::ep::``. Learnt from the libraries' public sources and from kernel names in public traces:

* DeepEP (``deep_ep::intranode|internode|internode_ll|ep::``; DeepSeek's own build ``dpsk::ep::internode::``
  with ``dispatch_ll``/``combine_ll``; ports such as ``primus_turbo::deep_ep::``): dispatch, combine and
  their notify / cached-notify / buffer-clean handshakes are the expert all-to-all; ``get_dispatch_layout``
  (counting tokens per rank, locally) and the V2 ``*_epilogue_impl`` (local copy-out and reduce) are compute.
* torch symmetric memory: one/two-shot and multimem all-reduce / all-gather in an anonymous namespace, the
  signal and barrier kernels of ``c10d::symmetric_memory``, NVSHMEM all-to-all-v of
  ``c10d::nvshmem_extension``, and the older ``c10d::intra_node_comm`` all-reduces.
* vLLM / SGLang / AMD aiter custom all-reduce (``cross_device_reduce_1stage|2stage`` in any namespace), vLLM's
  ROCm quick all-reduce (``quickreduce::``).
* TensorRT-LLM (``tensorrt_llm::[_v1::][kernels::]``: one/two-shot, fusion and MNNVL all-reduce, the MoE
  all-to-all of ``moe_comm``) and FlashInfer's ports (``flashinfer::trtllm_*allreduce*::``).
* Transformer Engine userbuffers (no namespace): ``userbuffers_*`` reduce-scatter / all-gather / all-reduce,
  ``kuserbuffers_push|pull send|recv`` point-to-point.
* MSCCL++ (``mscclpp::`` kernels, or kernels taking its channel handles), NVSHMEM on-stream collectives
  (``*_on_stream_kernel``), ROCm mori expert dispatch/combine, Ascend HCCL, oneCCL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Family:
    library: str
    pattern: re.Pattern[str]  # searched in the qualified name
    op: str  # the collective, or "name": read from the name's words
    path: str  # what the name says about the path ("" when it says nothing)
    example: str  # a name of this family as traces show it (docs and tests)


@dataclass(frozen=True)
class CommKernel:
    library: str
    op: str
    path: str
    declared_dimension: str = ""  # a user's rule (Declared) states them; the catalogue's are read from the name
    declared_tier: str = ""

    @property
    def is_declared(self) -> bool:
        return self.library.startswith(DECLARED_PREFIX)

    @property
    def dimension(self) -> str:
        """The parallel dimension the library's kernel serves, where the library says it: an all-to-all (or
        DeepEP's barrier) moves MoE tokens (ep); the inference and comm-GEMM-overlap all-reduces serve tensor
        parallelism (tp). "" where the kernel is general-purpose (symmetric memory, MSCCL++, NVSHMEM)."""
        if self.declared_dimension:
            return self.declared_dimension
        if self.library in GENERAL_LIBRARIES:
            return ""
        if self.op == "all_to_all" or self.library == "DeepEP":
            return "ep"
        return "tp" if self.library in TP_LIBRARIES else ""

    @property
    def tier(self) -> str:
        """``nvlink`` where the name says NVLink, ``network`` where it says internode (the run's network tells
        which), "" where it says nothing; a declared tier as given."""
        if self.declared_tier:
            return self.declared_tier
        if self.path.startswith(("intranode (NVLink)", "NVLink SHARP", "multi-node NVLink")):
            return "nvlink"
        return "network" if self.path.startswith("internode") else ""


def _f(library: str, pattern: str, op: str, path: str, example: str) -> Family:
    return Family(library, re.compile(pattern), op, path, example)


_B = r"(?:^|::)"  # a namespace or name starts here
# DeepEP kernels that are the expert all-to-all (dispatch, combine and their handshakes); others in its
# namespaces (get_dispatch_layout, V2 epilogues, elastic helpers) are local work
_EP_WORDS = r"\w*(?:dispatch|combine|notify|clean_low_latency_buffer)\w*"

FAMILIES: tuple[Family, ...] = (
    _f("DeepEP", _B + r"(?:deep_ep|dpsk::ep)::intranode::" + _EP_WORDS + "$", "all_to_all", "intranode (NVLink)",
       "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*)"),
    _f("DeepEP", _B + r"(?:deep_ep::internode_ll::" + _EP_WORDS + "|dpsk::ep::internode::\\w+_ll)$", "all_to_all",
       "internode, low latency (RDMA)", "void dpsk::ep::internode::dispatch_ll<true, 3, 10, 7168>(void*, int)"),
    _f("DeepEP", _B + r"(?:deep_ep|dpsk::ep)::internode::" + _EP_WORDS + "$", "all_to_all",
       "internode (RDMA, NVLink forwarding)", "void dpsk::ep::internode::combine<false, 4, __nv_bfloat16, 4>(int4*)"),
    _f("DeepEP", _B + r"deep_ep::(?:ep|elastic)::hybrid_(?:dispatch|combine)_impl$", "all_to_all",
       "internode (RDMA, NVLink forwarding)", "void deep_ep::ep::hybrid_dispatch_impl<8, 2>(void*)"),
    _f("DeepEP", _B + r"deep_ep::(?:ep|elastic)::(?:dispatch|combine)_impl$", "all_to_all", "intranode (NVLink)",
       "void deep_ep::ep::combine_impl<8>(void*)"),
    _f("DeepEP", _B + r"(?:deep_ep|dpsk::ep)::intranode::barrier$", "barrier", "intranode (NVLink)",
       "void deep_ep::intranode::barrier<8>(int**, int)"),
    # DeepEP's API in other libraries: NVIDIA's NCCL EP (nccl_ep::, and its JIT high-throughput kernels), UCCL's port
    _f("NCCL EP", _B + r"nccl_ep::internode_ll::" + _EP_WORDS + "$", "all_to_all", "internode, low latency (RDMA)",
       "void nccl_ep::internode_ll::dispatch<(bool)0, (bool)1, (int)4096, (ncclEpLayout_t)0, (bool)0>(void*, int)"),
    _f("NCCL EP", _B + r"nccl_ep::internode::" + _EP_WORDS + "$", "all_to_all", "internode (RDMA, NVLink forwarding)",
       "void nccl_ep::internode::combine<(bool)1, (int)8>(int4*, float*)"),
    _f("NCCL EP", _B + r"nccl_ep::intranode::" + _EP_WORDS + "$", "all_to_all", "intranode (NVLink)",
       "void nccl_ep::intranode::dispatch<(int)8, (int)512>(int4*, float*)"),
    _f("NCCL EP", r"^nccl_ep_jit_ht_(?:dispatch|combine)\w*$", "all_to_all", "internode (RDMA, NVLink forwarding)",
       "nccl_ep_jit_ht_combine_kernel_4096_bf16"),
    _f("UCCL EP", _B + r"uccl::internode_ll::" + _EP_WORDS + "$", "all_to_all", "internode, low latency (RDMA)",
       "void uccl::internode_ll::combine<false, 4096, 9, 4>(void*, int)"),
    _f("UCCL EP", _B + r"uccl::internode::" + _EP_WORDS + "$", "all_to_all", "internode (RDMA, NVLink forwarding)",
       "void uccl::internode::dispatch<false, 8, true>(int4*, float*)"),
    _f("UCCL EP", _B + r"uccl::intranode::" + _EP_WORDS + "$", "all_to_all", "intranode (NVLink)",
       "void uccl::intranode::combine<__nv_bfloat16, 8>(int4*, float*)"),
    # DLSlime's all-to-all (vLLM uses it for context parallelism, not only experts: the name does not say which)
    _f("DLSlime", _B + r"dlslime::\w*all_?to_?all\w*$", "all_to_all", "intranode (NVLink)",
       "void dlslime::intranode_alltoall_kernel<__nv_bfloat16>(void**, int, int)"),
    _f("torch symmetric memory", _B + r"multimem_(?:one_shot_)?(?:all_reduce|all_gather|reduce_scatter|reduce)\w*$",
       "name", "NVLink SHARP (multicast)",
       "void (anonymous namespace)::multimem_all_reduce_kernel<__nv_bfloat16, 16, 8>(__nv_bfloat16*, unsigned long)"),
    _f("torch symmetric memory", _B + r"(?:one|two)_shot_(?:all_reduce|all_gather|reduce_scatter|reduce)\w*$",
       "name", "intranode (NVLink)",
       "void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 2>(c10::BFloat16**)"),
    _f("torch symmetric memory",
       _B + r"c10d::symmetric_memory::(?:multimem_)?(?:barrier|put_signal|wait_signal)_kernel$", "barrier",
       "intranode (NVLink)", "void c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int)"),
    _f("torch symmetric memory", _B + r"c10d::nvshmem_extension::(?:exchangeSplitAndOffset|allToAllV)\w*$",
       "all_to_all", "NVSHMEM", "void c10d::nvshmem_extension::allToAllV_2d(void*, void*, long*, long*, int)"),
    _f("torch intra-node comm", _B + r"c10d::intra_node_comm::\w*AllReduceKernel$", "all_reduce", "intranode (NVLink)",
       "void c10d::intra_node_comm::oneShotAllReduceKernel<8>(unsigned long, unsigned long)"),
    _f("vLLM/SGLang custom all-reduce", _B + r"cross_device_reduce_[12]stage$", "all_reduce", "intranode (P2P)",
       "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int, int)"),
    _f("vLLM quick all-reduce", _B + r"quickreduce::allreduce_\w+$", "all_reduce", "intranode (xGMI)",
       "void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<half>>(half const*, int)"),
    _f("TensorRT-LLM", _B + r"tensorrt_llm::(?:_v1::)?(?:kernels::)?moe_comm::\w*(?:[Dd]ispatch|[Cc]ombine)\w*$",
       "all_to_all", "intranode / MNNVL", "void tensorrt_llm::kernels::moe_comm::moeA2ADispatchKernel<8>(int)"),
    _f("TensorRT-LLM",
       _B + r"tensorrt_llm::(?:_v1::)?(?:kernels::)?mnnvl::\w*(?:[Aa]ll_?[Rr]educe|[Aa]ll_?[Gg]ather)\w*$", "name",
       "multi-node NVLink", "void tensorrt_llm::kernels::mnnvl::twoshotAllreduceKernel<16, float>(float*)"),
    _f("TensorRT-LLM", _B + r"tensorrt_llm::(?:_v1::)?(?:kernels::)?(?:ar_fusion::)?\w*[Aa]ll_?[Rr]educe\w*$",
       "all_reduce", "intranode (NVLink)",
       "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::AllReduceParams)"),
    _f("FlashInfer (TensorRT-LLM all-reduce)", _B + r"flashinfer::trtllm_mnnvl_allreduce::\w*[Aa]llreduce\w*$",
       "all_reduce", "multi-node NVLink",
       "void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel<16, __nv_bfloat16>(__nv_bfloat16*)"),
    _f("FlashInfer (TensorRT-LLM all-reduce)",
       _B + r"flashinfer::trtllm_(?:allreduce_fusion|allreduce|custom_all_reduce)::\w*(?:[Aa]ll_?[Rr]educe)\w*$",
       "all_reduce", "intranode (NVLink)",
       "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<1, __nv_bfloat16>(int)"),
    _f("Transformer Engine userbuffers", _B + r"userbuffers_\w+_mc\w*$", "name", "NVLink SHARP (multicast)",
       "void userbuffers_fp16_sum_inplace_gpu_mc_rs_oop<8>(int, int, int, int, int, void**)"),
    _f("Transformer Engine userbuffers", _B + r"userbuffers_\w+$", "name", "intranode (NVLink)",
       "void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, int, void**)"),
    _f("Transformer Engine userbuffers", _B + r"kuserbuffers_(?:push|pull)(?:send|recv)\w*$", "name",
       "intranode (NVLink)", "void kuserbuffers_pushsendrecv(int*, int*, int4*, int4*, int, int)"),
    _f("MSCCL++", _B + r"mscclpp::\w+$", "name", "",
       "void mscclpp::algorithm::allreduceFullmesh<__half>(__half*, __half*, int)"),
    _f("NVSHMEM", _B + r"\w*(?:barrier|sync)_on_stream_kernel\w*$", "barrier", "NVSHMEM",
       "void barrier_on_stream_kernel_threadgroup<(threadgroup_t)1>(int, int)"),
    _f("NVSHMEM", _B + r"\w+_on_stream_kernel\w*$", "name", "NVSHMEM",
       "void alltoall_on_stream_kernel<int>(int, void*, void const*, unsigned long)"),
    _f("mori (ROCm)", _B + r"mori::moe::\w*(?:Dispatch|Combine)\w*$", "all_to_all", "",
       "void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs<__hip_bfloat16>)"),
)

# all-to-all kernels that serve more than experts (context parallelism, data movement): no dimension from the name
GENERAL_LIBRARIES = frozenset({"DLSlime"})
TP_LIBRARIES = frozenset({"vLLM/SGLang custom all-reduce", "vLLM quick all-reduce", "TensorRT-LLM",
                          "FlashInfer (TensorRT-LLM all-reduce)", "Transformer Engine userbuffers"})
# Kernels inside those libraries' namespaces that do local work (and names of the old rule below that are)
COMPUTE_IN_COMM_LIBRARIES = re.compile(
    r"get_dispatch_layout|_epilogue_impl$|RMSNorm|lamport_initialize|kuserbuffers_(?:dummy|inc)$")
# What the rule before this catalogue claimed by words anywhere in the name: kept for names the families do
# not spell out (an in-house build of one of these libraries, Ascend, oneCCL)
_WORDS = re.compile(
    r"cross_device_reduce_[12]stage|(?:one|two)_?shot_?(?:all_?reduce|all_?gather|reduce_?scatter|reduce)"
    r"|multimem_|allreduce_?fusion|custom_?all_?reduce|lamport|deep_ep::|hcom_|hccl|oneccl|mscclpp|quick_?reduce",
    re.IGNORECASE)
_WORD_LIBRARY = (("hcom_", "Ascend HCCL"), ("hccl", "Ascend HCCL"), ("oneccl", "oneCCL"), ("mscclpp", "MSCCL++"),
                 ("deep_ep", "DeepEP"))


def qualified(name: str) -> str:
    """``void ns::k<T, (int)8>(args)`` -> ``ns::k``: template arguments (nested) and the parameter list off."""
    text = name.strip().removeprefix("void ").strip()
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "(" and depth == 0 and not text.startswith("(anonymous namespace)", i):
            break
        if ch == "<" and not text.startswith("<<", i):
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    return "".join(out).strip()


_OP_WORDS = (("reduce_?scatter|_rs(?:_|$)", "reduce_scatter"), ("all_?gather|fcollect|_ag(?:_|$)", "all_gather"),
             ("all_?to_?all|alltoall", "all_to_all"), ("sendrecv", "send_recv"), ("send", "send"),
             ("recv", "recv"), ("bcast|broadcast", "broadcast"), ("all_?reduce|rdxn|sum|reduce", "all_reduce"))


def _op_from_words(function: str) -> str:
    low = function.lower()
    for words, op in _OP_WORDS:
        if re.search(words, low):
            return op
    return "unknown"


def describe(name: str, declared: tuple[Declared, ...] | None = None) -> CommKernel | None:
    """The library, op and path of a communication kernel outside NCCL/RCCL; None when it is not one. The
    user's ``declared`` families (default: those of the ingest under way, :func:`declaring`) come first."""
    return _describe(name, _DECLARED if declared is None else declared)


@lru_cache(maxsize=8192)  # kernel names repeat by the thousand within a trace
def _describe(name: str, declared: tuple[Declared, ...]) -> CommKernel | None:
    for rule in declared:
        if rule.pattern.search(name):
            return CommKernel(rule.library, rule.op, "", rule.dimension, rule.tier)
    return _catalogued(name)


@lru_cache(maxsize=4096)
def _catalogued(name: str) -> CommKernel | None:
    q = qualified(name)
    if COMPUTE_IN_COMM_LIBRARIES.search(q):
        return None
    function = q.rsplit("::", 1)[-1]
    for fam in FAMILIES:
        if fam.pattern.search(q):
            return CommKernel(fam.library, _op_from_words(function) if fam.op == "name" else fam.op, fam.path)
    if "mscclpp::" in name:  # a kernel of its own taking MSCCL++ channel handles (TVM's, for one)
        return CommKernel("MSCCL++", _op_from_words(function), "")
    if _WORDS.search(name):
        low = name.lower()
        library = next((lib for word, lib in _WORD_LIBRARY if word in low), "other (by its name's words)")
        return CommKernel(library, "", "")
    return None


# --- families a user declares (--comm-kernel REGEX=OP[:DIM[:TIER]], [[comm_kernel]] in commprof.toml) ------------

DECLARED_PREFIX = "declared "
DECLARABLE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send", "recv",
                  "send_recv", "gather", "scatter", "barrier")


@dataclass(frozen=True)
class Declared:
    """A kernel family the user declares: kernels whose name (as the trace spells it) ``pattern`` finds are
    communication of ``op``, in ``dimension`` and on ``tier`` where given ("" leaves them to the run)."""

    pattern: re.Pattern[str]
    op: str
    dimension: str = ""
    tier: str = ""
    name: str = ""  # the group's name in the report; default: the pattern

    @property
    def library(self) -> str:
        return f"{DECLARED_PREFIX}{self.name or self.pattern.pattern}"

    @property
    def spec(self) -> str:
        """As ``--comm-kernel`` takes it."""
        tail = (f":{self.dimension}" if self.dimension or self.tier else "") + (f":{self.tier}" if self.tier else "")
        return f"{self.pattern.pattern}={self.op}{tail}"


def declared(pattern: str, op: str, dimension: str = "", tier: str = "", name: str = "") -> Declared:
    """A checked :class:`Declared`; ValueError with a message a user can act on."""
    from commprof.vocab import DIMENSIONS, TIERS, UNKNOWN

    if not pattern:
        raise ValueError("the kernel name pattern is empty")
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ValueError(f"{pattern!r} is not a regular expression ({err})") from None
    if compiled.search(""):
        raise ValueError(f"{pattern!r} matches every kernel name (it matches an empty one)")
    op = op.strip().lower().replace("-", "_")
    if op not in DECLARABLE_OPS:
        raise ValueError(f"op {op!r} is not one of {', '.join(DECLARABLE_OPS)}")
    dimension = dimension.strip().lower()
    if dimension and (dimension not in DIMENSIONS or dimension == UNKNOWN):
        raise ValueError(f"dimension {dimension!r} is not one of {', '.join(d for d in DIMENSIONS if d != UNKNOWN)}")
    tier = tier.strip().lower()
    tiers = (*(t for t in TIERS if t != UNKNOWN), "network")  # network: the run's, as its groups across nodes say
    if tier and tier not in tiers:
        raise ValueError(f"tier {tier!r} is not one of {', '.join(tiers)}")
    return Declared(compiled, op, dimension, tier, name.strip())


def parse_declared(spec: str) -> Declared:
    """``REGEX=OP[:DIM[:TIER]]`` (split at the last ``=``: the pattern may hold ``::`` and ``=``)."""
    pattern, sep, rest = spec.rpartition("=")
    if not sep:
        raise ValueError(f"{spec!r}: give REGEX=OP[:DIM[:TIER]], e.g. 'myco::fabric::\\w+=all_to_all:ep'")
    parts = rest.split(":")
    if len(parts) > 3:
        raise ValueError(f"{spec!r}: after '=' give OP[:DIM[:TIER]], e.g. all_reduce:tp:nvlink")
    parts += [""] * (3 - len(parts))
    try:
        return declared(pattern, parts[0], parts[1], parts[2])
    except ValueError as err:
        raise ValueError(f"{spec!r}: {err}") from None


_DECLARED: tuple[Declared, ...] = ()


@contextmanager
def declaring(rules: tuple[Declared, ...]) -> Iterator[None]:
    """The user's families in force for what runs inside (an ingest task: the readers ask names.is_comm_kernel
    without them). The caches are keyed on the families, so nothing decided under others leaks in."""
    global _DECLARED
    before, _DECLARED = _DECLARED, tuple(rules)
    try:
        yield
    finally:
        _DECLARED = before


def current() -> tuple[Declared, ...]:
    return _DECLARED
