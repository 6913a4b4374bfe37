"""The admission verdict: did the engine run N? From its gauges; whose shortfall, from the client's own in-flight count."""

from infermatrix.core.measure.admission import EngineSample, judge_admission, settle_admission
from infermatrix.core.measure.inflight import ClientCounts, InFlight
from infermatrix.core.types import CellResult, RequestRecord


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


# ---- whose shortfall: the client's own in-flight count at each read (inflight.py) -------------------------


def _paired(triples):
    """(engine running, engine waiting, client in flight) per read."""
    return [EngineSample(float(i), r, w, InFlight(at=c, least=c, most=c, awaiting_first=0)) for i, (r, w, c) in enumerate(triples)]


def test_client_that_sent_fewer_than_n_makes_the_shortfall_its_own():
    a = judge_admission(4, True, 2, _paired([(2, 0, 2)] * 5), 0, 0, steady=_paired([(1, 0, 1), (2, 0, 2)]))
    assert not a.limited and a.client_short
    assert "the client kept at most 2 of 4" in a.client_reason and a.flags["client_short"] is True


def test_client_with_n_in_flight_leaves_the_shortfall_to_the_engine():
    a = judge_admission(4, True, 2, _paired([(2, 2, 4)] * 5), 0, 0)
    assert a.limited and not a.client_short and "ran at most 2 of 4" in a.reason and "client kept" not in a.reason


def test_one_read_with_n_in_flight_is_enough_to_blame_the_engine():
    # Conservative: the client is blamed only when it was short at every read.
    a = judge_admission(4, True, 3, _paired([(3, 0, 3)] * 4 + [(3, 0, 4)]), 0, 0)
    assert a.limited and not a.client_short


def test_a_front_end_that_holds_requests_is_named():
    # vLLM on two busy cores: the client has N awaiting a first token, the engine's gauges show fewer running and
    # nothing waiting — the rest sit before its scheduler.
    a = judge_admission(4, True, 1, _paired([(1, 0, 4)] * 5), 0, 0)
    assert a.limited and "ran at most 1 of 4 at once; its queue was empty in most reads" in a.reason
    assert "held before its scheduler" in a.reason
    # Not said where the engine queued them (its scheduler's limit), nor without a waiting gauge (nothing to read).
    assert "before its scheduler" not in judge_admission(4, True, 2, _paired([(2, 2, 4)] * 5), 0, 0).reason
    assert "before its scheduler" not in judge_admission(4, True, 1, _paired([(1, None, 4)] * 5), 0, 0).reason


def test_both_short_engine_queueing_stays_admission_limited_and_says_both():
    a = judge_admission(4, True, 2, _paired([(2, 1, 3)] * 5), 0, 0)
    assert a.limited and not a.client_short and "ran at most 2 of 4 at once, the client kept at most 3 of 4 in flight" in a.reason


def test_without_a_waiting_gauge_the_engine_must_have_run_what_the_client_had():
    ran_all = judge_admission(4, True, 2, _paired([(2, None, 2)] * 4), 0, 0)
    assert ran_all.client_short and not ran_all.limited
    ran_less = judge_admission(4, True, 1, _paired([(1, None, 3)] * 4), 0, 0)
    assert ran_less.limited and not ran_less.client_short


def test_preemption_outranks_a_short_client():
    a = judge_admission(4, True, 2, _paired([(2, 0, 2)] * 4), 1, 3)
    assert a.limited and not a.client_short and "preempted 2" in a.reason


def _rec(sent, first, ended, written=True):
    return RequestRecord(stream_index=0, seq=0, sent=sent, first_token=first, ended=ended, written=written)


def test_client_counts_at_a_read_and_over_its_span():
    recs = [
        _rec(0.0, 0.5, 2.0),  # in flight [0, 2), awaiting its first token until 0.5
        _rec(1.0, None, 3.0),  # never got a first token
        _rec(1.5, 1.6, 1.8),  # a short one inside the second read's span
        _rec(0.0, None, 5.0, written=False),  # waited for a connection, sent nothing: never counted
    ]
    c = ClientCounts(recs)
    assert c.read(0.25) == InFlight(at=1, least=1, most=1, awaiting_first=1)
    assert c.read(1.7, took_s=0.5) == InFlight(at=3, least=2, most=3, awaiting_first=1)  # [1.45, 1.95]: 2 before 1.5, 3 until 1.8
    assert c.read(1.75, took_s=0.5).least == 1  # [1.5, 2.0]: the first one ended at 2.0
    assert c.read(2.5) == InFlight(at=1, least=1, most=1, awaiting_first=1)
    assert c.read(4.0).at == 0


def test_a_long_read_is_judged_at_its_stamp_not_its_extremes():
    # A starved client's /metrics read took long: its span saw 18 to 64 in flight, 49 at its middle, where the
    # engine's sample is stamped too; the engine ran 23 of them and queued none.
    reads = [EngineSample(0.0, 23, 0, InFlight(at=49, least=18, most=64, awaiting_first=0))]
    a = judge_admission(64, True, 23, reads, 0, 0)
    assert a.client_short and "at most 49 of 64" in a.client_reason


def _cell(status: str = "valid", avg_active: float | None = 4.0) -> CellResult:
    return CellResult(context_tokens=1024, concurrency=4, status=status, reason="stalls" if status == "client_bound" else None,
                      avg_active=avg_active)  # fmt: skip


def test_settled_engine_shortfall_outranks_the_clients_pace_and_avg_active_is_what_the_engine_ran():
    reads = _paired([(2, 2, 4)] * 5)
    for status in ("valid", "client_bound"):
        cell = _cell(status)
        settle_admission(cell, judge_admission(4, True, 2, reads, 0, 0), reads)
        assert cell.status == "admission_limited" and "ran at most 2 of 4" in cell.reason
        assert cell.avg_active == 2.0 and cell.flags["avg_active_source"] == "engine" and cell.flags["client_active"] == 4.0
        assert cell.flags["admission_limited"] is True and cell.flags["achieved_concurrency"] == 2
        assert cell.flags["client_in_flight"]["at_most"] == 4
    error = _cell("error")
    settle_admission(error, judge_admission(4, True, 2, reads, 0, 0), reads)
    assert error.status == "error" and error.flags["admission_limited"] is True  # an error stays an error


def test_settled_client_shortfall_binds_only_a_valid_cell():
    reads = _paired([(2, 0, 2)] * 5)
    verdict = judge_admission(4, True, 2, reads, 0, 0)
    valid, bound = _cell(), _cell("client_bound")
    settle_admission(valid, verdict, reads)
    settle_admission(bound, verdict, reads)
    assert valid.status == "client_bound" and "the client kept at most 2 of 4" in valid.reason
    assert bound.reason == "stalls"  # a cell already the client's keeps its own reason


def test_settled_without_gauges_keeps_the_clients_count():
    cell = _cell()
    settle_admission(cell, judge_admission(4, False, None, [], None, None), [])
    assert cell.status == "valid" and cell.avg_active == 4.0 and cell.flags["avg_active_source"] == "client"
    assert "achieved_concurrency" not in cell.flags and cell.flags["client_in_flight"] is None
