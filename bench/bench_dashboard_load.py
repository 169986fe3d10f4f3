"""Dashboard under concurrent load: ``commprof dashboard`` (the real CLI server, its own process) on the
4-rank sample and a synthetic 64-rank run, hit by 50 and 200 simultaneous requests.

    python bench/bench_dashboard_load.py [--ranks 64] [--waves 3] [--concurrency 50,200]

The mix is what a browser sends on the first load of each page of each run: the page's HTML, Dash's
``_dash-layout`` and ``_dash-dependencies``, and every ``_dash-update-component`` call with its payload,
captured from real page loads in headless Chromium (its performance log); the static JS bundles are left
out (a browser caches them). Then:

* floor: every request of the mix, one at a time, twice (the same requests, the same server);
* then a fresh server (its runs analyzed, no view computed yet): a first wave of 50 requests started
  together (a barrier; request i of a wave is mix[i % len(mix)]), then waves of 50 and 200;
  latency = from the wave's start to the end of the response body.

Reported: p50 / p95 / max and errors per N, against the floor. Rows go to .bench/dashboard_load.json.
Target (issue 24): p95 <= 1.5 s at 50 concurrent requests. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
OUT_JSON = ROOT / ".bench" / "dashboard_load.json"
from commprof.dashboard import ids  # noqa: E402

PAGES = {"overview": ids.OVERVIEW_BREAKDOWN, "timeline": ids.TIMELINE_GRAPH, "collectives": ids.COLL_SCATTER,
         "topology": ids.TOPO_GRAPH, "skew": ids.SKEW_GROUPS}
DRAWN_JS = "var g = document.querySelector('#%s .js-plotly-plot'); return !!(g && g._fullLayout);"
Request = tuple[str, str, str | None]  # method, path, JSON body


def start_server(paths: list[Path], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "commprof", "dashboard", *map(str, paths), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if fetch(port, ("GET", "/", None), timeout=2)[0] == 200:
            return proc
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit("the dashboard did not answer in 120 s")


def settle(proc: subprocess.Popen[bytes], quiet_s: float = 1.0, limit_s: float = 120.0) -> None:
    """Wait until the server stops using CPU (its background analysis and warming are done)."""
    def cpu() -> int:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    deadline = time.monotonic() + limit_s
    last, since = cpu(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.2)
        now = cpu()
        if now != last:
            last, since = now, time.monotonic()


def capture(port: int, keys: list[str]) -> list[Request]:
    """The requests Chromium sends on the first load of each page (performance log: Network events)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from test_dashboard_browser import CHROME_ARGS, CHROMEDRIVER, CHROMIUM

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER or ""), options=options)
    base = f"http://127.0.0.1:{port}"
    mix: list[Request] = []
    try:
        for key in keys:
            for page, graph in PAGES.items():
                driver.get("about:blank")
                driver.get_log("performance")
                driver.get(f"{base}/run/{key}/{page}")
                deadline = time.monotonic() + 60
                while not driver.execute_script(DRAWN_JS % graph) and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(1.0)  # the page's later callbacks (URL state) settle
                for entry in driver.get_log("performance"):
                    msg = json.loads(entry["message"])["message"]
                    if msg["method"] != "Network.requestWillBeSent":
                        continue
                    req = msg["params"]["request"]
                    url = req["url"]
                    if not url.startswith(base) or "_dash-component-suites" in url or "favicon" in url:
                        continue
                    mix.append((req["method"], url[len(base):], req.get("postData")))
    finally:
        driver.quit()
    return mix


def fetch(port: int, request: Request, timeout: float = 120.0) -> tuple[int, int]:
    """(status, body bytes); status 0 for a connection error."""
    method, path, body = request
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip"} if body else {
            "Accept-Encoding": "gzip"}
        conn.request(method, path, body=body.encode() if body else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, len(resp.read())
    except OSError:
        return 0, 0
    finally:
        conn.close()


def wave(port: int, mix: list[Request], n: int) -> tuple[list[float], int]:
    """n requests started together: (latencies in s, errors)."""
    latencies = [0.0] * n
    statuses = [0] * n
    gate = threading.Barrier(n + 1)

    def one(i: int) -> None:
        gate.wait()
        t = time.perf_counter()
        statuses[i] = fetch(port, mix[i % len(mix)])[0]
        latencies[i] = time.perf_counter() - t

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    gate.wait()
    for t in threads:
        t.join()
    return latencies, sum(s not in (200, 204) for s in statuses)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def restart(proc: subprocess.Popen[bytes], paths: list[Path], port: int) -> subprocess.Popen[bytes]:
    """A fresh server (its runs analyzed and warmed in the background, then quiet)."""
    proc.terminate()
    proc.wait(10)
    fresh = start_server(paths, port)
    settle(fresh)
    return fresh


def one_at_a_time(port: int, mix: list[Request]) -> list[float]:
    took = []
    for request in mix:
        t = time.perf_counter()
        status, _size = fetch(port, request)
        took.append(time.perf_counter() - t)
        if status not in (200, 204):
            raise SystemExit(f"{request[0]} {request[1]} answered {status}")
    return took


def report(rows: list[dict[str, Any]], what: str, latencies: list[float], errors: int, floor: list[float],
           n: int) -> None:
    p50, p95, p95_floor = pct(latencies, .5), pct(latencies, .95), pct(floor, .95)
    print(f"{what}: p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms, max {max(latencies) * 1e3:.0f} ms, "
          f"errors {errors} of {len(latencies)}; p95 / one-at-a-time p95 {p95 / p95_floor:.1f}×")
    floor_what = "p95 of the same requests one at a time" + (", fresh server" if "fresh" in what else "")
    rows.append({"work": f"dashboard: {what} (sample + synth64), p95", "now": round(p95, 3), "unit": "s",
                 "floor": round(p95_floor, 3), "floor_what": floor_what,
                 "hta": None, "target": "p95 <= 1.5 s at 50 concurrent" if n == 50 else "all served",
                 "passed": (p95 <= 1.5 and errors == 0) if n == 50 else errors == 0,
                 "p50": round(p50, 3), "max": round(max(latencies), 3), "errors": errors})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--waves", type=int, default=3, help="waves per concurrency (latencies pooled)")
    parser.add_argument("--concurrency", default="50,200")
    parser.add_argument("--dump-mix", type=Path, help="write the captured requests to this file")
    args = parser.parse_args()
    from test_dashboard_browser import free_port

    from commprof.synth_run import make_run

    tmp = Path(tempfile.mkdtemp(prefix="commprof-bench-load-"))
    sample = tmp / "sample"
    shutil.copytree(ROOT / "sample_traces" / "gloo_4rank_profiler", sample, ignore=shutil.ignore_patterns("tables"))
    synth = make_run(tmp / f"synth{args.ranks}", ranks=args.ranks, steps=3, layout=(8, 2, args.ranks // 16),
                     kernels_per_phase=50)
    port = free_port()
    proc = start_server([sample, synth], port)
    rows: list[dict[str, Any]] = []
    try:
        mix = capture(port, [sample.name, synth.name])
        if args.dump_mix:
            args.dump_mix.write_text(json.dumps(mix, indent=1))
        kinds = {p.split("?")[0].rsplit("/", 1)[-1] if m == "GET" else "callback" for m, p, _ in mix}
        print(f"mix: {len(mix)} requests per first load of {len(PAGES)} pages × 2 runs ({', '.join(sorted(kinds))})")
        first_n = int(args.concurrency.split(",")[0])
        paths = [sample, synth]
        proc = restart(proc, paths, port)
        cold = one_at_a_time(port, mix)  # a fresh server: every view computed for the first time
        warm = one_at_a_time(port, mix)  # the same requests again
        for what, floor in (("cold", cold), ("warm", warm)):
            print(f"one at a time, {what}: p50 {pct(floor, .5) * 1e3:.0f} ms, p95 {pct(floor, .95) * 1e3:.0f} ms, "
                  f"max {max(floor) * 1e3:.0f} ms, the whole mix {sum(floor):.2f} s")
        proc = restart(proc, paths, port)
        got, bad = wave(port, mix, first_n)
        report(rows, f"{first_n} concurrent first-load requests on a fresh server (no view computed yet)", got, bad,
               cold, first_n)
        for n in (int(c) for c in args.concurrency.split(",")):
            latencies: list[float] = []
            errors = 0
            for _ in range(args.waves):
                got, bad = wave(port, mix, n)
                latencies += got
                errors += bad
            report(rows, f"{n} concurrent first-load requests", latencies, errors, warm, n)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
