"""Whose shortfall is it when the engine never ran N? A client that cannot keep N requests in flight is
`client_bound`, not `admission_limited`; an engine that seats fewer than the client sent stays
`admission_limited` — judged from the client's own in-flight count at each read of the engine's gauges
(src/core/measure/inflight.py), against a real sim server over loopback.

The client is held below N deterministically by its transport: 4 streams share 2 slots in front of httpx
(a first-come, first-served semaphore, like a pool of 2 connections: the other requests wait, unsent; httpx's
own pool limit is not first-come, first-served, and starves streams). No CPU load, no timing: the server's own
record says it never had more than 2 requests at once.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from imxtest import SimServer
from profiles import write_profile

from infermatrix.core.config import LoopConfig, MatrixConfig
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.stream.client import stream_request
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.types import Prompt
from infermatrix.plugins.sim.plugin import sim_traits
from infermatrix.plugins.sim.profile import load_profile

pytestmark = pytest.mark.slow  # starts sim servers

N = 4


def _runner(server: SimServer, client: httpx.AsyncClient, profile: str, **matrix) -> CellRunner:
    m = MatrixConfig(contexts=[64], concurrency=[N], duration_s=1.0, max_output=48, steady_timeout_s=1.0, ramp_timeout_s=60, **matrix)
    return CellRunner(client=client, base_url=server.base_url, headers={}, model="sim-tiny", matrix=m, loops=LoopConfig(),
                      pm=get_plugin_manager(), traits=sim_traits(load_profile(profile)), id_prefix="inflight")  # fmt: skip


class TwoSlots:
    """A stream transport that has at most 2 requests out at once (the raw transport's calling convention)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
        self.slots = anyio.Semaphore(2)  # hands a freed slot to the longest waiter

    async def stream_request(self, url: str, content: bytes, record: Any, *, headers: dict[str, str], idle_timeout_s: Any = None, **kw: Any) -> Any:
        async with self.slots:
            return await stream_request(self.inner, url, content, record, headers=headers, **kw)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _prompts() -> list[Prompt]:
    return [Prompt(text=f"stream {i} " + "word " * 40, tokens=48, key=f"s{i}") for i in range(N)]


def _peak(server: SimServer) -> int:
    """The most decode requests the server ever had open at once, from its own record."""
    edges = sorted((t, d) for r in server.truth()["requests"] if "-decode-" in r["request_id"]
                   for t, d in ((r["received"], 1), (r["finished"] or float("inf"), -1)))  # fmt: skip
    peak = cur = 0
    for _, d in edges:
        cur += d
        peak = max(peak, cur)
    return peak


@pytest.mark.anyio
async def test_client_that_keeps_fewer_than_n_in_flight_is_client_bound(tmp_path):
    profile = str(write_profile(tmp_path / "p.toml"))
    server = SimServer(profile, tmp_path / "sim.log")
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            runner = _runner(server, client, profile)
            runner.streams = TwoSlots()  # 2 of the 4 requests always wait for a slot, unsent
            cell = await runner.measure(64, _prompts())
        assert _peak(server) == 2  # server-side truth: it was never sent more than 2 at once
    finally:
        server.stop()
    flags = cell.flags
    assert cell.status == "client_bound", (cell.status, cell.reason, flags["admission"])
    assert cell.reason.startswith(f"the client kept at most 2 of {N} requests in flight"), cell.reason
    assert flags["admission"]["limited"] is False and flags["admission"]["client_short"] is True
    assert flags["achieved_concurrency"] <= 2
    inflight = flags["client_in_flight"]
    assert inflight["at_most"] == 2 and inflight["short"] is True and inflight["short_reads"] == inflight["reads"] >= 2


@pytest.mark.anyio
@pytest.mark.parametrize("workers", [0, 2])
async def test_engine_that_seats_fewer_than_the_client_sent_stays_admission_limited(tmp_path, workers):
    profile = str(write_profile(tmp_path / "p.toml", max_num_seqs=2))
    server = SimServer(profile, tmp_path / "sim.log")
    extra = {"client_workers_above": 2, "client_workers": workers} if workers else {}
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            cell = await _runner(server, client, profile, **extra).measure(64, _prompts())
        assert _peak(server) == N  # the client did send all 4
    finally:
        server.stop()
    flags = cell.flags
    assert cell.status == "admission_limited", (cell.status, cell.reason)
    assert f"ran at most 2 of {N}" in cell.reason and "client kept" not in cell.reason
    assert flags["admission"]["client_short"] is False
    # The worker processes' requests are counted too: the client had all N in flight at some read.
    assert flags["client_in_flight"]["at_most"] == N and flags["client_in_flight"]["short"] is False
    assert flags["client"]["worker_processes"] == workers
