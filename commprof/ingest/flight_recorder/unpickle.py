"""PyTorch's Flight Recorder dumps are pickles: loaded here with an unpickler that refuses every class.

A dump holds only dicts, lists, tuples, strings, numbers, booleans and None. Every way a pickle builds any
other object (GLOBAL / STACK_GLOBAL, INST / OBJ, the copyreg extension codes) goes through ``find_class``
or ``persistent_load``; both refuse, so loading a hostile pickle constructs nothing and runs no code.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

MAX_DUMP_BYTES = 256 << 20  # a ring buffer of a few thousand entries is a few MB; more is not a dump


class RefusedPickle(ValueError):
    """The pickle names a class or an external object (refused), or is not a complete pickle."""


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"it names a class ({module[:60]}.{name[:60]}); refused: a Flight Recorder dump holds "
                            "plain data only")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it refers to an external object; refused")


def load_plain(data: bytes) -> Any:
    """The plain data a pickle holds; RefusedPickle when it names a class or is cut short or damaged."""
    try:
        # through a buffered reader as large as the pickle: the unpickler reads a file without peek() (BytesIO)
        # a few bytes at a time, 4-5x slower on a dump (issue 39: 16,384 dumps)
        return _DataOnly(io.BufferedReader(io.BytesIO(data), buffer_size=max(len(data), 1))).load()
    except RefusedPickle:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, UnicodeDecodeError, RecursionError, MemoryError) as err:
        raise RefusedPickle(f"not a complete pickle ({str(err)[:80] or 'cut short'})") from None
