"""Watching the engine while a step of the run (start-up, a cell, a probe) runs: is it still there?

Down = the process exited (launch mode), or connection failures in a row on any request followed by a
failed ``/health`` probe. The runner then records the cell as ``error`` and restarts or waits.

Every way a step can end on the engine's account becomes one of two exceptions, never a traceback:
:class:`EngineDown` (it is gone: recover) or :class:`StepFailed` (it answered, but a request outside
the per-request accounting failed — a tokenize call, a metrics read, describe: the step is an error,
the run goes on). Errors a step swallowed (a metrics read that returned nothing) are checked too: if
any transport error happened during the step, the engine is asked whether it is still there.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio
import httpx
from infermatrix.core.engine.contract import Engine, LaunchedEngine
from infermatrix.core.engine.traits import error_text

__all__ = ["CONNECT_FAILURES", "WatchedTransport", "EngineDown", "StepFailed", "guarded", "down_reason"]

# The engine is suspected down after this many connection failures in a row (then /health decides).
CONNECT_FAILURES = 3
# A launched engine that is dying can refuse connections a moment before its exit is visible (a loaded
# machine: the process has closed its socket but not yet been reaped). Its exit says more than the refused
# connection, so a failed probe waits this long for it before calling the engine "stopped answering".
EXIT_GRACE_S = 2.0


class WatchedTransport(httpx.AsyncBaseTransport):
    """The client's transport, counting connection failures in a row (any request, any stream)."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner = inner
        self.consecutive = 0
        self.last_error = ""
        self.errors = 0  # transport errors of any kind, ever (a step compares before and after)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self.errors += 1
            self.consecutive += 1
            self.last_error = error_text(exc)
            raise
        except httpx.TransportError:
            self.errors += 1
            raise
        self.consecutive = 0
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class EngineDown(Exception):
    """The engine is gone (process exited, or not answering ``/health``)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class StepFailed(Exception):
    """A request outside the per-request accounting failed while the engine still answers ``/health``."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


async def down_reason(engine: Engine, client: httpx.AsyncClient, cause: str = "") -> str | None:
    """Why the engine is down (its process exited, or ``/health`` fails), or ``None`` when it is there."""
    if not engine.alive():
        return f"{engine.kind} {engine.exit_note()}"
    why = await engine.healthy(client, 5)
    if why is None:
        return None
    if isinstance(engine, LaunchedEngine) and not engine.attach:
        await _await_exit(engine, EXIT_GRACE_S)
    if not engine.alive():  # it died while we asked: the exit says more than the refused connection
        return f"{engine.kind} {engine.exit_note()}"
    return f"{engine.kind} at {engine.base_url} stopped answering ({cause + '; ' if cause else ''}health probe: {why})"



async def _await_exit(engine: Engine, grace_s: float) -> None:
    """Up to ``grace_s`` for a process that no longer answers to be seen exiting (returns at once if it has)."""
    with anyio.move_on_after(grace_s):
        while engine.alive():
            await anyio.sleep(0.05)


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
    """``await fn()`` while watching the engine; raises :class:`EngineDown` (and cancels ``fn``) when it
    goes down, :class:`StepFailed` when an HTTP error escapes ``fn`` while the engine still answers."""
    result: Any = None
    down: str | None = None
    error: Exception | None = None
    errors_before = transport.errors

    async def work(scope: anyio.CancelScope) -> None:
        nonlocal result, down, error
        try:
            result = await fn()
        except Exception as exc:  # re-raised below, not wrapped in the task group's ExceptionGroup
            http = _http_error(exc)
            if http is None:
                error = exc  # not the engine's doing (a bug, the store): the caller's to handle
            else:  # outside a request's own accounting (prompts, gauges, recounts): is it the engine?
                down = await down_reason(engine, client, error_text(http))
                if down is None:
                    error = StepFailed(engine.redact(error_text(http)))
        else:
            if transport.errors != errors_before:  # something failed and was swallowed: is the engine still there?
                down = await down_reason(engine, client, transport.last_error)
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
    if down is not None:
        raise EngineDown(engine.redact(down))
    if error is not None:
        raise error
    return result
