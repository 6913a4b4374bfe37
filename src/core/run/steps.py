"""The run's start-up on the engine's account, guarded (describe, capacity, tokenizer, gauges), so an engine
that fails in it is restarted or waited for and asked again, never a traceback (docs/reliability.md). The
steps after start-up (probes, cells, points, the workload's pass) are core/engine/step.py's."""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable

import anyio
import httpx
from rich.console import Console

from infermatrix.core.engine.contract import Engine, EngineError
from infermatrix.core.engine.step import Phase
from infermatrix.core.engine.watch import EngineDown, StepFailed, WatchedTransport, guarded
from infermatrix.core.wallclock import PhaseClock

__all__ = ["start_up", "STARTUP_TRIES"]

# A start-up step that fails while the engine answers is tried this many times before the run stops.
STARTUP_TRIES = 3


async def start_up(
    engine: Engine, client: httpx.AsyncClient, transport: WatchedTransport, console: Console,
    fn: Callable[[Phase], Awaitable[Any]], clock: PhaseClock | None = None,
) -> Any:
    """``fn`` (the start-up steps, naming each in the phase it gets), again after a recovery when the
    engine goes down meanwhile, or after a pause when a step fails with the engine up (at most
    :data:`STARTUP_TRIES` times). Raises :class:`EngineError` when it can't complete."""
    failures = downs = 0
    while True:
        phase = Phase(clock=clock)
        try:
            return await guarded(engine, client, transport, functools.partial(fn, phase))
        except EngineDown as down:
            downs += 1
            console.print(f"  [red]engine down during start-up ({phase.now}): {down.why}[/]", highlight=False)
            if downs > engine.config.max_restarts:
                raise EngineError(f"the engine went down {downs} times during start-up; last: {down.why}{_tail(engine)}") from None
            if not engine.attach:
                console.print(f"  restarting {engine.kind} …", highlight=False)
            else:
                console.print(f"  waiting up to {engine.config.reconnect_timeout_s:g} s for {engine.base_url} to come back …", highlight=False)
            if clock is not None:
                clock.enter("recover")
            console.print(f"  {await engine.recover(client)}", highlight=False)
        except StepFailed as exc:
            failures += 1
            if failures >= STARTUP_TRIES:
                raise EngineError(f"start-up failed {failures} times, last in {phase.now}: {exc.why}") from None
            console.print(f"  [yellow]start-up step {phase.now} failed ({exc.why}); trying again[/]", highlight=False)
            await anyio.sleep(1.0)


def _tail(engine: Engine) -> str:
    tail = engine.log_tail(12)
    return f"; last lines of its log:\n{engine.redact(tail)}" if tail else ""
