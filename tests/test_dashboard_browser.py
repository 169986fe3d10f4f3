"""The dashboard in a real headless Chromium, on a recorded sample (tp2_pp2_dp2), the synthetic GPU sample
(synth_2x8_tp8_dp2) and a synthetic 64-rank run (and a 256-rank one, marked slow): every page renders with
no console error, no text overlaps or is clipped (from the elements' boxes), the headline and findings are
there, drill-down links land on the filtered view, every timeline bar sits on its rank's lane and no
canvas passes 8192 px. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_record_windows_offline import windowed_run

from commprof.dashboard import ids, state

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROME_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--window-size=1400,1000")
PAGES = {"overview": ids.OVERVIEW_BREAKDOWN, "timeline": ids.TIMELINE_GRAPH, "collectives": ids.COLL_SCATTER,
         "topology": ids.TOPO_GRAPH, "skew": ids.SKEW_GROUPS}

# Text boxes from the DOM: every non-empty SVG text of each plotly graph and the page's HTML text.
# Overlap: two texts of one graph whose boxes intersect by > 2 px both ways. Clipped: an SVG text outside its
# graph, an HTML element wider than the page, or a table cell / tile whose text is cut (scrollWidth).
LAYOUT_JS = """
const out = {overlaps: [], clipped: []};
const page = document.documentElement.clientWidth;
const inter = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2 &&
                        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;
document.querySelectorAll('.js-plotly-plot').forEach((g) => {
  const frame = g.getBoundingClientRect();
  const texts = [];
  g.querySelectorAll('text').forEach((t) => {
    if (!t.textContent.trim() || t.closest('.textpoint')) return;  // text drawn on markers is part of them
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return;
    texts.push({t: t.textContent.trim(), r: r});
    if (r.left < frame.left - 1 || r.right > frame.right + 1 || r.top < frame.top - 1 || r.bottom > frame.bottom + 1)
      out.clipped.push(g.parentElement.id + ': ' + t.textContent.trim());
  });
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++)
    if (inter(texts[i].r, texts[j].r)) out.overlaps.push(g.parentElement.id + ': ' + texts[i].t + ' | ' + texts[j].t);
});
document.querySelectorAll('h2, h3, p, label, a, th, td, .tile .value, .finding, .Select-value-label').forEach((e) => {
  const r = e.getBoundingClientRect();
  if (r.width === 0 || e.closest('.scroll') || e.closest('.dash-spreadsheet-container')) return;
  if (r.right > page + 1) out.clipped.push('past the page: ' + e.textContent.trim().slice(0, 60));
});
const cells = '.dash-spreadsheet-container td, .dash-spreadsheet-container th, .tile .value';
document.querySelectorAll(cells).forEach((e) => {
  if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== 'visible')
    out.clipped.push('cut: ' + e.textContent.trim().slice(0, 60));
});
return out;
"""

CANVAS_JS = "return Array.from(document.querySelectorAll('canvas')).map(c => [c.width, c.height]);"

# Every timeline point on its lane: y near an integer lane, inside the pinned range, and the tick label of
# that lane drawn at the lane's pixel; a comm point's hover names the rank of its lane's label.
LANES_JS = """
const g = document.querySelector('#%s .js-plotly-plot');
const ya = g._fullLayout.yaxis, top = g.getBoundingClientRect().top + ya._offset;
const labels = {};
g.querySelectorAll('.ytick text').forEach((t) => {
  const r = t.getBoundingClientRect(); labels[t.textContent] = (r.top + r.bottom) / 2; });
const ticktext = ya.ticktext, tickvals = ya.tickvals, bad = [];
let points = 0;
tickvals.forEach((v, i) => {
  const px = top + ya.l2p(v);
  if (!(ticktext[i] in labels) || Math.abs(labels[ticktext[i]] - px) > 3)
    bad.push('label ' + ticktext[i] + ' off its lane');
});
g._fullData.forEach((tr) => {
  for (let k = 0; k < tr.y.length; k++) {
    const y = tr.y[k]; if (y === null || Number.isNaN(y)) continue;
    points++;
    const lane = Math.round(y);
    if (Math.abs(y - lane) > 0.35 || lane < 0 || lane >= tickvals.length) { bad.push(tr.name + ' y=' + y); continue; }
    if (tr.text && tr.text[k]) {
      const m = /rank (\\d+)/.exec(tr.text[k]); const label = ticktext[lane];
      if (m && !label.startsWith('rank ' + m[1] + ' ')) bad.push(tr.name + ': ' + m[0] + ' drawn on ' + label);
    }
  }
});
return {bad: bad.slice(0, 10), points: points, lanes: tickvals.length, range: ya.range};
"""


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
        self.app = app
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
def browser() -> Iterator[Any]:
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs chromium and chromedriver on PATH (apt-get install chromium chromium-driver)")
    driver = make_driver()
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _finding(**fields: Any) -> Any:
    from commprof.analyzers.findings import Finding

    base = {"id": "straggler", "key": "straggler:rank13", "severity": "high", "title": "Rank 13 is a straggler",
            "detail": "Its DP peers wait for it at every gradient all-reduce.", "action": "Look at rank 13's GPU.",
            "saving_ns_per_step": 1_500_000, "saving_model": "the wait it causes", "ranks": (5, 13),
            "pgs": ("8",), "dimension": "dp", "tier": "ib", "steps": (1,)}
    return Finding(**{**base, **fields})


def _deepep_run(folder: Path) -> Path:
    """4 ranks of an expert-parallel step (synthetic): DeepEP's intranode dispatch and internode combine on their
    own stream beside a GEMM (library groups with long names), and an in-house kernel that only looks like
    communication (listed, not counted)."""
    from commprof.synth import TraceBuilder

    for rank in range(4):
        b = TraceBuilder(rank=rank, world_size=4)
        for step in range(3):
            t = step * 2000
            b.step(step + 1, t, t + 2000)
            b.kernel("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_128x128_32x4_nn_align8>(Params)", t,
                     t + 1500)
            b.kernel("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*)", t + 100 + 20 * rank,
                     t + 500, stream=16)
            b.kernel("void deep_ep::internode::combine<__nv_bfloat16, 8>(int4*, float*)", t + 1300, t + 1800,
                     stream=16)
            b.kernel("void myco::fabric::dispatch_tokens_with_a_rather_long_name<__nv_bfloat16, 8>(int4*)", t + 1850,
                     t + 1900, stream=21)
        b.write(folder / f"rank-{rank}.json")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    import commprof
    from commprof.cli import main
    from commprof.dashboard import create_app
    from commprof.dashboard.cache import RunCache

    root = tmp_path_factory.mktemp("dash")
    for name in ("tp2_pp2_dp2", "synth_2x8_tp8_dp2"):
        shutil.copytree(ROOT / "sample_traces" / name, root / name, ignore=shutil.ignore_patterns("tables"))
    from click.testing import CliRunner

    made = CliRunner().invoke(main, ["synth", str(root / "s64"), "--nodes", "8", "--gpus-per-node", "8", "--layout",
                                     "tp=8,dp=8", "--steps", "2", "--straggler", "13", "--seed", "1"])
    assert made.exit_code == 0, made.output
    runs = {"pp": commprof.open_run(root / "tp2_pp2_dp2"), "synth": commprof.open_run(root / "synth_2x8_tp8_dp2"),
            "s64": commprof.open_run(root / "s64"), "deepep": commprof.open_run(_deepep_run(root / "deepep")),
            "windows": commprof.open_run(windowed_run(root / "windows"))}
    cache = RunCache(runs)
    # the 64-rank run carries a finding whatever the rules decide, so that its links can be followed
    a = cache.analysis("s64")
    dp_group = a.process_groups.filter(a.process_groups["ranks"].list.contains(13) &
                                       (a.process_groups["dimension"] == "dp"))["pg"][0]
    cache._analyses["s64"] = dataclasses.replace(a, finding_list=(_finding(pgs=(str(dp_group),)), *a.finding_list),
                                                 findings_computed=True)
    srv = Server(create_app(runs, cache))
    yield srv
    srv.stop()


def wait_for(driver: Any, css: str, timeout: float = 20.0, text: str | None = None) -> Any:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        if found and (text is None or any(text in f.text for f in found)):
            return next(f for f in found if text is None or text in f.text)
        time.sleep(0.1)
    raise AssertionError(f"{css!r}{' with ' + repr(text) if text else ''} did not appear in {timeout}s")


def wait_plot(driver: Any, graph_id: str, timeout: float = 20.0) -> int:
    """Wait until the graph has drawn traces; returns how many."""
    deadline = time.monotonic() + timeout
    script = (f"var g = document.querySelector('#{graph_id} .js-plotly-plot');"
              "return g && g.data && g._fullLayout ? g.data.length : -1;")
    while time.monotonic() < deadline:
        n = driver.execute_script(script)
        if n is not None and n > 0:
            time.sleep(0.3)  # let plotly finish drawing its labels
            return int(n)
        time.sleep(0.1)
    raise AssertionError(f"graph #{graph_id} drew no traces in {timeout}s")


def wait_annotations(driver: Any, graph_id: str, timeout: float = 20.0) -> list[str]:
    """The annotation texts of a drawn graph (a figure that shows a message instead of data has no traces)."""
    deadline = time.monotonic() + timeout
    script = (f"var g = document.querySelector('#{graph_id} .js-plotly-plot');"
              "return g && g._fullLayout ? (g._fullLayout.annotations || []).map(a => a.text) : null;")
    while time.monotonic() < deadline:
        texts = driver.execute_script(script)
        if texts:
            time.sleep(0.3)
            return [str(t) for t in texts]
        time.sleep(0.1)
    raise AssertionError(f"graph #{graph_id} drew nothing in {timeout}s")


def console_errors(driver: Any) -> list[dict[str, object]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def shot(driver: Any, name: str) -> None:
    """A full-page screenshot (the window grows to the page's height for it)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    time.sleep(0.5)  # the other graphs of the page finish drawing
    height = int(driver.execute_script("return Math.max(document.documentElement.scrollHeight, "
                                       "document.body.scrollHeight, document.getElementById('page').scrollHeight)"))
    driver.set_window_size(1400, min(max(height + 120, 1000), 7000))
    time.sleep(0.5)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(1400, 1000)


def check_layout(driver: Any, where: str) -> None:
    found = driver.execute_script(LAYOUT_JS)
    assert found["overlaps"] == [], f"{where}: overlapping text {found['overlaps'][:6]}"
    assert found["clipped"] == [], f"{where}: clipped text {found['clipped'][:6]}"
    canvases = driver.execute_script(CANVAS_JS)
    assert all(w <= 8192 and h <= 8192 for w, h in canvases), f"{where}: canvas {canvases}"


def check_lanes(driver: Any, where: str) -> dict[str, Any]:
    lanes = driver.execute_script(LANES_JS % ids.TIMELINE_GRAPH)
    assert lanes["bad"] == [], f"{where}: {lanes['bad']}"
    assert lanes["points"] > 0 and lanes["range"] == [lanes["lanes"] - 0.5, -0.5]
    return dict(lanes)


@pytest.mark.parametrize("run", ["pp", "synth", "s64", "deepep", "windows"])
def test_every_page_reads_well(browser: Any, server: Server, run: str) -> None:
    console_errors(browser)  # drain
    for page, graph in PAGES.items():
        browser.get(f"{server.url}/run/{run}/{page}")
        if (run, page) == ("deepep", "collectives"):  # no call has a size: the page says so instead of a cloud
            assert "no calls with a known size" in " ".join(wait_annotations(browser, graph))
        else:
            assert wait_plot(browser, graph) > 0
        if page == "timeline":
            wait_for(browser, f"#{ids.TIMELINE_INFO}", text="segments")
            check_lanes(browser, f"{run}/{page}")
        check_layout(browser, f"{run}/{page}")
        shot(browser, f"{run}-{page}")
    browser.get(f"{server.url}/run/{run}/overview")
    wait_plot(browser, ids.OVERVIEW_BREAKDOWN)
    assert "step time" in wait_for(browser, f"#{ids.OVERVIEW_HEADLINE}").text.lower()
    assert wait_for(browser, f"#{ids.OVERVIEW_FINDINGS}").text
    assert "world size" in wait_for(browser, f"#{ids.OVERVIEW_FACTS}").text
    table = wait_for(browser, f"#{ids.OVERVIEW_DIM_TIER}").text
    assert "exposed ms/step" in table and "bytes/step" in table
    if run == "windows":  # record --every: the windows' trend above the findings, the CLI's table row for row
        assert wait_plot(browser, ids.OVERVIEW_WINDOWS_GRAPH) == 2
        assert "step-00000010" in wait_for(browser, f"#{ids.OVERVIEW_WINDOWS}").text
    assert console_errors(browser) == []


def test_findings_link_to_their_evidence(browser: Any, server: Server) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/run/s64/overview")
    finding = wait_for(browser, f"#{ids.OVERVIEW_FINDINGS} .finding", text="Rank 13 is a straggler")
    assert "could save ~1.50 ms per step" in finding.text and "What to change" in finding.text
    # its ranks and its group's: rank 13 and the DP peers that wait for it
    finding.find_element(By.PARTIAL_LINK_TEXT, "timeline of 8 rank(s)").click()
    wait_for(browser, f"#{ids.TIMELINE_INFO}", text="8 rank(s)")
    assert "/run/s64/timeline?" in browser.current_url
    assert state.parse_query(browser.current_url.split("?")[1]) == {"ranks": "5,13,21,29,37,45,53,61",
                                                                    "step": "1"}
    assert "window" in browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_INFO}").text
    check_lanes(browser, "finding -> timeline")
    browser.back()
    finding = wait_for(browser, f"#{ids.OVERVIEW_FINDINGS} .finding", text="Rank 13")
    finding.find_element(By.PARTIAL_LINK_TEXT, "its collectives").click()
    wait_plot(browser, ids.COLL_SCATTER)
    wait_for(browser, f"#{ids.COLL_TABLE} td[data-dash-column=dimension]", text="dp")
    column = f"#{ids.COLL_TABLE} td[data-dash-column=%s]"
    dims = {td.text for td in browser.find_elements(By.CSS_SELECTOR, column % "dimension")}
    tiers = {td.text for td in browser.find_elements(By.CSS_SELECTOR, column % "tier")}
    assert dims == {"dp"} and tiers == {"ib"}
    shot(browser, "s64-finding-collectives")
    assert console_errors(browser) == []


def test_table_and_figure_drill_downs(browser: Any, server: Server) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/run/synth/overview")
    wait_plot(browser, ids.OVERVIEW_BREAKDOWN)
    wait_for(browser, f"#{ids.OVERVIEW_DIM_TIER} a", text="tp").click()  # the dimension x tier table's "tp"
    wait_for(browser, f"#{ids.COLL_TABLE} td[data-dash-column=dimension]", text="tp")
    assert {td.text for td in browser.find_elements(
        By.CSS_SELECTOR, f"#{ids.COLL_TABLE} td[data-dash-column=dimension]")} == {"tp"}
    assert "dimension=tp" in browser.current_url
    # a group's name in the table opens the timeline of its ranks
    link = wait_for(browser, f"#{ids.COLL_TABLE} td[data-dash-column=group_link] a")
    link.click()
    info = wait_for(browser, f"#{ids.TIMELINE_INFO}", text="8 rank(s)")
    assert "ranks=0-7" in browser.current_url or "ranks=8-15" in browser.current_url, (browser.current_url, info.text)
    # a rank's bar in the breakdown opens its timeline
    browser.get(f"{server.url}/run/synth/overview")
    wait_plot(browser, ids.OVERVIEW_BREAKDOWN)
    bars = browser.find_elements(By.CSS_SELECTOR, f"#{ids.OVERVIEW_BREAKDOWN} .trace.bars .point path")
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element(bars[5]).click().perform()  # the compute trace's 6th bar: rank 5
    wait_for(browser, f"#{ids.TIMELINE_INFO}", text="1 rank(s)")
    assert browser.current_url.endswith("/run/synth/timeline?ranks=5")
    assert console_errors(browser) == []


def test_timeline_state_lives_in_the_url(browser: Any, server: Server) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/run/synth/timeline?ranks=4-6")
    wait_plot(browser, ids.TIMELINE_GRAPH)
    whole = wait_for(browser, f"#{ids.TIMELINE_INFO}", text="3 rank(s)").text
    browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_STEP}").click()
    for opt in browser.find_elements(By.CSS_SELECTOR, "[role=option]"):
        if opt.text.strip() == "step 1":
            opt.click()
            break
    deadline = time.monotonic() + 10
    while "step=1" not in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "step=1" in browser.current_url and "ranks=4-6" in browser.current_url
    while browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_INFO}").text == whole and time.monotonic() < deadline:
        time.sleep(0.1)
    stepped = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_INFO}").text
    assert stepped != whole
    time.sleep(0.5)
    drag = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_GRAPH} .nsewdrag")
    w = drag.size["width"]
    ActionChains(browser).move_to_element(drag).click_and_hold().move_by_offset(w // 4, 0).move_by_offset(
        w // 8, 0).release().perform()
    deadline = time.monotonic() + 10
    while "t0=" not in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "t0=" in browser.current_url and "t1=" in browser.current_url
    zoomed = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_INFO}").text
    assert zoomed != stepped
    url = browser.current_url
    browser.get(url)  # a reload (or a shared link) shows the same view
    wait_plot(browser, ids.TIMELINE_GRAPH)
    assert wait_for(browser, f"#{ids.TIMELINE_INFO}", text="3 rank(s)").text.split("window ")[1] == \
        zoomed.split("window ")[1]
    check_lanes(browser, "zoomed timeline")
    shot(browser, "synth-timeline-zoomed")
    assert console_errors(browser) == []


def test_index_compare_download_and_messages(browser: Any, server: Server) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/")
    index = wait_for(browser, f"#{ids.INDEX_TABLE}")
    assert len(index.find_elements(By.CSS_SELECTOR, "tbody tr")) == 5  # pp, synth, s64, deepep, windows
    check_layout(browser, "index")
    shot(browser, "index")
    browser.get(f"{server.url}/compare?a=pp&b=synth")
    assert wait_plot(browser, ids.COMPARE_GRAPH) == 2
    wait_for(browser, f"#{ids.COMPARE_TABLE}", text="overlap")
    assert "Not like for like" in wait_for(browser, f"#{ids.COMPARE_NOTE}", text="like").text
    check_layout(browser, "compare")
    shot(browser, "compare")
    link = browser.find_element(By.ID, ids.PERFETTO_LINK) if browser.find_elements(By.ID, ids.PERFETTO_LINK) else None
    assert link is None  # compare has no single run to export
    browser.get(f"{server.url}/run/pp/overview")
    href = wait_for(browser, f"#{ids.PERFETTO_LINK}").get_attribute("href")
    assert href.endswith("/download/pp/perfetto.json")
    browser.get(f"{server.url}/run/..%2F..%2Fetc/overview")
    assert "No run named" in wait_for(browser, f"#{ids.MESSAGE}").text
    assert console_errors(browser) == []


@pytest.mark.slow
def test_256_ranks(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every page renders at 256 ranks; bars on their lanes with every rank drawn (the timeline's cap is 128:
    the first 128 of "all ranks"); heatmaps rolled up to hosts; no canvas beyond 8192 px."""
    from click.testing import CliRunner

    import commprof
    from commprof.cli import main
    from commprof.dashboard import create_app

    out = tmp_path_factory.mktemp("s256") / "s256"
    made = CliRunner().invoke(main, ["synth", str(out), "--nodes", "32", "--gpus-per-node", "8", "--layout",
                                     "tp=8,dp=32", "--steps", "1", "--straggler", "13", "--layers", "2",
                                     "--micro-batches", "2"])
    assert made.exit_code == 0, made.output
    srv = Server(create_app({"s256": commprof.open_run(out)}))
    try:
        console_errors(browser)
        for page, graph in PAGES.items():
            browser.get(f"{srv.url}/run/s256/{page}")
            assert wait_plot(browser, graph, timeout=60) > 0
            if page == "timeline":
                wait_for(browser, f"#{ids.TIMELINE_INFO}", text="segments", timeout=60)
                check_lanes(browser, "s256 default ranks")
            check_layout(browser, f"s256/{page}")
            shot(browser, f"s256-{page}")
        browser.get(f"{srv.url}/run/s256/timeline?ranks=0-255")
        wait_plot(browser, ids.TIMELINE_GRAPH, timeout=60)
        wait_for(browser, f"#{ids.TIMELINE_INFO}", text="128 rank(s)", timeout=60)
        assert "the first 128 are drawn" in wait_for(browser, f"#{ids.TIMELINE_NOTE}").text
        assert check_lanes(browser, "s256 all ranks")["lanes"] == 256
        check_layout(browser, "s256 all ranks")
        shot(browser, "s256-timeline-all")
        browser.get(f"{srv.url}/run/s256/topology")
        wait_plot(browser, ids.TOPO_TRAFFIC, timeout=60)
        size = browser.execute_script(
            f"return document.querySelector('#{ids.TOPO_TRAFFIC} .js-plotly-plot')._fullData[0].z.length")
        assert size == 32  # host x host
        assert console_errors(browser) == []
    finally:
        srv.stop()


# the most data points any trace may draw past 256 ranks: nothing per rank, per host or per group of the run
MOST_POINTS_JS = """
let most = 0;
document.querySelectorAll('.js-plotly-plot').forEach((g) => (g.data || []).forEach((t) => {
  for (const k of ['x', 'y', 'z']) if (t[k] && t[k].length > most) most = t[k].length; }));
return most;
"""


def _pick_by_typing(browser: Any, dropdown: str, text: str, want: str) -> None:
    """Open a dropdown, type into its search box and click the option that reads ``want``."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, f"#{dropdown}").click()
    box = wait_for(browser, "input.dash-dropdown-search")  # Dash 4: in a popover beside the page
    box.send_keys(text)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        hits = [o for o in browser.find_elements(By.CSS_SELECTOR, "[role=option]") if want in o.text]
        if hits:
            hits[0].click()
            return
        time.sleep(0.1)
    raise AssertionError(f"no option {want!r} after typing {text!r}")


def test_pages_past_256_ranks_show_hosts_and_groups_worst_first(browser: Any,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """1,024 ranks on 128 hosts (issue 39, item 4): overview, skew and topology draw hosts and groups, worst
    first, and say "the worst K of N"; no figure, table or dropdown holds a row per rank, host or group; a
    host or group found by typing its name is drawn; no console error."""
    from selenium.webdriver.common.by import By

    import commprof
    from commprof.dashboard import create_app
    from commprof.synth_run import make_run

    out = make_run(tmp_path_factory.mktemp("s1k") / "s1k", ranks=1024, steps=2, layout=(8, 1, 128),
                   kernels_per_phase=1, straggler_rank=300, straggler_delay_us=200, gpus_per_host=8,
                   extra=(("slow_link", "gpu-node-45"),))
    srv = Server(create_app({"s1k": commprof.open_run(out)}))
    try:
        console_errors(browser)
        browser.get(f"{srv.url}/run/s1k/overview")
        assert wait_plot(browser, ids.OVERVIEW_BREAKDOWN, timeout=120) == 5
        hosts = wait_for(browser, f"#{ids.OVERVIEW_HOSTS}").text
        assert "Hosts: the worst 16 of 128 hosts" in hosts and "112 more" in hosts
        # gpu-node-45's port is slow (the topology capture), rank 300 on gpu-node-37 is the one waited on
        assert hosts.index("gpu-node-45") < hosts.index("gpu-node-37") < hosts.index("gpu-node-00")
        assert len(browser.find_elements(By.CSS_SELECTOR, f"#{ids.OVERVIEW_HOSTS} tbody tr")) == 16
        groups = wait_for(browser, f"#{ids.OVERVIEW_GROUPS}").text
        assert "Process groups: the worst 20 of 137 groups" in groups and "117 more" in groups
        assert "16 of 1,024 ranks" in browser.find_element(By.CSS_SELECTOR, f"#{ids.OVERVIEW_BREAKDOWN}").text
        assert browser.execute_script(MOST_POINTS_JS) <= 64
        check_layout(browser, "s1k/overview")
        shot(browser, "s1k-overview")

        browser.get(f"{srv.url}/run/s1k/skew")
        wait_plot(browser, ids.SKEW_HEATMAP, timeout=60)
        wait_plot(browser, ids.SKEW_GROUPS, timeout=60)
        assert "the worst 20 of 136 groups" in wait_for(browser, f"#{ids.SKEW_WORST_GROUPS}").text
        said = wait_for(browser, f"#{ids.SKEW_SCALE}").text
        assert "the worst 40 of 128 hosts" in said and "the worst 30 of 136 groups" in said
        columns = browser.execute_script(f"return document.querySelector('#{ids.SKEW_GROUPS} .js-plotly-plot')"
                                         "._fullData[0].x.length")
        assert columns == 30  # every group said is drawn: each brings its own worst host
        calls = browser.execute_script(f"return document.querySelector('#{ids.SKEW_HEATMAP} .js-plotly-plot')"
                                       "._fullLayout.annotations.map(a => a.text)")
        assert any("64 of its 128 ranks" in t for t in calls), calls
        assert browser.execute_script(MOST_POINTS_JS) <= 64
        check_layout(browser, "s1k/skew")
        shot(browser, "s1k-skew")
        browser.find_element(By.CSS_SELECTOR, f"#{ids.SKEW_PG}").click()
        options = browser.find_elements(By.CSS_SELECTOR, "[role=option]")
        assert 1 < len(options) <= 21  # every group, then the 20 that wait most
        from selenium.webdriver.common.keys import Keys

        browser.find_element(By.CSS_SELECTOR, "input.dash-dropdown-search").send_keys(Keys.ESCAPE)
        _pick_by_typing(browser, ids.SKEW_PG, "pg 77", "(pg 77)")  # a TP group that waits not at all
        deadline = time.monotonic() + 20
        while "pg=77" not in browser.current_url and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "pg=77" in browser.current_url

        browser.get(f"{srv.url}/run/s1k/topology")
        wait_plot(browser, ids.TOPO_GRAPH, timeout=60)
        wait_plot(browser, ids.TOPO_TRAFFIC, timeout=60)
        assert "the worst 16 of 128 hosts" in wait_for(browser, f"#{ids.TOPO_SCALE}").text
        assert "Hosts: the worst 16 of 128 hosts" in wait_for(browser, f"#{ids.TOPO_HOSTS}").text
        size = browser.execute_script(
            f"return document.querySelector('#{ids.TOPO_TRAFFIC} .js-plotly-plot')._fullData[0].z.length")
        assert size == 17  # the 16 hosts and the rest, summed
        assert browser.execute_script(MOST_POINTS_JS) <= 64
        check_layout(browser, "s1k/topology")
        shot(browser, "s1k-topology")
        _pick_by_typing(browser, ids.TOPO_HOST, "node-100", "gpu-node-100")
        deadline = time.monotonic() + 20
        drawn_js = (f"return document.querySelector('#{ids.TOPO_GRAPH} .js-plotly-plot').data"
                    ".filter(t => t.name === 'host')[0].customdata")
        while "gpu-node-100" not in (browser.execute_script(drawn_js) or []) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "gpu-node-100" in browser.execute_script(drawn_js) and "host=gpu-node-100" in browser.current_url
        assert "drawn are gpu-node-100 and the worst 15 of 128 hosts" in wait_for(
            browser, f"#{ids.TOPO_SCALE}", text="gpu-node-100").text
        assert "gpu-node-100" in browser.find_element(By.CSS_SELECTOR, f"#{ids.TOPO_HOSTS} tbody").text
        shot(browser, "s1k-topology-host")
        # a host of the table opens the topology drawn around it (a fresh load: the router keys on the path)
        browser.find_element(By.CSS_SELECTOR, f"#{ids.TOPO_HOSTS}").find_element(By.LINK_TEXT, "gpu-node-05").click()
        assert "drawn are gpu-node-05 and" in wait_for(browser, f"#{ids.TOPO_SCALE}", text="gpu-node-05").text
        assert browser.current_url.endswith("/run/s1k/topology?host=gpu-node-05")

        # the collectives page's group filter: the 20 groups that wait most, any other found by typing
        browser.get(f"{srv.url}/run/s1k/collectives")
        wait_plot(browser, ids.COLL_SCATTER, timeout=60)
        assert "groups listed: the 20 of" in browser.find_element(By.CSS_SELECTOR, ".controls").text
        browser.find_element(By.CSS_SELECTOR, f"#{ids.COLL_FILTER_PG}").click()
        options = browser.find_elements(By.CSS_SELECTOR, "[role=option]")
        assert 1 < len(options) <= 20
        browser.find_element(By.CSS_SELECTOR, "input.dash-dropdown-search").send_keys(Keys.ESCAPE)
        _pick_by_typing(browser, ids.COLL_FILTER_PG, "pg 77", "(pg 77)")
        deadline = time.monotonic() + 20
        while "pg=77" not in browser.current_url and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "pg=77" in browser.current_url
        rows = wait_for(browser, f"#{ids.COLL_TABLE}", text="pg 77").text
        assert "pg 77" in rows
        check_layout(browser, "s1k/collectives")
        shot(browser, "s1k-collectives-group-found")

        # the timeline's rank dropdown: the chosen ranks and the worst hosts' first 20, any other found by typing
        browser.get(f"{srv.url}/run/s1k/timeline")
        wait_plot(browser, ids.TIMELINE_GRAPH, timeout=60)
        browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_RANKS}").click()
        options = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "[role=option]")]
        assert 1 < len(options) <= 20 + 16 and any("gpu-node-45" in o for o in options), options
        browser.find_element(By.CSS_SELECTOR, "input.dash-dropdown-search").send_keys(Keys.ESCAPE)
        _pick_by_typing(browser, ids.TIMELINE_RANKS, "1000", "1000 · gpu-node-125")
        deadline = time.monotonic() + 20
        while "1000" not in browser.current_url and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "ranks=" in browser.current_url and "1000" in browser.current_url
        shot(browser, "s1k-timeline-rank-found")
        assert console_errors(browser) == []
    finally:
        srv.stop()
