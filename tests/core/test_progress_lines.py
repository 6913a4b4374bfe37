"""The run's one line per finished cell or point (core/run/progress.py): label, status, detail, never run together."""

from __future__ import annotations

import io

from rich.console import Console

from infermatrix.core.run.progress import RunProgress


def _line(label: str, status: str) -> str:
    out = io.StringIO()
    RunProgress(Console(file=out, width=200, color_system=None), 1).finished(label, status, "detail")
    return out.getvalue().rstrip("\n")


def test_a_cell_line_lines_up_and_a_long_label_keeps_its_status_apart():
    short = _line("decode 1K × 4", "valid")
    assert short.index("valid") == _line("prefill 256K", "valid").index("valid")  # cell labels line up
    long = _line("trace mooncake.jsonl ×0.25", "client_bound")
    assert "×0.25 client_bound" in long and "×0.25client_bound" not in long
    assert long.endswith("detail")
