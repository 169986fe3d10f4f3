"""The script's own torch profiler wins: every torch profiler (torch.profiler, the legacy autograd one,
emit_nvtx) starts through two functions of ``torch.autograd.profiler``; while patched, a start that is not
ours calls ``on_user_start`` first (two profilers at once leave one of them broken), so that ours steps
aside."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

ENTRY_POINTS = ("_prepare_profiler", "_enable_profiler")


class ProfilerEntryGuard:
    def __init__(self, is_ours: Callable[[], bool], on_user_start: Callable[[], None]) -> None:
        self.is_ours = is_ours
        self.on_user_start = on_user_start
        self._patches: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        module = importlib.import_module("torch.autograd.profiler")
        for name in ENTRY_POINTS:
            original = getattr(module, name, None)
            if original is not None:
                setattr(module, name, self._wrap(original))
                self._patches.append((module, name, original))

    def _wrap(self, original: Any) -> Any:
        guard = self

        def start_profiler(*args: Any, **kwargs: Any) -> Any:
            if not guard.is_ours():
                guard.on_user_start()
            return original(*args, **kwargs)

        return start_profiler

    def uninstall(self) -> None:
        patches, self._patches = self._patches, []
        for module, name, original in patches:
            setattr(module, name, original)
