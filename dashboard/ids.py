"""Every component id of the app, in one place (pages and tests import them from here)."""

from __future__ import annotations

# shell
URL = "url"
PAGE = "page"
NAV = "nav"

# per page: the run key (a name from the CLI, never a path)
RUN_KEY = "run-key"

# overview
OVERVIEW_BREAKDOWN = "overview-breakdown"
OVERVIEW_BY_DIMENSION = "overview-by-dimension"
OVERVIEW_BY_TIER = "overview-by-tier"
OVERVIEW_FINDINGS = "overview-findings"
OVERVIEW_FACTS = "overview-facts"

# timeline
TIMELINE_GRAPH = "timeline-graph"
TIMELINE_STEP = "timeline-step"
TIMELINE_RANKS = "timeline-ranks"
TIMELINE_WINDOW = "timeline-window"  # dcc.Store: [start_ns, end_ns]
TIMELINE_INFO = "timeline-info"

# collectives
COLL_TABLE = "collectives-table"
COLL_SCATTER = "collectives-scatter"
COLL_FILTER_DIMENSION = "collectives-filter-dimension"
COLL_FILTER_TIER = "collectives-filter-tier"
COLL_FILTER_OP = "collectives-filter-op"
COLL_FILTER_PG = "collectives-filter-pg"

# topology
TOPO_GRAPH = "topology-graph"
TOPO_TRAFFIC = "topology-traffic"

# skew
SKEW_HEATMAP = "skew-heatmap"
SKEW_STRAGGLER = "skew-straggler"

# compare
COMPARE_A = "compare-a"
COMPARE_B = "compare-b"
COMPARE_GRAPH = "compare-graph"
COMPARE_TABLE = "compare-table"
COMPARE_MESSAGE = "compare-message"

# message page (unknown run, failed analysis)
MESSAGE = "message"
