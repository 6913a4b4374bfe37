"""Tokenizer recount of chunk-counted streams and the three-way disagreement measure."""

import re

import pytest

from infermatrix.core.measure.reconcile import _spread, disagreement, recount_chunks, tokenizer_total
from infermatrix.core.types import RequestRecord


async def _words(text: str) -> int:
    return len(re.findall(r"\S+", text))


def _record(chunks: list[str], t0: float = 0.0, dt: float = 0.01) -> RequestRecord:
    r = RequestRecord(stream_index=0, seq=0, sent=t0, token_source="chunks")
    text = ""
    for i, c in enumerate(chunks):
        text += c
        r.events.append((t0 + (i + 1) * dt, 1))
        r.offsets.append(len(text))
    r.text = text
    return r


def test_spread_sums_exactly():
    for total, weights in [(10, [1, 1, 1]), (7, [5, 1, 9, 2]), (0, [3, 3]), (3, [0, 0, 0])]:
        out = _spread(total, weights)
        assert sum(out) == total and len(out) == len(weights) and min(out) >= 0


@pytest.mark.anyio
async def test_recount_gives_exact_window_counts():
    # chunks of 1, 2 and 3 words (speculative decoding) counted as 1 each by the client
    sizes = [1, 2, 3, 2, 1, 3, 3, 2, 1, 2] * 5
    chunks = [" w" * k for k in sizes]
    r = _record(chunks)
    start, end = r.events[9][0], r.events[39][0]
    assert await recount_chunks([r], _words, start, end) == 1
    assert r.token_source == "tokenizer"
    inside = [n for t, n in r.events if start <= t <= end]
    assert sum(inside) == sum(sizes[9:40])
    assert sum(inside[1:]) == sum(sizes[10:40])  # what per-request rates use
    assert sum(n for _, n in r.events) == sum(sizes)


@pytest.mark.anyio
async def test_tokenizer_total_and_disagreement():
    recs = [_record([" a b", " c"]), _record([" d"])]
    assert await tokenizer_total(recs, _words) == 4
    assert disagreement({"usage": 100, "tokenizer": 99, "engine": None}) == pytest.approx(0.01)
    assert disagreement({"usage": None, "tokenizer": 5, "engine": None}) is None


def test_in_flight_allowance_grows_with_the_time_cut_streams_ran_unread():
    """A stream the client closed went on generating until the engine noticed: up to its rate times the
    time from its last read to the counter's read, plus a chunk. A finished stream adds nothing."""
    from infermatrix.core.measure.reconcile import in_flight_allowance

    cut = RequestRecord(stream_index=0, seq=1, sent=0.0, events=[(1.0 + 0.01 * i, 2) for i in range(101)])  # 200 tok/s
    done = RequestRecord(stream_index=1, seq=0, sent=0.0, events=[(1.0 + 0.01 * i, 2) for i in range(101)], finish_reason="length")
    assert in_flight_allowance(2, [cut, done], None) == 4  # no read time: one chunk per stream
    assert in_flight_allowance(2, [cut, done], 2.0) == 4  # read at the last chunk: nothing more
    assert in_flight_allowance(2, [cut, done], 2.05) == 4 + 10  # 50 ms unread at 200 tok/s
