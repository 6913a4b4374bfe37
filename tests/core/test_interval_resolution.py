"""A count has a resolution (issue 30): tokens arrive in whole engine steps, so a window's token count is known
only to about one step's tokens at each edge. Perfectly regular data — every sub-window holding the same count,
as a jitter-free engine whose step divides the sub-window gives — must not make a zero-width interval, and two
such cells 0.006 % apart (their windows' lengths differ by half a millisecond) must compare ``same``, not
``slower`` (the flaky tests/report/test_compare_intervals.py run: N=1 stored lo == hi, ratio 0.99994)."""

from __future__ import annotations

from infermatrix.core.intervals import ratio_interval, verdict_of
from infermatrix.core.measure.cell_intervals import cell_intervals
from infermatrix.core.measure.metrics import window_stats
from infermatrix.core.types import RequestRecord

STEP_S = 0.010  # a 10 ms engine step, one token per stream per step, no jitter


def _lockstep(streams: int, until_s: float) -> list[RequestRecord]:
    """``streams`` requests decoding in lockstep: a chunk of one token every step, from 0.5 s on."""
    steps = int(until_s / STEP_S)
    return [RequestRecord(stream_index=i, seq=0, sent=0.0, prompt_tokens=256, first_token=0.5,
                          events=[(0.5 + k * STEP_S, 1) for k in range(steps)], written=True) for i in range(streams)]  # fmt: skip


def _total_tps(streams: int, start: float, length: float):
    records = _lockstep(streams, start + length + 1.0)
    end = start + length
    return cell_intervals(records, start, end, window_stats(records, start, end))["total_tps"]


def test_equal_counts_in_every_batch_give_an_interval_of_the_count_resolution_not_zero():
    # 20 batches of exactly 40 tokens: the batch means vary not at all; the count is still ± a step at each edge
    iv = ratio_interval([40.0] * 20, [0.4] * 20, count_sd=1.0 / 6**0.5)
    assert iv is not None and iv.lo is not None and iv.hi is not None
    assert iv.lo < iv.value < iv.hi and "resolution" in iv.method, iv
    assert abs((iv.hi - iv.lo) / 2 - 2.093 * (1.0 / 6**0.5) / 8.0) < 1e-9  # t_19 × (one step / √6) ÷ the 8 s window


def test_a_perfectly_regular_cell_has_a_total_tps_interval_of_about_one_step_per_edge():
    for streams in (1, 8):
        iv = _total_tps(streams, 1.0003, 8.0)
        assert iv.lo is not None and iv.hi is not None and iv.lo < iv.value < iv.hi, (streams, iv)
        half = (iv.hi - iv.lo) / 2
        one_step_per_window = streams / 8.0  # one step's tokens over the 8 s window, in tok/s
        assert 0.5 * one_step_per_window < half < 1.5 * one_step_per_window, (streams, iv)


def test_two_regular_cells_half_a_millisecond_apart_compare_same():
    for streams in (1, 8):
        a, b = _total_tps(streams, 1.0003, 8.0), _total_tps(streams, 1.0003, 8.0005)
        v = verdict_of(a, b, higher_is_better=True)
        assert abs(v.ratio - 0.99994) < 2e-5 and v.verdict == "same", (streams, v)
