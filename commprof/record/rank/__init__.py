"""The rank side of ``commprof record``: code that runs inside every training rank.

It imports only the standard library, and torch only once the user's script has imported it. The
launcher's generated ``sitecustomize`` loads this package by file path under the private name
``_commprof_rank`` (so the training interpreter needs neither commprof nor its dependencies) and
calls :func:`boot`. Nothing here may make the training fail: every error becomes one warning.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from .config import ENV_RANK_PID, read_config
from .hook import call_after_import
from .identity import RankIdentity, detect_identity

_session: Any = None
_disabled = False


def boot() -> None:
    """Claim this process as a rank (its children inherit the claim and stay inactive), then wait
    for ``import torch``."""
    config = read_config()
    if config is None:
        return
    identity = detect_identity()
    if identity is None:
        return
    os.environ[ENV_RANK_PID] = str(os.getpid())
    os.register_at_fork(after_in_child=_disable_in_child)

    def on_torch(torch: types.ModuleType) -> None:
        _start(torch, identity)

    call_after_import("torch", on_torch)


def _disable_in_child() -> None:
    """A forked child (a DataLoader worker) shares our state but is not the rank."""
    global _disabled
    _disabled = True


def _start(torch: types.ModuleType, identity: RankIdentity) -> None:
    global _session
    if _disabled or _session is not None:
        return
    try:
        config = read_config()
        if config is None:
            return
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            return
        from .session import RankSession

        session = RankSession(torch, config, identity)
        _session = session
        session.activate()
    except Exception as err:
        _warn(identity, f"profiling disabled ({type(err).__name__}: {err}); training continues without it")


def _warn(identity: RankIdentity, message: str) -> None:
    try:
        sys.stderr.write(f"commprof: warning: rank {identity.rank}: {message}\n")
    except Exception:
        pass
