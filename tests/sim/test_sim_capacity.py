"""The server keeps to its own step clock with 128 streams open (2 cores, shared with this client)."""

import asyncio
import time

import httpx
import pytest

FAST = {"base": "demo", "name": "capacity", "kv_tokens": 1048576, "step_table": [[1, 8.0], [128, 8.0]],
        "step_per_1k_ctx_ms": 0.0, "loop": {"min_context": None}}  # fmt: skip


@pytest.mark.slow
def test_128_streams_stay_on_schedule(sim_server):
    server = sim_server(FAST)
    n, window = 128, 4.0

    async def go():
        received, seen = 0, set()
        window_at: list[float] = []  # [start, stop): set when every stream has had its first chunk (an event, not a guess)

        async def one(i):
            nonlocal received
            body = {"prompt": f"stream {i} hello", "max_tokens": 4000, "stream": True, "ignore_eos": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
            async with client.stream("POST", server.url + "/v1/completions", json=body) as r:
                async for raw in r.aiter_raw():  # count events without parsing: load the server, not the client
                    received += raw.count(b"data: ")
                    if i not in seen:
                        seen.add(i)
                        if len(seen) == n:
                            now = time.monotonic()
                            window_at.extend([now, now + window])
                    if window_at and time.monotonic() > window_at[1]:
                        return

        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n + 8)) as client:
            await asyncio.gather(*(one(i) for i in range(n)))
        return window_at, received

    (start, stop), received = asyncio.run(go())
    # The window opens once all n streams have had a token, so how long a loaded machine took to open 128
    # connections does not count (CI: a mean batch of 117.7 when the window opened at a fixed 1 s); no stream
    # ends before it closes (4,000 tokens at 8 ms a step is 32 s), so every step in it held every stream.
    steps = [s for s in server.truth(since=start)["steps"] if s["t_start"] < stop]
    assert steps
    planned = sum(s["planned_s"] for s in steps)
    actual = sum(s["duration_s"] for s in steps)
    lags = sorted(s["lag_s"] for s in steps)
    batch = sum(s["batch_size"] for s in steps) / len(steps)
    chunks_per_s = sum(s["batch_size"] for s in steps) / actual
    print(f"128 streams: {chunks_per_s:.0f} chunks/s, mean batch {batch:.1f}, actual/planned {actual / planned:.3f}, "
          f"lag p50 {lags[len(lags) // 2] * 1e3:.2f} ms, max {lags[-1] * 1e3:.1f} ms, client got {received}")  # fmt: skip
    # Server-side truth: every stream was in every step's batch, so the server, not the client, set the pace. How
    # closely the steps kept the model's clock (actual/planned, lag) depends on what else the machine runs:
    # printed above (pytest -s), not asserted: a loaded 2-core machine would fail it without a code change.
    assert sorted({s["batch_size"] for s in steps}) == [n]
