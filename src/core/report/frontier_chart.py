"""Frontier charts: tok/s per GPU against tok/s per user, one chart per context, every run on it.

Each run is a series: all its valid cells as dots, its non-dominated cells (``frontier.on_frontier``)
joined by a line. A sweep's chart (``report --sweep``) colours each setting's run and draws one line instead, the
envelope: the cells no cell of any setting dominates (``sweep_frontier.on_frontier``), joined. Where an SLO bounds the time per token, the interactivity below what it allows
(x < 1000 / bound) is shaded: no cell there can meet it.
"""

from __future__ import annotations

from html import escape

from infermatrix.core.contexts import format_context
from infermatrix.core.report.fmt import fmt_tps
from infermatrix.core.report.slo_report import SloReport, fmt_bound, fmt_usd
from infermatrix.core.report.svg_plot import HEIGHT, MARGIN, PALETTE, WIDTH, Scale, compact_number, nice_ticks

__all__ = ["frontier_charts", "sweep_frontier_chart"]


def _f(v: float) -> str:
    return f"{v:.1f}"


def _chart(ctx: int, rows: list[dict], labels: dict[str, str], shade_x: float | None, shade_note: str, envelope: bool = False) -> str:
    title = f"Frontier at {format_context(ctx)} context: tok/s per GPU vs tok/s per user"
    runs = list(dict.fromkeys(r["run_id"] for r in rows))
    xs = [r["tps_per_user"] for r in rows] + ([shade_x] if shade_x else [])
    ys = [r["tps_per_gpu"] for r in rows]
    left, right, top, bottom = MARGIN["left"], WIDTH - MARGIN["right"], MARGIN["top"], HEIGHT - MARGIN["bottom"]
    legend_rows = (len(runs) + 2) // 3
    height = HEIGHT + 18 * legend_rows + 6
    chart_id = f"frontier-{format_context(ctx)}"
    out = [f'<svg id="{escape(chart_id)}" class="imx-chart imx-frontier" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}">'
           f"<title>{escape(title)}</title>"]  # fmt: skip
    xt = nice_ticks(0.0, max(xs) * 1.05)
    yt = nice_ticks(0.0, max(ys) * 1.05)
    sx, sy = Scale(xt[0], xt[-1], left, right), Scale(yt[0], yt[-1], bottom, top)
    if shade_x:
        w = max(0.0, min(sx(shade_x), right) - left)
        out.append(f'<rect class="imx-infeasible" x="{left}" y="{top}" width="{_f(w)}" height="{bottom - top}" '
                   f'fill="#999999" fill-opacity="0.18"><title>{escape(shade_note)}</title></rect>')  # fmt: skip
    for t in yt:
        out.append(f'<line class="imx-grid" x1="{left}" x2="{right}" y1="{_f(sy(t))}" y2="{_f(sy(t))}"/>')
        out.append(f'<text class="imx-tick" x="{left - 6}" y="{_f(sy(t) + 4)}" text-anchor="end">{escape(compact_number(t))}</text>')
    for t in xt:
        out.append(f'<text class="imx-tick" x="{_f(sx(t))}" y="{bottom + 16}" text-anchor="middle">{escape(compact_number(t))}</text>')
    out.append(f'<line class="imx-axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
    out.append(f'<line class="imx-axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>')
    out.append(f'<text class="imx-label" x="{(left + right) / 2}" y="{bottom + 34}" text-anchor="middle">tok/s per user (interactivity)</text>')
    out.append(f'<text class="imx-label" transform="translate(14,{(top + bottom) / 2}) rotate(-90)" text-anchor="middle">tok/s per GPU</text>')
    if envelope:
        front = sorted((r for r in rows if r["on_frontier"]), key=lambda r: r["tps_per_user"])
        d = "M" + " L".join(f"{_f(sx(r['tps_per_user']))},{_f(sy(r['tps_per_gpu']))}" for r in front)
        out.append(f'<path class="imx-line imx-envelope" stroke="#333333" stroke-dasharray="5,3" fill="none" d="{d}"/>' if len(front) > 1 else "")
    for i, rid in enumerate(runs):
        colour = PALETTE[i % len(PALETTE)]
        mine = [r for r in rows if r["run_id"] == rid]
        out.append(f'<g class="imx-series" data-series="{escape(labels.get(rid, rid))}" data-run="{escape(rid)}">')
        front = sorted((r for r in mine if r["on_frontier"]), key=lambda r: r["tps_per_user"])
        if len(front) > 1 and not envelope:
            d = "M" + " L".join(f"{_f(sx(r['tps_per_user']))},{_f(sy(r['tps_per_gpu']))}" for r in front)
            out.append(f'<path class="imx-line imx-frontier-line" stroke="{colour}" fill="none" d="{d}"/>')
        for r in mine:
            tip = (f"{labels.get(rid, rid)} · N={r['concurrency']}: {fmt_tps(r['tps_per_gpu'])} tok/s/GPU, "
                   f"{fmt_tps(r['tps_per_user'])} tok/s/user, {fmt_usd(r['usd_per_mtok'])}/M tok")  # fmt: skip
            fill = colour if r["on_frontier"] else "white"
            out.append(f'<circle class="imx-point{" imx-on-frontier" if r["on_frontier"] else ""}" cx="{_f(sx(r["tps_per_user"]))}" '
                       f'cy="{_f(sy(r["tps_per_gpu"]))}" r="3.5" fill="{fill}" stroke="{colour}"><title>{escape(tip)}</title></circle>')  # fmt: skip
        out.append("</g>")
    for i, rid in enumerate(runs):
        x = left + (i % 3) * (WIDTH - left) / 3
        y = HEIGHT + 8 + 18 * (i // 3)
        out.append(f'<g class="imx-legend"><rect x="{_f(x)}" y="{_f(y - 9)}" width="12" height="12" rx="2" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text class="imx-tick" x="{_f(x + 17)}" y="{_f(y + 1)}">{escape(labels.get(rid, rid))}</text></g>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def frontier_charts(r: SloReport, labels: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """``(chart id, title, caption, svg)`` per context that has cells with a GPU count; ``labels``: run -> legend text.
    The title names the context: several charts sit side by side, and a reader must tell them apart on the page."""
    shade_ms = min(r.tpot_bounds.values()) if r.tpot_bounds else None
    shade_slo = min(r.tpot_bounds, key=lambda s: r.tpot_bounds[s]) if r.tpot_bounds else None
    shade_x = 1000.0 / shade_ms if shade_ms else None
    note = f"SLO {shade_slo}: cells left of {fmt_tps(shade_x)} tok/s per user cannot meet {fmt_bound(shade_ms)}" if shade_ms else ""
    out = []
    for ctx in dict.fromkeys(f["context_tokens"] for f in r.frontier):
        rows = [f for f in r.frontier if f["context_tokens"] == ctx and f["tps_per_gpu"] is not None]
        if not rows:
            continue
        caption = "filled dots and the line: each run's frontier" + (f"; shaded: {note}" if note else "")
        label = format_context(ctx)
        out.append((f"frontier-{label}", f"Frontier — {label} context", caption, _chart(ctx, rows, labels, shade_x, note)))
    return out


def sweep_frontier_chart(ctx: int, rows: list[dict], labels: dict[str, str]) -> tuple[str, str, str, str] | None:
    """A sweep's chart at one context (``rows``: its sweep_frontier rows): a colour per setting (``labels``: run ->
    setting), the envelope across settings drawn; None where no cell has a GPU count."""
    rows = [r for r in rows if r["tps_per_gpu"] is not None]
    if not rows:
        return None
    label = format_context(ctx)
    caption = "a colour per setting; filled dots and the dashed line: the envelope, the cells no cell of any setting beats on both"
    return f"sweep-frontier-{label}", f"Frontier — {label} context", caption, _chart(ctx, rows, labels, None, "", envelope=True)
