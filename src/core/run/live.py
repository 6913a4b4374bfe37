"""The run's live matrix on a terminal: the grid of contexts × concurrencies filling in, the current cell's
running tok/s, batch and in-flight count, the engine's KV usage and the GPUs' watts when known, and the ETA.

Two halves, kept apart so the screen can be checked without one: :class:`Board` is what is known (the plan,
the finished cells, the current one, the latest readings) and turns it into plain strings (:meth:`Board.frame`);
:func:`render` draws a frame with rich. ``progress.RunProgress`` owns the ``rich.live.Live`` and redraws from the
run's own event loop — a timer callback, never a thread — and only when the frame's strings changed.

Readings come two ways: ``sources`` (callables the board asks at each redraw: the runner's last engine gauge read,
the cell's GPU samples) and :meth:`Board.on_reading` (pushed by a sampler that reads on its own schedule; a pushed
value older than :data:`STALE_S` is not shown). Names: ``batch`` (the engine's running requests), ``waiting``,
``kv`` (KV-cache usage, 0..1), ``watts`` (all GPUs together), ``in_flight`` (the client's open requests).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Callable

from rich.text import Text

from infermatrix.core.contexts import format_context

__all__ = ["Board", "Frame", "GridPlan", "RunnerReadings", "STATUS_CODES", "STALE_S", "format_tps", "render", "stored_marks"]

# A finished cell's status, short enough for a grid column (the legend under the grid says them whole).
STATUS_CODES = {"valid": "ok", "looped": "loop", "over_capacity": "over", "error": "err", "client_bound": "client",
                "interrupted": "cut", "admission_limited": "admit"}  # fmt: skip
_STYLES = {"loop": "yellow", "over": "dim", "err": "red", "client": "yellow", "cut": "red", "admit": "yellow"}
STALE_S = 5.0  # a reading older than this is not shown: it says nothing about the engine now

Key = tuple[int, int | None]  # (context tokens, concurrency); None: the context's prefill probe


@dataclass
class GridPlan:
    """The matrix the board draws and the units still to run, by kind: ``prefill``, ``decode``, and ``over``
    (cells known over capacity: said, not measured, so they take no time)."""

    contexts: list[int]  # decode contexts
    concurrencies: list[int]  # columns
    prefill: list[int]  # prefill contexts: a column for their probes (none: no column)
    pending: Counter[str]
    guess_s: dict[str, float] = field(default_factory=dict)  # a unit's seconds before any of its kind is measured (a lower bound)
    stored: dict[Key, tuple[str, float | None]] = field(default_factory=dict)  # a resumed run's stored cells: status, tok/s


@dataclass(frozen=True)
class Frame:
    """What the screen says, as plain strings: compared with the last one, so an unchanged screen is not redrawn."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    status: str
    legend: str


def format_tps(value: float | None) -> str:
    """A grid cell's tok/s: one decimal below 1,000, whole above (a column stays narrow)."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.1f}"


def _duration(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


class Board:
    """What the live view knows. Every method is cheap: the hot path (``on_tokens``) only adds to a counter."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        self.plan: GridPlan | None = None
        self.marks: dict[Key, tuple[str, float | None]] = {}  # finished: status code, tok/s (decode total; prefill prompt)
        self.key: Key | None = None
        self.label, self.phase = "", ""
        self.deadline: float | None = None
        self.phase_started = self.unit_started = time.monotonic()
        self.took: dict[str, list[tuple[int | None, float]]] = {}  # kind -> (context, seconds) of units measured
        self.sources: list[Callable[[], dict[str, float | None]]] = []
        self.readings: dict[str, tuple[float, float]] = {}  # name -> (value, monotonic time read)

    # -- events ----------------------------------------------------------------------------------------

    def set_plan(self, plan: GridPlan) -> None:
        self.plan = plan
        self.marks.update({key: (STATUS_CODES.get(status, status), tps) for key, (status, tps) in plan.stored.items()})

    def cell(self, label: str, key: Key | None) -> None:
        self.label, self.key, self.unit_started = label, key, time.monotonic()

    def on_reading(self, **values: float | None) -> None:
        """Readings pushed by a sampler (names in the module's docstring); None clears one."""
        now = time.monotonic()
        for name, value in values.items():
            if value is None:
                self.readings.pop(name, None)
            else:
                self.readings[name] = (float(value), now)

    def finished(self, status: str, key: Key | None, tps: float | None) -> None:
        self.done += 1
        kind = _kind(key)
        if key is not None:
            self.marks[key] = (STATUS_CODES.get(status, status), tps)
        if self.plan is not None:
            pending = self.plan.pending
            # A cell over capacity was planned as "over" (no time); one found too big only now was a "decode".
            slot = "over" if status == "over_capacity" and pending["over"] > 0 else kind
            pending[slot] = max(0, pending[slot] - 1)
        if status != "over_capacity":
            self.took.setdefault(kind, []).append((key[0] if key else None, time.monotonic() - self.unit_started))
        self.key, self.label = None, ""  # until the next unit starts, the status line says only the totals

    # -- what the screen says --------------------------------------------------------------------------

    def fresh(self, now: float) -> dict[str, float]:
        """The readings to show: the sources asked now, then those pushed within :data:`STALE_S`."""
        for source in self.sources:
            self.on_reading(**source())
        return {name: value for name, (value, t) in self.readings.items() if now - t <= STALE_S}

    def eta_s(self, now: float) -> tuple[float, bool] | None:
        """Seconds left in this display's units, and whether it is a lower bound (a kind not measured yet): the
        units still to run at their kind's mean measured time, the current one less what it has run already."""
        elapsed = now - self.unit_started if self.label else 0.0
        if self.plan is None:
            took = self.took.get("step")
            if not took:
                return None
            return max(0.0, (self.total - self.done) * mean(t for _, t in took) - elapsed), False
        left, bound = 0.0, False
        current = _kind(self.key) if self.key is not None else None
        for kind in ("prefill", "decode"):
            n = self.plan.pending[kind]
            each, guessed = self._each_s(kind, None)
            if each is None or n == 0:
                continue
            bound = bound or guessed
            if current == kind and self.key is not None:
                own, _ = self._each_s(kind, self.key[0])
                left += (n - 1) * each + max(0.0, (own or each) - elapsed)
            else:
                left += n * each
        return left, bound

    def _each_s(self, kind: str, ctx: int | None) -> tuple[float | None, bool]:
        """One unit's expected seconds: the mean of those measured at ``ctx`` (any context: None), else of its
        kind, else the plan's guess (then True: a lower bound)."""
        took = self.took.get(kind, [])
        same = [t for c, t in took if ctx is None or c == ctx]
        if same or took:
            return mean(same or [t for _, t in took]), False
        return (self.plan.guess_s.get(kind) if self.plan is not None else None), True

    def frame(self, now: float, live_tps: float) -> Frame:
        header, rows = self._grid(live_tps)
        return Frame(header, rows, self._status(now, live_tps), self._legend())

    def _grid(self, live_tps: float) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
        plan = self.plan
        if plan is None:
            return (), ()
        columns: list[int | None] = [*([None] if plan.prefill else []), *plan.concurrencies]  # prefill: (ctx, None)
        planned = {*((c, None) for c in plan.prefill), *((c, n) for c in plan.contexts for n in plan.concurrencies)}
        header = ("context", *(["prefill"] if plan.prefill else []), *(f"×{n}" for n in plan.concurrencies))
        rows = []
        for ctx in sorted({*plan.contexts, *plan.prefill}):
            row = [format_context(ctx)]
            for n in columns:
                key = (ctx, n)
                if key == self.key:
                    row.append(f"▸ {format_tps(live_tps)}" if self.phase == "measure" else f"▸ {self.phase}")
                elif key in self.marks:
                    code, tps = self.marks[key]
                    row.append(f"{format_tps(tps)} {code}")
                else:
                    row.append("·" if key in planned else "")
            rows.append(tuple(row))
        return header, tuple(rows)

    def _status(self, now: float, live_tps: float) -> str:
        parts = [f"[{self.done}/{self.total}]"]
        if self.label:
            elapsed = now - self.phase_started
            timing = f"{elapsed:.0f} s"
            if self.deadline is not None and self.phase == "measure":
                total = self.deadline - self.phase_started
                timing = f"{min(elapsed, total):.0f}/{total:.0f} s"
            parts += [self.label, f"{self.phase} {timing}", f"{live_tps:,.1f} tok/s"]
        r = self.fresh(now)
        if "batch" in r:
            parts.append(f"batch {r['batch']:.0f}" + (f" (+{r['waiting']:.0f} waiting)" if r.get("waiting") else ""))
        if "in_flight" in r:
            parts.append(f"in flight {r['in_flight']:.0f}")
        if "kv" in r:
            parts.append(f"KV {100 * r['kv']:.0f} %")
        if "watts" in r:
            parts.append(f"GPU {r['watts']:,.0f} W")
        eta = self.eta_s(now)
        if eta is not None:
            parts.append(f"ETA {'≥ ' if eta[1] else ''}{_duration(eta[0])}")
        return "  ".join(parts)

    def _legend(self) -> str:
        if self.plan is None:
            return ""
        shown = sorted({code for code, _ in self.marks.values()})
        names = {v: k for k, v in STATUS_CODES.items()}
        said = ", ".join(f"{c} {names.get(c, c)}" for c in shown if names.get(c, c) != c)
        return "tok/s: decode total, prefill prompt" + (f"; {said}" if said else "") + "; · to run; ▸ running"


def _kind(key: Key | None) -> str:
    if key is None:
        return "step"
    return "prefill" if key[1] is None else "decode"


def render(frame: Frame) -> Text:
    """The frame drawn: a grid (when the display has a matrix) above the status line and the legend. Plain padded
    text with few styled spans, not a rich Table: rich draws an 8 × 8 table in ~6 ms, this in ~0.6 ms, and each
    redraw holds the client's event loop for as long as it takes (docs/performance.md, "Live view")."""
    out = Text(no_wrap=True, overflow="crop")  # never wrapped (a narrow terminal crops the grid's right side)
    if frame.header:
        grid = [frame.header, *frame.rows]
        widths = [max(len(row[j]) for row in grid) for j in range(len(frame.header))]
        out.append("  ".join(h.ljust(w) if j == 0 else h.rjust(w) for j, (h, w) in enumerate(zip(frame.header, widths))), style="dim")
        for row in frame.rows:
            out.append("\n")
            out.append(row[0].ljust(widths[0]))
            for cell, width in zip(row[1:], widths[1:]):
                out.append("  " + cell.rjust(width), style=_cell_style(cell))
        out.append("\n")
    out.append(frame.status, style="bold")
    if frame.legend:
        out.append("\n" + frame.legend, style="dim")
    return out


def _cell_style(cell: str) -> str | None:
    """A cell's colour: the running one and those not valid only. Each styled span costs rich time to draw, and a
    valid cell says "ok" in words already."""
    if cell.startswith("▸"):
        return "bold cyan"
    return _STYLES.get(cell.rsplit(" ", 1)[-1])


def stored_marks(store: Any, run_id: str) -> dict[Key, tuple[str, float | None]]:
    """A resumed run's stored cells and prefill probes, for the grid (a new run has none)."""
    _, cells = store.query("SELECT context_tokens, concurrency, status, total_tps FROM cells WHERE run_id = ?", [run_id])
    _, probes = store.query("SELECT context_tokens, status, prompt_tps FROM prefill WHERE run_id = ?", [run_id])
    marks: dict[Key, tuple[str, float | None]] = {(int(c), int(n)): (status, tps) for c, n, status, tps in cells}
    marks.update({(int(c), None): (status, tps) for c, status, tps in probes})
    return marks


class RunnerReadings:
    """The readings a run takes already, for the board's ``sources``: the engine gauges' last answered read (once
    a second in the window, and in the steady-state wait), the client's open requests, the cell's GPU samples.
    Costs a few attribute reads per redraw: the open requests are counted from a cursor past the ended ones."""

    def __init__(self, runner: Any, gpu: Callable[[], list[Any]]):
        self.runner, self.gpu = runner, gpu
        self._records: list[Any] | None = None
        self._first_open = 0

    def __call__(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        gauges = getattr(self.runner, "gauges", None)
        sample = getattr(gauges, "last_sample", None)
        if sample is not None and time.monotonic() - sample.t <= STALE_S:
            out.update(batch=sample.gauges.running, waiting=sample.gauges.waiting, kv=sample.gauges.kv_usage)
        records = getattr(self.runner, "live_records", None)
        if records:
            out["in_flight"] = self._open(records)
        samples = self.gpu()
        if samples:
            last = samples[-1].t
            watts = [s.power_w for s in reversed(samples[-64:]) if s.t == last and s.power_w is not None]
            out["watts"] = sum(watts) if watts else None
        return out

    def _open(self, records: list[Any]) -> int:
        if records is not self._records:  # a new cell's list
            self._records, self._first_open = records, 0
        while self._first_open < len(records) and records[self._first_open].ended is not None:
            self._first_open += 1
        return sum(1 for r in records[self._first_open:] if r.written and r.ended is None)
