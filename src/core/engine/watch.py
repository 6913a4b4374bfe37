"""Watching the engine while a cell or probe runs: is it still there?

Down = the process exited (launch mode), or connection failures in a row on any request followed by a
failed ``/health`` probe. The runner then records the cell as ``error`` and restarts or waits.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio
import httpx
from infermatrix.core.engine.contract import Engine

__all__ = ["CONNECT_FAILURES", "WatchedTransport", "EngineDown", "guarded"]

# The engine is suspected down after this many connection failures in a row (then /health decides).
CONNECT_FAILURES = 3


class WatchedTransport(httpx.AsyncBaseTransport):
    """The client's transport, counting connection failures in a row (any request, any stream)."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner = inner
        self.consecutive = 0
        self.last_error = ""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self.consecutive += 1
            self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise
        self.consecutive = 0
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class EngineDown(Exception):
    def __init__(self, why: str):
        super().__init__(why)
        self.why = why



def _http_error(exc: BaseException) -> httpx.HTTPError | None:
    """The HTTP error in ``exc``, also inside a task group's ExceptionGroup (concurrent recounts)."""
    if isinstance(exc, httpx.HTTPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _http_error(inner)
            if found is not None:
                return found
    return None


async def guarded(engine: Engine, client: httpx.AsyncClient, transport: WatchedTransport, fn: Callable[[], Awaitable[Any]]) -> Any:
    """``await fn()`` while watching the engine; raises :class:`EngineDown` (and cancels ``fn``) when it goes down."""
    result: Any = None
    down: str | None = None

    error: Exception | None = None

    async def work(scope: anyio.CancelScope) -> None:
        nonlocal result, down, error
        try:
            result = await fn()
        except Exception as exc:  # re-raised below, not wrapped in the task group's ExceptionGroup
            http = _http_error(exc)
            if http is None:
                error = exc
            else:  # outside a request's own accounting (prompts, gauges, recounts): is it the engine?
                why = await engine.healthy(client, 5)
                if why is None:
                    error = exc
                else:
                    down = f"{engine.kind} at {engine.base_url} stopped answering ({type(http).__name__}: {http}; health probe: {why})"
        scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal down
        transport.consecutive = 0
        while True:
            await anyio.sleep(0.1)
            if not engine.alive():
                down = f"{engine.kind} {engine.exit_note()}"
                break
            if transport.consecutive >= CONNECT_FAILURES:
                last = transport.last_error
                why = await engine.healthy(client, 5)
                if why is not None:
                    down = f"{engine.kind} at {engine.base_url} stopped answering ({last}; health probe: {why})"
                    break
                transport.consecutive = 0
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(work, tg.cancel_scope)
        tg.start_soon(watch, tg.cancel_scope)
    if error is not None:
        raise error
    if down is not None:
        raise EngineDown(down)
    return result
