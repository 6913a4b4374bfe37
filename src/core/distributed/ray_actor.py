"""The client actor: one host's share of a cell's streams, run by the same worker loop as a worker process.

A plain class; distributed/ray_pool.py makes it a Ray actor (``ray.remote``), so importing this module needs no
Ray. The coordinator calls ``ping`` (clock exchanges), ``start``, ``poll`` (messages since the last poll:
first tokens, token counts, finished records), ``stop`` and ``finish``. Every stamp leaves the actor in its
host's monotonic clock; a test may skew that clock (hostclock.ClockSkew) to check the coordinator undoes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from typing import Any

from infermatrix.core.distributed.hostclock import ClockSkew, convert_record, convert_ticks
from infermatrix.core.distributed.workers import WorkerSpec, worker_loop

__all__ = ["ClientActor"]


class ClientActor:
    def __init__(self, spec: WorkerSpec, skew: tuple[float, float] | None = None):
        self.spec = spec
        self.skew = ClockSkew(skew[0], skew[1], epoch=time.monotonic()) if skew else None
        self.outbox: list[Any] = []
        self.control: asyncio.Queue[Any] | None = None
        self.task: asyncio.Task[None] | None = None

    def _host_clock(self, t: float) -> float:
        return self.skew.skewed(t) if self.skew is not None else t

    def _from_host_clock(self, t: float) -> float:
        return self.skew.true(t) if self.skew is not None else t

    async def ping(self) -> float:
        """This host's monotonic clock, now (seconds)."""
        return self._host_clock(time.monotonic())

    async def where(self) -> dict[str, Any]:
        import ray  # inside the actor: the Ray backend's own process

        return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
                "skew": None if self.skew is None else dataclasses.asdict(self.skew)}  # fmt: skip

    def _send(self, msg: Any) -> None:
        kind, value = msg
        if self.skew is not None and kind == "record":
            value = dataclasses.replace(value, events=list(value.events))
            convert_record(value, self._host_clock)
        elif self.skew is not None and kind == "load":
            value = (value[0], convert_ticks(value[1], self._host_clock))
        self.outbox.append((kind, value))

    async def start(self) -> None:
        self.control = asyncio.Queue()
        self.task = asyncio.ensure_future(worker_loop(self.spec, self._send, lambda: None, self.control.get))

    async def poll(self) -> list[Any]:
        out, self.outbox = self.outbox, []
        if self.task is not None and self.task.done() and self.task.exception() is not None:
            out.append(("failed", repr(self.task.exception())))
        return out

    async def stop(self, window_end_host: float, wait_s: float) -> None:
        """The window closed at ``window_end_host`` (this host's clock): no new requests, first tokens awaited, then goodbye."""
        if self.control is not None:
            await self.control.put(("stop", self._from_host_clock(window_end_host), wait_s))
