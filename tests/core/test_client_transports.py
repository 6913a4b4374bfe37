"""Both stream transports (httpx, the default; the raw asyncio reader) against a real sim over loopback:
every chunk the server emitted is recorded with its tokens, failures map to the same outcomes, and a
finished stream's connection is reused. Server-side truth, no timing thresholds."""

from __future__ import annotations

import anyio
import httpx
import pytest
from imxtest import SimServer, free_port

from infermatrix.core.engine.traits import EngineTraits
from infermatrix.core.stream.client import encode_body, request_body, stream_request
from infermatrix.core.stream.transport import RawClient
from infermatrix.core.types import RequestRecord

pytestmark = pytest.mark.slow

FAULTS = """
[[faults.requests]]
kind = "http_error"
status = 503
max_tokens = 3
[[faults.requests]]
kind = "truncate"
max_tokens = 5
after_chunks = 2
[[faults.requests]]
kind = "reset"
max_tokens = 6
after_chunks = 2
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transports")
    profile = tmp / "p.toml"
    profile.write_text('base = "tiny"\nspec_tokens = 2\nacceptance = 0.6\n' + FAULTS)
    server = SimServer(str(profile), tmp / "sim.log")
    yield server
    server.stop()


def _client(kind: str):
    return RawClient(connect_timeout_s=5, idle_timeout_s=30) if kind == "raw" else httpx.AsyncClient(timeout=30)


TRAITS = EngineTraits(per_chunk_usage=True, ignore_eos=True)


def _body(max_tokens: int) -> bytes:
    return encode_body(request_body("completions", "sim-tiny", "hello there " * 20, max_tokens, traits=TRAITS))


async def _run(client, url: str, bodies: list[tuple[str, bytes]]) -> dict[str, RequestRecord]:
    out: dict[str, RequestRecord] = {}

    async def one(rid: str, body: bytes) -> None:
        rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
        out[rid] = await stream_request(client, url, body, rec, headers={"X-Request-Id": rid})

    async with anyio.create_task_group() as tg:
        for rid, body in bodies:
            tg.start_soon(one, rid, body)
    return out


@pytest.mark.parametrize("kind", ["httpx", "raw"])
def test_every_emission_is_recorded(sim, kind):
    """Multi-token chunks (speculative decoding), 6 concurrent streams: the client's (tokens) per chunk
    equal the server's emissions one for one, and no chunk is stamped before the server emitted it."""

    async def main():
        async with _client(kind) as c:
            return await _run(c, f"{sim.base_url}/v1/completions", [(f"t-{kind}-{i}", _body(40)) for i in range(6)])

    recs = anyio.run(main)
    truth = {r["request_id"]: r for r in sim.truth()["requests"]}
    assert len(recs) == 6
    for rid, rec in recs.items():
        t = truth[rid]
        assert rec.outcome == "ok" and rec.finish_reason == "length", rec.error
        assert [n for _, n in rec.events] == [n for _, n in t["emissions"]]
        assert rec.output_tokens == rec.final_usage_tokens == t["output_tokens"] == 40
        assert all(arrived >= emitted for (arrived, _), (emitted, _) in zip(rec.events, t["emissions"]))


@pytest.mark.parametrize("kind", ["httpx", "raw"])
def test_failures_map_to_the_same_outcomes(sim, kind):
    async def main():
        async with _client(kind) as c:
            url = f"{sim.base_url}/v1/completions"
            recs = await _run(c, url, [("f-503", _body(3)), ("f-trunc", _body(5)), ("f-reset", _body(6))])
            refused = await stream_request(c, f"http://127.0.0.1:{free_port()}/v1/completions", _body(4), RequestRecord(0, 0, 0.0))
            return {r.outcome for r in recs.values()}, refused

    outcomes, refused = anyio.run(main)
    assert outcomes == {"http_error", "truncated", "reset"}
    assert refused.outcome == "connect_error"


def test_raw_transport_reuses_a_finished_streams_connection(sim):
    """Read to its end after [DONE], a stream's connection goes back to the pool: the next request of
    the stream needs no new connect inside its TTFT."""

    async def main():
        c = RawClient()
        connects = 0
        inner = c._connect

        async def counting(key):
            nonlocal connects
            connects += 1
            return await inner(key)

        c._connect = counting  # type: ignore[method-assign]
        url = f"{sim.base_url}/v1/completions"
        recs = [await stream_request(c, url, _body(8), RequestRecord(0, s, 0.0)) for s in range(3)]
        await c.aclose()
        return connects, recs

    connects, recs = anyio.run(main)
    assert [r.outcome for r in recs] == ["ok"] * 3 and connects == 1
