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


def test_per_request_rate_is_token_weighted_so_fragments_weigh_by_their_span():
    # A stream running the whole window at 1 token / 10 ms, and a fragment: a restart with 3 chunks at the
    # window's end, 3 tokens each every 10 ms (300 tok/s). The median of the two rates would sit between
    # them; token-weighted, the fragment moves the rate by its share of the spans only.
    whole = _request(0, 0.0, 0.5, 0.01, 1, 300)  # 0.5 .. 3.49
    frag = _request(1, 2.9, 2.97, 0.01, 3, 3)  # 2.97, 2.98, 2.99
    frag.seq = 1
    s = window_stats([whole, frag], 1.0, 3.0)
    inside = [t for t, _ in whole.events if 1.0 <= t <= 3.0]
    w_tok, w_span = len(inside) - 1, inside[-1] - inside[0]  # one token per chunk, after the first
    f_tok, f_span = 6, frag.events[-1][0] - frag.events[0][0]
    assert s.per_request_tps == pytest.approx((w_tok + f_tok) / (w_span + f_span), rel=1e-6)
    assert s.tbt_ms == pytest.approx(1000 * (w_span + f_span) / (w_tok + f_tok), rel=1e-6)
    assert statistics.median([w_tok / w_span, f_tok / f_span]) > 1.4 * s.per_request_tps  # what the median said


def test_one_stream_per_request_equals_total_without_restarts():
    r = _request(0, 0.0, 0.1, 0.01, 2, 1000)
    s = window_stats([r], 1.0, 5.0)
    assert s.per_request_tps == pytest.approx(s.total_tps, rel=0.01)


def test_chunks_arriving_together_at_the_window_start_are_the_first_arrival():
    # A burst: three chunks read at once just inside the window (emitted before it), then one per 10 ms.
    r = RequestRecord(stream_index=0, seq=0, sent=0.0, first_token=0.5)
    r.events = [(0.5, 1), (1.0001, 2), (1.0002, 2), (1.0003, 2)] + [(1.0003 + 0.01 * k, 2) for k in range(1, 101)]
    r.ended = r.events[-1][0]
    s = window_stats([r], 1.0, 3.0)
    assert s.per_request_tps == pytest.approx(200.0, rel=1e-6)  # 100 chunks × 2 tokens over 1.0 s


def test_ttft_populations_burst_and_restarts_sent_before_the_window_closed():
    a = _request(0, 0.0, 0.2, 0.01, 1, 100, finish="length")  # burst, first token 200 ms after sent
    b = _request(0, 1.2, 1.25, 0.01, 1, 10, finish="length")  # restart, 50 ms
    b.seq = 1
    c = RequestRecord(stream_index=0, seq=2, sent=1.99, first_token=2.06)  # restart sent in, first token after
    c.events, c.ended, c.outcome = [(2.06, 1)], 2.06, "cancelled"
    late = RequestRecord(stream_index=1, seq=3, sent=2.5)  # sent after the window: not counted
    s = window_stats([a, b, c, late], 1.0, 2.0)
    assert (s.ttft_burst.count, s.ttft_restart.count) == (1, 2)
    assert s.ttft_burst.median_ms == pytest.approx(200.0)
    assert s.ttft_restart.median_ms == pytest.approx(60.0)
    assert s.ttft_ms == pytest.approx(70.0)
    assert s.ttft_missing == 0
