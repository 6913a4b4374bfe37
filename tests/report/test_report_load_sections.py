"""The open-loop, trace-replay and workload sections in the Markdown, HTML and JSON reports: the stored rows'
values appear, the latency-vs-rate chart has one marker per valid point and series, and a run without them
shows none of it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import render_json
from infermatrix.core.report.markdown import render_markdown
from infermatrix.core.report.text import render_text
from infermatrix.core.store import Store
from infermatrix.core.store.points import save_point
from infermatrix.core.store.workload_store import save_workload_pass

VALID = {"point": 0, "label": "poisson@4/s 1K", "arrival": "poisson", "requested_rate": 4.0, "context_tokens": 1024,
         "scheduled": 23, "sent": 23, "completed": 23, "achieved_rate": 3.83, "lag_p99_ms": 6.25,
         "ttft_p50_ms": 14.5, "ttft_p99_ms": 2048.0, "status": "valid"}  # fmt: skip
VALID_2 = {**VALID, "point": 1, "label": "poisson@8/s 1K", "requested_rate": 8.0, "achieved_rate": 7.91, "ttft_p50_ms": 21.5,
           "ttft_p99_ms": 3070.0}  # fmt: skip
BOUND = {"point": 2, "label": "gamma:0.5@20/s 1K cap 1", "arrival": "gamma:0.5", "requested_rate": 20.0,
         "context_tokens": 1024, "max_in_flight": 1, "scheduled": 40, "sent": 31, "completed": 31,
         "achieved_rate": 9.1, "lag_p99_ms": 2437.0, "ttft_p50_ms": 99.0, "status": "client_bound",
         "reason": "schedule lag p99 2437.0 ms > bound 25.0 ms"}  # fmt: skip
# A trace replay of 4 requests due at 0, 0.5, 1.5 and 2.5 s; the last one never sent.
TRACE = {"point": 3, "label": "trace mini", "arrival": "trace", "requested_rate": 1.6, "achieved_rate": 1.2, "scheduled": 4,
         "sent": 3, "completed": 3, "lag_p50_ms": 1.5, "lag_p99_ms": 3.25, "lag_bound_ms": 25.0, "ttft_p50_ms": 11.0,
         "ttft_p99_ms": 42.0, "origin": 100.0, "status": "valid",
         "trace": {"path": "/x/mini.jsonl", "format": "mooncake", "in_file": 5, "replayed": 4, "skipped_empty": 1,
                   "block_tokens": 512, "prompt_tokens": 4096, "shared_prefix_tokens": 1024}}  # fmt: skip
TRACE_REQUESTS = [{"request_no": i, "scheduled": 100.0 + at, "sent": (100.0 + at) if i < 3 else None, "lag_ms": 1.0,
                   "outcome": "ok" if i < 3 else "error"} for i, at in enumerate((0.0, 0.5, 1.5, 2.5))]  # fmt: skip
# Two conversations of two turns: 100 then 300 prompt tokens; TTFT 10 then 20 ms; turn 2 expects 96 cached tokens.
WORKLOAD_REQUESTS = [
    {"request_no": 2 * c + t, "session": c, "conversation": c, "turn": t + 1, "prompt_tokens": 100 + 200 * t,
     "expected_cached_tokens": 96 * t, "expected_cached_fraction": 96 * t / (100 + 200 * t), "ttft_ms": 10.0 * 2**t,
     "first_token": 1.0, "output_tokens": 50, "outcome": "ok"}
    for c in range(2) for t in range(2)
]  # fmt: skip
WORKLOAD = {"workload": "multi-turn", "status": "valid", "requests": 4, "failed": 0, "block_tokens": 16, "prompt_tokens": 800,
            "expected_cached_tokens": 192, "implied_reuse": 0.24, "engine_queries": 800.0, "engine_hits": 200.0,
            "engine_hit_rate": 0.25}  # fmt: skip


def fill_load_run(s: Store, run: str | None = None) -> str:
    """A run (``run``, else a new one) with two valid rate points, a client-bound one, a trace point and a multi-turn
    pass; its id."""
    run = run or s.create_run({"engine": "sim", "status": "completed"})
    for p in (VALID, VALID_2, BOUND):
        save_point(s, run, p, [])
    save_point(s, run, TRACE, TRACE_REQUESTS)
    save_workload_pass(s, run, WORKLOAD, WORKLOAD_REQUESTS)
    return run


@pytest.fixture
def load_db(tmp_path):
    with Store(tmp_path / "r.duckdb") as s:
        run = fill_load_run(s)
        plain = s.create_run({"engine": "sim", "status": "completed"})
        yield s, run, plain


def _row(text: str, first: str) -> list[str]:
    """The cells of the Markdown table row that starts with ``first``."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first}"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_markdown_carries_points_trace_and_workload(load_db):
    store, run, plain = load_db
    md, none = render_markdown(store, run), render_markdown(store, plain)
    for title in ("## Open-loop points", "## Trace replay", "## Workload multi-turn"):
        assert title in md and title not in none
    assert _row(md, "poisson 1K") == ["poisson 1K", "4", "3.83", "6.2", "14.5", "2,048", "23/23", "valid"]
    assert _row(md, "gamma:0.5 1K") == ["gamma:0.5 1K ≤1", "20", "9.10", "2,437", "99.0", "—", "31/40", "client_bound"]
    assert "gamma:0.5@20/s 1K cap 1: client_bound: schedule lag p99 2437.0 ms &gt; bound 25.0 ms" in md
    assert "| trace" not in md.split("## Trace replay")[0]  # a trace point is not an open-loop row
    assert _row(md, "trace mini") == ["trace mini (mooncake)", "3/4", "1.60", "1.20", "1.5", "3.2", "25.0", "11.0", "42.0", "valid"]
    assert "5 requests in the file, 4 replayed; not sent: 1 with 0 input or output tokens" in md
    assert "1,024 of 4,096 prompt tokens shared with an earlier request" in md
    assert _row(md, "0–1") == ["0–1", "2", "2", "████████████████████"]
    assert _row(md, "2–3") == ["2–3", "1", "0", "··········"]
    assert "4 requests, 0 failed · valid · prefix reuse implied 24.0% of 800 prompt tokens (16-token blocks); " \
           "engine prefix-cache hit rate 25.0% (+1.0%)" in md  # fmt: skip
    assert _row(md, "2 ")[:6] == ["2", "2", "300", "32.0%", "20.0", "20.0"]  # turn 2: 96 of 300 tokens cached
    assert "_No measurements saved" not in md


def _chart(html: str) -> str:
    m = re.search(r'<svg id="openloop-latency".*?</svg>', html, re.S)
    assert m, "no latency-vs-rate chart"
    return m.group(0)


def test_html_carries_the_tables_and_the_latency_vs_rate_chart(load_db):
    store, run, plain = load_db
    html, none = render_html(store, run), render_html(store, plain)
    for anchor in ('id="open-loop"', 'id="trace-replay"', 'id="workload"', 'id="openloop-latency"'):
        assert anchor in html and anchor not in none
    assert '<tr class="st-client_bound"><td class="text">gamma:0.5 1K ≤1</td><td class="num">20</td><td class="num">9.10</td>' in html
    assert "<td class=\"text\">trace mini (mooncake)</td><td class=\"num\">3/4</td>" in html
    assert "prefix reuse implied 24.0% of 800 prompt tokens" in html
    svg = _chart(html)
    series = dict(re.findall(r'<g class="imx-series" data-series="([^"]+)">(.*?)</g>', svg, re.S))
    assert list(series) == ["1K TTFT p50", "1K TTFT p99"]
    # Valid rate points only (not the client-bound one, not the trace), at their stored values.
    tips = {name: re.findall(r"<circle[^>]*><title>([^<]*)</title>", body) for name, body in series.items()}
    assert tips["1K TTFT p50"] == ["poisson@4/s 1K: 3.83 req/s sent, TTFT p50 14.5 ms", "poisson@8/s 1K: 7.91 req/s sent, TTFT p50 21.5 ms"]
    assert tips["1K TTFT p99"] == ["poisson@4/s 1K: 3.83 req/s sent, TTFT p99 2048.0 ms", "poisson@8/s 1K: 7.91 req/s sent, TTFT p99 3070.0 ms"]


def test_json_carries_points_and_the_workload(load_db):
    store, run, plain = load_db
    doc, none = render_json(store, run), render_json(store, plain)
    assert [(p["point"], p["label"], p["achieved_rate"], p["status"]) for p in doc["points"]] == [
        (0, "poisson@4/s 1K", 3.83, "valid"), (1, "poisson@8/s 1K", 7.91, "valid"),
        (2, "gamma:0.5@20/s 1K cap 1", 9.1, "client_bound"), (3, "trace mini", 1.2, "valid")]  # fmt: skip
    w = doc["workload"]
    assert (w["reuse"]["workload"], w["reuse"]["implied_reuse"], w["reuse"]["engine_hit_rate"]) == ("multi-turn", 0.24, 0.25)
    assert [(t["turn"], t["context_tokens"], t["ttft_p50_ms"]) for t in w["turns"]] == [(1, 100, 10.0), (2, 300, 20.0)]
    assert sum(b["requests"] for b in w["ttft_by_cached_fraction"]) == 4
    assert none["points"] == [] and none["workload"] == {"reuse": None, "turns": [], "ttft_by_cached_fraction": [], "tasks": []}
    json.loads(json.dumps(doc))


def test_open_loop_section_has_one_name_everywhere(load_db):
    """Issue 27 item 9: the text report called it "Open-loop load", Markdown, HTML and docs/load.md "Open-loop points"."""
    store, run, _ = load_db
    out = io.StringIO()
    render_text(store, run, Console(file=out, width=200, color_system=None))
    text, md, html = out.getvalue(), render_markdown(store, run), render_html(store, run)
    assert "Open-loop points" in text.splitlines() and "## Open-loop points" in md.splitlines()
    assert '<h2 id="open-loop">Open-loop points</h2>' in html
    docs = (Path(__file__).resolve().parents[2] / "docs" / "load.md").read_text(encoding="utf-8")
    assert "## Open-loop points" in docs.splitlines()
    assert not any("Open-loop load" in page for page in (text, md, html))
