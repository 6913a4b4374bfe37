"""Why an engine is down: a launched engine that refuses connections while its exit is not yet visible is
blamed on its exit once that shows (test_launched_engine_dies_in_phase[warmup] read "stopped answering
(ReadError …)" instead of "exited with code 7" on a loaded machine: the socket closed before the reaping)."""

from __future__ import annotations

import httpx
import pytest

from infermatrix.core.engine.contract import LaunchedEngine
from infermatrix.core.engine.watch import down_reason


class _Dying(LaunchedEngine):
    """Only what down_reason touches: the process shows its exit after ``exits_after`` looks."""

    kind = "sim"

    def __init__(self, exits_after: int | None) -> None:  # no super().__init__: nothing is launched
        self.attach, self.base_url, self.looks, self.exits_after = False, "http://127.0.0.1:9", 0, exits_after

    def command(self) -> list[str]:
        return []

    def alive(self) -> bool:
        self.looks += 1
        return self.exits_after is None or self.looks <= self.exits_after

    async def healthy(self, client: httpx.AsyncClient, timeout: float) -> str | None:
        return "ConnectError: connection refused"

    def exit_note(self) -> str:
        return "exited with code 7"


@pytest.mark.anyio
async def test_a_launched_engine_seen_exiting_after_the_probe_is_blamed_on_its_exit():
    async with httpx.AsyncClient() as client:
        why = await down_reason(_Dying(exits_after=5), client)
    assert why == "sim exited with code 7"


@pytest.mark.anyio
async def test_a_launched_engine_that_stays_up_but_refuses_stopped_answering():
    async with httpx.AsyncClient() as client:
        why = await down_reason(_Dying(exits_after=None), client, "ReadError")
    assert why is not None and why.startswith("sim at http://127.0.0.1:9 stopped answering (ReadError; health probe: ConnectError")
