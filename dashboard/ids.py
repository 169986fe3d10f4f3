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
OVERVIEW_EXPOSED_NOTE = "overview-exposed-note"
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

# skew (the per-call heatmap; SKEW_GROUPS below is the per-group one)
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

# added with the URL state, headline and drill-downs
OVERVIEW_HEADLINE = "overview-headline"
OVERVIEW_DIM_TIER = "overview-dimension-tier"
OVERVIEW_WINDOWS = "overview-windows"  # record --every/--on-demand: the trend over windows
OVERVIEW_WINDOWS_GRAPH = "overview-windows-graph"
OVERVIEW_WARNINGS = "overview-warnings"
PERFETTO_LINK = "perfetto-link"
TIMELINE_LANES = "timeline-lanes"
TIMELINE_MESSAGE = "timeline-message"
COLL_MESSAGE = "collectives-message"
SKEW_GROUPS = "skew-groups"
SKEW_PG = "skew-pg"
SKEW_MESSAGE = "skew-message"
SKEW_MATCH = "skew-match"
TOPO_MESSAGE = "topology-message"
INDEX_TABLE = "runs-index"
COMPARE_NOTE = "compare-note"
TIMELINE_FIRST = "timeline-first"  # dcc.Store: the window the graph was first drawn with (plotly's "reset" range)
TIMELINE_NOTE = "timeline-note"  # what the drawing left out (the 128-rank cap); TIMELINE_MESSAGE: the URL's problems
COMPARE_PROBLEM = "compare-problem"
SKEW_SHOWN = "skew-shown"  # dcc.Store: the group the skew page was drawn with
OVERVIEW_STRAGGLER = "headline-straggler"
OVERVIEW_WORST_GROUP = "headline-worst-group"
OVERVIEW_SPREAD = "overview-spread"
TOPO_LEFT_OUT = "topology-left-out"

# past 256 ranks (dashboard/scale.py): hosts and groups, worst first
OVERVIEW_HOSTS = "overview-hosts"
OVERVIEW_GROUPS = "overview-groups"
SKEW_SCALE = "skew-scale"  # what the aggregated skew page shows of how many
SKEW_WORST_GROUPS = "skew-worst-groups"
TOPO_SCALE = "topology-scale"
TOPO_HOST = "topology-host"  # dropdown: the host to draw with the worst ones
TOPO_SHOWN = "topology-shown"  # dcc.Store: the host the page was drawn with
TOPO_HOSTS = "topology-hosts"
TOPO_NOTE = "topology-note"  # links left out of the aggregated drawing, or why a host cannot be drawn
TOPO_PROBLEM = "topology-problem"  # a ?host= the run does not have
