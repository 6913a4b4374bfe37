"""A burst's client check (core/load/burst_point.py ``burst_stall``, on core/load/stall.py): a burst is the client's,
not the engine's, when its event loop stalled longer than a request's TTFT or e2e allows while it was in flight."""

from __future__ import annotations

import pytest

from infermatrix.core.load.burst_point import burst_stall, burst_tail
from infermatrix.core.load.stall import stall_bound_ms, stall_ms
from infermatrix.core.types import RequestRecord


def _req(i: int, sent: float, first: float, ended: float, outcome: str = "ok") -> RequestRecord:
    return RequestRecord(stream_index=i, seq=0, sent=sent, first_token=first, ended=ended, outcome=outcome)


QUIET = [(t / 100, 0.002) for t in range(100, 400)]  # 2 ms oversleeps from 1 s to 4 s


def test_the_bound_is_the_floor_or_a_tenth_of_the_latency():
    assert (stall_bound_ms(100.0), stall_bound_ms(400.0), stall_bound_ms(1500.0)) == (25.0, 40.0, 150.0)
    # a tick ending at 2.5 s that overslept 0.4 s covered 2.09-2.5 s: it overlaps (2.2, 2.3), not (1.0, 2.05)
    assert stall_ms([(2.5, 0.4)], 2.2, 2.3) == 400.0 and stall_ms([(2.5, 0.4)], 1.0, 2.05) == 0.0


def test_a_stall_that_holds_a_requests_end_makes_the_burst_the_clients():
    # as the vLLM burst beside a burner in the client's session: 442 ms stalled in mid-decode, the end read right after
    r4 = _req(4, 2.0, 2.03, 2.552)
    assert burst_stall(QUIET, [(2.0, r4)]) is None
    why = burst_stall([*QUIET, (2.55, 0.442)], [(2.0, r4)])
    assert why and "stalled 440 ms, holding request 4's end (e2e 552 ms; bound 55 ms)" in why, why  # beyond the usual 2 ms
    assert burst_stall([*QUIET, (2.55, 0.055)], [(2.0, r4)]) is None  # 53 ms held: under a tenth of 552


def test_a_stall_that_holds_the_first_token_is_held_to_the_ttft():
    r0 = _req(0, 1.0, 1.2, 3.0)  # TTFT 200 ms (bound 25), e2e 2,000 ms (bound 200)
    why = burst_stall([*QUIET, (1.195, 0.1)], [(1.0, r0)])
    assert why and "stalled 98 ms, holding request 0's first token (TTFT 200 ms; bound 25 ms)" in why, why
    # the same 100 ms in mid-decode held no stamp: nothing the burst reports moved
    assert burst_stall([*QUIET, (2.5, 0.1)], [(1.0, r0)]) is None


def test_a_stall_that_holds_the_send_after_the_slot_freed_counts_in_the_e2e():
    r1 = _req(1, 2.3, 2.32, 2.5)  # due at 2.0 when its slot freed, sent 300 ms late: its e2e from 2.0 is 500 ms
    assert "stalled 278 ms, holding request 1's send (e2e 500 ms; bound 50 ms)" in (burst_stall([*QUIET, (2.29, 0.28)], [(2.0, r1)]) or "")
    assert burst_stall([*QUIET, (3.5, 0.4)], [(2.0, r1)]) is None  # after it ended


def test_failed_requests_are_not_timed():
    bad = _req(2, 1.0, 1.1, 1.5, outcome="reset")
    assert burst_stall([*QUIET, (1.5, 0.3)], [(1.0, bad)]) is None


def test_a_loop_late_all_along_makes_the_burst_the_clients_though_no_single_stall_stands_out():
    r0 = _req(0, 1.0, 1.2, 3.0)
    late = [(t / 100, 0.03) for t in range(100, 400)]  # every tick 30 ms late: the usual lag forgives each hold
    why = burst_stall(late, [(1.0, r0)])
    assert why and "stalled 30 ms or more in one tick of ten through the burst (bound 25 ms)" in why, why
    assert burst_stall([(t / 100, 0.02) for t in range(100, 400)], [(1.0, r0)]) is None  # 20 ms: under the floor


def test_a_stall_that_holds_the_last_end_is_held_to_the_span():
    # a short burst, as the sim's in a loaded suite: 82 ms from the first send to the last end, read 10.8 ms late
    first, last = _req(0, 2.0, 2.01, 2.05), _req(1, 2.0, 2.02, 2.082)
    first.written = last.written = True
    assert burst_stall(QUIET, [(2.0, first), (2.0, last)]) is None  # the loop's usual 2 ms: under the 3 ms floor
    why = burst_stall([*QUIET, (2.0925, 0.0105)], [(2.0, first), (2.0, last)])
    assert why and "stalled 10.5 ms, holding the burst's last end (request 1; span 82 ms, bound 3.0 ms)" in why, why
    # the same stall at the first request's end held no span edge, and under its e2e's 25 ms floor nothing else
    assert burst_stall([*QUIET, (2.0605, 0.0105)], [(2.0, first), (2.0, last)]) is None


def test_the_span_starts_at_the_first_send_not_before_its_connect():
    # begun at 2.000 (opened), connected and handed to its socket 12 ms later (sent, before the write): a CI run stored
    # a 170 ms sim burst 12.8 ms longer than the sim's record when the span started at ``opened``
    first, last = _req(0, 2.012, 2.03, 2.10), _req(1, 2.015, 2.04, 2.182)
    first.opened, last.opened = 2.0, 2.001
    first.written = last.written = True
    tail = burst_tail([first, last])
    assert tail["first_sent"] == 2.012 and tail["duration_s"] == pytest.approx(0.170)
    assert tail["tail_start"] == 2.10 and tail["tail_s"] == pytest.approx(0.082)  # the first end after the last send
    assert tail["steady_request_rate"] == pytest.approx(1 / 0.088)  # one request ended by the tail's start, over 88 ms
