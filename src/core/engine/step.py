"""One step of a run on its engine — a prefill probe, a decode cell, a load point, a trace replay, the workload's
pass — written once: *engine up → guarded step → went down → recover* (docs/reliability.md).

``EngineSteps.step`` checks the engine is there (``ensure_up``: one gone between steps is brought back first, and
no step is blamed), runs the step watched (``guarded``), and ends it one of four ways:

- it finished: its value is saved;
- the engine went down inside it: it is saved as ``error`` with the reason (``went_down``), then the engine is
  brought back (``recover``); an engine that can't be brought back raises ``EngineError``, which ends the run;
- a request outside the per-request accounting failed with the engine up: it is saved as ``error``
  (``failed in <phase>: …``), the run goes on;
- it was cancelled (Ctrl-C): what it had is saved as ``interrupted`` (shielded), and the cancel goes on.

What is saved and how is the step's own (its ``save`` and ``interrupted``); the order is this module's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generic, Iterator, TypeVar

import anyio
import httpx
from rich.console import Console

from infermatrix.core.engine.contract import Engine
from infermatrix.core.engine.watch import EngineDown, StepFailed, WatchedTransport, down_reason, guarded
from infermatrix.core.wallclock import PhaseClock

__all__ = ["Phase", "EngineSteps", "StepEnd"]

T = TypeVar("T")
Forward = Callable[[str, "float | None"], None]


class Phase:
    """The phase a step is in (``prompts``, ``warm-up``, ``ramp`` … as the cell reports them), passed on to
    the progress display; a failed step's reason names it, and its :class:`PhaseClock` (``clock``) attributes
    the wall time to it (core/wallclock.py)."""

    def __init__(self, forward: Forward | None = None, clock: PhaseClock | None = None):
        self.now = "start-up"
        self.forward = forward
        self.clock = clock

    def __call__(self, name: str, deadline: float | None = None) -> None:
        self.now = name
        if self.clock is not None:
            self.clock.enter(name)
        if self.forward is not None:
            self.forward(name, deadline)

    @contextlib.contextmanager
    def forwarding(self, forward: Forward | None) -> Iterator[Phase]:
        """Phases go to ``forward`` (a progress display) for the block's duration, then where they went before."""
        before, self.forward = self.forward, forward
        try:
            yield self
        finally:
            self.forward = before


@dataclass
class StepEnd(Generic[T]):
    """How a step ended: its ``value`` when it finished, else ``reason`` (status ``error``) and ``flags``
    (``engine_down`` or ``failed_phase``, and ``engine_log_tail``); ``down``: the engine went down in it."""

    value: T | None = None
    reason: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    down: bool = False

    @property
    def failed(self) -> bool:
        return self.reason is not None


@dataclass
class EngineSteps:
    """What a step needs of its run's engine: the engine, its client and watched transport, the console for
    what happens to it, the run's one :class:`Phase`; ``on_recover`` is told when the engine was brought back
    (its prefix cache is empty after)."""

    engine: Engine
    client: httpx.AsyncClient
    transport: WatchedTransport
    console: Console
    phase: Phase
    reconnect_timeout_s: float
    on_recover: Callable[[], None] = lambda: None

    async def step(
        self, fn: Callable[[], Awaitable[T]], save: Callable[[StepEnd[T]], None], interrupted: Callable[[], None],
        begin: Callable[[], None] | None = None,
    ) -> StepEnd[T]:
        """Run ``fn`` as one step (``begin`` once the engine is known to be up), ``save`` how it ended, bring the
        engine back if it went down in it; ``interrupted`` saves what a cancelled step had (then the cancel goes on)."""
        await self.ensure_up()
        if begin is not None:
            begin()
        try:
            end: StepEnd[T] = StepEnd(value=await guarded(self.engine, self.client, self.transport, fn))
        except EngineDown as down:
            reason, flags = await self.went_down(down.why)
            end = StepEnd(reason=reason, flags=flags, down=True)
        except StepFailed as exc:  # the engine answers, but a request outside the per-request accounting failed
            now = self.phase.now
            end = StepEnd(reason=f"failed in {now}: {exc.why}", flags={"failed_phase": now, "engine_log_tail": self.engine.redact(self.engine.log_tail(20))})
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                interrupted()
            raise
        save(end)
        if end.down:
            await self.recover()
        return end

    async def ensure_up(self) -> None:
        """The engine gone between steps: no step to blame, bring it back first."""
        self.phase("health")
        why = await down_reason(self.engine, self.client)
        if why is not None:
            self.console.print(f"  [red]{self.engine.redact(why)}[/] between cells", highlight=False)
            if self.engine.attach:
                self.console.print(f"  waiting up to {self.reconnect_timeout_s:g} s for {self.engine.base_url} to come back …", highlight=False)
            await self.recover()

    async def recover(self) -> None:
        """Restart the engine (or wait for it); raises ``EngineError`` when it can't come back (the run ends)."""
        self.phase("recover")
        self.on_recover()
        self.console.print(f"  {await self.engine.recover(self.client)}", highlight=False)

    async def went_down(self, why: str) -> tuple[str, dict[str, Any]]:
        """The reason (and flags) a step the engine went down in is saved with."""
        engine, now = self.engine, self.phase.now
        tail = engine.redact(engine.log_tail(20))
        last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
        reason = engine.redact(f"engine down during this cell ({now}): {why}" + (f"; last log line: {last}" if last else ""))
        self.console.print(f"  [red]{reason}[/]", highlight=False)
        waiting = f"waiting up to {self.reconnect_timeout_s:g} s for {engine.base_url} to come back"
        self.console.print(f"  {'restarting ' + engine.kind if not engine.attach else waiting} …", highlight=False)
        return reason, {"engine_down": engine.redact(why), "engine_log_tail": tail, "failed_phase": now}
