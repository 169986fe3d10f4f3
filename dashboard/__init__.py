"""Dash app for commprof runs (see the dashboard issue)."""
