"""The text report's open-loop table: one row per stored point, the reason of any point not valid, and no
section at all for a run without points."""

import io

from rich.console import Console

from infermatrix.core.report.text import render_text
from infermatrix.core.store import Store
from infermatrix.core.store.points import save_point


def _text(store, run_id):
    out = io.StringIO()
    render_text(store, run_id, Console(file=out, width=120, color_system=None))
    return out.getvalue()


def test_points_are_shown_with_their_figures_and_reasons(tmp_path):
    with Store(tmp_path / "r.duckdb") as s:
        run = s.create_run({"engine": "sim", "status": "completed"})
        plain = s.create_run({"engine": "sim", "status": "completed"})
        save_point(s, run, {"point": 0, "label": "poisson@4/s 1K", "arrival": "poisson", "requested_rate": 4.0, "context_tokens": 1024,
                            "scheduled": 23, "sent": 23, "completed": 23, "achieved_rate": 3.83, "lag_p99_ms": 6.25,
                            "ttft_p50_ms": 14.5, "ttft_p99_ms": 2048.0, "status": "valid"}, [])  # fmt: skip
        save_point(s, run, {"point": 1, "label": "gamma:0.5@20/s 1K cap 1", "arrival": "gamma:0.5", "requested_rate": 20.0,
                            "context_tokens": 1024, "max_in_flight": 1, "scheduled": 40, "sent": 31, "completed": 31,
                            "achieved_rate": 9.1, "lag_p99_ms": 2437.0, "status": "client_bound",
                            "reason": "schedule lag p99 2437.0 ms > bound 25.0 ms"}, [])  # fmt: skip
        text, none = _text(s, run), _text(s, plain)
    assert "Open-loop points" in text and "Open-loop points" not in none
    rows = [ln.split() for ln in text.splitlines() if ln.startswith(("poisson", "gamma"))]
    assert rows[0] == ["poisson", "1K", "4", "3.83", "6.2", "14.5", "2,048", "23/23", "valid"]
    assert rows[1] == ["gamma:0.5", "1K", "≤1", "20", "9.10", "2,437", "—", "—", "31/40", "client_bound"]
    assert "gamma:0.5@20/s 1K cap 1: client_bound: schedule lag p99 2437.0 ms > bound 25.0 ms" in text
