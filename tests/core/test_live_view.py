"""The live matrix (core/run/live.py, core/run/progress.py) without a run: it starts no thread, redraws only when
the screen's text changed, fills the grid from finished cells and gives an ETA from the plan and measured cells."""

from __future__ import annotations

import asyncio
import io
import threading
import types
from collections import Counter

import pytest
from rich.console import Console

from infermatrix.core.run import live as live_module
from infermatrix.core.run.live import Board, GridPlan, format_tps
from infermatrix.core.run.progress import RunProgress


def _plan(**pending: int) -> GridPlan:
    return GridPlan(contexts=[1024, 4096], concurrencies=[1, 8], prefill=[1024], pending=Counter(pending), guess_s={"decode": 5.0, "prefill": 0.0})


def test_the_live_view_runs_on_the_event_loop_with_no_thread_and_redraws_only_on_change():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)

    async def go() -> tuple[int, int, int, int]:
        before = threading.active_count()
        with RunProgress(console, 4) as progress:
            during = threading.active_count()  # rich's auto-refresh would be a thread taking the GIL from the client
            progress.plan(_plan(decode=4))
            drawn = progress.redraws
            progress._tick()  # the timer's callback with nothing new: no redraw
            progress._tick()
            unchanged = progress.redraws
            progress.finished("decode 1K × 1", "valid", "detail", (1024, 1), 181.7)
            return before, during, unchanged - drawn, progress.redraws - unchanged

    before, during, idle_redraws, after_cell = asyncio.run(go())
    assert during == before
    assert idle_redraws == 0 and after_cell == 1
    assert "181.7 ok" in out.getvalue()  # the grid drawn on the terminal


def test_off_a_terminal_or_with_no_live_only_the_lines_are_printed():
    for console, live in ((Console(file=io.StringIO(), width=200), True), (Console(file=io.StringIO(), force_terminal=True, width=200, color_system=None), False)):
        with RunProgress(console, 1, live) as progress:
            progress.plan(_plan(decode=1))
            progress.finished("decode 1K × 1", "valid", "181.7 tok/s total", (1024, 1), 181.7)
        text = console.file.getvalue()  # type: ignore[attr-defined]
        assert progress.redraws == 0 and "ETA" not in text
        assert text.strip().startswith("decode 1K × 1") and "181.7 tok/s total" in text


def test_the_grid_shows_finished_cells_planned_ones_and_leaves_unplanned_ones_blank():
    board = Board(5)
    board.set_plan(_plan(prefill=1, decode=3, over=1))
    board.finished("valid", (1024, None), 9026.4)
    board.finished("valid", (1024, 1), 181.66)
    board.finished("over_capacity", (4096, 8), None)
    frame = board.frame(0.0, 0.0)
    assert frame.header == ("context", "prefill", "×1", "×8")
    assert frame.rows == (("1K", "9,026 ok", "181.7 ok", "·"), ("4K", "", "·", "— over"))  # 4K has no prefill probe planned
    assert "over over_capacity" in frame.legend
    assert format_tps(999.96) == "1000.0" and format_tps(1234.5) == "1,234"


def test_the_eta_counts_the_cells_still_to_run_at_their_measured_time_and_over_capacity_ones_at_none(monkeypatch):
    # The board's clock stands still: a cell "took" exactly what the test set, not that plus the test's own steps (on a
    # loaded machine 12 µs between two lines moved the ETA past approx's tolerance).
    monkeypatch.setattr(live_module, "time", types.SimpleNamespace(monotonic=lambda: 1000.0))
    board = Board(5)
    board.set_plan(_plan(decode=4, over=1))
    eta = board.eta_s(0.0)
    assert eta == (20.0, True)  # nothing measured: 4 cells at duration_s at least
    board.cell("decode 1K × 1", (1024, 1))
    board.unit_started -= 12.0  # the cell took 12 s
    board.finished("valid", (1024, 1), 100.0)
    assert board.eta_s(0.0) == (pytest.approx(36.0), False)  # 3 more at 12 s; the over-capacity cell takes none
    board.finished("over_capacity", (4096, 8), None)
    assert board.eta_s(0.0) == (pytest.approx(36.0), False)
    board.cell("decode 1K × 8", (1024, 8))
    board.label = "decode 1K × 8"
    now = board.unit_started + 5.0
    assert board.eta_s(now) == (pytest.approx(31.0), False)  # the current cell has run 5 of its 12 s


def test_pushed_readings_show_until_they_are_stale():
    board = Board(1)
    board.on_reading(kv=0.42, watts=612.0, batch=8, waiting=2)
    status = board.frame(board.readings["kv"][1], 0.0).status
    assert "KV 42 %" in status and "GPU 612 W" in status and "batch 8 (+2 waiting)" in status
    assert "KV" not in board.frame(board.readings["kv"][1] + 60, 0.0).status


def test_a_fault_in_drawing_stops_the_view_with_one_line_and_never_the_run(monkeypatch):
    import infermatrix.core.run.progress as progress_module

    console = Console(file=io.StringIO(), force_terminal=True, width=200, color_system=None)

    def broken(frame):
        raise ValueError("no room")

    with RunProgress(console, 2) as progress:
        monkeypatch.setattr(progress_module, "render", broken)
        progress.finished("decode 1K × 1", "valid", "181.7 tok/s total", (1024, 1), 181.7)  # raises nothing
        progress.finished("decode 1K × 8", "valid", "901.2 tok/s total", (1024, 8), 901.2)
    lines = [line.strip() for line in console.file.getvalue().splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert sum("live view stopped (ValueError: no room)" in line for line in lines) == 1
    assert any(line.startswith("decode 1K × 8") for line in lines)
