"""Serving many requests at once: each callback answer computed once per view state, and a threaded
production server.

Every callback of the dashboard is a pure function of what the browser sends (the run dict is fixed at
startup, the analysis is cached per run, no callback reads the clock, cookies or a session), so the body of
a ``/_dash-update-component`` request is the view state: equal bodies get equal answers. The answer is kept
per body (``Memo``: one computation per body however many requests ask at once, the others wait for it),
which skips Dash's dispatch, the page's layout and the figure's JSON encoding for every later request of
the same view. Answers that are not a 200 or 204 (a broken request) are never kept.

The server is waitress (a production WSGI server, pure Python, threads) where it is installed, else
Flask's threaded development server. Threads rather than processes: every process would need its own
analysis of every run (memory and start-up time × processes), and with the answers cached a request costs
milliseconds of the GIL.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flask import Response, make_response, request

from commprof.dashboard.memo import Memo

if TYPE_CHECKING:
    from dash import Dash

UPDATE_ROUTE = "/_dash-update-component"
MAX_ANSWERS = 4096
MAX_ANSWER_BYTES = 512 * 2**20  # a 256-rank timeline answer is ~4 MB: 128 of them
THREADS = 8  # waitress' default is 4: a long first computation then holds up fewer of the cheap answers
Answer = tuple[int, bytes, str]


class _NotKept(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def cache_answers(app: Dash) -> Memo[Answer]:
    """Keep the answers of the app's callbacks per request body (see the module's docstring)."""
    endpoint = app.config.routes_pathname_prefix + UPDATE_ROUTE.lstrip("/")
    dispatch = app.server.view_functions[endpoint]
    answers: Memo[Answer] = Memo(MAX_ANSWERS, MAX_ANSWER_BYTES, size=lambda answer: len(answer[1]))

    def compute() -> Answer:
        response = make_response(dispatch())
        if response.status_code not in (200, 204):
            raise _NotKept(response)
        return response.status_code, response.get_data(), response.mimetype or "application/json"

    def cached_dispatch() -> Any:
        body = request.get_data(cache=True)  # cache=True: Dash's dispatch reads the same body again
        try:
            status, data, mimetype = answers.get(body, compute)
        except _NotKept as err:
            return err.response
        return Response(data, status=status, mimetype=mimetype)

    app.server.view_functions[endpoint] = cached_dispatch
    return answers


def serve(app: Dash, host: str, port: int, threads: int = THREADS) -> None:
    """Serve until interrupted: waitress with ``threads`` threads, else Flask's threaded server."""
    try:
        from waitress import serve as waitress_serve
    except ImportError:
        logging.getLogger("commprof.dashboard").info("waitress is not installed: Flask's threaded server serves")
        app.run(host=host, port=port, debug=False, threaded=True)
        return
    waitress_serve(app.server, host=host, port=port, threads=threads, ident="commprof")
