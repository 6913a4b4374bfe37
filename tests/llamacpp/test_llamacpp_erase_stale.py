"""llama-server's cache reset (every slot erased before a prefill probe) over pooled connections the server closes:
llama-server closes idle keep-alive connections, and the reset follows a cell's closed streams. A call on such a
connection is sent again on a fresh one; a server that still answers nothing, or names no slot, is a note, never a
lost probe and never a false "ok". A loopback server answering with the recorded /props and /slots of a real
llama-server (tests/llamacpp/data), one request per connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from infermatrix.plugins.llamacpp.config import LlamaCppEngineConfig
from infermatrix.plugins.llamacpp.plugin import LlamaCppEngine

DATA = Path(__file__).parent / "data"
SLOTS = 8  # unified_slots.json: -np 8


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class OneAnswerPerConnection:
    """Answers llama-server's /props, /slots and slot erase, the first request on each connection only: the next one
    on that connection is closed unanswered (FIN, or RST with ``reset``) — the server's keep-alive timeout racing the
    client's pool. ``drop`` names paths it never answers."""

    def __init__(self, reset: bool = False, drop: tuple[str, ...] = ()):
        self.reset, self.drop = reset, drop
        self.connections = 0
        self.erased: list[int] = []
        self.pages = {"/props": (DATA / "unified_props.json").read_bytes(), "/slots": (DATA / "unified_slots.json").read_bytes()}

    def _body(self, path: str) -> bytes | None:
        if any(path.startswith(d) for d in self.drop):
            return None
        if path.startswith("/slots/") and path.endswith("?action=erase"):
            slot = int(path[len("/slots/") :].split("?")[0])
            self.erased.append(slot)
            return json.dumps({"id_slot": slot, "n_erased": 0}).encode()
        return self.pages.get(path)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            body = self._body(path)
            if body is not None:
                writer.write(_answer(body))
                await writer.drain()
                await reader.readuntil(b"\r\n\r\n")  # the next request on this connection: never answered
            if self.reset:
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def _engine(server: OneAnswerPerConnection, workdir: Path) -> AsyncIterator[tuple[LlamaCppEngine, httpx.AsyncClient]]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            yield LlamaCppEngine(LlamaCppEngineConfig(base_url=url, model="tiny"), workdir), client
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.mark.anyio
@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_every_slot_is_erased_though_each_pooled_connection_is_closed_after_one_answer(reset, tmp_path):
    server = OneAnswerPerConnection(reset=reset)
    async with _engine(server, tmp_path) as (engine, client):
        notes = [await engine.reset_prefix_cache(client) for _ in range(3)]
    assert notes == [f"ok ({SLOTS} slots erased)"] * 3
    assert server.erased == list(range(SLOTS)) * 3  # each slot, each time, in order
    # every call but the very first met a connection closed under it and went out again on a fresh one
    assert server.connections >= 3 * (2 + SLOTS)


@pytest.mark.anyio
async def test_an_erase_that_is_never_answered_is_a_note_not_an_error(tmp_path):
    server = OneAnswerPerConnection(drop=("/slots/",))
    async with _engine(server, tmp_path) as (engine, client):
        note = await engine.reset_prefix_cache(client)
    assert note is not None and note.startswith("POST /slots/{id}?action=erase failed: RemoteProtocolError"), note
    assert server.erased == []


@pytest.mark.anyio
async def test_a_server_that_names_no_slot_is_not_an_ok(tmp_path):
    """/props and /slots unanswered: nothing to erase is said, not "ok (0 slots erased)" — the probe would not be cold."""
    server = OneAnswerPerConnection(drop=("/props", "/slots"))
    async with _engine(server, tmp_path) as (engine, client):
        note = await engine.reset_prefix_cache(client)
    assert note == "llama-server named no slots to erase: neither /slots nor /props answered"
