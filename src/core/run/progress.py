"""What the user watches during a run: one plain line per finished cell everywhere, and on a terminal the live
matrix above the cursor (core/run/live.py: the grid, the current cell's tok/s and batch, KV, watts, the ETA).

The live view costs the client as little as it can: no thread (rich's auto-refresh thread is off); a timer on the
run's own event loop redraws at most :data:`REDRAW_HZ` times a second, and only when the screen's text changed;
the hot path (``on_tokens``, once per read) adds to a counter. docs/performance.md, "Live view".
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

from infermatrix.core.contexts import format_context
from infermatrix.core.run.live import Board, Frame, GridPlan, Key, render

__all__ = ["RunProgress", "REDRAW_HZ"]

REDRAW_HZ = 2.0  # a modest rate: the numbers stay readable and the redraws cost the client next to nothing


class RunProgress:
    """Plain lines per finished cell everywhere; on a terminal (and ``live``), the live view above them."""

    def __init__(self, console: Console, total_cells: int, live: bool = True):
        self.console = console
        self.board = Board(total_cells)
        self.tokens = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)
        self._show = live and console.is_terminal
        self._live: Live | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last: Frame | None = None
        self.redraws = 0  # frames drawn (an unchanged frame is not): for the overhead script and the tests

    # The step code sets and reads these (load/search.py grows ``total`` as it probes).
    @property
    def total(self) -> int:
        return self.board.total

    @total.setter
    def total(self, value: int) -> None:
        self.board.total = value

    @property
    def done(self) -> int:
        return self.board.done

    def __enter__(self) -> RunProgress:
        if self._show:
            # stdout is left alone: where the user sent it (a file, a pipe) is where it stays while the view runs
            self._live = Live(console=self.console, auto_refresh=False, transient=True, redirect_stdout=False)
            self._live.start()
            self.redraw()
            self._schedule()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- the plan and the events ---------------------------------------------------------------------------

    def plan(self, plan: GridPlan) -> None:
        """The matrix this display draws (MatrixRun.run): without one it shows the status line only."""
        self.board.set_plan(plan)
        self.redraw()

    def on_reading(self, **values: float | None) -> None:
        """Readings pushed by a sampler: ``batch``, ``waiting``, ``kv`` (0..1), ``watts``, ``in_flight``."""
        self.board.on_reading(**values)

    def add_source(self, source: Callable[[], dict[str, float | None]]) -> None:
        """A callable asked at each redraw for readings (a dict of the names ``on_reading`` takes)."""
        self.board.sources.append(source)

    def cell(self, label: str, key: Key | None = None) -> None:
        self.board.cell(label, key)
        self.tokens = 0
        self._samples.clear()
        self.redraw()

    def on_phase(self, phase: str, deadline: float | None) -> None:
        b = self.board
        b.phase, b.deadline, b.phase_started = phase, deadline, time.monotonic()
        if phase == "measure":
            self.tokens = 0
            self._samples.clear()

    def on_tokens(self, n: int) -> None:
        self.tokens += n

    def live_tps(self) -> float:
        now = time.monotonic()
        self._samples.append((now, self.tokens))
        while len(self._samples) > 1 and now - self._samples[0][0] > 3.0:
            self._samples.popleft()
        (t0, k0), (t1, k1) = self._samples[0], self._samples[-1]
        return (k1 - k0) / (t1 - t0) if t1 > t0 else 0.0

    def finished(self, label: str, status: str, detail: str, key: Key | None = None, tps: float | None = None) -> None:
        """A unit done: its line printed (above the live view on a terminal), its grid cell filled (``key``, ``tps``)."""
        self.board.finished(status, key, tps)
        style = {"valid": "green", "looped": "yellow", "over_capacity": "dim", "error": "red"}.get(status, "white")
        # Cell labels fit 16 columns; a longer one (a load point's, a trace's file name) keeps a space before its status.
        self.console.print(Text.assemble((f"  {label:<16} ", "bold"), (f"{status:<14}", style), detail))
        self.redraw()  # the line went above the view; the view then shows the cell filled in

    # -- drawing -------------------------------------------------------------------------------------------

    def redraw(self) -> None:
        """Draw the frame if its text changed since the last one (nothing off a terminal). A fault in drawing never
        stops the run: it is said in one line, and the per-cell lines go on without the view."""
        if self._live is None:
            return
        try:
            frame = self.board.frame(time.monotonic(), self.live_tps())
            if frame == self._last:
                return
            self._last = frame
            self.redraws += 1
            self._live.update(render(frame), refresh=True)
        except Exception as exc:
            self._live.stop()
            self._live = None
            self.console.print(f"  live view stopped ({type(exc).__name__}: {exc}); the per-cell lines go on", highlight=False)

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a caller outside a run): redrawn at its events only
            return
        self._timer = loop.call_later(1.0 / REDRAW_HZ, self._tick)

    def _tick(self) -> None:
        self.redraw()
        if self._live is not None:
            self._schedule()

    @staticmethod
    def cell_label(context: int, n: int | None = None) -> str:
        return f"prefill {format_context(context)}" if n is None else f"decode {format_context(context)} × {n}"
