"""What a step after the matrix (a load point, a trace replay, the SLO search, the workload's pass) gets of its
run: the run's config, store and id, the engine's steps (core/engine/step.py), the cell runner and workload
start-up made, and three doors back into the run — its progress display, its count of saved steps, and (for the
search's concurrency probes) its decode cell. The run builds it (``MatrixRun.context``), so load never imports
run at run time (docs/architecture.md).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ContextManager

from rich.console import Console

from infermatrix.core.config import RunConfig
from infermatrix.core.engine.step import EngineSteps, StepEnd
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.store import Store
from infermatrix.core.types import Capacity, Workload

if TYPE_CHECKING:
    from infermatrix.core.run.progress import RunProgress

__all__ = ["RunContext", "Rows"]

Rows = tuple[dict[str, Any], list[dict[str, Any]]]  # a step's row and its request rows


@dataclass(frozen=True)
class RunContext:
    """A run as a step after its matrix sees it (built once its engine is started)."""

    cfg: RunConfig
    store: Store
    run_id: str
    steps: EngineSteps  # the engine, its client, the console, the run's phase; ``steps.step`` runs one step
    runner: CellRunner
    workload: Workload
    capacity: Capacity
    max_model_len: int | None
    live: Callable[[int], ContextManager[RunProgress]]  # the progress display over N units, the phase forwarded to it
    count: Callable[[str], None]  # a saved step's status, counted in the run's outcome
    decode_cell: Callable[[RunProgress, int, int], Awaitable[None]]  # one decode cell (ctx, n), measured and saved

    @property
    def console(self) -> Console:
        return self.steps.console

    async def row_step(
        self, progress: RunProgress, label: str, fn: Callable[[], Awaitable[None]], rows: Callable[[str | None, str | None], Rows],
        save: Callable[[dict[str, Any], list[dict[str, Any]]], None], detail: Callable[[dict[str, Any]], str], interrupted: str,
    ) -> None:
        """One step stored as a row and its requests (a load point, a trace replay, the workload's pass): ``fn`` run
        as an engine step, then ``rows(status, reason)`` saved (status None: the step judges itself; ``error``
        with the reason; ``interrupted``), with its start and end, its reason redacted, counted and shown."""
        started_at = _now()

        def begin() -> None:  # the engine is up: the step starts now
            nonlocal started_at
            started_at = _now()

        def ended(end: StepEnd[None]) -> None:
            row, reqs = rows("error" if end.failed else None, end.reason)
            row.update(started_at=started_at, finished_at=_now())
            if row.get("reason"):
                row["reason"] = self.steps.engine.redact(row["reason"])
            self.steps.phase("save")
            save(row, reqs)
            self.count(row["status"])
            progress.finished(label, row["status"], row["reason"] or detail(row))

        def cut_short() -> None:
            row, reqs = rows("interrupted", interrupted)
            row.update(started_at=started_at, finished_at=_now())
            save(row, reqs)

        progress.cell(label)
        await self.steps.step(fn, ended, cut_short, begin)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
