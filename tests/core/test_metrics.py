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
    r.events = [(0.5, 1), (1.0001, 2), (1.0004, 2), (1.0008, 2)] + [(1.0008 + 0.01 * k, 2) for k in range(1, 101)]
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


def test_avg_active_counts_from_the_stream_opening_not_from_the_last_byte_sent():
    """A request is in flight from when the client began it (``opened``: before connecting and writing), not from
    its send (``sent``, TTFT's start, just before the write) — docs/metrics.md, avg_active. Counting from ``sent`` would drop
    the connect-and-write time of every request that opened inside the window."""
    whole = _request(0, 0.0, 0.5, 0.01, 1, 400)  # in flight over the whole window [1, 3]
    whole.opened = 0.0
    late = _request(1, 2.0, 2.1, 0.01, 1, 50)  # opened at 1.5, its body written at 2.0, still open at 3
    late.opened, late.ended = 1.5, None  # still streaming when the window closes
    s = window_stats([whole, late], 1.0, 3.0)
    assert s.avg_active == pytest.approx((2.0 + 1.5) / 2.0)  # from sent it would read (2.0 + 1.0) / 2.0
    # A request that never opened (no stamp) counts from sent; one that ended before the window counts nothing.
    gone = _request(2, 0.0, 0.1, 0.01, 1, 10, finish="length")  # ended at 0.19
    gone.opened = 0.0
    assert window_stats([whole, late, gone], 1.0, 3.0).avg_active == pytest.approx(s.avg_active)


def test_completed_output_tokens_and_measured_s_by_their_definitions():
    """completed: finished with a finish_reason and no error inside the window; output_tokens: every in-window
    chunk's tokens; measured_s: window_end - window_start."""
    done = _request(0, 0.0, 0.5, 0.01, 3, 100, finish="length")  # ends 1.49, inside
    failed = _request(1, 0.0, 0.5, 0.01, 1, 100, finish="length")
    failed.outcome = "error"  # a finish_reason but an error: not completed
    after = _request(2, 0.0, 0.5, 0.01, 1, 400, finish="length")  # ends 4.49, after the window
    s = window_stats([done, failed, after], 1.0, 3.0)
    assert s.completed == 1 and s.e2e_values_s == [pytest.approx(1.49)]
    assert s.measured_s == pytest.approx(2.0)
    assert s.output_tokens == 3 * 50 + 50 + 201  # done: 1.00..1.49 (50 chunks of 3); failed: 50; after: 1.00..3.00
    assert s.total_tps == pytest.approx(s.output_tokens / 2.0)


def test_ttft_counts_a_request_sent_exactly_at_the_window_end_and_not_one_without_a_first_token():
    edge = RequestRecord(stream_index=0, seq=1, sent=2.0, first_token=2.03)  # sent as the window closed
    edge.events, edge.ended = [(2.03, 1)], 2.03
    lost = RequestRecord(stream_index=1, seq=1, sent=1.5)  # no first token within the wait
    lost.outcome = "cancelled"
    failed = RequestRecord(stream_index=2, seq=1, sent=1.5)
    failed.outcome = "error"
    s = window_stats([edge, lost, failed], 1.0, 2.0)
    assert s.ttft_restart.count == 1 and s.ttft_ms == pytest.approx(30.0)
    assert s.ttft_missing == 1  # the failed one is counted as failed, not here


def test_itl_values_are_per_token_gaps_inside_the_window():
    r = RequestRecord(stream_index=0, seq=0, sent=0.0, first_token=0.9)
    r.events = [(0.9, 1), (1.0, 1), (1.02, 2), (1.05, 3), (1.25, 2), (2.5, 1)]
    r.ended = 2.5
    s = window_stats([r], 1.0, 1.25)
    # gaps inside the window (both edges inside), each divided by the tokens its chunk carried; the chunk at 1.0
    # follows one before the window
    assert s.itl_values_s == pytest.approx([0.1, 0.01, 0.01, 0.1])
    assert s.tbt_values_s == pytest.approx([0.25 / 7])  # after the first in-window arrival: 7 tokens over 250 ms


def test_prefill_point_is_the_median_probe_and_tokens_over_its_ttft():
    from infermatrix.core.run.prefill import prefill_point
    from infermatrix.core.types import PrefillSample

    def probe(i: int, tokens: int | None, ttft: float) -> PrefillSample:
        return PrefillSample(sample_no=i, throwaway=False, request_id=f"p{i}", prompt_tokens=tokens, ttft_ms=ttft,
                             sent=0.0, first_token=ttft / 1000, outcome="ok")  # fmt: skip

    kept = [probe(1, 1024, 100.0), probe(2, 1030, 300.0), probe(3, 1020, 110.0)]
    tokens, ttft, tps = prefill_point(kept, 1000)
    assert (tokens, ttft) == (1024, 110.0)  # medians, not means (170 ms) nor the first probe
    assert tps == pytest.approx(1024 / 0.110)
    # Where the server did not say how many prompt tokens, the target length stands in.
    assert prefill_point([probe(1, None, 50.0), probe(2, None, 60.0), probe(3, 1010, 70.0)], 1000)[0] == 1000


def _events(*pairs):
    r = RequestRecord(stream_index=0, seq=0, sent=0.0, first_token=pairs[0][0])
    r.events = list(pairs)
    r.ended = pairs[-1][0]
    return r


def test_request_rate_edges_of_the_first_arrival():
    from infermatrix.core.measure.metrics import ARRIVAL_GROUP_S, request_rate

    # Every in-window chunk arrived together (one read after a stall): no measured time, no rate.
    assert request_rate(_events((1.0, 1), (1.0002, 1), (1.0004, 1)), 0.5, 2.0) is None
    # A first arrival of exactly two chunks: the rate starts at the second, its tokens left out.
    assert request_rate(_events((1.0, 1), (1.0005, 2), (1.2005, 3), (1.4005, 4)), 0.5, 2.0) == (7, pytest.approx(0.4))
    # "Within 1 ms" includes 1 ms itself (0.0 + 0.001 is exactly 0.001 apart in binary floating point).
    assert request_rate(_events((0.0, 1), (ARRIVAL_GROUP_S, 1), (0.5, 1)), 0.0, 1.0) == (1, pytest.approx(0.499))
    # Two chunks, 0.3 s apart, one token after the first: a rate, however short the request.
    assert request_rate(_events((1.0, 1), (1.3, 1)), 0.5, 2.0) == (1, pytest.approx(0.3))
    # (A chunk carrying no tokens is never an event: chunks.py records only n > 0, and the tokenizer recount drops
    # zeros, so `tokens <= 0` is a guard, not a case.)


def test_short_spans_still_give_a_rate_and_e2e_runs_from_sent():
    # One request, 5 chunks 20 ms apart inside a 0.2 s window: Σ spans 0.08 s, 4 tokens after the first.
    r = RequestRecord(stream_index=0, seq=0, sent=0.9, first_token=1.01)
    r.events = [(1.01 + 0.02 * k, 1) for k in range(5)]
    r.ended, r.finish_reason = 1.09, "length"
    s = window_stats([r], 1.0, 1.2)
    assert s.per_request_tps == pytest.approx(4 / 0.08) and s.tbt_ms == pytest.approx(20.0)
    assert s.e2e_values_s == [pytest.approx(1.09 - 0.9)]  # end to end: from sent, not from the clock's zero
    assert s.total_tps == pytest.approx(5 / 0.2) and s.avg_active == pytest.approx((1.09 - 1.0) / 0.2)  # a window under 1 s
    # A request that ended exactly as the window closed, or opened, finished inside it (both edges are inside).
    at_end = RequestRecord(stream_index=1, seq=0, sent=1.0, first_token=1.1, ended=1.2, finish_reason="stop")
    at_start = RequestRecord(stream_index=2, seq=0, sent=0.5, first_token=0.6, ended=1.0, finish_reason="stop")
    assert window_stats([r, at_end, at_start], 1.0, 1.2).completed == 3


def test_a_single_token_after_the_first_arrival_is_a_rate():
    r = RequestRecord(stream_index=0, seq=0, sent=0.0, first_token=1.0)
    r.events, r.ended = [(1.0, 1), (1.25, 1)], 1.25
    s = window_stats([r], 0.5, 2.0)
    assert s.per_request_tps == pytest.approx(4.0) and s.tbt_ms == pytest.approx(250.0)
