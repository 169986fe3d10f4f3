"""One module per page: ``layout(cache, key)`` builds the page, ``register(app, cache)`` its callbacks."""

from __future__ import annotations

from commprof.dashboard.pages import collectives, compare, overview, skew, timeline, topology

RUN_PAGES = {
    "overview": overview,
    "timeline": timeline,
    "collectives": collectives,
    "topology": topology,
    "skew": skew,
}
ALL = (*RUN_PAGES.values(), compare)
