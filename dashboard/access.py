"""Who may read the dashboard: a token, as Jupyter does it, when the server listens beyond this machine.

``require_token(app, token, port)`` puts one check in front of every route of the app's Flask server (Flask's
``before_request`` runs before any view, a 404 included): the pages, Dash's ``_dash-layout``,
``_dash-dependencies``, ``_dash-update-component`` and ``_dash-component-suites``, the Perfetto downloads. A
request passes when it carries the token

- as the ``token`` query parameter (the URL the command prints): the answer then sets an HttpOnly,
  SameSite=Strict cookie, so the page's own requests (callbacks, scripts, downloads) carry it from then on and
  the pages may drop the parameter from the URL when they write their state into it;
- in that cookie;
- in an ``Authorization: token <token>`` header (scripts, ``curl``).

Anything else gets a 403 and a short page saying how to get in; nothing of the runs is in it. Tokens are
compared with ``hmac.compare_digest`` (no timing hint). The cookie's name holds the port: browsers share
cookies between ports of one host, so two dashboards on one machine keep their own tokens.

The traffic is plain HTTP: anyone who can read the network between browser and server can read the token
too. An SSH tunnel to a dashboard on 127.0.0.1 is still the private way (docs/dashboard.md).
"""

from __future__ import annotations

import hmac
import secrets
from html import escape
from typing import TYPE_CHECKING

from flask import Response, after_this_request, request

if TYPE_CHECKING:
    from dash import Dash

ENV = "COMMPROF_DASHBOARD_TOKEN"
QUERY = "token"
SCHEME = "token"
REFUSAL = """<!doctype html>
<html><head><meta charset="utf-8"><title>commprof: token needed</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 640px; margin: 40px auto; color: #222">
<h2>This commprof dashboard needs its token</h2>
<p>{why} Open the URL that <code>commprof dashboard</code> printed when it started (it ends in
<code>?token=&hellip;</code>), or ask whoever started it. Scripts can send the header
<code>Authorization: token &hellip;</code>.</p>
</body></html>
"""


def new_token() -> str:
    """A random token: 32 bytes (256 bits), URL-safe."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    return f"commprof-token-{port}"


def _matches(given: str | None, token: bytes) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token)


def _from_header(value: str | None) -> str | None:
    """The token of ``Authorization: token X`` (``Bearer X`` too), else None."""
    scheme, _, rest = (value or "").strip().partition(" ")
    return rest.strip() if scheme.lower() in (SCHEME, "bearer") and rest.strip() else None


def require_token(app: Dash, token: str, port: int) -> None:
    """Refuse every request to ``app`` that does not carry ``token`` (see the module's docstring)."""
    if not token:
        raise ValueError("the dashboard's token must not be empty")
    expected = token.encode("utf-8", "surrogateescape")
    cookie = cookie_name(port)

    def check() -> Response | None:
        in_query = request.args.get(QUERY)
        if _matches(in_query, expected):
            if request.cookies.get(cookie) != token:
                @after_this_request
                def remember(response: Response) -> Response:
                    response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
                    return response
            return None
        if _matches(request.cookies.get(cookie), expected):
            return None
        if _matches(_from_header(request.headers.get("Authorization")), expected):
            return None
        return refusal("That token is not this dashboard's." if in_query is not None else
                       "Every page of it asks for the token it was started with.")

    def no_referrer(response: Response) -> Response:
        # a link out of a page (ui.perfetto.dev) must not carry a URL with ?token= to another site
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    # first, before any hook Dash or a plugin registered: nothing runs for a request without the token
    app.server.before_request_funcs.setdefault(None, []).insert(0, check)
    app.server.after_request(no_referrer)


def refusal(why: str) -> Response:
    """403 and a page that says how to get in (and nothing about the runs)."""
    wants_html = request.accept_mimetypes.accept_html and not request.path.startswith("/_dash-")
    if wants_html:
        return Response(REFUSAL.format(why=escape(why)), status=403, mimetype="text/html",
                        headers={"Cache-Control": "no-store"})
    return Response(f"403: this commprof dashboard needs its token. {why}\n", status=403, mimetype="text/plain",
                    headers={"Cache-Control": "no-store"})
