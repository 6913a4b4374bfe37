"""Issue 17: the report says how the streams were read (cells.flags.transport) and, for a valid cell whose engine
ran a different count than the client had in flight (by more than 2 %, cells.flags.batch), both counts.
Read from a real DuckDB file."""

from __future__ import annotations

from rich.console import Console

from imx_factories import RUN_INFO, make_cell
from infermatrix.core.report.text import render_text
from infermatrix.core.store import Store

RAW = {"used": "raw", "why": "auto: a plain http:// HTTP/1.1 endpoint, no proxy", "setting": "auto"}


def _batch(engine: float, client: float, differ: bool) -> dict:
    return {"reads": 5, "engine_running_mean": engine, "engine_waiting_mean": 0.0, "client_in_flight_mean": client,
            "client_awaiting_first_mean": 0.0, "behind": 0.0, "differ": differ, "source": "gauge"}  # fmt: skip


def test_transport_and_engine_batch_beside_the_clients(tmp_path):
    s = Store(tmp_path / "b.duckdb")
    run_id = s.create_run(dict(RUN_INFO))
    for n, batch in ((4, _batch(3.9, 4.0, differ=True)), (8, _batch(7.95, 8.0, differ=False))):
        c, _ = make_cell(1024, n, values=(100.0 * n, 90.0, 200.0 + n, 10.0 + n, float(n), 1, 3000, 30.0))
        c.flags["transport"], c.flags["batch"] = RAW, batch
        s.save_cell(run_id, c)
    s.finish_run(run_id, "completed")
    console = Console(record=True, width=220)
    render_text(s, run_id, console)
    text = " ".join(console.export_text().split())
    assert f"Client transport raw ({RAW['why']})" in text or f"Client transport: raw ({RAW['why']})" in text, text[:2000]
    assert "engine ran 3.9 on average, the client counted 4.0 in flight (5 reads" in text
    assert "engine ran 7.9" not in text and "client counted 8.0" not in text  # within 2 %: nothing to say
