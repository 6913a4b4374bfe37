"""What a comparison of runs says, computed once from the views (engine_comparison, decode_matrix)
and the runs table; the text, Markdown, HTML and JSON renderers only draw it.

The first run is the baseline A; every other run (B, C …) is held against it cell by cell over
the cells valid in both (ratio = other / A). Each metric has a direction: more tok/s is better,
fewer ms is better; a ratio within ``SAME_WITHIN`` of 1 counts as the same.
"""

from __future__ import annotations

import math
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.contexts import format_context, parse_context
from infermatrix.core.report.fmt import fmt_ms, fmt_ratio, fmt_tokens, fmt_tps, status_label
from infermatrix.core.report.query import view_rows
from infermatrix.core.store import Store, StoreError

__all__ = [
    "METRICS", "SAME_WITHIN", "Metric", "CellPair", "OneSided", "Pair", "BestCell", "Comparison",
    "load_comparison", "verdict", "describe_run", "fmt_ratio",
]

SAME_WITHIN = 0.02  # |ratio - 1| below 2 % is noise for a 30 s window, not a difference


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    fmt: Any
    higher_is_better: bool


METRICS = (
    Metric("total_tps", "Total tok/s", fmt_tps, True),
    Metric("per_request_tps", "Per request tok/s", fmt_tps, True),
    Metric("ttft_ms", "TTFT", fmt_ms, False),
    Metric("tbt_ms", "TBT", fmt_ms, False),
)
_BY_KEY = {m.key: m for m in METRICS}
# Method settings whose difference makes numbers not like for like: (column, label, formatter).
_METHOD = (
    ("duration_s", "duration", lambda v: f"{v:g} s" if isinstance(v, (int, float)) else str(v)),
    ("max_output", "max output", fmt_tokens),
    ("prompt_mode", "prompt mode", str),
    ("token_source", "token source", str),
    ("api", "API", str),
)


def verdict(metric: str, ratio: float | None) -> str | None:
    """'better', 'worse' or 'same' for the other run against A; None without a ratio."""
    if ratio is None or ratio <= 0 or (isinstance(ratio, float) and math.isnan(ratio)):
        return None
    score = math.log(ratio) * (1 if _BY_KEY[metric].higher_is_better else -1)
    if abs(ratio - 1) < SAME_WITHIN:
        return "same"
    return "better" if score > 0 else "worse"


@dataclass
class CellPair:
    context_label: str
    context_tokens: int
    concurrency: int
    values: dict[str, tuple[float | None, float | None, float | None]]  # metric -> (a, b, ratio)


@dataclass
class OneSided:
    """A cell both runs tried that only one could run (the other: over capacity, looped, error …);
    ``a``/``b`` are what each side shows."""

    context_label: str
    context_tokens: int
    concurrency: int
    valid_in: str  # 'a' or 'b'
    a: str
    b: str


@dataclass
class Pair:
    run_b: str
    cells: list[CellPair] = field(default_factory=list)
    one_sided: list[OneSided] = field(default_factory=list)
    measured_by_one: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # 'a'/'b' -> cells only it measured
    geomean: dict[str, float | None] = field(default_factory=dict)
    verdicts: dict[str, Counter] = field(default_factory=dict)


@dataclass
class BestCell:
    """The run with the most total tok/s at a cell valid in two or more of the runs compared (``same``: its lead
    over the runner-up is within ``SAME_WITHIN``, so the cell has no winner)."""

    context_label: str
    context_tokens: int
    concurrency: int
    best: str
    total_tps: float
    runner_up: str
    margin: float | None  # best / runner-up
    same: bool = False  # the lead is inside SAME_WITHIN: noise, so no run wins the cell


@dataclass
class Comparison:
    runs: dict[str, dict[str, Any]]  # in the order given; the first is the baseline
    letters: dict[str, str]
    pairs: dict[str, Pair]
    best: list[BestCell]
    method_diffs: list[str]
    method_unknown: list[str]
    decode: dict[str, dict[tuple[int, int], dict[str, Any]]]

    @property
    def baseline(self) -> str:
        return next(iter(self.runs))


def describe_run(run: dict[str, Any]) -> str:
    bits = [run.get("engine"), run.get("engine_version"), (run.get("engine_extra") or {}).get("model_name") or run.get("model")]
    if run.get("status") == "imported":
        bits.append("imported")
    return f"{run['run_id']} ({' · '.join(str(b) for b in bits if b)})"


def _setting(store: Store, run: dict[str, Any], column: str) -> Any:
    value = run.get(column)
    if value is None:
        value = ((run.get("config") or {}).get("matrix") or {}).get(column) if isinstance(run.get("config"), dict) else None
    if value is None and column == "token_source":  # the runner records it per cell
        _, rows = store.query(
            "SELECT token_source, count(*) FROM decode_details WHERE run_id = ? AND token_source IS NOT NULL "
            "GROUP BY 1 ORDER BY 2 DESC", [run["run_id"]])
        value = " + ".join(r[0] for r in rows) or None
    return value


def _method(store: Store, runs: dict[str, dict[str, Any]], letters: dict[str, str]) -> tuple[list[str], list[str]]:
    diffs: list[str] = []
    unknown: dict[str, list[str]] = {}
    for column, label, fmt in _METHOD:
        values = {rid: _setting(store, run, column) for rid, run in runs.items()}
        known = {rid: v for rid, v in values.items() if v is not None}
        if len({str(v) for v in known.values()}) > 1:
            diffs.append(f"{label}: " + ", ".join(f"{letters[r]} {fmt(v)}" for r, v in known.items()))
        for rid in values:
            if rid not in known:
                unknown.setdefault(rid, []).append(label)
    notes = [f"{letters[r]} does not record its {', '.join(labels)}" for r, labels in unknown.items()]
    return diffs, notes


def _shown(row: dict[str, Any]) -> str:
    if row["status"] == "valid":
        return f"{fmt_tps(row['total_tps'])} tok/s"
    return status_label(row["status"])


def _pair(store: Store, a: str, b: str, decode: dict[str, dict[tuple[int, int], dict[str, Any]]]) -> Pair:
    _, rows = store.query(
        "SELECT context_label, concurrency, metric, value_a, value_b, ratio FROM engine_comparison WHERE run_a = ? AND run_b = ?",
        [a, b])
    cells: dict[tuple[int, int], CellPair] = {}
    for label, n, metric, va, vb, ratio in rows:
        key = (parse_context(label), n)
        cells.setdefault(key, CellPair(label, key[0], n, {}))
        cells[key].values[metric] = (va, vb, ratio)
    pair = Pair(b, [cells[k] for k in sorted(cells)])
    for key in sorted(set(decode[a]) | set(decode[b])):
        ra, rb = decode[a].get(key), decode[b].get(key)
        va, vb = ra is not None and ra["status"] == "valid", rb is not None and rb["status"] == "valid"
        if ra is None or rb is None:  # the other run never tried it: not a "could not run"
            pair.measured_by_one.setdefault("a" if rb is None else "b", []).append(key)
        elif va != vb:
            pair.one_sided.append(OneSided(format_context(key[0]), key[0], key[1], "a" if va else "b", _shown(ra), _shown(rb)))
    for m in METRICS:
        found = (c.values[m.key][2] for c in pair.cells if m.key in c.values)
        ratios = [r for r in found if r is not None and r > 0]
        pair.geomean[m.key] = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        pair.verdicts[m.key] = Counter(verdict(m.key, c.values.get(m.key, (None, None, None))[2]) for c in pair.cells)
    return pair


def _best(decode: dict[str, dict[tuple[int, int], dict[str, Any]]]) -> list[BestCell]:
    out = []
    keys = sorted({k for rows in decode.values() for k in rows})
    for key in keys:
        valid = sorted(
            ((rows[key]["total_tps"], rid) for rid, rows in decode.items()
             if key in rows and rows[key]["status"] == "valid" and rows[key]["total_tps"] is not None),
            reverse=True,
        )
        if len(valid) < 2:  # nothing to compare
            continue
        (top, best), rest = valid[0], valid[1:]
        margin = top / rest[0][0] if rest[0][0] else None
        same = verdict("total_tps", margin) == "same"  # the per-cell ratios' own noise rule
        out.append(BestCell(format_context(key[0]), key[0], key[1], best, top, rest[0][1], margin, same))
    return out


def load_comparison(store: Store, run_ids: list[str]) -> Comparison:
    """Resolve the ids (prefixes ok; the first is the baseline) and compute the comparison."""
    if len(run_ids) < 2:
        raise StoreError("compare needs at least two runs")
    ids = [store.resolve_run(r) for r in run_ids]
    if len(set(ids)) != len(ids):
        raise StoreError("the same run was given twice")
    if len(ids) > len(string.ascii_uppercase):
        raise StoreError(f"compare takes at most {len(string.ascii_uppercase)} runs")
    runs = {i: store.get_run(i) or {} for i in ids}  # resolve_run found each
    letters = dict(zip(ids, string.ascii_uppercase))
    decode = {}
    for rid in ids:
        decode[rid] = {(r["context_tokens"], r["concurrency"]): r for r in view_rows(store, "SELECT * FROM decode_matrix WHERE run_id = ?", [rid])}
    pairs = {b: _pair(store, ids[0], b, decode) for b in ids[1:]}
    diffs, unknown = _method(store, runs, letters)
    return Comparison(runs, letters, pairs, _best(decode), diffs, unknown, decode)
