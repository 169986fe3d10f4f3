"""The typed shape of a Kineto trace: only the fields commprof reads.

Kineto traces are hundreds of MB of JSON per rank. Decoding them with ``msgspec`` into structs that
name only the fields we use skips everything else at C speed (about 6x faster than ``json.loads``
into dicts on a 54 MB trace, and far less memory); see the README's "Why msgspec".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Union, get_type_hints

import msgspec

Number = int | float
NULL = msgspec.Raw(b"null")


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The event args we read. Everything is optional and loosely typed: writers differ. Encoded (the kept args
    handed over by kineto.prefetch's child, scan.Scan's pickled state), only the fields that are set."""

    stream: Number | str | None = None
    device: Number | str | None = None
    correlation: Number | None = None
    external_id: Number | None = msgspec.field(default=None, name="External id")
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: Number | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Number | None = msgspec.field(default=None, name="Out msg nelems")
    in_split: str | list[Number] | None = msgspec.field(default=None, name="In split size")
    out_split: str | list[Number] | None = msgspec.field(default=None, name="Out split size")
    group_size: Number | str | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | Number | None = msgspec.field(default=None, name="Process Group Name")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: str | list[Number] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: Number | str | None = msgspec.field(default=None, name="Seq")
    src_rank: Number | None = msgspec.field(default=None, name="Src Rank")
    dst_rank: Number | None = msgspec.field(default=None, name="Dst Rank")
    is_async: Number | bool | str | None = msgspec.field(default=None, name="Is asynchronized op")
    # Input shapes are only needed for a few comm ops: keep them raw, decode on demand.
    input_dims: msgspec.Raw = msgspec.field(default=NULL, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NULL, name="Input type")
    # metadata events ("M"): process_name / thread_name / process_labels
    name: str | Number | None = None
    labels: str | None = None


class Event(msgspec.Struct, gc=False):
    """One trace event. ``args`` stays raw JSON: most events' args are never read, and decoding
    them only for the events that matter is a quarter faster overall."""

    ph: str = ""
    name: str | Number = ""
    cat: str = ""
    pid: Number | str = 0
    tid: Number | str = 0
    # µs. Untyped so that the decoders' ``float_hook=str`` hands float literals over as their text,
    # converted to ns exactly later (commprof.ingest.common.exact_time); integers arrive as ints.
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = NULL


class EventX(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (``"ph": "X"``: ops, kernels, runtime calls) with its args decoded in the same
    pass as the event, at C speed: a decoder call per kept event cost more than the typed args of all
    of them (20 MB kernel-heavy trace: 0.046 CPU s of calls against 0.023 s in the decode)."""

    name: str | Number = ""
    cat: str = ""
    pid: Number | str = 0
    tid: Number | str = 0
    ts: Any = None
    dur: Any = None
    args: Args | None = None


class EventM(EventX, tag="M"):
    """A metadata event (``"ph": "M"``: thread and process names, labels), args decoded alike."""


def _untyped(phase: str, fields: list[tuple[str, Any, Any]]) -> type[msgspec.Struct]:
    """An event of a phase no table keeps (flows, instants, counters, ...): Event's typed fields, so that it
    validates exactly as an Event would; not the fields that take any value (``ts``, ``dur``: Any; ``args``:
    Raw), which the pass never reads for such an event (92k of them in the 53.7 MB trace)."""
    return msgspec.defstruct(f"Event_{ord(phase)}", fields, tag_field="ph", tag=phase, gc=False)


_HINTS = get_type_hints(Event)
_UNREAD = ("ph", "ts", "dur", "args")
_FIELDS = [(name, _HINTS[name], default) for name, default in zip(Event.__struct_fields__, Event.__struct_defaults__,
                                                                  strict=True) if name not in _UNREAD]


# the phases of the Trace Event Format; a piece with any other (or none) is decoded as list[Event]
OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "R", "c", "(", ")", "V",
                "v")
TYPED_EVENT = EventX | EventM | Union[tuple(_untyped(phase, _FIELDS) for phase in OTHER_PHASES)]  # type: ignore[valid-type]  # noqa: UP007
ARGS_DECODER = msgspec.json.Decoder(Args)
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)  # what makes args read as missing


class _Correlation(msgspec.Struct, gc=False):
    # bounded here, at C speed: a correlation past int64 fails the decode and reads as missing
    correlation: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)] | None = None


CORRELATION_DECODER = msgspec.json.Decoder(_Correlation)


def decode_args(raw: msgspec.Raw) -> Args | None:
    """The event's args, or None when absent or not an object of the expected shape."""
    if raw is NULL:
        return None
    try:
        return ARGS_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def decode_correlation(raw: msgspec.Raw) -> int | None:
    """The ``correlation`` of a runtime event (cudaLaunchKernel & co.): all its args that are read."""
    if raw is NULL:
        return None
    try:
        return CORRELATION_DECODER.decode(raw).correlation
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class PgConfig(msgspec.Struct):
    pg_name: str | Number = ""
    pg_desc: str = ""
    backend_config: str = ""
    pg_size: Number = 0
    ranks: list[Number] | str = []


class DistributedInfo(msgspec.Struct):
    backend: str | None = None
    rank: Number | None = None
    world_size: Number | None = None
    pg_count: Number | None = None
    pg_config: list[PgConfig] | dict[str, PgConfig] | None = None
    nccl_version: str | None = None


class DeviceProperty(msgspec.Struct):
    id: Number | None = None
    name: str | None = None
    computeMajor: Number | None = None  # noqa: N815 (Kineto's spelling)
    computeMinor: Number | None = None  # noqa: N815
    totalGlobalMem: Number | None = None  # noqa: N815


class Trace(msgspec.Struct):
    traceEvents: list[Event] | None = None  # noqa: N815
    distributedInfo: DistributedInfo | None = None  # noqa: N815
    deviceProperties: list[DeviceProperty] | None = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815 (ns; untyped for exactness, see Event.ts)
    host_name: str | None = None


def merge_headers(parts: list[Trace]) -> Trace:
    """Top-level fields from several partial documents; the first one that has a field wins."""
    merged = Trace()
    for field_name in Trace.__struct_fields__:
        for part in parts:
            value = getattr(part, field_name)
            if value is not None:
                setattr(merged, field_name, value)
                break
    return merged


@dataclass
class StreamResult:
    """What :func:`commprof.ingest.kineto.stream.stream_events` read of a trace, beside its events. Defined here,
    not in stream.py, so that a process given it pickled (kineto.prefetch's parent) need not import the stream
    and build its decoders (~15 ms) to read it back."""

    header: Trace
    events: int = 0
    text_bytes: int = 0
    warnings: list[str] = field(default_factory=list)
    corrupt: str | None = None  # damage inside a complete text: an error unless a partial result is asked for
