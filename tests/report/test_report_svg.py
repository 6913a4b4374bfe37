"""The hand-written SVG charts: scales, ticks, colours, and charts that degrade instead of failing."""

from __future__ import annotations

import math
import re

import pytest

from html_tree import parse
from infermatrix.core.report.svg_heatmap import HeatCell, diverging_colour, heatmap, sequential_colour
from infermatrix.core.report.svg_plot import Scale, Series, compact_number, line_chart, nice_ticks


@pytest.mark.parametrize("lo, hi", [(0, 7950.5), (0, 1.0), (0, 0.37), (0, 238487), (12, 13), (0, 0)])
def test_nice_ticks_cover_the_range_with_round_steps(lo, hi):
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi and len(ticks) >= 2
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5, 10))
    assert len(ticks) <= 12


def test_log2_scale_spaces_doublings_evenly():
    s = Scale(1, 128, 0, 700, "log2")
    xs = [s(2 ** k) for k in range(8)]
    gaps = {round(b - a, 6) for a, b in zip(xs, xs[1:])}
    assert len(gaps) == 1 and xs[0] == 0 and xs[-1] == 700
    one = Scale(4, 4, 0, 100, "log2")  # a single concurrency level still maps inside the plot
    assert 0 < one(4) < 100


def test_compact_number():
    assert [compact_number(v) for v in (2500, 300, 0.5, 2_000_000, 0)] == ["2.5K", "300", "0.5", "2M", "0"]


def test_sequential_colour_darkens_with_value():
    colour = sequential_colour(100, 10000)
    lum = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b in (colour(v) for v in (100, 500, 2000, 10000))]
    assert lum == sorted(lum, reverse=True) and lum[0] - lum[-1] > 150


def test_diverging_colour_is_green_for_better_red_for_worse():
    colour = diverging_colour(2.0)
    r, g, _ = colour(math.log(1.8))
    assert g > r
    r, g, _ = colour(math.log(1 / 1.8))
    assert r > g
    assert colour(0.0) == colour(0.0) and abs(colour(0.0)[0] - colour(0.0)[1]) < 5  # neutral grey


def test_line_chart_without_points_says_so():
    svg = line_chart([Series("x", [])], title="t", x_label="x", y_label="y")
    parse(svg)
    assert "no valid measurements" in svg


def test_line_chart_single_point_and_tooltips():
    svg = line_chart([Series("8K context", [(4.0, 120.0, "8K × 4: 120 tok/s")])], title="t", x_label="x", y_label="y",
                     chart_id="c")
    root = parse(svg)
    (circle,) = list(root.iter("circle"))
    assert circle.all_text() == "8K × 4: 120 tok/s"
    assert 64 < float(circle.attrs["cx"]) < 624
    # every coordinate is a finite number
    assert all(math.isfinite(float(v)) for v in re.findall(r'c[xy]="([^"]+)"', svg))


def test_band_and_dashed_line_are_drawn():
    s = Series("a", [(1, 10, ""), (2, 12, "")], band=[(1, 10, 30), (2, 12, 40)], dashed=[(1, 20), (2, 25)])
    root = parse(line_chart([s], title="t", x_label="x", y_label="y"))
    classes = [p.attrs.get("class", "") for p in root.iter("path")]
    assert "imx-band" in classes and "imx-line imx-dashed" in classes and "imx-line" in classes


def test_heatmap_cells_and_status_cells():
    cells = [HeatCell("8K", "1", 100.0, "100", "a"), HeatCell("8K", "2", 200.0, "200", "b"),
             HeatCell("16K", "1", None, "Looped", "c", "looped")]
    svg = heatmap(cells, ["8K", "16K"], ["1", "2"], title="m", colour=sequential_colour(100, 200), legend=("lo", "hi"))
    root = parse(svg)
    groups = [g for g in root.iter("g") if "data-cell" in g.attrs]
    assert [g.attrs["data-cell"] for g in groups] == ["8Kx1", "8Kx2", "16Kx1"]
    fills = [next(g.iter("rect")).attrs.get("fill") for g in groups]
    assert fills[0] != fills[1] and fills[2] is None  # status cells take their look from CSS
    assert "imx-st-looped" in groups[2].classes()
    assert len([r for r in root.iter("rect") if "imx-heat-missing" in r.classes()]) == 1  # 16K x 2 was not measured
