"""Dashboard benchmark: browser-measured time to the first full render of every page, and the largest
callback payload, for the 4-rank sample run and a synthetic 64-rank run (commprof.synth_run).

    python bench/bench_dashboard.py [--kernels-per-phase 50]

Render time = from navigation start until the page's graph (``.js-plotly-plot``) holds data, measured in
Chromium (headless, system binary). Payload = the largest response body of ``/_dash-update-component``,
recorded by an ``after_request`` hook on the app's Flask server. Targets: < 2 s per page and < 5 MB for the
timeline at any zoom. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_dashboard_browser import Server, free_port, make_driver  # noqa: E402

import commprof  # noqa: E402
from commprof.dashboard import create_app, ids  # noqa: E402
from commprof.dashboard.cache import MAX_TIMELINE_RANKS, warmed  # noqa: E402
from commprof.figures.transforms import RANK_LANES  # noqa: E402
from commprof.synth_run import make_run  # noqa: E402

PAGES = {"overview": ids.OVERVIEW_BREAKDOWN, "timeline": ids.TIMELINE_GRAPH, "collectives": ids.COLL_SCATTER,
         "topology": ids.TOPO_GRAPH, "skew": ids.SKEW_HEATMAP}


def render_ms(driver, url: str, graph: str, timeout: float = 60.0) -> float:  # type: ignore[no-untyped-def]
    driver.get(url)
    script = (f"var g = document.querySelector('#{graph} .js-plotly-plot');"
              "return (g && g.data && g.data.length > 0) ? performance.now() : null;")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = driver.execute_script(script)
        if done is not None:
            return float(done)
        time.sleep(0.02)
    return float("nan")


def screenshot(driver, path: Path) -> None:  # type: ignore[no-untyped-def]
    """The whole page (the window grows to its height for the shot), once its graphs have drawn."""
    path.parent.mkdir(parents=True, exist_ok=True)
    time.sleep(1.0)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1400, min(max(height + 120, 1000), 7000))
    time.sleep(0.5)
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


def server_start_s(run: Path) -> float:
    """Seconds from launching ``commprof dashboard RUN`` until it answers ``/``."""
    import subprocess
    import urllib.request

    port = free_port()
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "commprof", "dashboard", str(run), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def answers() -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
        except OSError:
            return False
        return True

    try:
        while time.perf_counter() - t < 120:
            if answers():
                return time.perf_counter() - t
            time.sleep(0.05)
        return float("nan")
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels-per-phase", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--run", type=Path, default=None,
                        help="a run directory to measure instead of a generated one (e.g. `commprof synth` 256 "
                             "ranks); also times `commprof dashboard RUN` until it answers")
    parser.add_argument("--shots", type=Path, default=None,
                        help="save a full-page screenshot of each page's first render here (RUN-PAGE.png)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="commprof-bench-dash-"))
    sample = tmp / "sample"
    shutil.copytree(ROOT / "sample_traces" / "gloo_4rank_profiler", sample, ignore=shutil.ignore_patterns("tables"))
    t = time.perf_counter()
    synth = args.run or make_run(tmp / f"synth{args.ranks}", ranks=args.ranks, steps=3,
                                 layout=(8, 2, args.ranks // 16), kernels_per_phase=args.kernels_per_phase)
    made = time.perf_counter() - t
    if args.run:
        commprof.open_run(args.run)  # its Parquet cache, as a second start finds it
        print(f"commprof dashboard {args.run}: answers after {server_start_s(args.run):.1f} s (target <= 5)")
    t = time.perf_counter()
    runs = {"sample": commprof.open_run(sample), synth.name if args.run else f"synth{args.ranks}":
            commprof.open_run(synth)}
    opened = time.perf_counter() - t
    cache, _ = warmed(runs)  # as `commprof dashboard` does before it serves
    app = create_app(runs, cache)
    for key in runs:
        app.commprof_warm_page(key)  # type: ignore[attr-defined]  # as `commprof dashboard` does beside serving
    sizes: list[tuple[str, int]] = []

    @app.server.after_request
    def record(response):  # type: ignore[no-untyped-def]
        from flask import request

        if request.path == "/_dash-update-component":
            sizes.append((str((request.get_json(silent=True) or {}).get("output", "")), len(response.get_data())))
        return response

    server = Server(app)
    driver = make_driver()
    rows = []
    try:
        for key in runs:
            for page, graph in PAGES.items():
                sizes.clear()
                first = render_ms(driver, f"{server.url}/run/{key}/{page}", graph)  # cold: analysis + caches
                sizes_cold = max((s for _, s in sizes), default=0)
                if args.shots:
                    screenshot(driver, args.shots / f"{key}-{page}.png")
                warm = render_ms(driver, f"{server.url}/run/{key}/{page}", graph)
                rows.append((key, page, first, warm, sizes_cold))
            # the timeline with every rank selected, and a zoomed window, as server-side payloads
            cache = app.commprof_cache  # type: ignore[attr-defined]
            base = cache.timeline_base(key)
            # every rank the page draws at most (it caps "all ranks" at MAX_TIMELINE_RANKS)
            all_ranks = tuple(base.rows["rank"].unique().sort().to_list()[:MAX_TIMELINE_RANKS])
            span = base.end_ns - base.origin_ns
            for label, window in (("whole run", (base.origin_ns, base.end_ns)),
                                  ("1% zoom", (base.origin_ns + span // 2, base.origin_ns + span // 2 + span // 100))):
                t = time.perf_counter()
                fig, info = cache.timeline_figure(key, *window, all_ranks, RANK_LANES)
                built = (time.perf_counter() - t) * 1e3
                payload = len(fig.to_json())
                rows.append((key, f"timeline all {len(all_ranks)} ranks, {label} (server)", built, float("nan"),
                             payload))
    finally:
        driver.quit()
        server.stop()
    print(f"{args.run or f'synthetic {args.ranks}-rank run'}: written in {made:.1f} s, both runs opened in "
          f"{opened:.1f} s" + ("" if args.run else f" ({args.kernels_per_phase} kernels per compute phase)"))
    print(f"{'run':<10} {'page':<46} {'first ms':>9} {'warm ms':>8} {'max payload':>12}")
    for key, page, first, warm, size in rows:
        print(f"{key:<10} {page:<46} {first:>9.0f} {warm:>8.0f} {size / 1e6:>10.3f} MB")
    worst = max(r[2] for r in rows if "(server)" not in r[3:4] and r[2] == r[2])
    biggest = max(r[4] for r in rows)
    print(f"worst first render {worst:.0f} ms (target < 2000); largest payload {biggest / 1e6:.2f} MB (target < 5)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
