"""The HTML report's per-cell timelines (docs/telemetry.md): the engine's running and waiting requests and its KV usage
(%) over the cell's step, and each GPU's power where NVML read it, seconds from the window's start (0: the window
opens; it closes at the cell's measured seconds)."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.svg_plot import Series, line_chart

__all__ = ["timeline_charts"]

_ENGINE = (("running", "running", 1.0), ("waiting", "waiting", 1.0), ("kv_usage", "KV %", 100.0))


def _seconds(v: float) -> str:
    return f"{v:.1f}"


def _series(points: list[tuple[float, float]], label: str, scale: float, unit: str) -> Series:
    return Series(label, [(s, v * scale, f"{s:+.1f} s: {label} {v * scale:,.1f}{unit}") for s, v in points])


def timeline_charts(telemetry: dict[tuple[int, int], dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """``(chart id, title, caption, svg)`` per decode cell with a timeline: the engine's series, then power."""
    out = []
    for (ctx, n), t in sorted(telemetry.items()):
        line = t.get("timeline") or {}
        name, ident = f"{format_context(ctx)} × {n}", f"timeline-{ctx}-{n}"
        engine = [_series(line[m], label, scale, "") for m, label, scale in _ENGINE if line.get(m)]
        window = (t.get("engine") or t.get("gpu") or {}).get("window_s")
        caption = f"seconds from the window's start (it lasted {window:.1f} s)" if window else "seconds from the window's start"
        if engine:
            svg = line_chart(engine, title=f"{name}: engine", x_label="s from the window's start", y_label="requests · KV %", x_kind="linear",
                             x_format=_seconds, chart_id=ident)  # fmt: skip
            out.append((ident, f"{name}: engine", caption, svg))
        power = [_series(pts, f"GPU {m.split()[1]}", 1.0, " W") for m, pts in sorted(line.items()) if m.startswith("power_w ")]
        if power:
            svg = line_chart(power, title=f"{name}: GPU power", x_label="s from the window's start", y_label="W", x_kind="linear",
                             x_format=_seconds, chart_id=f"{ident}-power")  # fmt: skip
            out.append((f"{ident}-power", f"{name}: GPU power", caption, svg))
    return out
