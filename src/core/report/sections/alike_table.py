"""The table both compare sections of one-measurement points share (bursts, interference points): per point the
baseline A and another run ran alike, each metric's A value, the other run's, and other/A with its word by the fixed
rule (such a point is one measurement, without an interval)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from infermatrix.core.report.compare_data import Comparison
from infermatrix.core.report.fmt import fmt_ratio

__all__ = ["alike_table"]

_WORDS = {"better": "better", "worse": "worse", "same": "same", None: ""}


def alike_table(
    cmp: Comparison, pairs: Sequence[Any], first: str, label: Callable[[dict[str, Any]], str],
    metrics: Sequence[tuple[str, Any]], titles: dict[str, str], fmt: Callable[[str, Any], str],
) -> tuple[list[str], list[list[str]]]:
    """Header and rows: ``first`` (the point, as ``label`` names it from A's row), the other run's letter, then per metric
    ``fmt(column, value)`` of A and of the other run and other/A with its word."""
    a = cmp.letters[cmp.baseline]
    header = [first, "Run"]
    for col, _ in metrics:
        header += [f"{titles[col]} {a}", f"{titles[col]} other", "other/A"]
    rows = []
    for p in pairs:
        row = [label(p.a), cmp.letters[p.run_b]]
        for col, _ in metrics:
            ratio, word = p.ratios[col]
            row += [fmt(col, p.a.get(col)), fmt(col, p.b.get(col)), f"{fmt_ratio(ratio)} {_WORDS[word]}".strip()]
        rows.append(row)
    return header, rows
