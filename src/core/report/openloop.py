"""The open-loop table of a report: one row per load point, from the ``load_points`` view (docs/load.md)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infermatrix.core.contexts import format_context as context_label
from infermatrix.core.store import Store

__all__ = ["load_point_rows", "point_cells", "point_reasons", "render_points", "POINT_HEADERS", "POINT_CAPTION", "POINTS_TITLE"]

POINTS_TITLE = "Open-loop points"  # the section's one name: text, Markdown, HTML and docs/load.md alike

POINT_HEADERS = ("Point", "Rate/s", "Sent/s", "Lag p99", "TTFT p50", "TTFT p99", "Done", "Status")
POINT_CAPTION = ("requests arriving at a rate (≤N: in-flight cap); Sent/s = requests sent ÷ their span; "
                 "lag and TTFT in ms, TTFT from each request's scheduled time; KS fit and more: the load_points view")


def load_point_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's ``load_points`` rows in point order."""
    # With the settings each point used (the points table's), for the header's rows (point_settings.py).
    cols, found = store.query("SELECT v.*, p.duration_s, p.max_output FROM load_points v JOIN points p USING (run_id, point) "
                              "WHERE v.run_id = ? ORDER BY v.point", [run_id])  # fmt: skip
    return [dict(zip(cols, r)) for r in found]


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def point_cells(p: dict[str, Any]) -> list[str]:
    """One point's cells, as the text report prints them."""
    achieved = "—" if p.get("achieved_rate") is None else f"{p['achieved_rate']:.2f}"
    cap = f" ≤{p['max_in_flight']}" if p.get("max_in_flight") else ""
    return [
        f"{p['arrival']} {context_label(p['context_tokens'])}{cap}" if p.get("context_tokens") else str(p["arrival"]),
        f"{p['requested_rate']:g}",
        achieved,
        _ms(p.get("lag_p99_ms")),
        _ms(p.get("ttft_p50_ms")),
        _ms(p.get("ttft_p99_ms")),
        f"{p.get('completed') or 0}/{p.get('scheduled') or 0}",
        p["status"],
    ]


def point_reasons(points: list[dict[str, Any]]) -> list[str]:
    """Why each point that has a reason got its status, one line each."""
    return [f"{p.get('label')}: {p['status']}: {p['reason']}" for p in points if p.get("reason")]


def render_points(console: Console, points: list[dict[str, Any]], styles: dict[str, str]) -> None:
    """The open-loop section: nothing when the run has no points."""
    if not points:
        return
    console.print()
    console.print(Text(POINTS_TITLE, style="bold underline"))
    console.print(Text(POINT_CAPTION, style="dim"))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    for h in POINT_HEADERS:
        # The numbers and the status never fold; a long point label may.
        table.add_column(h, justify="left" if h in ("Point", "Status") else "right", no_wrap=h != "Point",
                         min_width=len("client_bound") if h == "Status" else len(h))  # fmt: skip
    for p in points:
        cells = point_cells(p)
        table.add_row(*cells[:-1], Text(cells[-1], style=styles.get(p["status"], "")))
    console.print(table)
    for line in point_reasons(points):
        console.print(Text(f"  {line}", style="dim"), soft_wrap=True)
