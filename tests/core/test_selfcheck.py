"""The client self-check notices a blocked event loop (it measures lag; it does not assert speed)."""

import time

import anyio
import pytest

from infermatrix.core.measure.selfcheck import LAG_P99_LIMIT_MS, ClientMonitor


@pytest.mark.anyio
async def test_blocked_loop_is_client_bound():
    mon = ClientMonitor()
    async with anyio.create_task_group() as tg:
        tg.start_soon(mon.sample)
        for _ in range(30):
            await anyio.sleep(0)
            time.sleep(0.02)  # the loop can't run the sampler for 20 ms: a client that can't keep up
        tg.cancel_scope.cancel()
    load = mon.result()
    assert load.samples > 0
    assert load.lag_p99_ms > LAG_P99_LIMIT_MS
    assert load.bound and any("lag" in w for w in load.why)


@pytest.mark.anyio
async def test_idle_loop_reports_numbers():
    mon = ClientMonitor()
    async with anyio.create_task_group() as tg:
        tg.start_soon(mon.sample)
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    load = mon.result()
    assert load.samples >= 5 and load.cpu_pct is not None and load.lag_max_ms >= load.lag_p99_ms >= 0
