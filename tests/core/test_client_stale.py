"""A pooled keep-alive connection that the server closed is retried on a fresh one; a fresh connection
closed without an answer is the server's fault and is not (real loopback HTTP, an in-process server)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from infermatrix.core.measure.client import stream_request
from infermatrix.core.types import RequestRecord

BODY = (b'data: {"choices":[{"index":0,"text":"hi","finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\ndata: [DONE]\n\n')  # fmt: skip
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


class KeepAliveThenDrop:
    """Answers the first request on each connection and closes it, unanswered, on the second (a server's
    keep-alive limit or idle timeout racing the client's pool); ``drop_first`` drops every request."""

    def __init__(self, drop_first: bool = False):
        self.drop_first = drop_first
        self.connections = 0
        self.answered = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                if served or self.drop_first:
                    return  # closed with no answer
                writer.write(ANSWER)
                await writer.drain()
                served += 1
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


async def _run(server: KeepAliveThenDrop, requests: int) -> list[RequestRecord]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    records = []
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            for i in range(requests):
                rec = RequestRecord(stream_index=0, seq=i, sent=0.0)
                records.append(await stream_request(client, f"http://127.0.0.1:{port}/v1/completions", {"prompt": "x"}, rec))
    finally:
        srv.close()
        await srv.wait_closed()
    return records


@pytest.mark.anyio
async def test_a_pooled_connection_closed_by_the_server_is_retried_on_a_fresh_one():
    server = KeepAliveThenDrop()
    records = await _run(server, 3)
    assert [r.outcome for r in records] == ["ok", "ok", "ok"], [r.error for r in records]
    assert server.answered == 3 and server.connections == 3  # each retry went out on a new connection
    assert all(r.events and r.finish_reason == "stop" for r in records)


@pytest.mark.anyio
async def test_a_fresh_connection_closed_without_an_answer_is_a_failed_request():
    server = KeepAliveThenDrop(drop_first=True)
    (record,) = await _run(server, 1)
    assert record.outcome == "truncated" and "without sending a response" in (record.error or "")
    assert server.connections == 1  # not retried


@pytest.mark.anyio
async def test_health_probe_on_a_pooled_connection_the_server_closed_asks_again(tmp_path):
    """The engine watch's /health probe must not call an engine down because its kept-alive connection
    had been closed by the server (llama-server closes idle ones): found by the llama.cpp end-to-end run."""
    from infermatrix.core.registry import validate_config
    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.registry import build_engine

    server = KeepAliveThenDrop()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, {"engine": {"kind": "openai", "base_url": f"http://127.0.0.1:{port}", "model": "m"}}, "t")
    engine = build_engine(pm, cfg.engine, tmp_path)
    assert engine is not None
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            assert [await engine.healthy(client) for _ in range(3)] == [None, None, None]
    finally:
        srv.close()
        await srv.wait_closed()
    assert server.answered == 3 and server.connections == 3
