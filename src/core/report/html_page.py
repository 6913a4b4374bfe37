"""The HTML shell every report page shares: one self-contained document (inline CSS, inline SVG,
no scripts, no fonts or styles fetched), light and dark, printable."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from infermatrix.core.report.model import Chart

__all__ = ["CSS", "page", "table", "esc", "figure"]

CSS = """
:root { --fg:#111827; --muted:#6b7280; --bg:#ffffff; --panel:#f9fafb; --line:#e5e7eb; --accent:#1d4ed8;
  --looped:#a21caf; --error:#b91c1c; --client:#a16207; --over:#9ca3af; --better:#15803d; --worse:#b91c1c; }
@media (prefers-color-scheme: dark) { :root { --fg:#e5e7eb; --muted:#9ca3af; --bg:#111827; --panel:#1f2937;
  --line:#374151; --accent:#93c5fd; --looped:#f0abfc; --error:#fca5a5; --client:#fde68a; --over:#6b7280;
  --better:#86efac; --worse:#fca5a5; } }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg); font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; }
main { max-width: 1400px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 2px; } h2 { font-size: 19px; margin: 30px 0 6px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 0 0 6px; }
.subtitle { font-size: 17px; font-weight: 600; color: var(--accent); margin: 0; } .summary, .caption, .muted { color: var(--muted); margin: 2px 0 8px; }
.facts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(300px, 100%), 1fr)); gap: 12px; margin-top: 16px; }
.facts section { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.facts dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
.facts dt { font-weight: 600; } .facts dd { margin: 0; overflow-wrap: anywhere; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 4px 9px; } th { background: var(--panel); text-align: center; }
td.num, th.num { text-align: right; white-space: nowrap; } td.text { text-align: left; }
.scroll { overflow-x: auto; }
table.matrix td { text-align: right; min-width: 96px; } table.matrix th[scope=row] { text-align: right; }
table.matrix .tps { display: block; font-weight: 600; } table.matrix .ttft { display: block; color: var(--muted); font-size: 12px; white-space: nowrap; }
td.st-looped, .st-looped { color: var(--looped); font-weight: 600; font-style: italic; }
td.st-over_capacity, .st-over_capacity { color: var(--over); font-style: italic; }
td.st-error, .st-error { color: var(--error); font-weight: 600; }
td.st-client_bound, .st-client_bound { color: var(--client); font-style: italic; }
td.st-interrupted, .st-interrupted { color: var(--muted); font-style: italic; }
td.st-missing { color: var(--muted); text-align: center; }
.legend p { margin: 2px 0; color: var(--muted); } ul.notes { margin: 6px 0; }
.warning { background: #fef3c7; color: #78350f; border: 1px solid #f59e0b; border-radius: 6px; padding: 8px 12px; margin: 10px 0; }
.better { color: var(--better); font-weight: 600; } .worse { color: var(--worse); font-weight: 600; } .same { color: var(--muted); }
/* auto-fill, not auto-fit: a chart alone in its grid (latency vs rate) keeps one cell's width instead of the page's,
   so its axis text is drawn at the size of every other chart's */
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(560px, 100%), 1fr)); gap: 18px; }
figure.chart { margin: 0; background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
figure.chart figcaption { color: var(--muted); font-size: 12.5px; margin-bottom: 4px; } figure.chart figcaption b { color: var(--fg); font-size: 14px; display: block; }
svg.imx-chart { width: 100%; height: auto; display: block; }
.imx-grid { stroke: var(--line); stroke-width: 1; } .imx-axis { stroke: var(--muted); stroke-width: 1; }
.imx-tick { fill: var(--muted); font-size: 11px; } .imx-label { fill: var(--fg); font-size: 12px; } .imx-empty { fill: var(--muted); font-size: 14px; }
.imx-line { fill: none; stroke-width: 2; } .imx-dashed { stroke-dasharray: 5 4; stroke-width: 1.5; }
.imx-band { opacity: 0.16; stroke: none; } .imx-point { stroke: var(--bg); stroke-width: 1; }
.imx-heat-text { fill: #111827; font-size: 11.5px; font-weight: 600; } .imx-heat-text.imx-on-dark { fill: #ffffff; }
.imx-heat-status rect { fill: var(--panel); stroke: var(--line); stroke-dasharray: 3 2; } .imx-heat-status-text { fill: var(--muted); font-style: italic; font-weight: 400; }
.imx-heat-missing { fill: none; stroke: var(--line); }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; }
@media print { main { max-width: none; padding: 0; } .charts { grid-template-columns: 1fr 1fr; } figure.chart { break-inside: avoid; } }
"""


def esc(text: object) -> str:
    return escape("" if text is None else str(text))


def page(title: str, body: str) -> str:
    """A complete HTML document around ``body`` (already HTML)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<meta name=\"generator\" content=\"infermatrix\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, align: str = "", cls: str = "",
          row_classes: Sequence[str] | None = None, raw: bool = False) -> str:
    """An HTML table. ``align`` per column 'l'/'r'; cells are escaped unless ``raw`` (already HTML)."""
    def cell_class(i: int) -> str:
        return "num" if i < len(align) and align[i] == "r" else "text"

    head = "".join(f'<th scope="col" class="{cell_class(i)}">{esc(h)}</th>' for i, h in enumerate(header))
    body = []
    for k, row in enumerate(rows):
        extra = f' class="{esc(row_classes[k])}"' if row_classes and row_classes[k] else ""
        cells = "".join(f'<td class="{cell_class(i)}">{c if raw else esc(c)}</td>' for i, c in enumerate(row))
        body.append(f"<tr{extra}>{cells}</tr>")
    klass = f' class="{esc(cls)}"' if cls else ""
    return f'<div class="scroll"><table{klass}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def figure(c: Chart) -> str:
    """One chart with its title and caption (a grid of them: ``<div class="charts">``)."""
    return f'<figure class="chart" data-chart="{esc(c.chart_id)}"><figcaption><b>{esc(c.title)}</b>{esc(c.caption)}</figcaption>{c.svg}</figure>'
