"""Repeats (issue 30 item 2; docs/metrics.md, "Repeats"): each repeat saved into a real DuckDB file, the cell across
them as the views show it, the across-repeat interval and its test against the windows, and the order resume
measures them in."""

from __future__ import annotations

import math

import pytest
from imx_factories import RUN_INFO, make_cell

from infermatrix.core.intervals import Interval
from infermatrix.core.intervals.repeats import across_repeats, chi2_quantile
from infermatrix.core.run.matrix import cell_steps

def _repeat(tps: float, repeat: int, half: float = 2.0, status: str = "valid"):
    c, _ = make_cell(1024, 2, status=status, seed=repeat, values=(tps, tps / 2, 50.0, 10.0, 2.0, 4, 100 + repeat, 10.0),
                     intervals={"total_tps": (tps - half, tps + half)})  # fmt: skip
    c.window_start, c.window_end = 1000.0 + 20 * repeat, 1010.0 + 20 * repeat
    c.flags["phases_s"] = {"measure": 10.0}
    return c


def test_repeats_are_stored_and_the_cell_is_their_mean(store):
    run_id = store.create_run(dict(RUN_INFO))
    values = [100.0, 104.0, 96.0]
    for r, v in enumerate(values, start=1):
        store.save_repeat(run_id, _repeat(v, r), r, 3)
    _, reps = store.query("SELECT repeat, total_tps, status FROM cell_repeats ORDER BY repeat")
    assert reps == [(1, 100.0, "valid"), (2, 104.0, "valid"), (3, 96.0, "valid")]
    _, (row,) = store.query("SELECT total_tps, output_tokens, measured_s, repeats, noisier_than_window FROM decode_matrix")
    assert row[0] == pytest.approx(100.0) and row[1] == 101 + 102 + 103 and row[2] == 30.0 and row[3] == 3
    assert row[4] == ["total_tps"]  # sd 4 against windows of ±2 (se ~1): Q = 32 > 5.99
    _, (iv,) = store.query("SELECT value, lo, hi, method, n, repeats, sd, noisier FROM cell_intervals WHERE metric = 'total_tps'")
    half = 4.303 * 4.0 / math.sqrt(3)  # t_{0.975, 2} x sd / sqrt(K)
    assert iv[0] == pytest.approx(100.0) and iv[1] == pytest.approx(100 - half) and iv[2] == pytest.approx(100 + half)
    assert iv[3:] == ("t across repeats, K=3", 3, 3, pytest.approx(4.0), True)
    # every repeat's requests, numbered apart; the histograms merged
    _, per = store.query("SELECT repeat, count(*), min(request_no) FROM requests GROUP BY repeat ORDER BY repeat")
    assert [(r, lo) for r, _, lo in per] == [(1, 0), (2, 1_000_000), (3, 2_000_000)]
    n_requests = sum(n for _, n, _ in per)
    _, ((ttft_count,),) = store.query("SELECT count FROM histograms WHERE metric = 'ttft'")
    assert ttft_count == n_requests
    # saving a repeat again replaces that repeat only
    store.save_repeat(run_id, _repeat(100.0, 2), 2, 3)
    _, ((tps,),) = store.query("SELECT total_tps FROM decode_matrix")
    assert tps == pytest.approx(296 / 3)
    assert store.query("SELECT count(*) FROM requests")[1][0][0] == n_requests


def test_a_non_valid_repeat_makes_the_cell_so_and_an_interrupted_one_is_left_to_resume(store):
    run_id = store.create_run(dict(RUN_INFO))
    store.save_repeat(run_id, _repeat(100.0, 1), 1, 3)
    store.save_repeat(run_id, _repeat(100.0, 2, status="interrupted"), 2, 3)
    _, ((status, repeats),) = store.query("SELECT status, repeats FROM decode_matrix")
    assert (status, repeats) == ("valid", 1)  # what is final so far: one repeat
    assert store.done_repeats(run_id) == {(1024, 2): {1}}
    store.save_repeat(run_id, _repeat(100.0, 2, status="looped"), 2, 3)
    _, ((status, reason),) = store.query("SELECT status, reason FROM cells")
    assert status == "looped" and reason.startswith("repeat 2 of 3")
    assert store.done_repeats(run_id) == {(1024, 2): {1, 2}}


def test_a_cell_measured_once_has_no_repeat_rows(store):
    run_id = store.create_run(dict(RUN_INFO))
    c, _ = make_cell(1024, 2, intervals={"total_tps": (90.0, 110.0)})
    store.save_cell(run_id, c)
    assert store.query("SELECT count(*) FROM cell_repeats")[1] == [(0,)]
    _, ((repeats, noisier),) = store.query("SELECT repeats, noisier_than_window FROM decode_matrix")
    assert (repeats, noisier) == (None, None)
    _, ((method, k),) = store.query("SELECT method, repeats FROM cell_intervals WHERE metric = 'total_tps'")
    assert (method, k) == ("test factory", None)


def test_across_repeats_flags_a_spread_its_windows_do_not_explain():
    def w(v: float, half: float) -> Interval:
        return Interval(v, v - half, v + half, "batch means", 20)

    calm = across_repeats([100.0, 101.0, 99.0], [w(100, 4), w(101, 4), w(99, 4)])
    noisy = across_repeats([100.0, 110.0, 90.0], [w(100, 4), w(110, 4), w(90, 4)])
    assert calm is not None and noisy is not None
    assert calm.noisier is False and noisy.noisier is True
    assert calm.interval.n == 3 and calm.sd == pytest.approx(1.0)
    assert across_repeats([100.0], [w(100, 4)]) is None
    assert across_repeats([100.0, 101.0], [w(100, 4), None]).noisier is None  # a window without an interval: untested
    assert chi2_quantile(2) == pytest.approx(5.991) and chi2_quantile(30) == pytest.approx(43.773, rel=2e-3)


def test_cell_steps_interleave_the_repeats_and_resume_only_what_is_missing():
    cells = [(1024, 1), (1024, 2)]
    assert cell_steps(cells, 1, set(), {}) == [(1024, 1, None), (1024, 2, None)]
    assert cell_steps(cells, 2, set(), {}) == [(1024, 1, 1), (1024, 2, 1), (1024, 1, 2), (1024, 2, 2)]
    # stopped during repeat 2 of 1K x 1: repeat 1 of both is stored, the rest is left
    assert cell_steps(cells, 3, set(), {(1024, 1): {1}, (1024, 2): {1}}) == [(1024, 1, 2), (1024, 2, 2), (1024, 1, 3), (1024, 2, 3)]
    # a cell done whole (over capacity) is not measured again
    assert cell_steps(cells, 2, {(1024, 2)}, {}) == [(1024, 1, 1), (1024, 1, 2)]


def test_the_slo_views_judge_a_request_by_its_own_repeats_window(store):
    """Repeat 2's requests ended before its own window (the combined window, repeat 1's start to repeat 2's end, would
    take them): only repeat 1's are judged."""
    run_id = store.create_run(dict(RUN_INFO))
    for r in (1, 2):
        c = _repeat(100.0, r)
        for q in c.requests:
            shift = 100.0 * r
            q.sent, q.first_token, q.ended = q.sent + shift, q.first_token + shift, q.ended + shift
            q.events = [(t + shift, k) for t, k in q.events]
        c.window_start, c.window_end = (1100.0, 1130.0) if r == 1 else (1300.0, 1330.0)
        store.save_repeat(run_id, c, r, 2)
    _, ((judged,),) = store.query("SELECT count(*) FROM request_latencies")
    _, ((ok_in_repeat_1,),) = store.query("SELECT count(*) FROM requests WHERE repeat = 1 AND outcome <> 'cancelled'")
    assert judged == ok_in_repeat_1 > 0
