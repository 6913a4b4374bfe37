"""What a step after the matrix (a load point, a trace replay, the SLO search, the workload's pass) gets of its
run: the run's config, store and id, the engine's steps (core/engine/step.py), the cell runner and workload
start-up made, and three doors back into the run — its progress display, its count of saved steps, and (for the
search's concurrency probes) its decode cell. The run builds it (``MatrixRun.context``), so load never imports
run at run time (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, ContextManager

from rich.console import Console

from infermatrix.core.config import RunConfig
from infermatrix.core.engine.step import EngineSteps
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.store import Store
from infermatrix.core.types import Capacity, Workload

if TYPE_CHECKING:
    from infermatrix.core.run.progress import RunProgress

__all__ = ["RunContext"]


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
