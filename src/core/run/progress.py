"""What the user watches during a run: the current cell, its phase, elapsed time and live tok/s."""

from __future__ import annotations

import time
from collections import deque

from rich.console import Console
from rich.live import Live
from rich.text import Text

from infermatrix.core.contexts import format_context

__all__ = ["RunProgress"]


class RunProgress:
    """A one-line live display on a terminal; plain lines per finished cell everywhere."""

    def __init__(self, console: Console, total_cells: int):
        self.console = console
        self.total = total_cells
        self.done = 0
        self.label = ""
        self.phase = ""
        self.deadline: float | None = None
        self.phase_started = time.monotonic()
        self.tokens = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)
        self._live: Live | None = None

    def __enter__(self) -> RunProgress:
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True, get_renderable=self._render)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def cell(self, label: str) -> None:
        self.label = label
        self.tokens = 0
        self._samples.clear()

    def on_phase(self, phase: str, deadline: float | None) -> None:
        self.phase, self.deadline, self.phase_started = phase, deadline, time.monotonic()
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

    def _render(self) -> Text:
        elapsed = time.monotonic() - self.phase_started
        timing = f"{elapsed:5.1f} s"
        if self.deadline is not None and self.phase == "measure":
            total = self.deadline - self.phase_started
            timing = f"{min(elapsed, total):5.1f}/{total:.1f} s"
        return Text.assemble(
            (f"[{self.done}/{self.total}] ", "dim"), (self.label, "bold cyan"), "  ",
            (f"{self.phase:<8}", "magenta"), f" {timing}  ", (f"{self.live_tps():9.1f} tok/s", "green"),
        )

    def finished(self, label: str, status: str, detail: str) -> None:
        self.done += 1
        style = {"valid": "green", "looped": "yellow", "over_capacity": "dim", "error": "red"}.get(status, "white")
        # Cell labels fit 16 columns; a longer one (a load point's, a trace's file name) keeps a space before its status.
        self.console.print(Text.assemble((f"  {label:<16} ", "bold"), (f"{status:<14}", style), detail))

    @staticmethod
    def cell_label(context: int, n: int | None = None) -> str:
        return f"prefill {format_context(context)}" if n is None else f"decode {format_context(context)} × {n}"
