"""Issue 17: a ramp that gave up is judged by the engine's own token counter (measure/ramp_check.py; docs/metrics.md,
"Client verdict", item 4). A client that had not read what the engine generated is `client_bound`, with the reason;
an engine that had not generated the first tokens leaves the cell `error`.

Both against a launched sim over loopback, the cell run in-process so the client can be made to read late: its
stream reader holds every response's bytes for longer than the ramp lasts (a reader stalled from the first chunk,
as httpx at 256 streams on two starved cores was), while the engine's loop is untouched. The sim's own record says
what it generated meanwhile.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from imxtest import SimServer
from profiles import write_profile

from infermatrix.core.config import LoopConfig, MatrixConfig
from infermatrix.core.measure import cell as cell_module
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.measure.steady import RAMP_END_TRIES, SLOW_READ_S
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.types import Prompt
from infermatrix.plugins.sim.plugin import sim_traits
from infermatrix.plugins.sim.profile import load_profile

pytestmark = pytest.mark.slow  # starts sim servers

N = 4
RAMP_S = 2  # the ramp's timeout: inputs of the experiment
HOLD_S = 3 * RAMP_S  # the late reader holds each response's bytes this long, past the ramp


class LateBytes(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self.inner = inner

    async def __aiter__(self):
        await anyio.sleep(HOLD_S)
        async for chunk in self.inner:
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class LateReader(httpx.AsyncHTTPTransport):
    """Real HTTP to the sim; the response's body is read only HOLD_S after its head arrived."""

    sent = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent = True
        resp = await super().handle_async_request(request)
        resp.stream = LateBytes(resp.stream)
        return resp


METRICS_LATE_S = 2 * SLOW_READ_S  # later than a window edge's read may take, well inside a ramp end's


class SlowMetrics(httpx.AsyncHTTPTransport):
    """Real HTTP to the sim; every ``/metrics`` answer reaches the client ``METRICS_LATE_S`` late (a starved
    machine: the last session saw every engine read at a ramp's end fail so)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await super().handle_async_request(request)
        if request.url.path == "/metrics":
            await anyio.sleep(METRICS_LATE_S)
        return resp


class MuteMetrics(httpx.AsyncHTTPTransport):
    """Real HTTP to the sim; once ``streams`` has sent a request, ``/metrics`` never answers (the read times out)."""

    def __init__(self, streams: LateReader) -> None:
        super().__init__()
        self.streams = streams

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics" and self.streams.sent:
            await anyio.sleep(request.extensions["timeout"]["read"])  # what httpx's own read timeout would end
            raise httpx.ReadTimeout("no answer", request=request)
        return await super().handle_async_request(request)


def _runner(server: SimServer, client: httpx.AsyncClient, profile: str) -> CellRunner:
    m = MatrixConfig(contexts=[64], concurrency=[N], duration_s=1.0, max_output=2048, warmup=False, ramp_timeout_s=RAMP_S, transport="httpx")
    return CellRunner(client=client, base_url=server.base_url, headers={}, model="sim-tiny", matrix=m, loops=LoopConfig(),
                      pm=get_plugin_manager(), traits=sim_traits(load_profile(profile)), id_prefix="ramp")  # fmt: skip


def _prompts() -> list[Prompt]:
    return [Prompt(text=f"stream {i} " + "word " * 40, tokens=48, key=f"s{i}") for i in range(N)]


def _generated(server: SimServer) -> int:
    """Tokens the sim itself emitted to the cell's decode requests (its own record)."""
    return sum(r["output_tokens"] or 0 for r in server.truth()["requests"] if "-decode-" in (r["request_id"] or ""))


@pytest.mark.anyio
@pytest.mark.parametrize("metrics", ["prompt", "late"])
async def test_a_ramp_the_client_did_not_read_is_client_bound(tmp_path, metrics):
    """``late``: the engine's reads answer later than a window edge's read may wait; the ramp's end waits longer
    and asks again, so the verdict is still the engine's count (before, no read answered: ``error``)."""
    profile = str(write_profile(tmp_path / "p.toml", step_base_ms=2.0))
    server = SimServer(profile, tmp_path / "sim.log")
    try:
        async with httpx.AsyncClient(timeout=30, transport=SlowMetrics() if metrics == "late" else None) as client:
            runner = _runner(server, client, profile)
            runner.streams = httpx.AsyncClient(transport=LateReader(), timeout=httpx.Timeout(30, read=HOLD_S * 2))
            try:
                cell = await runner.measure(64, _prompts())
            finally:
                await runner.streams.aclose()
        emitted = _generated(server)
    finally:
        server.stop()
    check = cell.flags["ramp_check"]
    seen = (cell.status, cell.reason, check, emitted)
    assert cell.flags["ramp_ok"] is False, seen
    assert cell.status == "client_bound", seen
    assert cell.reason.startswith(f"only 0 of {N} streams got a first token within {RAMP_S} s") and "the client fell behind" in cell.reason, seen
    assert check["behind"] and check["client_tokens"] == 0 and check["engine_tokens"] > check["allowance"], seen
    assert emitted >= check["engine_tokens"]  # the engine's counter told what the sim's own record holds (and it went on)


@pytest.mark.anyio
async def test_a_ramp_the_engine_was_slow_to_serve_stays_error(tmp_path):
    """Serial prefills of 1 s each: two of four streams have a first token when the ramp gives up, and the client
    read every token the engine generated -- the engine's failure, not the client's."""
    profile = str(write_profile(tmp_path / "p.toml", step_base_ms=2.0, prefill_base_ms=1000.0, prefix_cache_tokens=0))
    server = SimServer(profile, tmp_path / "sim.log")
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            cell = await _runner(server, client, profile).measure(64, _prompts())
    finally:
        server.stop()
    check = cell.flags["ramp_check"]
    seen = (cell.status, cell.reason, check)
    assert cell.flags["ramp_ok"] is False and cell.status == "error", seen
    assert cell.reason.startswith("only ") and f"of {N} streams got a first token within {RAMP_S} s" in cell.reason, seen
    assert check is not None and not check["behind"] and check["engine_tokens"] > 0, seen


@pytest.mark.anyio
async def test_a_ramp_whose_engine_did_not_answer_says_so(tmp_path, monkeypatch):
    """The engine's reads at the ramp's end all go unanswered: the cell stays ``error`` (nothing tells whose it
    was) and its reason says the engine could not be asked, rather than leaving it to read as the engine's."""
    monkeypatch.setattr(cell_module, "RAMP_END_READ_S", METRICS_LATE_S)  # the test's time only: each try is cut short as a slow read
    profile = str(write_profile(tmp_path / "p.toml", step_base_ms=2.0))
    server = SimServer(profile, tmp_path / "sim.log")
    try:
        reader = LateReader()
        async with httpx.AsyncClient(timeout=30, transport=MuteMetrics(reader)) as client:
            runner = _runner(server, client, profile)
            runner.streams = httpx.AsyncClient(transport=reader, timeout=httpx.Timeout(30, read=HOLD_S * 2))
            try:
                cell = await runner.measure(64, _prompts())
            finally:
                await runner.streams.aclose()
    finally:
        server.stop()
    seen = (cell.status, cell.reason, cell.flags["ramp_check"], cell.flags["engine_gauges"])
    assert cell.flags["ramp_ok"] is False and cell.status == "error" and cell.flags["ramp_check"] is None, seen
    assert cell.reason.startswith(f"only 0 of {N} streams") and "the engine did not answer its reads at the ramp's end" in cell.reason, seen
    assert cell.flags["engine_gauges"]["failed_reads"] >= RAMP_END_TRIES, seen  # every try was made, and counted
