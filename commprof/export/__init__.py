"""Exports of a run for other tools: an annotated Chrome/Perfetto trace (:mod:`commprof.export.perfetto`)."""
