"""The sim's own record of a stretch (GET /debug/window, plugins/sim/record.py), computed from a scheduler's
steps and sequences built by hand: every definition checked on numbers worked out here."""

import pytest

from infermatrix.plugins.sim.profile import load_profile
from infermatrix.plugins.sim.record import window_record
from infermatrix.plugins.sim.scheduler import Scheduler
from infermatrix.plugins.sim.seq import Seq


def _seq(i: int, received: float, emissions: list[tuple[float, int]], finished: float | None, max_tokens: int = 100) -> Seq:
    s = Seq(f"cmpl-{i}", "completions", 64, (), max_tokens, request_id=f"run-decode-64-2-s{i}-r0")
    s.received = received
    s.first_token = emissions[0][0] if emissions else None
    for t, n in emissions:
        s.emissions.extend((t, float(n)))
        s.generated += n
    s.finished, s.finish_reason = finished, "length" if finished is not None else None
    return s


def test_window_record_by_the_definitions():
    sched = Scheduler(load_profile("tiny"))
    # Steps of 1 s (t_start, duration, planned, batch, tokens, lag): batch 2 for [0, 2), 1 for [2, 3), idle [3, 4), 2 for [4, 5).
    sched.steps.extend([(0.0, 1.0, 1.0, 2, 2, 0.0, 0), (1.0, 1.0, 1.0, 2, 2, 0.0, 0), (2.0, 1.0, 1.0, 1, 1, 0.0, 0), (4.0, 1.0, 1.0, 2, 2, 0.0, 0)])
    a = _seq(0, -0.5, [(1.0, 1), (2.0, 1), (3.0, 1)], finished=3.0)  # finishes at the step ending at 3
    b = _seq(1, -0.2, [(1.0, 1), (2.0, 1)], finished=2.0)
    c = _seq(2, 3.5, [(5.0, 1)], finished=None)
    old = _seq(3, -9.0, [(-8.0, 1)], finished=-8.0)  # ended before the stretch: not listed
    sched.records.extend([a, b, c, old])
    w = window_record(sched, 0.5, 4.5)
    span = 4.0
    assert w["mean_batch"] == pytest.approx((2 * 0.5 + 2 * 1 + 1 * 1 + 2 * 0.5) / span)  # overlaps of each step with [0.5, 4.5]
    assert w["output_tokens"] == 2 + 2 + 1 and w["steps"] == 3  # steps ending at 1, 2, 3 (the one ending at 5 is outside)
    assert w["total_tps"] == pytest.approx(5 / span)
    # Per request, token-weighted over in-window spans, the first in-window emission's tokens left out: a 2 tokens / 2 s, b 1 / 1 s.
    assert w["per_request_tps"] == pytest.approx(3 / 3.0)
    assert w["mean_held"] == pytest.approx(((3.0 - 0.5) + (2.0 - 0.5) + (4.5 - 3.5)) / span)
    assert w["most_finished_in_a_step"] == 1 and w["finished_in_window"] == 2 and w["received_in_window"] == 1
    assert [r["request_id"][-6:] for r in w["requests"]] == ["-s0-r0", "-s1-r0", "-s2-r0"]
    assert w["requests"][0]["tokens_in_window"] == 3 and w["requests"][2]["max_tokens"] == 100
