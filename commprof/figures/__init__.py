"""Figures below both the dashboard and the report writers: pure builders (polars in, ``go.Figure`` out), their
colours and units (style), and the table shaping behind them (transforms). Nothing here imports Dash, so the
HTML report (commprof/report/html_*.py) draws the dashboard's own figures without loading the app."""
