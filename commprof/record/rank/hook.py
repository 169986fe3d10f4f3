"""Run a callback once, right after ``import torch`` has finished, without importing torch ourselves.

A finder at the front of ``sys.meta_path`` that answers only for the top-level name ``torch``: it
asks the other finders for the real spec and wraps that spec's loader's ``exec_module`` (on the
loader instance, so the loader keeps its type and every other method). The finder removes itself on
first use, so after torch is imported nothing of ours sits on the import path.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[types.ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        remove_finder(self)
        spec = _find_with_others(fullname, path, target)
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        callback = self.callback

        def exec_module(module: types.ModuleType) -> None:
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            callback(module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader with __slots__: give up quietly
            return spec
        return spec


def _find_with_others(
    fullname: str, path: Sequence[str] | None, target: types.ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


def remove_finder(finder: object) -> None:
    try:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
    except ValueError:
        pass


def call_after_import(name: str, callback: Callable[[types.ModuleType], None]) -> object | None:
    """Call ``callback(module)`` once ``name`` (a top-level package) has been imported; at once if
    it already is. Returns the finder (to remove it), or None when the callback already ran."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return None
    finder = _AfterImport(name, callback)
    sys.meta_path.insert(0, finder)
    return finder
