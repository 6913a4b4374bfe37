"""A prefill point's 95 % intervals from its repeated cold probes (issue 30 item 1): a real run against a launched
sim whose decode steps are noisy on purpose (``step_jitter``: a probe's TTFT ends with one decode step, so the
probes differ), stored in prefill_intervals beside prefill_list; the probes stored are the ones the sim served; the
interval holds the probes' centre; reports show ± and JSON carries the bounds. One probe per point: NULL bounds, no ±."""

from __future__ import annotations

import math
import statistics

import pytest

from infermatrix.core.intervals import median_interval
from infermatrix.core.report.data import load_report
from infermatrix.core.report.json_report import json_of
from infermatrix.core.report.markdown import markdown_of
from infermatrix.core.report.sections.prefill import PM_CAPTION
from infermatrix.core.store import Store
from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow  # launches a sim

PROFILE = {"step_base_ms": 10.0, "step_per_seq_ms": 0.0, "step_jitter": 0.3, "spec_tokens": 0, "prefill_tps": 20000.0, "prefill_base_ms": 5.0}
CONTEXTS = [256, 1024]


def _run(samples: int):
    with sim_server(**PROFILE) as sim:
        result = run_matrix({"kind": "sim", "base_url": sim.base_url},
                            matrix={"contexts": [], "prefill_contexts": CONTEXTS, "prefill_samples": samples})  # fmt: skip
        truth = sim.truth()
    assert result.status == "completed", (result.error, result.output[-2000:])
    return result, truth


def _prefill_rows(md: str) -> list[str]:
    """The Markdown rows of the Prefill table and the prefill rows of All measurements."""
    return [line for line in md.splitlines() if line.startswith("| ") and (" context |" in line or line.startswith("| Prefill |"))]


def _report(result):
    with Store(result.db, read_only=True) as s:
        d = load_report(s, result.run_id)
        return d, markdown_of(d), json_of(d)


def test_three_probes_give_each_point_an_interval_around_their_centre():
    result, truth = _run(3)
    by_id = {r["request_id"]: r for r in truth["requests"] if r.get("request_id")}
    ivs = {(r["context_tokens"], r["metric"]): r for r in result.query("SELECT * FROM prefill_intervals WHERE run_id = ?", [result.run_id])}
    # One row per valid point; a point whose client held too many probes is client_bound (run/prefill.py), has none,
    # and says why (bars.judged, as the fidelity tests): on a loaded machine a 20 ms probe can be held 3 ms.
    points = result.query("SELECT context_tokens, status, reason FROM prefill WHERE run_id = ?", [result.run_id])
    valid = [p["context_tokens"] for p in points if p["status"] == "valid"]
    assert valid and all(p["status"] == "valid" or p["reason"].startswith("the client's event loop held") for p in points), points
    assert set(ivs) == {(c, m) for c in valid for m in ("ttft_ms", "prompt_tps")}
    for point in result.query("SELECT * FROM prefill_list WHERE run_id = ? AND status = 'valid'", [result.run_id]):
        ctx = point["context_tokens"]
        kept = result.query("SELECT * FROM prefill_samples WHERE run_id = ? AND context_tokens = ? AND NOT throwaway AND outcome = 'ok'",
                            [result.run_id, ctx])  # fmt: skip  (a probe the client's loop held is not in the point: run/prefill.py)
        # The stored probes are the sim's: each one it served cold, max_tokens 1, the prompt it counted, its first
        # token emitted before the client stamped it (one clock: both processes read CLOCK_MONOTONIC).
        for s in kept:
            served = by_id[s["request_id"]]
            assert (served["max_tokens"], served["cached_tokens"], served["prompt_tokens"]) == (1, 0, s["prompt_tokens"]), (s, served)
            assert served["first_token"] <= s["first_token"], (s, served)
        ttfts = [s["ttft_ms"] for s in kept]
        assert len(ttfts) == 3 and len(set(ttfts)) == 3  # the jitter made the probes differ
        ttft = ivs[(ctx, "ttft_ms")]
        assert ttft["value"] == point["ttft_ms"] == statistics.median(ttfts) and ttft["n"] == 3 and "n=3" in ttft["method"]
        geo = math.exp(statistics.fmean(math.log(t) for t in ttfts))
        assert ttft["lo"] < min(ttfts) and max(ttfts) < ttft["hi"] and ttft["lo"] < geo < ttft["hi"], (ttfts, ttft)
        again = median_interval(ttfts, point["ttft_ms"])  # the interval is the stored probes' own: recomputed, the same
        assert math.isclose(again.lo, ttft["lo"]) and math.isclose(again.hi, ttft["hi"])  # type: ignore[arg-type]
        tps = ivs[(ctx, "prompt_tps")]  # tokens ÷ TTFT: the TTFT interval's image, ends swapped
        assert math.isclose(tps["value"], point["prompt_tps"])
        assert math.isclose(tps["lo"], point["prompt_tokens"] * 1000 / ttft["hi"]) and math.isclose(tps["hi"], point["prompt_tokens"] * 1000 / ttft["lo"])
    _, md, js = _report(result)
    rows = _prefill_rows(md)
    assert len(rows) == 2 * len(CONTEXTS) and sum(row.count("±") == 2 for row in rows) == 2 * len(valid), rows  # Prefill and All measurements
    assert PM_CAPTION in md
    for p in (p for p in js["prefill"] if p["context_tokens"] in valid):
        assert p["intervals"]["ttft_ms"]["lo"] == ivs[(p["context_tokens"], "ttft_ms")]["lo"] and p["intervals"]["prompt_tps"]["n"] == 3


def test_one_probe_per_point_stores_null_bounds_and_reports_show_no_plus_minus():
    result, _ = _run(1)
    rows = result.query("SELECT * FROM prefill_intervals WHERE run_id = ?", [result.run_id])
    valid = [p["context_tokens"] for p in result.query("SELECT context_tokens FROM prefill WHERE run_id = ? AND status = 'valid'", [result.run_id])]
    assert valid and len(rows) == 2 * len(valid) and all(r["lo"] is None and r["hi"] is None and r["n"] == 1 for r in rows), rows
    _, md, js = _report(result)
    assert not any("±" in row for row in _prefill_rows(md)) and PM_CAPTION not in md
    assert all(p["intervals"]["ttft_ms"] == {"lo": None, "hi": None, "method": "n=1: too few values for an interval", "n": 1}
               for p in js["prefill"] if p["context_tokens"] in valid)  # fmt: skip
