"""The dashboard's token (issue 40, item 4), over real HTTP: ``commprof dashboard --host 0.0.0.0`` started as a
process makes a token and prints it in its URL; every route (pages, Dash's ``_dash-*`` routes, its scripts, the
Perfetto download, a path that does not exist) answers 403 without it, and with it (``?token=`` then the cookie
it sets, or an ``Authorization`` header) the pages load. On loopback no token is asked unless one is given."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commprof.cli.dashboard import choose_token, host_warning, server_url

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "tp2_dp2"
KEY = "tp2_dp2"
SCRIPT = "_dash-component-suites/dash/deps/react@18.3.1.min.js"  # any script Dash serves: its path is asked
ROUTE_BODY = {  # the router's callback, as the browser posts it on the first load
    "output": "..page.children...nav.children..",
    "outputs": [{"id": "page", "property": "children"}, {"id": "nav", "property": "children"}],
    "inputs": [{"id": "url", "property": "pathname", "value": f"/run/{KEY}/overview"}],
    "state": [{"id": "url", "property": "search", "value": ""}],
    "changedPropIds": ["url.pathname"],
}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Answer:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def fetch(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request, no cookie jar and no redirects followed: exactly what is sent is what is judged."""
    req = urllib.request.Request(url, data=data, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return Answer(resp.status, resp.headers, resp.read())
    except urllib.error.HTTPError as err:
        return Answer(err.code, err.headers, err.read())


def routes(base: str) -> list[tuple[str, str, bytes | None]]:
    """(name, url, POST body) of every kind of route the dashboard answers."""
    return [
        ("index", f"{base}/", None),
        ("run page", f"{base}/run/{KEY}/timeline", None),
        ("layout", f"{base}/_dash-layout", None),
        ("dependencies", f"{base}/_dash-dependencies", None),
        ("callback", f"{base}/_dash-update-component", json.dumps(ROUTE_BODY).encode()),
        ("script", f"{base}/{SCRIPT}", None),
        ("favicon", f"{base}/_favicon.ico", None),
        ("download", f"{base}/download/{KEY}/perfetto.json", None),
        ("not found", f"{base}/assets/nothing.css", None),
        ("static", f"{base}/static/nothing.js", None),
    ]


@pytest.fixture(scope="module")
def network_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """``commprof dashboard SAMPLE --host 0.0.0.0`` as a process: (base URL, token, what it printed)."""
    tmp = tmp_path_factory.mktemp("token")
    shutil.copytree(SAMPLE, tmp / KEY, ignore=shutil.ignore_patterns("tables"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "COMMPROF_DASHBOARD_TOKEN"}
    env["COMMPROF_CACHE_DIR"] = str(tmp / "cache")
    log = tmp / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "commprof", "dashboard", str(tmp / KEY), "--host", "0.0.0.0",
                                 "--port", str(port), "-j", "1"], stdout=subprocess.DEVNULL, stderr=err, env=env,
                                cwd=tmp)
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"on (http://\S+)", log.read_text())
            url = found.group(1) if found else None
            time.sleep(0.2)
        assert url is not None, log.read_text()
        token = re.search(r"\?token=([\w-]+)$", url)
        assert token is not None, url
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() < deadline:  # the URL is printed just before the server listens
            try:
                fetch(base + "/")
                break
            except OSError:
                time.sleep(0.2)
        yield base, token.group(1), log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_command_makes_a_token_and_prints_it_in_the_url(network_server: tuple[str, str, str]) -> None:
    _, token, printed = network_server
    assert len(token) >= 40  # 32 random bytes
    assert f"/?token={token}" in printed
    assert "serves the dashboard to the network, to whoever has its token" in printed
    assert "no login" not in printed


@pytest.mark.parametrize("credential", ["none", "wrong query", "wrong header", "wrong cookie", "empty query"])
def test_every_route_refuses_a_request_without_the_token(network_server: tuple[str, str, str],
                                                         credential: str) -> None:
    base, token, _ = network_server
    for name, url, body in routes(base):
        headers: dict[str, str] = {}
        if credential == "wrong query" or credential == "empty query":
            url += ("&" if "?" in url else "?") + ("token=" if credential == "empty query" else "token=x" + token)
        elif credential == "wrong header":
            headers["Authorization"] = f"token {token[:-1]}"
        elif credential == "wrong cookie":
            headers["Cookie"] = f"commprof-token-{base.rsplit(':', 1)[1]}={token}x"
        answer = fetch(url, body, headers)
        assert answer.status == 403, (credential, name, answer.status)
        assert b"needs its token" in answer.body, (credential, name)
        # the refusal tells nothing of the runs
        assert KEY.encode() not in answer.body and b"Set-Cookie" not in bytes(str(answer.headers), "utf-8")


def test_with_the_token_the_pages_load(network_server: tuple[str, str, str]) -> None:
    base, token, _ = network_server
    # the printed URL: the page, and a cookie that carries the token from then on
    first = fetch(f"{base}/?token={token}")
    assert first.status == 200 and b"_dash-renderer" in first.body
    set_cookie = first.headers.get("Set-Cookie", "")
    port = base.rsplit(":", 1)[1]
    assert set_cookie.startswith(f"commprof-token-{port}={token};"), set_cookie
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    assert first.headers.get("Referrer-Policy") == "same-origin"
    cookie = {"Cookie": set_cookie.split(";", 1)[0]}
    for name, url, body in routes(base):
        answer = fetch(url, body, cookie)
        if name in ("not found", "static"):
            assert answer.status == 404, (name, answer.status)
            continue
        assert answer.status == 200, (name, answer.status, answer.body[:300])
        assert "Set-Cookie" not in answer.headers, name  # only the URL with ?token= sets it
    page = fetch(f"{base}/_dash-update-component", json.dumps(ROUTE_BODY).encode(), cookie)
    assert f"{KEY} \u2014 overview" in json.dumps(json.loads(page.body), ensure_ascii=False)  # the run's page
    download = fetch(f"{base}/download/{KEY}/perfetto.json", headers=cookie)
    assert json.loads(download.body)["traceEvents"]
    # a script (curl) sends the header instead
    for scheme in ("token", "Bearer"):
        answer = fetch(f"{base}/_dash-layout", headers={"Authorization": f"{scheme} {token}"})
        assert answer.status == 200, scheme
    # the query parameter on any route, not only the page
    assert fetch(f"{base}/_dash-dependencies?token={token}").status == 200


def test_the_browser_is_shown_a_page_and_scripts_a_line(network_server: tuple[str, str, str]) -> None:
    base, _, _ = network_server
    page = fetch(base + "/run/x/overview", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.headers.get_content_type() == "text/html"
    assert b"<h2>This commprof dashboard needs its token" in page.body
    script = fetch(base + "/_dash-layout", headers={"Accept": "application/json"})
    assert script.headers.get_content_type() == "text/plain" and script.body.startswith(b"403: ")


def test_loopback_asks_no_token_unless_one_is_given() -> None:
    assert choose_token("127.0.0.1", None) == (None, False)
    assert choose_token("localhost", None) == (None, False)
    assert choose_token("127.0.0.1", "mine") == ("mine", False)
    made, made_here = choose_token("0.0.0.0", None)
    assert made_here and made and made != choose_token("0.0.0.0", None)[0]
    assert choose_token("10.1.2.3", "mine") == ("mine", False)
    assert host_warning("127.0.0.1", 8050) is None and host_warning("::", 8050) is not None
    # a token the user gave stays out of what is printed; one made here is the only way to learn it
    assert server_url("127.0.0.1", 8050, None, False) == "http://127.0.0.1:8050/"
    assert server_url("10.1.2.3", 8050, "abc/+", True) == "http://10.1.2.3:8050/?token=abc%2F%2B"
    assert "mine" not in server_url("10.1.2.3", 8050, "mine", False)
    assert server_url("::1", 8050, None, False) == "http://[::1]:8050/"


def test_a_token_given_on_loopback_is_required(tmp_path: Path) -> None:
    """--token (here COMMPROF_DASHBOARD_TOKEN) on the default host: the app refuses without it."""
    import commprof
    from commprof.dashboard import create_app
    from commprof.dashboard.access import require_token
    from commprof.dashboard.cache import RunCache

    shutil.copytree(SAMPLE, tmp_path / KEY, ignore=shutil.ignore_patterns("tables"))
    cache = RunCache({KEY: commprof.open_run(tmp_path / KEY)})
    app = create_app(cache.runs, cache)
    require_token(app, "s3cret-of-the-team", 8050)
    from werkzeug.serving import make_server

    port = free_port()
    httpd = make_server("127.0.0.1", port, app.server, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{port}"
        assert fetch(base + "/_dash-layout").status == 403
        assert fetch(base + "/_dash-layout?token=s3cret-of-the-team").status == 200
        assert fetch(base + "/_dash-layout", headers={"Authorization": "token s3cret-of-the-team"}).status == 200
    finally:
        httpd.shutdown()
    with pytest.raises(ValueError):
        require_token(app, "", 8050)


def test_an_empty_token_is_refused_by_the_command(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from commprof.cli import main

    result = CliRunner().invoke(main, ["dashboard", str(SAMPLE), "--token", " "])
    assert result.exit_code == 2 and "must not be empty" in result.output


@pytest.mark.browser
def test_a_browser_opens_the_printed_url_and_then_any_page(network_server: tuple[str, str, str]) -> None:
    """Chromium: the URL with ?token= draws the overview, its cookie then opens another page without the
    token (page and callbacks), no console error; without the cookie the refusal is all there is."""
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, console_errors, make_driver, wait_for, wait_plot

    from commprof.dashboard import ids

    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs chromium and chromedriver on PATH (apt-get install chromium chromium-driver)")
    base, token, _ = network_server
    driver = make_driver()
    try:
        driver.set_page_load_timeout(30)
        driver.get(f"{base}/?token={token}")
        assert wait_plot(driver, ids.OVERVIEW_BREAKDOWN) > 0
        driver.get(f"{base}/run/{KEY}/timeline")
        assert wait_plot(driver, ids.TIMELINE_GRAPH) > 0
        assert console_errors(driver) == []
        driver.delete_all_cookies()
        driver.get(f"{base}/run/{KEY}/overview")
        assert "needs its token" in wait_for(driver, "h2").text
        assert KEY not in driver.page_source
    finally:
        driver.quit()
