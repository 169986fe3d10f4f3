"""The ``commprof topology`` view: what NCCL saw, summarised per communicator and rendered as text or
JSON. The logs themselves are read by :mod:`commprof.ingest.nccl_logs`."""

from commprof.nccl.report import render
from commprof.nccl.summary import SCHEMA_VERSION, summarize

__all__ = ["SCHEMA_VERSION", "render", "summarize"]
