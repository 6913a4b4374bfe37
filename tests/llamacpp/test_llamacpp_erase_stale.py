"""llama-server's cache reset (every slot erased before a prefill probe) over pooled connections the server closes:
llama-server closes idle keep-alive connections, and the reset follows a cell's closed streams. A call on such a
connection is sent again on a fresh one; a server that still answers nothing, or names no slot, is a note, never a
lost probe and never a false "ok". A loopback server answering with the recorded /props and /slots of a real
llama-server (tests/llamacpp/data), one request per connection (tests/keepalive_server.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from keepalive_server import KeepAliveThenDrop, http_answer, serving

from infermatrix.plugins.llamacpp.config import LlamaCppEngineConfig
from infermatrix.plugins.llamacpp.plugin import LlamaCppEngine

DATA = Path(__file__).parent / "data"
SLOTS = 8  # unified_slots.json: -np 8


class LlamaServerPages:
    """llama-server's /props, /slots and slot erase, as answers by path; ``drop`` names path prefixes never answered.
    ``erased`` lists the slots erased, in order."""

    def __init__(self, drop: tuple[str, ...] = ()):
        self.drop = drop
        self.erased: list[int] = []
        self.pages = {"/props": (DATA / "unified_props.json").read_bytes(), "/slots": (DATA / "unified_slots.json").read_bytes()}

    def __call__(self, path: str) -> bytes | None:
        if path.startswith(self.drop):
            return None
        if path.startswith("/slots/") and path.endswith("?action=erase"):
            slot = int(path[len("/slots/") :].split("?")[0])
            self.erased.append(slot)
            return http_answer(json.dumps({"id_slot": slot, "n_erased": 0}).encode())
        page = self.pages.get(path)
        return None if page is None else http_answer(page)


@contextlib.asynccontextmanager
async def _engine(server: KeepAliveThenDrop, workdir: Path) -> AsyncIterator[tuple[LlamaCppEngine, httpx.AsyncClient]]:
    async with serving(server) as port, httpx.AsyncClient(timeout=5) as client:
        yield LlamaCppEngine(LlamaCppEngineConfig(base_url=f"http://127.0.0.1:{port}", model="tiny"), workdir), client


@pytest.mark.anyio
@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_every_slot_is_erased_though_each_pooled_connection_is_closed_after_one_answer(reset, tmp_path):
    pages = LlamaServerPages()
    server = KeepAliveThenDrop(pages, reset=reset)
    async with _engine(server, tmp_path) as (engine, client):
        notes = [await engine.reset_prefix_cache(client) for _ in range(3)]
    assert notes == [f"ok ({SLOTS} slots erased)"] * 3
    assert pages.erased == list(range(SLOTS)) * 3  # each slot, each time, in order
    # every call but the very first met a connection closed under it and went out again on a fresh one
    assert server.connections >= 3 * (2 + SLOTS)


@pytest.mark.anyio
async def test_an_erase_that_is_never_answered_is_a_note_not_an_error(tmp_path):
    pages = LlamaServerPages(drop=("/slots/",))
    async with _engine(KeepAliveThenDrop(pages), tmp_path) as (engine, client):
        note = await engine.reset_prefix_cache(client)
    assert note is not None and note.startswith("POST /slots/{slot_id}?action=erase failed: RemoteProtocolError"), note
    assert pages.erased == []


@pytest.mark.anyio
async def test_a_server_that_names_no_slot_is_not_an_ok(tmp_path):
    """/props and /slots unanswered: nothing to erase is said, not "ok (0 slots erased)" — the probe would not be cold."""
    pages = LlamaServerPages(drop=("/props", "/slots"))
    async with _engine(KeepAliveThenDrop(pages), tmp_path) as (engine, client):
        note = await engine.reset_prefix_cache(client)
    assert note == "llama-server named no slots to erase: neither /slots nor /props answered"
