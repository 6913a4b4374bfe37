"""window_stats against values computed by hand from constructed request timelines."""

import statistics

import pytest

from infermatrix.core.measure.metrics import window_stats
from infermatrix.core.types import RequestRecord


def _request(i, sent, first, step, tokens_per_chunk, chunks, finish=None, ended=None):
    r = RequestRecord(stream_index=i, seq=0, sent=sent, first_token=first)
    r.events = [(first + k * step, tokens_per_chunk) for k in range(chunks)]
    r.finish_reason = finish
    r.ended = ended if ended is not None else r.events[-1][0]
    r.outcome = "ok" if finish else "cancelled"
    return r


def test_steady_streams_multi_token_chunks():
    # Two streams, one chunk every 10 ms carrying 2 tokens, window [1.0, 3.0].
    recs = [_request(i, 0.0, 0.5 + i * 0.001, 0.01, 2, 400) for i in range(2)]
    s = window_stats(recs, 1.0, 3.0)
    inside = sum(n for r in recs for t, n in r.events if 1.0 <= t <= 3.0)
    assert s.output_tokens == inside
    assert s.total_tps == pytest.approx(inside / 2.0)
    # 2 tokens per 10 ms = 200 tok/s per request, 5 ms per token.
    assert s.per_request_tps == pytest.approx(200.0, rel=1e-6)
    assert s.tbt_ms == pytest.approx(5.0, rel=1e-6)
    assert s.avg_active == pytest.approx(2.0)
    assert s.completed == 0
    assert s.ttft_ms == pytest.approx(statistics.median([0.5, 0.501]) * 1000)


def test_completed_and_active_with_restart():
    a = _request(0, 0.0, 0.1, 0.01, 1, 100, finish="length")  # ends at 1.09
    b = _request(0, 1.09, 1.2, 0.01, 1, 300)  # restart, still open
    b.seq = 1
    s = window_stats([a, b], 0.5, 2.5)
    assert s.completed == 1
    assert s.e2e_values_s == [pytest.approx(1.09)]
    # in flight all the time except none: a until 1.09, b from 1.09
    assert s.avg_active == pytest.approx(1.0)
    assert len(s.ttft_values_s) == 2


def test_empty_window_is_none_not_zero_division():
    r = RequestRecord(stream_index=0, seq=0, sent=0.0)
    s = window_stats([r], 1.0, 1.0)
    assert s.total_tps is None and s.per_request_tps is None and s.ttft_ms is None
