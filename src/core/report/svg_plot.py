"""Charts as inline SVG, written by hand: no library, no script, nothing fetched — an HTML report
stays one file that opens offline, prints, and renders the same in every browser.

``line_chart`` draws series of (x, y) points (optionally a shaded band per series, and a second,
dashed line), on a linear or log-2 x axis; ``heatmap`` (svg_heatmap.py) draws the decode matrix.
Colours and fonts come from CSS classes (``.imx-axis``, ``.imx-grid`` ...) defined by the page,
series colours from ``PALETTE``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

__all__ = ["PALETTE", "Series", "Scale", "nice_ticks", "compact_number", "line_chart"]

# Okabe-Ito (colour-blind safe), then a few more.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999", "#882255")
WIDTH, HEIGHT = 640, 360
MARGIN = {"left": 64, "right": 16, "top": 14, "bottom": 46}


@dataclass
class Series:
    """One line: ``points`` are (x, y, tooltip); ``band`` (x, low, high) shades a range under it;
    ``dashed`` (x, y) is a second line in the same colour (e.g. p90 over a p50 line)."""

    label: str
    points: list[tuple[float, float, str]]
    band: list[tuple[float, float, float]] = field(default_factory=list)
    dashed: list[tuple[float, float]] = field(default_factory=list)


def compact_number(v: float) -> str:
    """Axis labels: ``2500 -> "2.5K"``, ``300 -> "300"``, ``0.5 -> "0.5"``."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e3:
        return f"{v / 1e3:g}K"
    return f"{v:g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t < hi + step * 0.999:
        ticks.append(round(t, 10))
        t += step
    return ticks


class Scale:
    """Maps data to pixels: ``kind`` 'linear' or 'log2' (data must be > 0)."""

    def __init__(self, lo: float, hi: float, px0: float, px1: float, kind: str = "linear"):
        self.kind = kind
        if kind == "log2":
            lo, hi = math.log2(lo), math.log2(hi)
            if hi - lo < 1e-9:
                lo, hi = lo - 1, hi + 1
        elif hi - lo < 1e-12:
            hi = lo + (abs(lo) or 1.0)
        self.lo, self.hi, self.px0, self.px1 = lo, hi, px0, px1

    def __call__(self, v: float) -> float:
        t = math.log2(v) if self.kind == "log2" else v
        return self.px0 + (t - self.lo) / (self.hi - self.lo) * (self.px1 - self.px0)


def _f(v: float) -> str:
    return f"{v:.1f}"


def _path(points: Sequence[tuple[float, float]]) -> str:
    return "M" + " L".join(f"{_f(x)},{_f(y)}" for x, y in points)


def _x_ticks(xs: list[float], kind: str, labels: Callable[[float], str], sx: Scale) -> list[tuple[float, str]]:
    """Ticks at the data's x values, dropping labels that would overlap their left neighbour."""
    out: list[tuple[float, str]] = []
    last = -1e9
    for x in sorted(set(xs)):
        px = sx(x)
        if px - last >= 34:
            out.append((x, labels(x)))
            last = px
    return out


def line_chart(
    series: Sequence[Series], *, title: str, x_label: str, y_label: str, x_kind: str = "log2",
    x_format: Callable[[float], str] = compact_number, y_format: Callable[[float], str] = compact_number,
    chart_id: str = "", note: str | None = None,
) -> str:
    """An SVG line chart (y from 0), one colour per series, a legend under the plot."""
    series = [s for s in series if s.points]
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points] + [h for s in series for *_, h in s.band] + [y for s in series for _, y in s.dashed]
    legend_rows = math.ceil(len(series) / 6) if len(series) > 1 else 0
    height = HEIGHT + 18 * legend_rows + (6 if legend_rows else 0)
    left, right, top = MARGIN["left"], WIDTH - MARGIN["right"], MARGIN["top"]
    bottom = HEIGHT - MARGIN["bottom"]
    parts = [_open(chart_id, title, height)]
    if not xs:
        parts.append(f'<text class="imx-empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no valid measurements</text></svg>')
        return "".join(parts)
    x_lo, x_hi = min(xs), max(xs)
    if x_kind == "log2":
        pad = 2 ** 0.25
        sx = Scale(x_lo / pad, x_hi * pad, left, right, "log2")
    else:
        span = (x_hi - x_lo) or abs(x_hi) or 1.0
        sx = Scale(x_lo - span * 0.05, x_hi + span * 0.05, left, right)
    yt = nice_ticks(0.0, max(ys) * 1.05 if max(ys) > 0 else 1.0)
    sy = Scale(yt[0], yt[-1], bottom, top)
    for t in yt:  # horizontal grid with y labels
        y = sy(t)
        parts.append(f'<line class="imx-grid" x1="{left}" x2="{right}" y1="{_f(y)}" y2="{_f(y)}"/>')
        parts.append(f'<text class="imx-tick" x="{left - 6}" y="{_f(y + 4)}" text-anchor="end">{escape(y_format(t))}</text>')
    for x, label in _x_ticks(xs, x_kind, x_format, sx):
        px = sx(x)
        parts.append(f'<line class="imx-grid imx-grid-x" x1="{_f(px)}" x2="{_f(px)}" y1="{top}" y2="{bottom}"/>')
        parts.append(f'<text class="imx-tick" x="{_f(px)}" y="{bottom + 16}" text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<line class="imx-axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
    parts.append(f'<line class="imx-axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>')
    parts.append(f'<text class="imx-label" x="{(left + right) / 2}" y="{bottom + 34}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text class="imx-label" transform="translate(14,{(top + bottom) / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>')
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        parts.append(f'<g class="imx-series" data-series="{escape(s.label)}">')
        if s.band:
            upper = [(sx(x), sy(h)) for x, _, h in s.band]
            lower = [(sx(x), sy(lo)) for x, lo, _ in reversed(s.band)]
            parts.append(f'<path class="imx-band" fill="{colour}" d="{_path(upper + lower)} Z"/>')
        if s.dashed:
            pts = [(sx(x), sy(y)) for x, y in s.dashed]
            parts.append(f'<path class="imx-line imx-dashed" stroke="{colour}" d="{_path(pts)}"/>')
        pts = [(sx(x), sy(y)) for x, y, _ in s.points]
        if len(pts) > 1:
            parts.append(f'<path class="imx-line" stroke="{colour}" d="{_path(pts)}"/>')
        for (px, py), (_, _, tip) in zip(pts, s.points):
            parts.append(f'<circle class="imx-point" cx="{_f(px)}" cy="{_f(py)}" r="3.5" fill="{colour}"><title>{escape(tip)}</title></circle>')
        parts.append("</g>")
    parts.append(_legend(series, HEIGHT + 8))
    parts.append("</svg>")
    return "".join(parts)


def _open(chart_id: str, title: str, height: int) -> str:
    ident = f' id="{escape(chart_id)}"' if chart_id else ""
    return (
        f'<svg{ident} class="imx-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
    )


def _legend(series: Sequence[Series], y0: float) -> str:
    if len(series) < 2:
        return ""
    out, per_row, col_w = [], 6, (WIDTH - MARGIN["left"]) / 6
    for i, s in enumerate(series):
        x = MARGIN["left"] + (i % per_row) * col_w
        y = y0 + 18 * (i // per_row)
        colour = PALETTE[i % len(PALETTE)]
        out.append(
            f'<g class="imx-legend"><rect x="{_f(x)}" y="{_f(y - 9)}" width="12" height="12" rx="2" fill="{colour}"/>'
            f'<text class="imx-tick" x="{_f(x + 17)}" y="{_f(y + 1)}">{escape(s.label)}</text></g>'
        )
    return "".join(out)
