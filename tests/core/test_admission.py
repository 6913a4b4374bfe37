"""The admission verdict: did the engine run N? From its gauges, never the client's in-flight count."""

from infermatrix.core.measure.admission import EngineSample, judge_admission


def _samples(pairs):
    return [EngineSample(float(i), r, w) for i, (r, w) in enumerate(pairs)]


def test_engine_that_seats_fewer_than_n_is_limited():
    a = judge_admission(4, True, 2, _samples([(2, 2)] * 8), 0, 0)
    assert a.limited and a.ran_at_most == 2 and "ran at most 2 of 4" in a.reason
    assert a.flags["waiting_share"] == 1.0


def test_restart_dips_with_nothing_waiting_are_not_the_engines():
    # One stream between two requests: the engine briefly runs 0 of 1, nothing waits.
    a = judge_admission(1, True, 1, _samples([(1, 0), (0, 0), (1, 0)]), 5, 5)
    assert not a.limited and a.running_mean < 0.95


def test_shortfall_with_requests_waiting_is_limited_even_if_n_was_seen_once():
    a = judge_admission(8, True, 8, _samples([(6, 2)] * 5 + [(8, 0)]), 0, 0)
    assert a.limited and "on average" in a.reason


def test_preemptions_make_a_cell_limited():
    a = judge_admission(4, True, 4, _samples([(4, 0)] * 4), 10, 13)
    assert a.limited and "preempted 3" in a.reason and a.flags["preemptions"] == 3


def test_without_gauges_nothing_is_judged_and_flags_say_so():
    a = judge_admission(4, False, None, [], None, None)
    assert not a.checked and not a.limited and a.flags["checked"] is False and "not checked" in a.flags["why"]
