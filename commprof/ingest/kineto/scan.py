"""The one pass over a Kineto trace's events: what it keeps of each event, column by column (:class:`Scan`).
The reader (reader.py) drives it; cpu.py and times.py read what it kept. It lives apart from the reader so
that those two import it without importing the reader (which imports them)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

import msgspec

from commprof.ingest.common import names
from commprof.ingest.kineto.decode import (
    ARGS_DECODER,
    CORRELATION_DECODER,
    DECODE_ERRORS,
    NULL,
    Args,
    Event,
    EventM,
    EventX,
    decode_args,
)
from commprof.ingest.kineto.kept import KeptArgs
from commprof.ingest.kineto.numbers import INT64_LIMIT, as_int
from commprof.ingest.kineto.rows import BATCH, Codes, Rows, flush_light, release_free_memory
from commprof.ingest.kineto.rows import flush as flush_rows


def _strip_raw(args: Args) -> Args:
    """Args kept past their piece must not hold Raw views into the piece's text buffer."""
    if args.input_dims is NULL and args.input_type is NULL:
        return args
    return msgspec.structs.replace(args, input_dims=NULL, input_type=NULL)


def _own_raw(args: Args) -> Args:
    """A copy of args whose Raw fields own their bytes (kept for Gloo ops' shapes)."""
    return msgspec.structs.replace(args, input_dims=args.input_dims.copy(), input_type=args.input_type.copy())


_SKIP, _DEVICE, _MEMORY, _CPU, _RUNTIME = 0, 1, 2, 3, 4
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "xpu_runtime", "privateuse1_runtime"})


_PLAIN, _COMM_OP, _PARAM_COMMS, _STEP = 0, 1, 2, 3


def _cpu_role(name: str) -> int:
    """What a CPU op is to the pass (cached per name: op names repeat by the thousand)."""
    if name.startswith(names.COMM_OP_PREFIXES) or name.startswith(names.CALL_OP_PREFIXES):
        return _COMM_OP  # c10d calls too: their input shapes link a worker op to its caller (gloo_calls)
    if name == "record_param_comms":
        return _PARAM_COMMS
    return _STEP if name.startswith("ProfilerStep#") else _PLAIN


def _is_launch(name: Any) -> bool:
    """Runtime calls that put work on a device (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch,
    hipModuleLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync, ...): only these carry a kernel's launch,
    so only their args are read (the others, syncs and event records, are half of all runtime calls)."""
    low = str(name).lower()
    return "launch" in low or "memcpy" in low or "memset" in low


def _category(cat: str) -> int:
    low = cat.lower()
    if low in names.MEMORY_CATEGORIES:
        return _MEMORY
    if low in names.DEVICE_CATEGORIES:
        return _DEVICE
    if low in RUNTIME_CATEGORIES:
        return _RUNTIME
    return _CPU if low in names.CPU_CATEGORIES else _SKIP


KEPT_ARGS = ("cpu_comm_args",)  # Scan's dicts of Args (the others are KeptArgs: columns)
_KEPT_ARGS = "kept_args_json"
_KEPT_ARGS_ENCODER = msgspec.json.Encoder()
_KEPT_ARGS_DECODER = msgspec.json.Decoder(dict[str, dict[int, Args]])

KIND_TABLE = ("compute", "comm", "memory")  # a device row's kind, by its code
_COMPUTE, _COMM, _MEM = 0, 1, 2


@dataclass
class Scan:
    """Everything kept from the events, one piece of the trace at a time: rows go column by column into
    :class:`Rows` (names, lanes, pids and tids as codes into the ``Codes`` tables, times converted in
    batches), so the pass holds a few bytes a row and not the rows' text."""

    dev: Rows = field(default_factory=lambda: Rows(("ts", "dur"), {"name": "int32", "lane": "int32",
                                                                  "kind": "int8", "corr": "int64"}))
    dev_comm_args: KeptArgs = field(default_factory=KeptArgs)  # device row -> args of comm kernels
    cpu: Rows = field(default_factory=lambda: Rows(("ts", "dur"), {"pid": "int32", "tid": "int32",
                                                                  "name": "int32", "cat": "int32"}))
    # cpu row -> args of comm ops and c10d calls; read by CPU runs' tables only, so not kept once the trace has a
    # device row (a GPU trace's c10d and nccl:* ops: two per collective)
    cpu_comm_args: dict[int, Args] = field(default_factory=dict)
    step_rows: list[int] = field(default_factory=list)  # cpu rows of ProfilerStep#N marks
    launch: Rows = field(default_factory=lambda: Rows(("ts",), {"corr": "int64", "tid": "int32"}))
    comm_args_by_external_id: KeptArgs = field(default_factory=KeptArgs)  # record_param_comms, by External id
    thread_names: dict[Any, str] = field(default_factory=dict)
    gpu_pids: set[Any] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    lanes: dict[tuple[Any, Any], int] = field(default_factory=dict)  # (device, stream) -> lane code
    lane_names: Codes = field(default_factory=Codes)  # lane text -> code (keys that print alike share one)
    dev_names: Codes = field(default_factory=Codes)  # kernel / memcpy names
    cpu_names: Codes = field(default_factory=Codes)  # CPU op names
    pids: Codes = field(default_factory=Codes)
    tids: Codes = field(default_factory=Codes)  # CPU threads of ops and of runtime calls alike
    cats: Codes = field(default_factory=Codes)
    categories: dict[str, int] = field(default_factory=dict)
    # kernel name -> (its kind: _COMPUTE | _COMM | _MEM, its code in dev_names): one dict lookup a kernel, not
    # two (each compares the name's text: a fresh string from the decoder, often 100+ characters of templates)
    kernels: dict[str, tuple[int, int]] = field(default_factory=dict)
    launch_names: dict[Any, bool] = field(default_factory=dict)  # runtime call name -> does it launch work
    cpu_roles: dict[str, int] = field(default_factory=dict)  # CPU op name -> _PLAIN, _COMM_OP, ...
    unclassified: set[str] = field(default_factory=set)  # kernel names that read like comm, taken as compute
    uncounted: list[list[Any]] = field(default_factory=list)  # the largest of them by time (reader.py)
    bad: Counter[str] = field(default_factory=Counter)  # what the skipped device events were
    # kineto.prefetch's child: rows kept as array.array where that is what flush would make (rows.flush_light),
    # so that a pass over whole-µs times never imports numpy; :meth:`adopt` makes them numpy
    light: bool = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (kineto.prefetch's hand-over): the kept args as one JSON text, not one pickled struct each
        (the 53.7 MB trace's ~10k comm args: ~16 ms to pickle and read back, ~5 ms so). Exact: what the
        decoders accept (no NaN or infinity, ints of any size, Raw JSON) is what JSON writes back."""
        state = dict(self.__dict__)
        state[_KEPT_ARGS] = _KEPT_ARGS_ENCODER.encode({name: state.pop(name) for name in KEPT_ARGS})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        kept = _KEPT_ARGS_DECODER.decode(state.pop(_KEPT_ARGS))
        self.__dict__.update(state)
        for name in KEPT_ARGS:
            setattr(self, name, kept[name])

    def add(self, events: list[Event]) -> None:
        # Runs once per event of every trace: names bound to locals, the decoders called inline (what
        # decode_args / decode_correlation do, without a Python call per event), each field read once.
        categories, category = self.categories, _category
        kernels, cpu_roles, launch_names, lanes = self.kernels, self.cpu_roles, self.launch_names, self.lanes
        # one tuple a row, in each table's column order (Scan's field defaults: times, then ints)
        dev_row, cpu_row, launch_row = self.dev.pending.append, self.cpu.pending.append, self.launch.pending.append
        comm_row, dev_at = self.dev_comm_args.pending.append, self.dev.pending.__len__  # (the row's place, args)
        dev_names, cpu_names, pids, tids, cats = self.dev_names, self.cpu_names, self.pids, self.tids, self.cats
        args_of, correlation_of, null, failed = ARGS_DECODER.decode, CORRELATION_DECODER.decode, NULL, DECODE_ERRORS
        cpu, runtime, skip, memory, comm, plain = _CPU, _RUNTIME, _SKIP, _MEMORY, _COMM, _PLAIN
        low, high = -INT64_LIMIT, INT64_LIMIT
        for ev in events:
            ph = ev.ph
            if ph != "X":
                if ph == "M":
                    self._metadata(ev, decode_args(ev.args))
                continue
            cat = ev.cat
            kind = categories.get(cat)
            if kind is None:
                kind = categories[cat] = category(cat)
            if kind == cpu:
                name = ev.name if type(ev.name) is str else str(ev.name)
                role = cpu_roles.get(name)
                if role is None:
                    role = cpu_roles[name] = _cpu_role(name)
                if role != plain:
                    self._cpu_args(ev, role)
                cpu_row((ev.ts, ev.dur, pids[ev.pid], tids[ev.tid], cpu_names[name], cats[cat]))
            elif kind == runtime:
                launches = launch_names.get(ev.name)
                if launches is None:
                    launches = launch_names[ev.name] = _is_launch(ev.name)
                raw = ev.args
                if launches and raw is not null:
                    try:
                        corr = correlation_of(raw).correlation
                    except failed:
                        continue
                    ts = ev.ts
                    if corr is not None and ts is not None:
                        launch_row((ts, corr, tids[ev.tid]))
            elif kind != skip:
                raw, ts, dur = ev.args, ev.ts, ev.dur
                try:
                    args = args_of(raw) if raw is not null else None
                except failed:
                    args = None
                if ts is None or dur is None or args is None or args.stream is None:
                    self._bad(ev, args)
                    continue
                name = ev.name if type(ev.name) is str else str(ev.name)
                device = args.device
                key = (device if device is not None else ev.pid, args.stream)
                lane = lanes.get(key)
                if lane is None:
                    lane = self._lane(key)
                if kind == memory:
                    row_kind, code = _MEM, dev_names[name]
                else:
                    known = kernels.get(name)
                    if known is None:
                        known = kernels[name] = (self._kernel_kind(name), dev_names[name])
                    row_kind, code = known
                if row_kind == comm:  # Raw fields are views into the piece's text: not held past it
                    comm_row((dev_at(), args if args.input_dims is null and args.input_type is null
                              else _strip_raw(args)))
                dev_corr = args.correlation
                if type(dev_corr) is not int or not low <= dev_corr < high:
                    read = as_int(dev_corr)  # missing, floats: rare writers
                    dev_corr = -1 if read is None else read
                dev_row((ts, dur, code, lane, row_kind, dev_corr))
        self._flush_args()
        if self.dev.pending_times() + self.cpu.pending_times() + self.launch.pending_times() >= BATCH:
            self._flush()

    def add_typed(self, events: list[Any]) -> None:
        """:meth:`add` for a piece decoded as TYPED_EVENT: the same rows, warnings and kept args, from
        EventX / EventM whose args are decoded already (an Args, or None where the event has none).
        Such a piece has no event whose args are not of Args's shape (the decode would have failed), so
        where :meth:`add` reads args as missing on a failed decode, this one never has to."""
        categories, category = self.categories, _category
        kernels, cpu_roles, launch_names, lanes = self.kernels, self.cpu_roles, self.launch_names, self.lanes
        dev_row, cpu_row, launch_row = self.dev.pending.append, self.cpu.pending.append, self.launch.pending.append
        comm_row, dev_at, null = self.dev_comm_args.pending.append, self.dev.pending.__len__, NULL
        dev_names, cpu_names, pids, tids, cats = self.dev_names, self.cpu_names, self.pids, self.tids, self.cats
        cpu, runtime, skip, memory, comm, plain = _CPU, _RUNTIME, _SKIP, _MEMORY, _COMM, _PLAIN
        low, high, corr_max = -INT64_LIMIT, INT64_LIMIT, INT64_LIMIT - 1
        complete, metadata = EventX, EventM
        for ev in events:
            kind_of_event = type(ev)
            if kind_of_event is not complete:
                if kind_of_event is metadata:
                    self._metadata(ev, ev.args)
                continue
            cat = ev.cat
            kind = categories.get(cat)
            if kind is None:
                kind = categories[cat] = category(cat)
            if kind == cpu:
                name = ev.name if type(ev.name) is str else str(ev.name)
                role = cpu_roles.get(name)
                if role is None:
                    role = cpu_roles[name] = _cpu_role(name)
                if role != plain:
                    self._cpu_args_of(ev.args, role)
                cpu_row((ev.ts, ev.dur, pids[ev.pid], tids[ev.tid], cpu_names[name], cats[cat]))
            elif kind == runtime:
                launches = launch_names.get(ev.name)
                if launches is None:
                    launches = launch_names[ev.name] = _is_launch(ev.name)
                args = ev.args
                if launches and args is not None:
                    corr = args.correlation  # what CORRELATION_DECODER reads: an int in [0, 2^63 - 1], or none
                    ts = ev.ts
                    if type(corr) is int and 0 <= corr <= corr_max and ts is not None:
                        launch_row((ts, corr, tids[ev.tid]))
            elif kind != skip:
                args, ts, dur = ev.args, ev.ts, ev.dur
                if ts is None or dur is None or args is None or args.stream is None:
                    self._bad(ev, args)
                    continue
                name = ev.name if type(ev.name) is str else str(ev.name)
                device = args.device
                key = (device if device is not None else ev.pid, args.stream)
                lane = lanes.get(key)
                if lane is None:
                    lane = self._lane(key)
                if kind == memory:
                    row_kind, code = _MEM, dev_names[name]
                else:
                    known = kernels.get(name)
                    if known is None:
                        known = kernels[name] = (self._kernel_kind(name), dev_names[name])
                    row_kind, code = known
                if row_kind == comm:  # Raw fields are views into the piece's text: not held past it
                    comm_row((dev_at(), args if args.input_dims is null and args.input_type is null
                              else _strip_raw(args)))
                dev_corr = args.correlation
                if type(dev_corr) is not int or not low <= dev_corr < high:
                    read = as_int(dev_corr)  # missing, floats: rare writers
                    dev_corr = -1 if read is None else read
                dev_row((ts, dur, code, lane, row_kind, dev_corr))
        self._flush_args()
        if self.dev.pending_times() + self.cpu.pending_times() + self.launch.pending_times() >= BATCH:
            self._flush()

    def _cpu_args(self, ev: Event, role: int) -> None:
        self._cpu_args_of(decode_args(ev.args) if role != _STEP else None, role)

    def _cpu_args_of(self, args: Args | None, role: int) -> None:
        """What a CPU op other than a plain one keeps: its args (comm ops, record_param_comms) or its row
        (a ProfilerStep#N mark)."""
        if role == _COMM_OP:
            if args is not None and not len(self.dev):
                self.cpu_comm_args[len(self.cpu)] = _own_raw(args)
        elif role == _PARAM_COMMS:
            ext = as_int(args.external_id) if args is not None else None
            if args is not None and ext is not None:
                self.comm_args_by_external_id.pending.append((ext, _strip_raw(args)))
        else:
            self.step_rows.append(len(self.cpu))

    def _bad(self, ev: Event, args: Args | None) -> None:
        missing = [k for k, v in (("ts", ev.ts), ("dur", ev.dur)) if v is None]
        missing += ["args.stream"] if args is None or args.stream is None else []
        self.bad[f"{ev.cat} {str(ev.name)[:60]!r} without {'/'.join(missing)}"] += 1

    def _flush_args(self) -> None:
        """The piece's kept args into their columns: a batch of them as Args (~700 bytes each) would be most of
        what the pass holds besides the columns."""
        self.dev_comm_args.flush(self.dev.flushed)  # its keys are places among the pending device rows
        self.comm_args_by_external_id.flush()

    def _flush(self) -> None:
        """Pending rows and kept args into their columns."""
        self._flush_args()
        (flush_light if self.light else flush_rows)((self.dev, self.cpu, self.launch))

    def finish(self) -> None:
        """After the last piece: every pending row into the columns (a light scan: into array.array chunks
        where it can, for :meth:`adopt` to finish)."""
        tables = (self.dev, self.cpu, self.launch)
        if len(self.dev):
            self.cpu_comm_args.clear()  # a GPU trace's: its CPU ops make no table (see the field)
        self._flush()
        if self.light:
            return
        release_free_memory()
        for table in tables:
            table.finish()
        release_free_memory()  # the chunks the columns were joined from

    def release(self, *names: str) -> None:
        """Let go of what the tables being built no longer read (``launch``, ``cpu``, kept args): each named
        field becomes empty, as in a scan that kept nothing of it."""
        for each in fields(self):
            if each.name in names and callable(each.default_factory):
                setattr(self, each.name, each.default_factory())

    def adopt(self) -> None:
        """A light scan's columns as :meth:`finish` makes them (numpy), in the process that reads them."""
        if not self.light:
            return
        tables = (self.dev, self.cpu, self.launch)
        for table in tables:
            table.adopt()
            table.finish()
        self.light = False

    def _kernel_kind(self, name: str) -> int:
        if "Memcpy" in name or "Memset" in name:
            kind = _MEM
        elif names.is_comm_kernel(name):
            kind = _COMM
        else:
            kind = _COMPUTE
            if names.looks_like_comm(name):
                self.unclassified.add(name)
        return kind

    def _lane(self, key: tuple[Any, Any]) -> int:
        dev = str(as_int(key[0]) if as_int(key[0]) is not None else key[0])
        self.devices.add(dev)
        code = self.lanes[key] = self.lane_names[f"gpu {dev} stream {as_int(key[1])}"]
        return code

    def _metadata(self, ev: Event, args: Args | None) -> None:
        if args is None:
            return
        if ev.name == "thread_name" and isinstance(args.name, str):
            self.thread_names[(ev.pid, ev.tid)] = args.name
        elif ev.name == "process_labels" and (args.labels or "").startswith("GPU"):
            self.gpu_pids.add(ev.pid)
