"""Token counts from three sources, and the tokenizer fallback for servers without per-chunk usage.

1. usage deltas (per-chunk cumulative usage, where the engine's traits offer it), as streamed;
2. the model's tokenizer (the server's tokenize endpoint) applied to the text received;
3. the engine's own generated-tokens counter (``EngineTraits.metrics``) before and after the cell.

When a server sends no per-chunk usage, each chunk was provisionally counted as one token (wrong under
speculative decoding). ``recount_chunks`` replaces those counts with the tokenizer's, exactly at the
window's edges, so the window's totals and per-request rates are right.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio

from infermatrix.core.types import RequestRecord

__all__ = ["recount_chunks", "tokenizer_total", "disagreement", "in_flight_allowance", "reconcile_tokens", "RECONCILE_LIMIT"]

RECONCILE_LIMIT = 0.01  # sources further apart than 1 % flag the cell
CountText = Callable[[str], Awaitable[int]]


def _spread(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` (largest remainder); sums exactly."""
    if not weights:
        return []
    w = [max(1, x) for x in weights]
    s = sum(w)
    raw = [total * x / s for x in w]
    out = [int(r) for r in raw]
    for i in sorted(range(len(w)), key=lambda i: raw[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    return out


async def _recount_one(r: RequestRecord, count: CountText, start: float, end: float) -> None:
    inside = [i for i, (t, _) in enumerate(r.events) if start <= t <= end]
    offs = r.offsets
    total = r.final_usage_tokens if r.final_usage_tokens is not None else await count(r.text)
    if not inside:
        counts = _spread(total, [b - a for a, b in zip([0, *offs[:-1]], offs)])
    else:
        i0, i1 = inside[0], inside[-1]
        before = await count(r.text[: offs[i0 - 1]]) if i0 > 0 else 0
        through_first = await count(r.text[: offs[i0]])
        through_last = await count(r.text[: offs[i1]]) if i1 > i0 else through_first
        lens = [b - a for a, b in zip([0, *offs[:-1]], offs)]
        counts = (
            _spread(before, lens[:i0])
            + [through_first - before]
            + _spread(through_last - through_first, lens[i0 + 1 : i1 + 1])
            + _spread(max(0, total - through_last), lens[i1 + 1 :])
        )
    # A chunk the tokenizer merges into its neighbour's token carries none: it is no token arrival
    # (and a zero-token event would be a zero-length gap in the per-token latencies).
    kept = [(ev, off) for ev, off, n in zip(((t, n) for (t, _), n in zip(r.events, counts)), r.offsets, counts) if n > 0]
    r.events = [ev for ev, _ in kept]
    r.offsets = [off for _, off in kept]
    r.token_source = "tokenizer"


async def recount_chunks(records: list[RequestRecord], count: CountText, start: float, end: float, limit: int = 8) -> int:
    """Recount every ``chunks``-counted record with the tokenizer; returns how many were recounted."""
    todo = [r for r in records if r.token_source == "chunks" and r.events and len(r.offsets) == len(r.events)]
    sem = anyio.Semaphore(limit)

    async def one(r: RequestRecord) -> None:
        async with sem:
            await _recount_one(r, count, start, end)

    async with anyio.create_task_group() as tg:
        for r in todo:
            tg.start_soon(one, r)
    return len(todo)


async def tokenizer_total(records: list[RequestRecord], count: CountText, limit: int = 8) -> int:
    """The tokenizer's count of all text the cell's requests received."""
    total = 0
    sem = anyio.Semaphore(limit)

    async def one(r: RequestRecord) -> None:
        nonlocal total
        async with sem:
            n = await count(r.text)  # not `total += await …`: that reads total before the await
        total += n

    async with anyio.create_task_group() as tg:
        for r in records:
            if r.text:
                tg.start_soon(one, r)
    return total


def in_flight_allowance(concurrency: int, records: list[RequestRecord], after_at: float | None) -> int:
    """How many more tokens the engine's counter may hold than the client received, in good faith.

    A stream the client closed (the window's end) was not finished by the engine: it went on generating
    until it noticed the close, and none of that was delivered. Per such stream that is one chunk in
    flight plus the stream's decode rate times the time from its last chunk read to the counter's read
    (``after_at``): the engine cannot have noticed later than its counter was read. Without ``after_at``,
    one chunk per stream.
    """
    chunk = max((n for r in records for _, n in r.events), default=1)
    if after_at is None:
        return concurrency * chunk
    tokens, span = 0, 0.0
    for r in records:
        if len(r.events) >= 2:
            tokens += sum(n for _, n in r.events[1:])
            span += r.events[-1][0] - r.events[0][0]
    rate = tokens / span if span > 0 else 0.0  # tokens a stream gets per second, token-weighted
    cut = [r for r in records if r.finish_reason is None and r.events]
    late = sum(max(0.0, after_at - r.events[-1][0]) for r in cut)
    return max(concurrency, len(cut)) * chunk + int(rate * late + 0.999)


def disagreement(values: dict[str, float | None]) -> float | None:
    """Largest relative gap between any two known sources (relative to the larger)."""
    known = [v for v in values.values() if v is not None]
    if len(known) < 2 or max(known) <= 0:
        return None
    return (max(known) - min(known)) / max(known)


async def reconcile_tokens(
    concurrency: int, records: list[RequestRecord], before: Any, after: Any, recounted: int, count: CountText | None,
    after_at: float | None = None,
) -> dict[str, Any]:
    """Usage deltas vs the tokenizer's count (``count``, or None) vs the engine's generated-tokens
    counter (``before`` / ``after`` gauge reads, or None): ``cells.flags.tokens``."""
    usage = sum(r.output_tokens for r in records if r.token_source == "usage")
    all_usage = all(r.token_source == "usage" for r in records if r.events)
    sources: dict[str, float | None] = {
        "usage": usage if all_usage and records else None,
        "tokenizer": await tokenizer_total(records, count) if count is not None and records else None,
        "engine": None,
    }
    in_flight = 0
    b = getattr(before, "generated_tokens", None)
    a = getattr(after, "generated_tokens", None)
    if b is not None and a is not None:
        sources["engine"] = a - b
        in_flight = in_flight_allowance(concurrency, records, after_at)
    client = sources["usage"] if sources["usage"] is not None else sources["tokenizer"]
    compared = dict(sources)
    if compared["engine"] is not None and client is not None and client <= compared["engine"] <= client + in_flight:
        compared["engine"] = client
    gap = disagreement(compared)
    return {**sources, "engine_in_flight_allowance": in_flight, "disagreement": gap,
            "agree": gap is None or gap <= RECONCILE_LIMIT, "recounted_requests": recounted}  # fmt: skip
