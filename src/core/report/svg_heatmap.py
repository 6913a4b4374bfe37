"""The decode matrix as an SVG heatmap: rows are contexts, columns concurrency levels, colour is a
number (total tok/s, or a comparison ratio); cells without a number show their status instead."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from infermatrix.core.report.svg_plot import WIDTH, _open

__all__ = ["HeatCell", "heatmap", "sequential_colour", "diverging_colour"]

# Light to dark (a perceptually even blue ramp); numbers on dark cells are drawn white.
_RAMP = ((0.0, (239, 246, 255)), (0.35, (147, 197, 253)), (0.7, (37, 99, 235)), (1.0, (23, 37, 84)))
# Diverging: red (worse) - neutral - green (better).
_DIVERGE = ((0.0, (185, 28, 28)), (0.5, (243, 244, 246)), (1.0, (21, 128, 61)))


@dataclass
class HeatCell:
    """``value`` drives the colour (None: a status cell, drawn grey with ``text``)."""

    row: str
    col: str
    value: float | None
    text: str
    tooltip: str
    status: str = "valid"


def _interp(stops: Sequence[tuple[float, tuple[int, int, int]]], t: float) -> tuple[int, int, int]:
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
            return tuple(round(a + (b - a) * f) for a, b in zip(c0, c1))  # type: ignore[return-value]
    return stops[-1][1]


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % rgb


def _dark(rgb: tuple[int, int, int]) -> bool:
    r, g, b = rgb
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 128


def sequential_colour(lo: float, hi: float) -> Callable[[float], tuple[int, int, int]]:
    """Colour for a value in [lo, hi] on a log scale (decode throughput spans orders of magnitude)."""
    a, b = math.log(max(lo, 1e-9)), math.log(max(hi, 1e-9))

    def colour(v: float) -> tuple[int, int, int]:
        return _interp(_RAMP, 0.5 if b - a < 1e-12 else (math.log(max(v, 1e-9)) - a) / (b - a))

    return colour


def diverging_colour(limit: float = 2.0) -> Callable[[float], tuple[int, int, int]]:
    """Colour of a 'better' score: log ratio in [-ln limit, ln limit] -> red .. grey .. green."""

    def colour(score: float) -> tuple[int, int, int]:
        return _interp(_DIVERGE, 0.5 + score / (2 * math.log(limit)))

    return colour


def heatmap(
    cells: Sequence[HeatCell], rows: Sequence[str], cols: Sequence[str], *, title: str,
    colour: Callable[[float], tuple[int, int, int]], legend: tuple[str, str] | None = None,
    chart_id: str = "", row_label: str = "context", col_label: str = "requests at once", diverging: bool = False,
) -> str:
    """A grid of ``cells``; ``legend`` (low text, high text) draws the colour ramp under it
    (``diverging``: the red-grey-green ramp of comparisons)."""
    left, top = 64, 34
    cell_w = max(48.0, min(150.0, (WIDTH - left - 12) / max(1, len(cols))))
    cell_h = 38.0 if len(rows) > 4 else 46.0
    height = int(top + cell_h * len(rows) + 44)
    width = max(WIDTH, int(left + cell_w * len(cols) + 12))
    out = [_open(chart_id, title, height).replace(f'viewBox="0 0 {WIDTH} ', f'viewBox="0 0 {width} ').replace(
        f'width="{WIDTH}"', f'width="{width}"')]
    out.append(f'<text class="imx-label" x="{left + cell_w * len(cols) / 2:.1f}" y="12" text-anchor="middle">{escape(col_label)}</text>')
    for j, c in enumerate(cols):
        out.append(f'<text class="imx-tick" x="{left + cell_w * (j + 0.5):.1f}" y="28" text-anchor="middle">{escape(c)}</text>')
    for i, r in enumerate(rows):
        out.append(f'<text class="imx-tick" x="{left - 8}" y="{top + cell_h * (i + 0.5) + 4:.1f}" text-anchor="end">{escape(r)}</text>')
    index = {(c.row, c.col): c for c in cells}
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            cell = index.get((r, c))
            x, y = left + cell_w * j, top + cell_h * i
            if cell is None:
                out.append(f'<rect class="imx-heat-missing" x="{x:.1f}" y="{y:.1f}" width="{cell_w - 2:.1f}" height="{cell_h - 2:.1f}"/>')
                continue
            if cell.value is None:
                fill, cls, text_cls = "", f"imx-heat-status imx-st-{escape(cell.status)}", "imx-heat-text imx-heat-status-text"
            else:
                rgb = colour(cell.value)
                fill = f' fill="{_hex(rgb)}"'
                cls, text_cls = "imx-heat-cell", "imx-heat-text" + (" imx-on-dark" if _dark(rgb) else "")
            out.append(
                f'<g class="{cls}" data-cell="{escape(r)}x{escape(c)}"><rect x="{x:.1f}" y="{y:.1f}" width="{cell_w - 2:.1f}" '
                f'height="{cell_h - 2:.1f}" rx="3"{fill}/><text class="{text_cls}" x="{x + (cell_w - 2) / 2:.1f}" '
                f'y="{y + cell_h / 2 + 3:.1f}" text-anchor="middle">{escape(cell.text)}</text>'
                f'<title>{escape(cell.tooltip)}</title></g>'
            )
    y_leg = top + cell_h * len(rows) + 22
    out.append(f'<text class="imx-label" transform="translate(14,{top + cell_h * len(rows) / 2:.1f}) rotate(-90)" text-anchor="middle">{escape(row_label)}</text>')
    if legend:
        ramp = _DIVERGE if diverging else _RAMP
        stops = "".join(f'<stop offset="{k / 10:.1f}" stop-color="{_hex(_interp(ramp, k / 10))}"/>' for k in range(11))
        gid = f"{chart_id or 'heat'}-grad"
        out.append(f'<defs><linearGradient id="{escape(gid)}">{stops}</linearGradient></defs>')
        out.append(f'<rect x="{left}" y="{y_leg - 8:.1f}" width="240" height="10" fill="url(#{escape(gid)})"/>')
        out.append(f'<text class="imx-tick" x="{left}" y="{y_leg + 14:.1f}">{escape(legend[0])}</text>')
        out.append(f'<text class="imx-tick" x="{left + 240}" y="{y_leg + 14:.1f}" text-anchor="end">{escape(legend[1])}</text>')
    out.append("</svg>")
    return "".join(out)
