"""Concurrent requests do not queue behind one another for the same view (issue 24): 50 simultaneous
requests for one page or figure compute it once, the others wait for that result; different views compute
side by side; a failure is never kept. The latencies under load are measured by
bench/bench_dashboard_load.py, not here."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import commprof
from commprof.dashboard import create_app, ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.memo import Memo
from commprof.dashboard.pages import overview
from commprof.figures import charts as figures
from commprof.figures import transforms

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "tp2_pp2_dp2"


def together(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """fn(0..n-1), all started at once (a barrier); their results in order."""
    out: list[Any] = [None] * n
    gate = threading.Barrier(n)

    def one(i: int) -> None:
        gate.wait()
        try:
            out[i] = fn(i)
        except Exception as err:  # noqa: BLE001 - the test looks at it
            out[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_memo_computes_once_per_key_and_keys_side_by_side() -> None:
    memo: Memo[object] = Memo(8)
    calls: list[str] = []

    def slow(key: str) -> Callable[[], object]:
        def compute() -> object:
            calls.append(key)
            time.sleep(0.5)
            return object()
        return compute

    got = together(50, lambda i: memo.get("a", slow("a")))
    assert calls == ["a"] and all(g is got[0] for g in got)  # one computation, one shared result
    t = time.perf_counter()
    together(4, lambda i: memo.get(f"k{i}", slow(f"k{i}")))
    assert time.perf_counter() - t < 1.5  # four keys of 0.5 s each, not one after another (2 s)
    assert memo.computed == 5


def test_memo_keeps_no_failure_and_stays_in_its_bounds() -> None:
    memo: Memo[bytes] = Memo(3, max_bytes=10, size=len)
    tries = []

    def failing() -> bytes:
        tries.append(1)
        raise ValueError("broken")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo.get("bad", failing)
    assert len(tries) == 2 and len(memo) == 0
    for key in "abcd":
        memo.get(key, lambda: b"1234")
    assert len(memo) == 2  # 3 × 4 bytes would pass max_bytes: the oldest went
    assert memo.get("big", lambda: b"x" * 11) == b"x" * 11 and len(memo) == 2  # served, too big to keep


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    sample = tmp_path_factory.mktemp("conc") / "sample"
    shutil.copytree(SAMPLE, sample, ignore=shutil.ignore_patterns("tables"))
    runs = {"sample": commprof.open_run(sample)}
    return create_app(runs, RunCache(runs))


def _route_body(app: Any, path: str) -> str:
    key = next(k for k in app.callback_map if k.startswith(f"..{ids.PAGE}.children"))
    spec = app.callback_map[key]
    return json.dumps({"output": key, "outputs": [{"id": ids.PAGE, "property": "children"},
                                                  {"id": ids.NAV, "property": "children"}],
                       "inputs": [dict(spec["inputs"][0], value=path)], "state": [dict(spec["state"][0], value="")],
                       "changedPropIds": [f"{ids.URL}.pathname"]})


def test_fifty_requests_for_one_page_build_it_once(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    real = overview.layout

    def counted(*args: Any) -> Any:
        built.append(args[1])
        time.sleep(0.05)  # a slow page: the others arrive while it is built
        return real(*args)

    monkeypatch.setattr(overview, "layout", counted)
    body = _route_body(app, "/run/sample/overview")
    answers = together(50, lambda i: app.server.test_client().post(
        "/_dash-update-component", data=body, content_type="application/json"))
    assert built == ["sample"]
    assert {a.status_code for a in answers} == {200} and len({a.get_data() for a in answers}) == 1
    assert "Findings" in answers[0].get_data(as_text=True)
    other = app.server.test_client().post("/_dash-update-component", data=_route_body(app, "/run/sample/skew"),
                                          content_type="application/json")
    assert other.status_code == 200 and built == ["sample"]  # another view is its own answer


def test_a_broken_request_is_answered_each_time_and_never_kept(app: Any) -> None:
    before = len(app.commprof_answers)
    for _ in range(2):
        answer = app.server.test_client().post("/_dash-update-component", data=b"{not json",
                                               content_type="application/json")
        assert answer.status_code >= 400
    assert len(app.commprof_answers) == before


def test_fifty_requests_for_one_timeline_figure_draw_it_once(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cache: RunCache = app.commprof_cache
    base = cache.timeline_base("sample")
    drawn: list[int] = []
    real = figures.timeline_figure

    def counted(*args: Any) -> Any:
        drawn.append(1)
        time.sleep(0.05)
        return real(*args)

    monkeypatch.setattr(figures, "timeline_figure", counted)
    window = (base.origin_ns + 1, base.end_ns - 1)  # a window nobody drew yet
    got = together(50, lambda i: cache.timeline_figure("sample", *window, (0, 1), transforms.RANK_LANES))
    assert len(drawn) == 1 and all(g is got[0] for g in got)
