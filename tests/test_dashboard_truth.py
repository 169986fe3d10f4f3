"""The dashboard tells the analysis' truth at every zoom and scale, and every view is a link (issue 25), in
a real headless Chromium on synthetic runs of 16 and 64 ranks (256: marked slow) with a straggler:

* the exposed time drawn on each rank's lane in a window is ``analyze``'s for that window (within 1 %),
  for the whole run, a step and a narrow window inside it;
* each finding's evidence links open the groups (of the dimension it names) and the ranks it names;
* a click on a cell of the skew heatmap lands on the timeline of that group and rank;
* every view survives a reload from its URL, and an invalid URL value is said on the page.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from test_dashboard_browser import Server, browser, console_errors, wait_for, wait_plot  # noqa: F401 - fixture

from commprof.dashboard import ids, state

pytestmark = pytest.mark.browser

SIZES = {16: ("2", "tp=8,dp=2", "5"), 64: ("8", "tp=8,dp=8", "13"), 256: ("32", "tp=8,pp=2,dp=16", "77")}

# per lane of the exposed trace: the drawn length (ms) and the lane's label
DRAWN_JS = """
const g = document.querySelector('#%s .js-plotly-plot');
const ya = g._fullLayout.yaxis, out = {};
g._fullData.forEach((tr) => {
  if (tr.name !== 'exposed part of comm') return;
  for (let k = 0; k + 1 < tr.x.length; k += 3) {
    const label = ya.ticktext[Math.round(tr.y[k])].split(' · ')[0];
    out[label] = (out[label] || 0) + (tr.x[k + 1] - tr.x[k]);
  }
});
return out;
"""


def make_run(root: Path, ranks: int) -> Path:
    from click.testing import CliRunner

    from commprof.cli import main

    nodes, layout, straggler = SIZES[ranks]
    extra = ["--steps", "2", "--layers", "2", "--micro-batches", "2"] if ranks == 256 else ["--steps", "3"]
    made = CliRunner().invoke(main, ["synth", str(root / f"s{ranks}"), "--nodes", nodes, "--gpus-per-node", "8",
                                     "--layout", layout, "--straggler", straggler, "--seed", "3", *extra])
    assert made.exit_code == 0, made.output
    return root / f"s{ranks}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Any]]:
    import commprof
    from commprof.dashboard import create_app
    from commprof.dashboard.cache import RunCache

    root = tmp_path_factory.mktemp("truth")
    runs = {f"s{n}": commprof.open_run(make_run(root, n)) for n in (16, 64)}
    cache = RunCache(runs)
    srv = Server(create_app(runs, cache))
    yield srv, cache
    srv.stop()


def _windows(cache: Any, key: str) -> list[tuple[str, int, int]]:
    """Three zoom levels: the whole run, step 1, and 2 % of step 1 around its first exposed span."""
    base = cache.timeline_base(key)
    step = base.steps.row(1, named=True)
    spans = cache.analysis(key).exposed_spans
    first = spans.filter(pl.col("start_ns") >= step["start_ns"]).sort("start_ns").row(0, named=True)
    half = (step["end_ns"] - step["start_ns"]) // 100
    mid = first["start_ns"]
    return [("", base.origin_ns, base.end_ns), ("&step=1", step["start_ns"], step["end_ns"]),
            (f"&t0={(mid - half - base.origin_ns) / 1e6:.3f}&t1={(mid + half - base.origin_ns) / 1e6:.3f}", 0, 0)]


def check_exposed_drawn(driver: Any, url: str, cache: Any, key: str, ranks: list[int]) -> None:
    from commprof.analyzers.windows import exposed_in_window

    origin = cache.timeline_base(key).origin_ns
    for query, lo, hi in _windows(cache, key):
        if "t0=" in query:  # the server's window: origin + t0 (µs in the URL)
            q = state.parse_query(query)
            lo, hi = origin + int(float(q["t0"]) * 1e6), origin + int(float(q["t1"]) * 1e6)
        driver.get(f"{url}/run/{key}/timeline?ranks={state.ranks_text(ranks)}{query}")
        wait_plot(driver, ids.TIMELINE_GRAPH, timeout=60)
        wait_for(driver, f"#{ids.TIMELINE_INFO}", text="segments", timeout=60)
        drawn = driver.execute_script(DRAWN_JS % ids.TIMELINE_GRAPH)
        truth = exposed_in_window(cache.analysis(key).exposed_spans, lo, hi)
        assert truth["exposed_ns"].sum() > 0, (key, query)
        for rank, exposed_ns in truth.filter(pl.col("rank").is_in(ranks)).iter_rows():
            got_ms = drawn.get(f"rank {rank} comm", 0.0)
            assert got_ms == pytest.approx(exposed_ns / 1e6, rel=0.01, abs=1e-4), (key, query, rank)


@pytest.mark.parametrize("key", ["s16", "s64"])
def test_exposed_time_drawn_is_the_analysis_at_three_zooms(browser: Any, served: tuple[Server, Any],  # noqa: F811
                                                           key: str) -> None:
    srv, cache = served
    check_exposed_drawn(browser, srv.url, cache, key, list(range(0, 16)) if key == "s16" else list(range(0, 64, 4)))
    assert console_errors(browser) == []


def test_evidence_links_open_what_the_finding_names(browser: Any, served: tuple[Server, Any]) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    srv, cache = served
    found = [f for f in cache.findings("s64") if f.pgs]
    assert found, "the 64-rank straggler run has findings that name groups"
    dims = dict(zip(cache.analysis("s64").process_groups["pg"].to_list(),
                    cache.analysis("s64").process_groups["dimension"].to_list(), strict=True))
    def finding_box(i: int) -> Any:
        wait_for(browser, f"#{ids.OVERVIEW_FINDINGS} .finding", timeout=30)
        return browser.find_elements(By.CSS_SELECTOR, f"#{ids.OVERVIEW_FINDINGS} .finding")[i]

    for i, f in enumerate(found):
        browser.get(f"{srv.url}/run/s64/overview")
        finding_box(i).find_element(By.PARTIAL_LINK_TEXT, "skew of its group").click()
        wait_plot(browser, ids.SKEW_HEATMAP, timeout=30)
        pg = state.parse_query(browser.current_url.split("?", 1)[1])["pg"]
        assert pg in f.pgs and (f.dimension not in {dims[p] for p in f.pgs} or dims[pg] == f.dimension), (f.key, pg)
        shown = browser.find_element(By.CSS_SELECTOR, f"#{ids.SKEW_PG}").text
        assert f"(pg {pg})" in shown or f"pg {pg}" in shown, shown
        browser.back()
        finding_box(i).find_element(By.PARTIAL_LINK_TEXT, "timeline of").click()
        wait_for(browser, f"#{ids.TIMELINE_INFO}", text="segments", timeout=30)
        ranks = state.as_ranks(state.parse_query(browser.current_url.split("?", 1)[1])["ranks"], range(64)) or []
        assert set(f.ranks) <= set(ranks), (f.key, ranks)
    assert console_errors(browser) == []


def test_a_heatmap_click_lands_on_that_group_and_rank(browser: Any, served: tuple[Server, Any]) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    srv, cache = served
    browser.get(f"{srv.url}/run/s16/skew")
    wait_plot(browser, ids.SKEW_GROUPS, timeout=30)
    a = cache.analysis("s16")
    cell = a.rank_group_waits.filter(pl.col("wait_ns_per_step") > 0).sort("wait_ns_per_step").row(-1, named=True)
    column = f"{cell['dimension']} · pg {cell['pg']}"
    graph = browser.find_element(By.CSS_SELECTOR, f"#{ids.SKEW_GROUPS} .js-plotly-plot")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", graph)
    time.sleep(0.5)
    # the mouse at the cell's centre, as a user's pointer: plotly reads the cell under it (Selenium's own
    # pointer moves do not reach plotly's hover layer in headless Chromium, so the events are the DOM's)
    found = browser.execute_script("""
      const g = arguments[0], xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis, r = g.getBoundingClientRect();
      const i = xa._categories.indexOf(arguments[1]), j = ya._categories.indexOf(arguments[2]);
      if (i < 0 || j < 0) return [i, j];
      const x = r.left + xa._offset + xa.l2p(i), y = r.top + ya._offset + ya.l2p(j);
      const target = document.elementFromPoint(x, y);
      for (const type of ['mousemove', 'mousedown', 'mouseup', 'click'])
        target.dispatchEvent(new MouseEvent(type, {clientX: x, clientY: y, bubbles: true, buttons: 1}));
      return [i, j, target.getAttribute('class')];""", graph, column, str(cell["rank"]))
    assert found[0] >= 0 and found[1] >= 0 and "drag" in found[2], found
    deadline = time.monotonic() + 20
    while "/timeline" not in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    query = state.parse_query(browser.current_url.split("?", 1)[1])
    members = a.process_groups.filter(pl.col("pg") == cell["pg"])["ranks"][0].to_list()
    assert state.as_ranks(query["ranks"], range(16)) == sorted(set(members) | {cell["rank"]})
    assert query.get("step") == str(cell["max_wait_step"])
    wait_for(browser, f"#{ids.TIMELINE_INFO}", text=f"{len(members)} rank(s)", timeout=30)
    assert console_errors(browser) == []


def _settled(driver: Any, css: str, timeout: float = 30.0) -> str:
    """The element's text once it stops changing (the page's callbacks are done)."""
    last, since = None, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.find_elements("css selector", css)
        text = found[0].text if found else None
        if text != last:
            last, since = text, time.monotonic()
        elif text and time.monotonic() - since > 1.0:
            return text
        time.sleep(0.1)
    return last or ""


def test_every_view_survives_a_reload(browser: Any, served: tuple[Server, Any]) -> None:  # noqa: F811
    srv, _ = served
    views = [
        ("/run/s16/timeline?step=1&ranks=3-5&t0=300.000&t1=320.000", f"#{ids.TIMELINE_INFO}"),
        ("/run/s16/timeline?ranks=all", f"#{ids.TIMELINE_INFO}"),
        ("/run/s16/collectives?dimension=tp&op=all_reduce", f"#{ids.COLL_TABLE}"),
        ("/run/s64/skew?pg=12", f"#{ids.SKEW_PG}"),
        ("/compare?a=s64&b=s16", f"#{ids.COMPARE_TABLE}"),
    ]
    for path, css in views:
        browser.get(srv.url + path)
        first = _settled(browser, css)
        url = browser.current_url
        assert state.parse_query(url.split("?", 1)[1]) == state.parse_query(path.split("?", 1)[1]), (path, url)
        browser.get(url)  # a reload
        assert _settled(browser, css) == first, path
    # a group chosen on the page goes into the URL and comes back with a reload
    browser.get(srv.url + "/run/s64/skew?pg=12")
    wait_plot(browser, ids.SKEW_HEATMAP, timeout=30)
    browser.find_element("css selector", f"#{ids.SKEW_PG}").click()
    option = wait_for(browser, "[role=option]", text="(pg 3)")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", option)
    deadline = time.monotonic() + 10
    while "pg=3" not in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert browser.current_url.endswith("/run/s64/skew?pg=3")
    browser.get(browser.current_url)
    assert "(pg 3)" in _settled(browser, f"#{ids.SKEW_PG}")
    assert console_errors(browser) == []


@pytest.mark.parametrize(("path", "message", "said"), [
    ("/run/s16/timeline?ranks=abc", ids.TIMELINE_MESSAGE, "a rank must be a whole number"),
    ("/run/s16/timeline?step=abc", ids.TIMELINE_MESSAGE, "step must be a whole number"),
    ("/run/s16/timeline?ranks=99", ids.TIMELINE_MESSAGE, "this run has no rank 99"),
    ("/run/s16/skew?pg=zz", ids.SKEW_MESSAGE, "group 'zz' is not one of this run's groups"),
    ("/run/s16/collectives?dimension=zz", ids.COLL_MESSAGE, "dimension 'zz' is not one of"),
    ("/compare?a=s16&b=nonexistent", ids.COMPARE_PROBLEM, "run B 'nonexistent' is not one of the runs served"),
])
def test_an_invalid_url_value_is_said_on_the_page(browser: Any, served: tuple[Server, Any], path: str,  # noqa: F811
                                                  message: str, said: str) -> None:
    srv, _ = served
    browser.get(srv.url + path)
    time.sleep(2.0)  # the page's first callbacks have run: the message must still be there
    assert said in wait_for(browser, f"#{message}", text=said, timeout=30).text
    assert browser.find_element("css selector", f"#{message}").is_displayed()


@pytest.mark.slow
def test_exposed_time_drawn_at_256_ranks(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> None:  # noqa: F811
    import commprof
    from commprof.dashboard import create_app
    from commprof.dashboard.cache import RunCache

    runs = {"s256": commprof.open_run(make_run(tmp_path_factory.mktemp("t256"), 256))}
    cache = RunCache(runs)
    srv = Server(create_app(runs, cache))
    try:
        check_exposed_drawn(browser, srv.url, cache, "s256", list(range(0, 256, 9)))
        assert console_errors(browser) == []
    finally:
        # the shared browser leaves this server's page before the server stops: a request still on its way (a
        # slow callback on a loaded machine) would otherwise fail with ERR_CONNECTION_REFUSED in the next test's log
        browser.get("about:blank")
        srv.stop()
        browser.get_log("browser")


def test_a_reset_returns_to_the_chosen_step_and_steps_are_marked(browser: Any,  # noqa: F811
                                                                   served: tuple[Server, Any]) -> None:
    """Zoom into step 1, double-click: the window is step 1 again (issue 25: the whole run, while the
    dropdown still said step 1); the step boundaries are drawn as lines."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    srv, cache = served
    step = cache.timeline_base("s16").steps.row(1, named=True)
    browser.get(f"{srv.url}/run/s16/timeline?step=1&ranks=0-3")
    wait_plot(browser, ids.TIMELINE_GRAPH, timeout=30)
    stepped = _settled(browser, f"#{ids.TIMELINE_INFO}")
    assert f"window {(step['end_ns'] - step['start_ns']) / 1e6:.3f} ms" in stepped
    lines = browser.execute_script(f"return document.querySelector('#{ids.TIMELINE_GRAPH} .js-plotly-plot')"
                                   "._fullLayout.shapes.filter(s => s.line.dash === 'dash').length")
    assert lines >= 2  # the step's start and end
    drag = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_GRAPH} .nsewdrag")
    w = drag.size["width"]
    ActionChains(browser).move_to_element(drag).click_and_hold().move_by_offset(w // 4, 0).release().perform()
    deadline = time.monotonic() + 15
    while "t0=" not in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _settled(browser, f"#{ids.TIMELINE_INFO}") != stepped
    ActionChains(browser).move_to_element(drag).double_click().perform()
    deadline = time.monotonic() + 15
    while "t0=" in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _settled(browser, f"#{ids.TIMELINE_INFO}") == stepped
    assert "step=1" in browser.current_url and "step 1" in browser.find_element(By.ID, ids.TIMELINE_STEP).text
    shown = browser.execute_script(f"return document.querySelector('#{ids.TIMELINE_GRAPH} .js-plotly-plot')"
                                   "._fullLayout.xaxis.range")
    origin = cache.timeline_base("s16").origin_ns
    assert shown[0] == pytest.approx((step["start_ns"] - origin) / 1e6, abs=1e-3)
    assert shown[1] == pytest.approx((step["end_ns"] - origin) / 1e6, abs=1e-3)
    assert console_errors(browser) == []


@pytest.mark.parametrize("button", ["Autoscale", "Reset axes"])
def test_the_modebar_resets_to_the_chosen_step(browser: Any, served: tuple[Server, Any], button: str) -> None:  # noqa: F811
    """Choose step 1 in the dropdown, zoom in by dragging, press the modebar's autoscale (plotly sends
    ``xaxis.autorange``: before the fix the whole run came back while the dropdown said step 1) or reset
    axes: the x-range drawn is step 1's window again."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    srv, cache = served
    base = cache.timeline_base("s16")
    step = base.steps.row(1, named=True)
    browser.get(f"{srv.url}/run/s16/timeline?ranks=0-3")
    wait_plot(browser, ids.TIMELINE_GRAPH, timeout=30)
    whole = _settled(browser, f"#{ids.TIMELINE_INFO}")
    browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_STEP}").click()
    option = wait_for(browser, "[role=option]", text="step 1")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", option)
    stepped = _settled(browser, f"#{ids.TIMELINE_INFO}")
    assert stepped != whole and f"window {(step['end_ns'] - step['start_ns']) / 1e6:.3f} ms" in stepped
    drag = browser.find_element(By.CSS_SELECTOR, f"#{ids.TIMELINE_GRAPH} .nsewdrag")
    ActionChains(browser).move_to_element(drag).click_and_hold().move_by_offset(drag.size["width"] // 4, 0) \
        .release().perform()
    assert _settled(browser, f"#{ids.TIMELINE_INFO}") not in (stepped, whole)
    ActionChains(browser).move_to_element(drag).perform()  # the modebar shows on hover
    browser.execute_script(f"document.querySelector('#{ids.TIMELINE_GRAPH} .modebar-btn[data-title=\"{button}\"]')"
                           ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    assert _settled(browser, f"#{ids.TIMELINE_INFO}") == stepped
    assert "step 1" in browser.find_element(By.ID, ids.TIMELINE_STEP).text and "step=1" in browser.current_url
    shown = browser.execute_script(f"return document.querySelector('#{ids.TIMELINE_GRAPH} .js-plotly-plot')"
                                   "._fullLayout.xaxis.range")
    assert shown[0] == pytest.approx((step["start_ns"] - base.origin_ns) / 1e6, abs=1e-3)
    assert shown[1] == pytest.approx((step["end_ns"] - base.origin_ns) / 1e6, abs=1e-3)
    assert console_errors(browser) == []
