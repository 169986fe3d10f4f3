"""Results computed once per key, however many requests ask for them at the same time.

``functools.lru_cache`` is thread-safe but not single-flight: 50 simultaneous requests for a figure that is
not cached yet compute it 50 times (and hold the GIL 50 times as long). ``Memo`` keeps one lock per key:
the first caller computes, the others wait for that result; different keys compute side by side. A
computation that raises is not kept (the next caller tries again, and sees the error itself).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Memo(Generic[T]):
    """An LRU map key -> value of at most ``maxsize`` entries and ``max_bytes`` in all (with ``size``
    saying what a value weighs), filled by ``get(key, compute)`` with one computation per key at a time."""

    def __init__(self, maxsize: int, max_bytes: int | None = None, size: Callable[[T], int] | None = None) -> None:
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self._size = size or (lambda _value: 0)
        self._values: OrderedDict[Hashable, tuple[T, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # guards the maps, never held while computing
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self.computed = 0  # how many computations ran (tests read it)

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key][0]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        try:
            with key_lock:  # the first caller computes; the others wait here for its result
                with self._lock:
                    if key in self._values:
                        self._values.move_to_end(key)
                        return self._values[key][0]
                value = compute()
                self.computed += 1
                self._keep(key, value)  # kept before the key's lock goes: no second computation slips in
                return value
        finally:
            with self._lock:
                if self._key_locks.get(key) is key_lock:
                    del self._key_locks[key]

    def _keep(self, key: Hashable, value: T) -> None:
        weight = self._size(value)
        if self.max_bytes is not None and weight > self.max_bytes:
            return  # bigger than the whole budget: served, not kept
        with self._lock:
            self._values[key] = (value, weight)
            self._bytes += weight
            while len(self._values) > self.maxsize or (self.max_bytes is not None and self._bytes > self.max_bytes):
                _, (_, dropped) = self._values.popitem(last=False)
                self._bytes -= dropped

    def __len__(self) -> int:
        return len(self._values)


def memoized(fn: Callable[..., T], maxsize: int) -> Callable[..., T]:
    """``fn`` with its results kept per positional arguments (which must be hashable), single-flight."""
    memo: Memo[T] = Memo(maxsize)

    def call(*args: Any) -> T:
        return memo.get(args, lambda: fn(*args))

    call.memo = memo  # type: ignore[attr-defined]
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call
