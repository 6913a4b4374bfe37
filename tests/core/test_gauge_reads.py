"""A gauge read that gets no answer in time is counted (``cells.flags.engine_gauges.failed_reads``), whether it failed,
answered late or was cut short late: a cell whose window kept no read (``flags.batch`` null) must say why.

The engine here is a real loopback socket that accepts and never answers — a server too busy to reply — so every cut
is the reader's own bound or its caller's cancel, not a race.
"""

from __future__ import annotations

import socket

import anyio
import httpx
import pytest

from infermatrix.core.engine.traits import MetricNames
from infermatrix.core.measure.steady import SLOW_READ_S, EngineGauges, GaugeSample


@pytest.fixture
def silent_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel accepts the connections; nothing ever reads or answers them
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.anyio
async def test_an_edge_read_cut_short_is_counted_and_keeps_nothing(silent_server):
    into: list[GaugeSample] = []
    async with httpx.AsyncClient() as client:
        gauges = EngineGauges(client, silent_server, {}, MetricNames(running="r", waiting="w"))
        t0 = anyio.current_time()
        await gauges.edge_read(into)
        took = anyio.current_time() - t0
    assert into == [] and took >= SLOW_READ_S
    assert gauges.failures == 1 and "cut short" in (gauges.last_error or ""), gauges.last_error
    assert gauges.state == "unknown"  # no answer says nothing about whether the engine has gauges


@pytest.mark.anyio
@pytest.mark.parametrize("out_s, counted", [(SLOW_READ_S + 0.05, 1), (0.05, 0)])
async def test_a_window_read_cut_at_the_windows_end_counts_once_it_is_late(silent_server, out_s, counted):
    """Unanswered for over SLOW_READ_S when the window closes: late, counted. Cut sooner (the window closing as a
    read begins, which the once-a-second reads of a whole-seconds window often do): not late yet, not counted."""
    into: list[GaugeSample] = []
    async with httpx.AsyncClient() as client:
        gauges = EngineGauges(client, silent_server, {}, MetricNames(running="r"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(gauges.watch, into)
            await anyio.sleep(out_s)  # the window: the watcher's first read is out, and never answered
            tg.cancel_scope.cancel()
    assert into == [] and gauges.failures == counted, gauges.last_error
