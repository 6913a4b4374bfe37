"""Which prefill probes the client's own event loop held (measure/selfcheck.py ``edge_hold_ms``, used by run/prefill.py): pure cases on made-up
ticks of the 10 ms loop monitor, (tick end, oversleep) in seconds. A probe's TTFT runs from its send to its first
token's read; only a stall at one of those two moments lengthens it."""

import pytest

from infermatrix.core.measure.selfcheck import EDGE_HOLD_FLOOR_MS, EDGE_HOLD_SHARE, edge_hold_bound_ms, edge_hold_ms

TICK = 0.010


def steady(t0: float, t1: float, lag: float = 0.0008) -> list[tuple[float, float]]:
    """An idle loop's ticks from ``t0`` to ``t1``: each sleeps 10 ms and oversleeps ``lag``."""
    out, t = [], t0
    while t < t1:
        t += TICK + lag
        out.append((t, lag))
    return out


def with_stall(ticks: list[tuple[float, float]], due: float, lag: float) -> list[tuple[float, float]]:
    """``ticks`` with the one due at ``due`` woken ``lag`` late (the loop could run nothing from ``due`` to its wake)."""
    kept = [(e, g) for e, g in ticks if not (e - g - TICK < due + lag and e > due)]
    return sorted([*kept, (due + lag, lag)])


def test_an_idle_loop_holds_nothing_past_the_floor():
    ticks = steady(0.0, 1.0)
    assert edge_hold_ms(ticks, 0.2, 0.55) == pytest.approx(0.8)  # the usual oversleep, under EDGE_HOLD_FLOOR_MS
    assert edge_hold_ms(ticks, 0.2, 0.55) < edge_hold_bound_ms(350.0)


def test_a_stall_that_held_the_first_tokens_read_is_charged_whole():
    ticks = with_stall(steady(0.0, 1.0), due=0.548, lag=0.040)  # due 2 ms before the first token, woke 38 ms after it
    assert edge_hold_ms(ticks, 0.2, 0.55) == pytest.approx(40.0)


def test_a_stall_just_after_the_send_is_charged():
    ticks = with_stall(steady(0.0, 1.0), due=0.205, lag=0.030)  # the request's write may have waited for it
    assert edge_hold_ms(ticks, 0.2, 0.55) == pytest.approx(30.0)


def test_stalls_before_the_send_and_while_the_engine_works_are_not():
    ticks = with_stall(with_stall(steady(0.0, 1.0), due=0.150, lag=0.030), due=0.300, lag=0.050)
    # before the send: over before the clock started; mid-prefill: the loop only waits then, and it was over 0.2 s
    # before the first token arrived, so nothing read late
    assert edge_hold_ms(ticks, 0.2, 0.55) < EDGE_HOLD_FLOOR_MS


def test_the_bound_is_a_floor_or_a_share_of_the_span():
    assert edge_hold_bound_ms(100.0) == EDGE_HOLD_FLOOR_MS
    assert edge_hold_bound_ms(1000.0) == pytest.approx(EDGE_HOLD_SHARE * 1000.0)


def test_with_no_start_only_the_end_is_judged():
    # a burst: its start is followed by its own sends (the loop's work, the burst's time), so only its last end counts
    ticks = with_stall(steady(0.0, 1.0), due=0.205, lag=0.030)
    assert edge_hold_ms(ticks, None, 0.55) < EDGE_HOLD_FLOOR_MS
    assert edge_hold_ms(with_stall(ticks, due=0.548, lag=0.020), None, 0.55) == pytest.approx(20.0)
