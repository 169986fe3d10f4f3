"""The HTML report (issue 40, items 1 and 2): ``analyze/check/diff --format html`` write one file whose numbers are
the JSON report's (tables cell for cell, figures value for value), whose trace texts are text, never markup, and
which opens in headless Chromium with no network: every figure drawn, no console error, no request but the file."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from commprof.report import analysis_text

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "sample_traces" / "tp2_dp2"  # what `make demo` records: train_3d.py, TP=2 x DP=2 on 4 Gloo ranks
SYNTH_2X8 = ROOT / "sample_traces" / "synth_2x8_tp8_dp2"
MAX_BYTES = 8_000_000  # plotly.js is ~4.8 MB of it; the pictures of 1,024 ranks ~0.7 MB
MAX_FIGURE_BYTES = 2_000_000
HOSTILE = "<script>window.__pwned=1</script>\"'<img src=x onerror=window.__pwned=2>"


class Page(HTMLParser):
    """The report's tables (by data-table), figure JSON (by data-picture order), findings and all text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.figures: list[dict[str, Any]] = []
        self.pictures: list[str] = []
        self.findings: list[str] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._figure_json: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-table"):
            self._table = a["data-table"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "script" and "figure-data" in (a.get("class") or ""):
            self._figure_json = []
        elif tag == "figure" and a.get("data-picture"):
            self.pictures.append(a["data-picture"] or "")
        elif tag == "article" and a.get("data-finding"):
            self.findings.append(a["data-finding"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._row:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "section":
            self._table = None
        elif tag == "script" and self._figure_json is not None:
            self.figures.append(json.loads("".join(self._figure_json)))
            self._figure_json = None

    def handle_data(self, data: str) -> None:
        if self._figure_json is not None:
            self._figure_json.append(data)
            return
        if self._cell is not None:
            self._cell.append(data)
        self.text.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def _json(cli: Callable[..., Result], *args: str) -> dict[str, Any]:
    result = cli(*args, "--format", "json")
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _html(cli: Callable[..., Result], out: Path, *args: str) -> str:
    result = cli(*args, "--format", "html", "-o", str(out))
    assert result.exit_code in (0, 1), result.output
    return out.read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))  # the samples' folders stay untouched


@pytest.mark.parametrize("run", [DEMO, SYNTH_2X8], ids=["demo", "synth_2x8"])
def test_the_html_shows_the_json_numbers(cli: Callable[..., Result], run: Path, tmp_path: Path) -> None:
    report = _json(cli, "analyze", str(run))
    page = parse(_html(cli, tmp_path / "r.html", "analyze", str(run)))
    # every table of the text report, cell for cell, from the JSON report
    shown = {title.split(" (")[0].split(":")[0]: rows for title, _, rows in analysis_text.sections(report) if rows}
    assert page.tables == shown
    # the findings, in order; the headline
    assert page.findings == [f["key"] for f in report["findings"]]
    assert analysis_text.headline(report) in "".join(page.text)
    # the pictures: breakdown per rank = ranks[], dimension x tier = dimension_tier[]
    figures = dict(zip(page.pictures, page.figures, strict=True))
    assert {"breakdown", "dimension_tier", "timeline", "skew", "topology"} <= set(figures)
    by_name = {t["name"]: t for t in figures["breakdown"]["data"]}
    for part, label in (("compute_ns", "compute"), ("exposed_comm_ns", "exposed comm"), ("idle_ns", "idle"),
                        ("overlapped_comm_ns", "overlapped comm"), ("memory_ns", "memory")):
        assert by_name[label]["x"] == [str(r["rank"]) for r in report["ranks"]]
        assert by_name[label]["y"] == pytest.approx([r[part] / 1e6 for r in report["ranks"]])
    bars = {(t["name"].split(" · ")[0], x): y for t in figures["dimension_tier"]["data"]
            if t["name"].endswith("exposed transfer") for x, y in zip(t["x"], t["y"], strict=True)}
    assert bars == pytest.approx({(r["tier"], r["dimension"]): r["exposed_transfer_ns_per_step"] / 1e6
                                  for r in report["dimension_tier"]})


def test_check_and_diff_write_html(cli: Callable[..., Result], tmp_path: Path) -> None:
    html, junit = tmp_path / "check.html", tmp_path / "junit.xml"
    result = cli("check", str(SYNTH_2X8), "--max-straggler-wait-ms", "0.5", "--html", str(html), "--junit",
                 str(junit))
    assert result.exit_code == 1, result.output
    page = parse(html.read_text(encoding="utf-8"))
    assert "max_straggler_wait_ms" in "".join(page.text) and "timeline" in page.pictures
    assert f'<property name="html_report" value="{html}" />' in junit.read_text()
    assert f"[[ATTACHMENT|{html}]]" in junit.read_text()
    diff = _json(cli, "diff", str(DEMO), str(SYNTH_2X8))
    page = parse(_html(cli, tmp_path / "diff.html", "diff", str(DEMO), str(SYNTH_2X8)))
    assert page.pictures[0] == "compare" and {"a-breakdown", "b-breakdown"} <= set(page.pictures)
    step = page.tables["Run totals (mean per rank and step)"][0]
    assert step[0] == "step_ns" and step[1] == f"{diff['totals']['step_ns']['a'] / 1e6:.3f} ms"


def hostile_run(tmp_path: Path) -> Path:
    """The 2x8 sample whose host names and group names carry markup and quotes in every file that names them
    (traces, rank sidecars, manifest, NCCL logs), in a folder named with markup."""
    run = tmp_path / "run <b>x &amp; \"q\""
    shutil.copytree(SYNTH_2X8, run, ignore=shutil.ignore_patterns("tables"))
    for path in (p for p in run.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        zipped = path.name.endswith(".gz")
        text = (gzip.decompress(raw) if zipped else raw).decode()
        quoted = path.name.endswith((".json", ".json.gz"))
        for name in ("gpu-node-00", "gpu-node-01", "TENSOR_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP"):
            text = text.replace(name, name + (json.dumps(HOSTILE)[1:-1] if quoted else HOSTILE.replace(" ", "_")))
        path.write_bytes(gzip.compress(text.encode(), 1) if zipped else text.encode())
    return run


def test_trace_text_is_text_not_markup(cli: Callable[..., Result], tmp_path: Path) -> None:
    html = _html(cli, tmp_path / "r.html", "analyze", str(hostile_run(tmp_path)))
    assert "<script>window" not in html and "<img" not in html and "<b>x" not in html
    assert "\u2028" not in html
    page = parse(html)
    assert HOSTILE in "".join(page.text)  # shown as the characters it is made of
    texts = [s for f in page.figures for s in strings(f)]
    assert any(HOSTILE.replace("<", "&lt;") in s for s in texts)  # plotly shows '<' for &lt;
    assert not [s for s in texts if re.search(r"<(?!/?(?:br|b|i|extra)\s*/?>)[a-z/]", s)]


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


# ---------------------------------------------------------------- in a browser
def _open_offline(driver: Any, path: Path) -> dict[str, Any]:
    """Open the file with the network off; what it drew, logged and asked for."""
    import time

    driver.get_log("browser")
    driver.get_log("performance")
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": -1, "uploadThroughput": -1})
    driver.get(path.as_uri())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not driver.execute_script(
            "return document.body && document.body.getAttribute('data-figures-drawn')"):
        time.sleep(0.2)
    state = driver.execute_script("""
        return {drawn: document.body.getAttribute('data-figures-drawn'),
                failed: document.body.getAttribute('data-figures-failed'),
                blocks: document.querySelectorAll('figure.picture').length,
                plots: Array.from(document.querySelectorAll('.js-plotly-plot')).map(function (e) {
                  return {traces: (e.data || []).length, svg: e.querySelectorAll('svg.main-svg').length,
                          marks: e.querySelectorAll('.point, .bars path, .lines path, .heatmaplayer image,'
                                                    + ' .hm image, .scatterlayer path').length}; }),
                pwned: window.__pwned === undefined ? null : window.__pwned,
                text: document.body.innerText};
    """)
    messages = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    state["requests"] = [m["params"]["request"]["url"] for m in messages if m["method"] == "Network.requestWillBeSent"]
    state["console"] = [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "WARNING")]
    return state


@pytest.fixture(scope="module")
def offline_browser() -> Any:
    from test_dashboard_browser import CHROME_ARGS, CHROMEDRIVER, CHROMIUM

    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("needs chromium and chromedriver on PATH (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _assert_opens(driver: Any, path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    assert size < MAX_BYTES, size
    figures = sum(len(m) for m in re.findall(r'class="figure-data"[^>]*>([^<]*)</script>', path.read_text()))
    assert figures < MAX_FIGURE_BYTES, figures
    state = _open_offline(driver, path)
    assert state["console"] == []
    assert state["failed"] == "" and int(state["drawn"]) == state["blocks"] == len(state["plots"]) >= 1, state
    for plot in state["plots"]:
        assert plot["traces"] >= 1 and plot["svg"] >= 1 and plot["marks"] >= 1, state["plots"]
    # the file itself, and data: URLs plotly makes for its patterns: nothing that leaves the page
    assert all(u == path.as_uri() or u.startswith("data:") for u in state["requests"]), state["requests"]
    return state


@pytest.mark.browser
@pytest.mark.parametrize("command", [("analyze", str(DEMO)), ("analyze", str(SYNTH_2X8)),
                                     ("check", str(SYNTH_2X8), "--max-exposed-comm-pct", "1"),
                                     ("diff", str(DEMO), str(SYNTH_2X8))], ids=["demo", "synth_2x8", "check", "diff"])
def test_the_report_opens_offline(cli: Callable[..., Result], offline_browser: Any, tmp_path: Path,
                                  command: tuple[str, ...]) -> None:
    out = tmp_path / "report.html"
    _html(cli, out, *command)
    _assert_opens(offline_browser, out)


@pytest.mark.browser
def test_hostile_names_stay_text_in_the_browser(cli: Callable[..., Result], offline_browser: Any,
                                                 tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    _html(cli, out, "analyze", str(hostile_run(tmp_path)))
    state = _assert_opens(offline_browser, out)
    assert state["pwned"] is None
    assert HOSTILE in state["text"]


@pytest.mark.browser
@pytest.mark.slow
def test_1024_ranks_stay_small_and_draw(cli: Callable[..., Result], offline_browser: Any, tmp_path: Path) -> None:
    run = tmp_path / "r1024"
    made = cli("synth", str(run), "--nodes", "128", "--gpus-per-node", "8", "--layout", "tp=8,dp=128", "--steps", "2")
    assert made.exit_code == 0, made.output
    out = tmp_path / "report.html"
    _html(cli, out, "analyze", str(run))
    state = _assert_opens(offline_browser, out)
    assert "1024 rank(s)" in state["text"]
    # the topology as the dashboard draws it past 256 ranks: the hosts first in line, every other host summed (a box
    # per host, each named by an annotation added one at a time, took 65 s of a 4,096-rank report's 81)
    assert "1,024 ranks on 128 hosts: drawn are the 16 first in line" in state["text"]
    topology = json.loads(re.search(r'class="figure-data" data-target="figure-topology">([^<]*)</script>',
                                    out.read_text()).group(1))
    assert "The 16 hosts first in line and the other 112" in topology["layout"]["title"]["text"]
