"""What a comparison of runs says, computed once from the views (engine_comparison, decode_matrix)
and the runs table; the text, Markdown, HTML and JSON renderers only draw it.

The first run is the baseline A; every other run (B, C …) is held against it cell by cell over
the cells valid in both (ratio = other / A). Each metric has a direction: more tok/s is better,
fewer ms is better. Each cell's verdict — same, faster or slower — comes from the two cells' 95 % intervals
(``cell_intervals``; the ratio's interval by the delta method, ``infermatrix.core.intervals.verdict_of``): same
when it holds 1. A cell without intervals on both sides (an imported page, a store older than v8) falls back to
the fixed rule, a ratio within ``SAME_WITHIN`` of 1 is the same, and the comparison says so.
"""

from __future__ import annotations

import math
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.contexts import format_context, parse_context
from infermatrix.core.intervals import Interval, Verdict, verdict_of
from infermatrix.core.intervals.tdist import Z95
from infermatrix.core.report.compare_tasks import TaskComparison, compare_tasks
from infermatrix.core.report.data import Intervals, load_intervals, load_telemetry
from infermatrix.core.report.fmt import fmt_ms, fmt_ratio, fmt_tokens, fmt_tps, status_label
from infermatrix.core.report.query import view_rows
from infermatrix.core.store import Store, StoreError

__all__ = [
    "METRICS", "SAME_WITHIN", "Metric", "CellPair", "OneSided", "Pair", "BestCell", "Comparison",
    "load_comparison", "verdict", "describe_run", "fmt_ratio", "STYLE", "GATE_METRICS", "gate", "BurstPair", "BURST_METRICS",
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


# A cell verdict's word -> the style (colour, mark) the renderers give it.
STYLE = {"faster": "better", "slower": "worse", "same": "same", None: None}



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
    judged: dict[str, Verdict] = field(default_factory=dict)  # metric -> ratio, its interval, same / faster / slower


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
    geomean_interval: dict[str, tuple[float, float] | None] = field(default_factory=dict)  # None: some cell had none
    verdicts: dict[str, Counter] = field(default_factory=dict)  # metric -> counts of same / faster / slower
    fixed_rule: bool = False  # some cell had no intervals on a side: judged by the fixed SAME_WITHIN rule


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


BURST_METRICS = (("duration_s", False), ("output_tps", True), ("e2e_p99_ms", False), ("ttft_p99_ms", False))  # (burst_points column, higher is better)


@dataclass
class BurstPair:
    """A burst both the baseline A and run B ran with the same requests, concurrency, context, max output and stop rule,
    valid in both: its burst_points rows, and per metric the ratio B/A and its word by the fixed rule (a burst is one
    measurement: it has no interval)."""

    run_b: str
    a: dict[str, Any]
    b: dict[str, Any]
    ratios: dict[str, tuple[float | None, str | None]]  # metric -> (B/A, better | worse | same)


def _burst_key(r: dict[str, Any]) -> tuple:
    return (r["requests"], r["concurrency"], r["context_tokens"], r.get("max_output"), bool(r.get("natural_stop")))


def _burst_pairs(store: Store, ids: list[str]) -> list[BurstPair]:
    return _alike_pairs(store, ids, "burst_points", _burst_key, BURST_METRICS)


# (interference column, higher is better): the decoders' gaps during a prefill, the stall, the prompt's TTFT, the gaps alone
INTERFERENCE_METRICS = (("tbt_during_ms", False), ("stall_max_ms", False), ("prefill_ttft_ms", False), ("tbt_alone_ms", False))


def _interference_key(r: dict[str, Any]) -> tuple:
    return (r["decode_streams"], r["decode_context"], r["prefill_context"], r["prefills"], r.get("prefill_rate"))


def _interference_pairs(store: Store, ids: list[str]) -> list[BurstPair]:
    return _alike_pairs(store, ids, "interference", _interference_key, INTERFERENCE_METRICS)


def _alike_pairs(store: Store, ids: list[str], view: str, key: Any, metrics: tuple[tuple[str, bool], ...]) -> list[BurstPair]:
    """Points of ``view`` (bursts, interference points) valid in the baseline and another run with the same ``key``: per
    metric the ratio other/A and its word by the fixed rule (one measurement each: no interval)."""
    rows = {rid: {key(r): r for r in view_rows(store, f"SELECT * FROM {view} WHERE run_id = ? AND status = 'valid' "
                                                     "ORDER BY point", [rid])} for rid in ids}  # fmt: skip
    out = []
    for b in ids[1:]:
        for k, ra in rows[ids[0]].items():
            rb = rows[b].get(k)
            if rb is None:
                continue
            ratios: dict[str, tuple[float | None, str | None]] = {}
            for col, higher in metrics:
                va, vb = ra.get(col), rb.get(col)
                ratio = vb / va if va and vb is not None else None
                word = None if ratio is None else "same" if abs(ratio - 1) < SAME_WITHIN else "better" if (ratio > 1) == higher else "worse"
                ratios[col] = (ratio, word)
            out.append(BurstPair(b, ra, rb, ratios))
    return out


@dataclass
class Comparison:
    runs: dict[str, dict[str, Any]]  # in the order given; the first is the baseline
    letters: dict[str, str]
    pairs: dict[str, Pair]
    best: list[BestCell]
    method_diffs: list[str]
    method_unknown: list[str]
    decode: dict[str, dict[tuple[int, int], dict[str, Any]]]
    intervals: dict[str, Intervals] = field(default_factory=dict)  # run -> cell -> metric -> interval
    bursts: list[BurstPair] = field(default_factory=list)  # bursts valid in A and another run, alike (docs/load.md, "Bursts")
    tasks: dict[str, list[TaskComparison]] = field(default_factory=dict)  # run B -> its task sets against A's (compare_tasks.py)
    # run -> decode cell -> its engine_cells / gpu_cells rows (docs/telemetry.md), timelines left out
    telemetry: dict[str, dict[tuple[int, int], dict[str, Any]]] = field(default_factory=dict)
    interference: list[BurstPair] = field(default_factory=list)  # interference points valid in A and another run, alike

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


def _judge(pair: Pair, ia: Intervals, ib: Intervals) -> None:
    """Each cell's verdict per metric, and the geometric mean's interval over the cells (the log ratios' errors add)."""
    for m in METRICS:
        logs, ses = [], []
        for c in pair.cells:
            a, b, _ = c.values.get(m.key, (None, None, None))
            if a is None or b is None or a <= 0 or b <= 0:
                continue
            key = (c.context_tokens, c.concurrency)
            va, vb = ia.get(key, {}).get(m.key), ib.get(key, {}).get(m.key)
            v = c.judged[m.key] = verdict_of(va if va is not None else a, vb if vb is not None else b, m.higher_is_better)
            pair.fixed_rule |= v.lo is None
            logs.append(math.log(v.ratio))
            ses.append(None if v.lo is None or v.hi is None else (math.log(v.hi) - math.log(v.lo)) / (2 * Z95))
        pair.verdicts[m.key] = Counter(c.judged[m.key].verdict for c in pair.cells if m.key in c.judged)
        if logs and None not in ses:
            mean, half = sum(logs) / len(logs), Z95 * math.sqrt(sum(s * s for s in ses if s is not None)) / len(logs)
            pair.geomean_interval[m.key] = (math.exp(mean - half), math.exp(mean + half))
        else:
            pair.geomean_interval[m.key] = None


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
    intervals = {rid: load_intervals(store, rid) for rid in ids}
    pairs = {b: _pair(store, ids[0], b, decode) for b in ids[1:]}
    for b, pair in pairs.items():
        _judge(pair, intervals[ids[0]], intervals[b])
    diffs, unknown = _method(store, runs, letters)
    tasks = {b: compare_tasks(store, ids[0], b) for b in ids[1:]}
    telemetry = {rid: {k: {p: r for p, r in t.items() if p != "timeline"} for k, t in load_telemetry(store, rid).items()} for rid in ids}
    return Comparison(runs, letters, pairs, _best(decode), diffs, unknown, decode, intervals, _burst_pairs(store, ids), tasks, telemetry,
                      interference=_interference_pairs(store, ids))


# --fail-if-slower's metrics -> (the cell_intervals metric, the decode_matrix column without intervals, higher is better)
GATE_METRICS = {
    "total_tps": ("total_tps", "total_tps", True),
    "per_request_tps": ("per_request_tps", "per_request_tps", True),
    "ttft_ms": ("ttft_ms", "ttft_ms", False),
    "tbt_ms": ("tbt_ms", "tbt_ms", False),
    "ttft_p99": ("ttft_p99_ms", None, False),
    "tbt_p99": ("tbt_p99_ms", None, False),
}


@dataclass
class GateHit:
    run_b: str
    context_label: str
    concurrency: int
    metric: str
    judged: Verdict
    confident: bool  # slower by more than the limit with confidence (the ratio's whole interval beyond it)


def gate(cmp: Comparison, pct: float, metrics: list[str]) -> list[GateHit]:
    """Every (pair, cell, metric) where the other run is slower than the baseline by more than ``pct`` %: confident
    when the ratio's interval lies wholly beyond it (without intervals, the fixed rule: the ratio itself beyond it
    and beyond SAME_WITHIN); a slower ratio whose interval reaches back inside the limit is reported, not confident."""
    hits = []
    limit = pct / 100.0
    for pair in cmp.pairs.values():
        ia, ib = cmp.intervals.get(cmp.baseline, {}), cmp.intervals.get(pair.run_b, {})
        for c in pair.cells:
            key = (c.context_tokens, c.concurrency)
            for name in metrics:
                imetric, column, higher = GATE_METRICS[name]
                va, vb = ia.get(key, {}).get(imetric), ib.get(key, {}).get(imetric)
                a = va if va is not None else (cmp.decode[cmp.baseline].get(key, {}).get(column) if column else None)
                b = vb if vb is not None else (cmp.decode[pair.run_b].get(key, {}).get(column) if column else None)
                if a is None or b is None or (a.value if isinstance(a, Interval) else a) <= 0:
                    continue
                v = verdict_of(a, b, higher)
                # slowdown as a ratio > 1: base / new for a rate, new / base for a latency
                worst_inside = v.hi if higher else v.lo  # the end of the ratio's interval nearest "no slowdown"
                slow = v.ratio < 1 - limit if higher else v.ratio > 1 + limit
                if worst_inside is None:
                    confident = slow and v.verdict == "slower"
                else:
                    confident = worst_inside < 1 - limit if higher else worst_inside > 1 + limit
                if slow or confident:
                    hits.append(GateHit(pair.run_b, c.context_label, c.concurrency, name, v, confident))
    return hits
