"""Flight Recorder dumps: the last N collectives per process group, as torch records them.

torch 2.13 offers ``_dump_fr_trace_json`` (all backends, Gloo included; Gloo entries carry no
timing and no p2p); older versions ``_dump_nccl_trace_json`` (NCCL only) or pickle variants.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

from .files import atomic_write_bytes

_JSON_DUMPS = ("_dump_fr_trace_json", "_dump_nccl_trace_json")
_PICKLE_DUMPS = ("_dump_fr_trace", "_dump_nccl_trace")


def buffer_size(environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        value = environ.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def dump_bytes(torch: Any) -> bytes | None:
    """The Flight Recorder contents as JSON bytes, or None when this torch cannot dump them."""
    c10d = getattr(torch._C, "_distributed_c10d", None)
    if c10d is None:
        return None
    for name in _JSON_DUMPS:
        func = getattr(c10d, name, None)
        if func is not None:
            data = func()
            return data if isinstance(data, bytes) else str(data).encode()
    for name in _PICKLE_DUMPS:
        func = getattr(c10d, name, None)
        if func is not None:
            obj = pickle.loads(func())  # noqa: S301 - bytes produced by torch in this process
            return json.dumps(obj, default=str).encode()
    return None


def dump(torch: Any, path: str) -> int | None:
    """Write the dump to ``path``; returns the number of entries, or None when nothing was dumped."""
    data = dump_bytes(torch)
    if data is None:
        return None
    atomic_write_bytes(path, data)
    return data.count(b'"record_id"')  # one per entry; cheaper than parsing megabytes again
