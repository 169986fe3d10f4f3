"""The first page in a fresh browser (issue 25): the sample overview, from navigation start until its graph
holds data, in a new headless Chromium each time, A/B interleaved in one process:

* A: without the plotly.js preload and without the overview built before the first visit (as before);
* B: as ``commprof dashboard`` serves it now (preload in the index head, overview built at start).

    python bench/bench_dashboard_first.py [--repeat 5]

Medians; rows to .bench/dashboard_first.json (now = B, floor = A). Target: <= 2 s (issue 25, 2 cores shared
by server and browser). Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_dashboard_browser import Server, make_driver  # noqa: E402

import commprof  # noqa: E402
from commprof.dashboard import create_app, ids  # noqa: E402
from commprof.dashboard.app import _preload  # noqa: E402
from commprof.dashboard.cache import warmed  # noqa: E402

OUT_JSON = ROOT / ".bench" / "dashboard_first.json"
DRAWN_JS = (f"var g = document.querySelector('#{ids.OVERVIEW_BREAKDOWN} .js-plotly-plot');"
            "return (g && g.data && g.data.length > 0) ? performance.now() : null;")


def first_render_ms(url: str) -> float:
    driver = make_driver()
    try:
        driver.get(url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = driver.execute_script(DRAWN_JS)
            if done is not None:
                return float(done)
            time.sleep(0.02)
        return float("nan")
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="commprof-bench-first-"))
    sample = tmp / "sample"
    shutil.copytree(ROOT / "sample_traces" / "gloo_4rank_profiler", sample, ignore=shutil.ignore_patterns("tables"))
    runs = {"sample": commprof.open_run(sample)}
    cache, _ = warmed(runs)
    before = create_app(runs, cache)
    before.index_string = before.index_string.replace(_preload(before), "")
    now = create_app(runs, cache)
    now.commprof_warm_page("sample")  # type: ignore[attr-defined]  # as `commprof dashboard` does at start
    servers = {"A before": Server(before), "B now": Server(now)}
    took: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for i in range(args.repeat):
            for name in (sorted(servers) if i % 2 else sorted(servers, reverse=True)):
                took[name].append(first_render_ms(f"{servers[name].url}/run/sample/overview"))
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in took.items()}
    for name, values in took.items():
        print(f"{name}: median {median[name]:.0f} ms ({', '.join(f'{v:.0f}' for v in values)})")
    row = {"work": "dashboard: first page in a fresh browser (sample overview)", "now": round(median["B now"]),
           "unit": "ms", "floor": round(median["A before"]), "hta": None,
           "floor_what": "the same page without the plotly preload and the pre-built overview",
           "target": "<= 2 s", "passed": median["B now"] <= 2000}
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps({"rows": [row]}, indent=1))


if __name__ == "__main__":
    main()
