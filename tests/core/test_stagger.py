"""Staggered phases (measure/stagger.py, docs/metrics.md): stream i's first request is shortened so the N streams'
ends are spread over one generation, no two sharing a length where there is room; later requests are max_output."""

import pytest

from infermatrix.core.measure.stagger import STAGGER_MIN_TOKENS, first_max_tokens


@pytest.mark.parametrize(("n", "out"), [(2, 64), (8, 512), (128, 2048), (256, 2048), (128, 224)])
def test_first_requests_spread_evenly_up_to_max_output(n, out):
    k = [first_max_tokens(i, n, out) for i in range(n)]
    assert k[-1] == out and k == sorted(k) and min(k) > STAGGER_MIN_TOKENS
    assert len(set(k)) == n  # (out - min) / n >= 1 token here: every stream ends at its own step
    steps = [b - a for a, b in zip(k, k[1:])]
    assert max(steps) - min(steps) <= 1  # evenly: the spacing varies by the rounding only


def test_no_stagger_for_one_stream_short_outputs_or_when_off():
    assert first_max_tokens(0, 1, 2048) == 2048
    assert first_max_tokens(0, 8, STAGGER_MIN_TOKENS) == STAGGER_MIN_TOKENS
    assert [first_max_tokens(i, 8, 512, stagger=False) for i in range(8)] == [512] * 8


def test_more_streams_than_tokens_still_bounded():
    k = [first_max_tokens(i, 256, 64) for i in range(256)]
    assert k[-1] == 64 and all(STAGGER_MIN_TOKENS < x <= 64 for x in k)
