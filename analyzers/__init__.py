"""Analyzers: pure functions from commprof tables to tables and findings."""
