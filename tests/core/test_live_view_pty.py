"""``infermatrix run`` on a terminal shows the live matrix; off one (and with --no-live) only the per-cell lines.

The real command line against the built-in sim, inside a pseudo-terminal of a fixed size; what it wrote is played
into a terminal emulator (pyte) and the last screen that shows the grid — every cell finished — is read back. Each
grid cell's status and tok/s are judged against what the run stored in its DuckDB file, not against the lines.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import duckdb
import pytest
from imxtest import ROOT, run_cli

from infermatrix.core.contexts import format_context
from infermatrix.core.run.live import STATUS_CODES, format_tps

pyte = pytest.importorskip("pyte")  # the test extra (pyproject)

pytestmark = pytest.mark.slow  # launches the sim and the CLI

COLS, LINES = 150, 50
# 4K × 8 is over the demo profile's KV cache (49,152 tokens): the grid shows a status other than valid too.
ARGS = ("--engine", "sim", "--contexts", "256,4K", "--concurrency", "1,12", "--prefill-contexts", "256", "--duration", "1", "--max-output", "32")


def _load_runner():
    """The pseudo-terminal runner of scripts/live_overhead.py (one implementation for the script and this test)."""
    spec = importlib.util.spec_from_file_location("live_overhead", ROOT / "scripts" / "live_overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_in_pty


def _run_in_pty(*args: str) -> tuple[int, bytes]:
    """The real command line with its stdin, stdout and stderr on a pseudo-terminal of COLS × LINES."""
    rc, raw, _cpu = _load_runner()(list(args), COLS, LINES, ROOT, 240)
    return rc, raw


def _grid_screens(raw: bytes) -> list[list[str]]:
    """Every screen on which the grid's header row is shown, each taken just before the terminal got a carriage
    return (a redraw starts with one, so each screen is a whole frame or a run of plain lines)."""
    screen = pyte.Screen(COLS, LINES)
    stream = pyte.ByteStream(screen)
    shots = []
    for piece in raw.split(b"\r"):
        stream.feed(piece + b"\r")
        lines = [line.rstrip() for line in screen.display]
        if any(line.split()[:1] == ["context"] and "×1" in line for line in lines):
            shots.append(lines)
    return shots


def _read_grid(lines: list[str]) -> dict[tuple[int, int | None], str]:
    """The grid's cells by (context, concurrency; None: prefill), as shown: "<tok/s> <code>"."""
    top = next(i for i, line in enumerate(lines) if line.split()[:1] == ["context"])
    heads = lines[top].split()[1:]
    columns: list[int | None] = [None if h == "prefill" else int(h.lstrip("×")) for h in heads]
    cells: dict[tuple[int, int | None], str] = {}
    for line in lines[top + 1:]:
        words = line.split()
        if not words or not words[0][0].isdigit():
            break
        ctx, rest = words[0], words[1:]
        shown = [f"{rest[i]} {rest[i + 1]}" for i in range(0, len(rest), 2)]  # every planned cell here is "<tok/s> <code>"
        planned = [c for c in columns if c is not None or ctx == "256"]  # 4K has no prefill probe: blank
        for n, text in zip(planned, shown):
            cells[(_context(ctx), n)] = text
    return cells


def _plain(raw: bytes) -> str:
    """A terminal's bytes as text, one line per line written: colours left out, a cursor move or erase (a redraw of
    the live view) taken for a line break, so a line printed after a redraw is not joined to the view's last line."""
    text = re.sub(r"\x1b\[[0-9;]*[ABJK]", "\n", raw.decode(errors="replace"))
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


def _context(label: str) -> int:
    return next(c for c in (256, 4096) if format_context(c) == label)


def _stored(db: Path) -> dict[tuple[int, int | None], tuple[str, float | None]]:
    with duckdb.connect(str(db), read_only=True) as con:
        cells = con.execute("SELECT context_tokens, concurrency, status, total_tps FROM cells").fetchall()
        probes = con.execute("SELECT context_tokens, status, prompt_tps FROM prefill").fetchall()
    stored: dict[tuple[int, int | None], tuple[str, float | None]] = {(c, n): (s, t) for c, n, s, t in cells}
    stored.update({(c, None): (s, t) for c, s, t in probes})
    return stored


def test_a_run_on_a_terminal_shows_the_matrix_filling_in_with_what_was_stored(tmp_path):
    db = tmp_path / "live.duckdb"
    rc, raw = _run_in_pty("run", *ARGS, "--db", str(db))
    assert rc == 0, raw.decode(errors="replace")[-3000:]
    stored = _stored(db)
    assert {s for s, _ in stored.values()} >= {"valid", "over_capacity"} and len(stored) == 5
    shots = _grid_screens(raw)
    assert len(shots) > 3, "the grid was not redrawn as the cells finished"
    final = _read_grid(shots[-1])  # the last frame before the view closed: every cell done
    assert set(final) == set(stored)
    for key, (status, tps) in stored.items():
        assert final[key] == f"{format_tps(tps)} {STATUS_CODES[status]}", key
        if tps is not None:  # the number itself, not only its formatting, is the stored one
            assert abs(float(final[key].split()[0].replace(",", "")) - tps) <= 0.5
    # While it ran: a cell in progress with its running tok/s, and the whole run's ETA
    running = [shot for shot in shots if any("▸" in line for line in shot)]
    assert running and any("ETA" in line and "tok/s" in line and "in flight" in line for shot in running for line in shot)
    # and the per-cell lines are printed above the view on the terminal too
    lines = _plain(raw).splitlines()
    assert any(line.strip().startswith("decode 4K × 12") and "over_capacity" in line for line in lines)


def test_off_a_terminal_and_with_no_live_the_run_prints_one_line_per_cell(tmp_path):
    piped = run_cli("run", *ARGS, "--db", str(tmp_path / "piped.duckdb"))
    assert piped.returncode == 0, piped.stderr[-3000:]
    rc, raw = _run_in_pty("run", *ARGS, "--no-live", "--db", str(tmp_path / "nolive.duckdb"))
    assert rc == 0, raw.decode(errors="replace")[-3000:]
    assert not _grid_screens(raw)  # --no-live: no grid ever drawn on the terminal
    for text, db in ((piped.stderr, tmp_path / "piped.duckdb"), (_plain(raw), tmp_path / "nolive.duckdb")):
        stored = _stored(db)
        for (ctx, n), (status, _) in stored.items():
            label = f"prefill {format_context(ctx)}" if n is None else f"decode {format_context(ctx)} × {n}"
            assert any(line.strip().startswith(label) and status in line for line in text.splitlines()), (label, status)
        assert "ETA" not in text and "▸" not in text
    assert "\x1b[" not in piped.stderr  # nothing drawn with cursor moves off a terminal
