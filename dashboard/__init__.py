"""The commprof dashboard (Dash): ``create_app(runs)`` serves the runs given on the command line."""

from __future__ import annotations

from commprof.dashboard.app import create_app

__all__ = ["create_app"]
