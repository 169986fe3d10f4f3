"""The dashboard in a real headless Chromium: every page loads, the timeline zooms, the collectives
table filters, compare shows two runs, and the browser console stays free of errors."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commprof.dashboard import ids

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
CHROME_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--window-size=1400,1000")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The app's Flask server on 127.0.0.1:<free port>, in a thread."""

    def __init__(self, app: object) -> None:
        import logging

        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log lines
        self.port = free_port()
        self.httpd = make_server("127.0.0.1", self.port, app.server, threaded=True)  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.httpd.shutdown()


def make_driver():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER or ""), options=options)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs chromium and chromedriver on PATH (apt-get install chromium chromium-driver)")
    driver = make_driver()
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    import commprof
    from commprof.dashboard import create_app
    from commprof.synth_run import make_run

    root = tmp_path_factory.mktemp("dash")
    sample = root / "sample"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_4rank_profiler", sample,
                    ignore=shutil.ignore_patterns("tables"))
    synth = make_run(root / "synth16", ranks=16, steps=3, layout=(4, 2, 2))
    runs = {"sample": commprof.open_run(sample), "synth16": commprof.open_run(synth)}
    srv = Server(create_app(runs))
    yield srv
    srv.stop()


def wait_for(driver, css: str, timeout: float = 15.0, text: str | None = None):  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        if found and (text is None or any(text in f.text for f in found)):
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"{css!r}{' with ' + repr(text) if text else ''} did not appear in {timeout}s")


def wait_plot(driver, graph_id: str, timeout: float = 15.0) -> int:  # type: ignore[no-untyped-def]
    """Wait until the graph has drawn traces; returns how many."""
    deadline = time.monotonic() + timeout
    script = (f"var g = document.querySelector('#{graph_id} .js-plotly-plot');"
              "return g && g.data ? g.data.length : -1;")
    while time.monotonic() < deadline:
        n = driver.execute_script(script)
        if n is not None and n > 0:
            return int(n)
        time.sleep(0.1)
    raise AssertionError(f"graph #{graph_id} drew no traces in {timeout}s")


def console_errors(driver) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def shot(driver, name: str) -> None:  # type: ignore[no-untyped-def]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


@pytest.mark.parametrize("run", ["sample", "synth16"])
def test_every_page_renders(browser, server: Server, run: str) -> None:  # type: ignore[no-untyped-def]
    graphs = {"overview": ids.OVERVIEW_BREAKDOWN, "timeline": ids.TIMELINE_GRAPH,
              "collectives": ids.COLL_SCATTER, "topology": ids.TOPO_GRAPH, "skew": ids.SKEW_HEATMAP}
    console_errors(browser)  # drain
    for page, graph in graphs.items():
        browser.get(f"{server.url}/run/{run}/{page}")
        assert wait_plot(browser, graph) > 0
        shot(browser, f"{run}-{page}")
    facts = browser.get(f"{server.url}/run/{run}/overview") or wait_for(browser, f"#{ids.OVERVIEW_FACTS}")
    assert "world size" in facts.text
    assert console_errors(browser) == []


def test_timeline_step_and_zoom(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/run/synth16/timeline")
    wait_plot(browser, ids.TIMELINE_GRAPH)
    info = wait_for(browser, f"#{ids.TIMELINE_INFO}", text="segments")
    whole = info.text
    # pick step 1 from the dropdown
    browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_STEP}").click()
    option = wait_for(browser, "[role=option]", text="step 1")
    for opt in browser.find_elements(By.CSS_SELECTOR, "[role=option]"):
        if opt.text.strip() == "step 1":
            option = opt
    option.click()
    wait_for(browser, f"#{ids.TIMELINE_INFO}", text="window 2.000 ms")
    assert whole != browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_INFO}").text
    shot(browser, "synth16-timeline-step1")
    # drag-zoom on the plot area: the window shrinks and the server re-aggregates
    drag = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_GRAPH} .nsewdrag")
    w = drag.size["width"]
    ActionChains(browser).move_to_element(drag).click_and_hold().move_by_offset(w // 4, 0).move_by_offset(
        w // 8, 0).release().perform()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_INFO}").text
        if "window 2.000 ms" not in text and "window" in text:
            break
        time.sleep(0.1)
    window_ms = float(text.split("window ")[1].split(" ms")[0])
    assert 0.2 < window_ms < 1.0, text
    shot(browser, "synth16-timeline-zoomed")
    assert console_errors(browser) == []


def test_collectives_filter(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{server.url}/run/synth16/collectives")
    wait_plot(browser, ids.COLL_SCATTER)
    rows_before = len(browser.find_elements(By.CSS_SELECTOR, f"#{ids.COLL_TABLE} tbody tr"))
    cell = wait_for(browser, f"#{ids.COLL_TABLE} th.dash-filter[data-dash-column=op] input")
    cell.send_keys("send" + Keys.ENTER)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ops = [td.text for td in browser.find_elements(By.CSS_SELECTOR, f"#{ids.COLL_TABLE} td[data-dash-column=op]")]
        if ops and set(ops) == {"send"}:
            break
        time.sleep(0.1)
    assert ops and set(ops) == {"send"}, ops
    assert rows_before > len(ops)
    shot(browser, "synth16-collectives-filtered")
    assert console_errors(browser) == []


def test_compare_and_messages(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    browser.get(f"{server.url}/compare")
    assert wait_plot(browser, ids.COMPARE_GRAPH) == 2
    wait_for(browser, f"#{ids.COMPARE_TABLE}", text="step time")
    shot(browser, "compare")
    browser.get(f"{server.url}/run/..%2F..%2Fetc/overview")
    assert "No run named" in wait_for(browser, f"#{ids.MESSAGE}").text
    assert console_errors(browser) == []
