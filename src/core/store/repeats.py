"""A cell measured in K > 1 repeats (matrix.repeat; docs/metrics.md, "Repeats"): each repeat's rows, and the cell
across its repeats, which is what the cells row and every view built on it then hold (pure Python, no database).

The cell across its repeats: the rates, times and means (total_tps, per_request_tps, ttft_ms, tbt_ms, avg_active,
the TTFT populations' medians) are the means over its final repeats; the counts (completed, output_tokens,
measured_s, the populations' sizes) are their sums; its histograms are the repeats' merged; its status is valid
when every final repeat is, else the first other status in repeat order (the reason names the repeat); its flags
are the last final repeat's, with every repeat's doubtful columns, the phases' seconds summed and ``repeats``:
``{"k": final repeats, "of": K, "noisier": [metrics]}``. Its intervals are the across-repeat ones
(infermatrix.core.intervals.repeats) as soon as two repeats are final.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.intervals import Interval
from infermatrix.core.intervals.repeats import across_repeats
from infermatrix.core.measure import histograms as hdr
from infermatrix.core.store import rows
from infermatrix.core.types import CellResult

__all__ = ["REPEAT_COLUMNS", "REPEAT_INTERVAL_COLUMNS", "COMBINED_INTERVAL_COLUMNS", "REQUEST_STRIDE", "Repeat", "repeat_of",
           "combine", "combined_interval_rows"]

# cells' own columns, from status to ran_at_most (rows.cell_row's order after the key)
_CELL_FIELDS = ("status", "reason", "total_tps", "per_request_tps", "ttft_ms", "tbt_ms", "avg_active", "completed", "output_tokens",
                "measured_s", "window_start", "window_end", "token_source", "prompt_tokens", "started_at", "finished_at", "flags",
                "ttft_burst_ms", "ttft_burst_n", "ttft_restart_ms", "ttft_restart_n", "ran_at_most")  # fmt: skip
REPEAT_COLUMNS = ("run_id", "context_tokens", "concurrency", "repeat", *_CELL_FIELDS, "histograms")
REPEAT_INTERVAL_COLUMNS = ("run_id", "context_tokens", "concurrency", "repeat", "metric", "value", "lo", "hi", "method", "n")
COMBINED_INTERVAL_COLUMNS = (*rows.INTERVAL_COLUMNS, "repeats", "sd", "window_lo", "window_hi", "noisier")
# requests.request_no of a repeated cell: (repeat - 1) x REQUEST_STRIDE + the position in the repeat, unique in the cell
REQUEST_STRIDE = 1_000_000
_MEANS = ("total_tps", "per_request_tps", "ttft_ms", "tbt_ms", "avg_active", "ttft_burst_ms", "ttft_restart_ms")
_SUMS = ("completed", "output_tokens", "measured_s", "ttft_burst_n", "ttft_restart_n")


@dataclass
class Repeat:
    """One repeat as stored: its cell_repeats columns by name (flags and histograms parsed), its window intervals."""

    repeat: int
    values: dict[str, Any]
    intervals: dict[str, Interval] = field(default_factory=dict)


def repeat_of(run_id: str, c: CellResult, repeat: int) -> tuple[Repeat, list[Any]]:
    """A just-measured repeat: as a :class:`Repeat`, and its cell_repeats row (without saved_at)."""
    cell = rows.cell_row(run_id, c)
    hists = {m: (e.decode("ascii") if isinstance(e, (bytes, bytearray)) else str(e)) for m, e in sorted(c.histograms.items())}
    row = [run_id, c.context_tokens, c.concurrency, repeat, *cell[3:], rows.to_json(hists)]
    values = dict(zip(REPEAT_COLUMNS, row))
    values["flags"], values["histograms"] = dict(c.flags or {}), hists
    return Repeat(repeat, values, dict(c.intervals or {})), row


def _final(reps: Sequence[Repeat]) -> list[Repeat]:
    return [r for r in sorted(reps, key=lambda r: r.repeat) if r.values["status"] != "interrupted"]


def _mean(xs: list[Any]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _status(final: list[Repeat], every: Sequence[Repeat], of: int) -> tuple[str, str | None]:
    if not final:
        last = max(every, key=lambda r: r.repeat)
        return "interrupted", last.values["reason"]
    for r in final:
        if r.values["status"] != "valid":
            return r.values["status"], f"repeat {r.repeat} of {of}: {r.values['reason'] or r.values['status']}"
    return "valid", None


def _flags(final: list[Repeat], every: Sequence[Repeat], of: int) -> dict[str, Any]:
    last = (final or sorted(every, key=lambda r: r.repeat))[-1]
    flags = json.loads(json.dumps(last.values["flags"] or {}))  # a copy
    doubtful: dict[str, str] = {}
    phases: dict[str, float] = {}
    for r in final:
        client = (r.values["flags"] or {}).get("client")
        for col, why in ((client or {}).get("doubtful") or {}).items() if isinstance(client, dict) else ():
            doubtful.setdefault(col, f"repeat {r.repeat}: {why}")
        for phase, s in ((r.values["flags"] or {}).get("phases_s") or {}).items():
            phases[phase] = phases.get(phase, 0.0) + float(s)
    if doubtful and isinstance(flags.get("client"), dict):
        flags["client"]["doubtful"] = doubtful
    if phases:
        flags["phases_s"] = phases
    flags["repeats"] = {"k": len(final), "of": of, "measured": [r.repeat for r in final]}
    return flags


def combine(reps: Sequence[Repeat], of: int) -> tuple[CellResult, list[list[Any]]]:
    """The cell across its stored repeats (``of``: K, the repeats planned), and its cell_interval_rows (run_id first)."""
    first = reps[0].values
    final = _final(reps)
    status, reason = _status(final, reps, of)
    used = final or list(reps)
    v = {k: [r.values[k] for r in used] for k in (*_MEANS, *_SUMS)}
    c = CellResult(context_tokens=first["context_tokens"], concurrency=first["concurrency"], status=status, reason=reason)
    for k in _MEANS:
        setattr(c, k, _mean(v[k]))
    for k in _SUMS:
        xs = [x for x in v[k] if x is not None]
        setattr(c, k, (sum(xs) if k == "measured_s" else int(sum(xs))) if xs else None)
    starts, ends = [r.values["window_start"] for r in used if r.values["window_start"] is not None], [r.values["window_end"] for r in used if r.values["window_end"] is not None]
    c.window_start, c.window_end = (min(starts) if starts else None), (max(ends) if ends else None)
    c.started_at = min((r.values["started_at"] for r in used if r.values["started_at"] is not None), default=None)
    c.finished_at = max((r.values["finished_at"] for r in used if r.values["finished_at"] is not None), default=None)
    c.token_source, c.prompt_tokens = used[-1].values["token_source"], used[-1].values["prompt_tokens"]
    most = [r.values["ran_at_most"] for r in used if r.values["ran_at_most"] is not None]
    c.flags = _flags(final, reps, of)
    if most:  # the most the engine ran at once in any repeat (cells.ran_at_most reads flags.admission)
        c.flags.setdefault("admission", {})["ran_at_most"] = max(most)
    metrics = sorted({m for r in used for m in (r.values["histograms"] or {})})
    c.histograms = {m: hdr.merge([r.values["histograms"][m] for r in used if m in (r.values["histograms"] or {})]) for m in metrics}
    ivs = combined_interval_rows(final if len(final) >= 2 else used[-1:], of)
    c.flags["repeats"]["noisier"] = sorted(row[0] for row in ivs if row[-1])
    return c, ivs


def combined_interval_rows(reps: Sequence[Repeat], of: int) -> list[list[Any]]:
    """Per metric ``[metric, value, lo, hi, method, n, repeats, sd, window_lo, window_hi, noisier]``: across the
    repeats when two or more hold the metric, else the one repeat's window interval (repeats 1)."""
    out = []
    for metric in sorted({m for r in reps for m in r.intervals}):
        held = [r for r in reps if metric in r.intervals]
        if len(held) == 1:
            iv = held[0].intervals[metric]
            out.append([metric, iv.value, iv.lo, iv.hi, iv.method, iv.n, 1, None, None, None, None])
            continue
        ri = across_repeats([r.intervals[metric].value for r in held], [r.intervals[metric] for r in held])
        assert ri is not None
        iv = ri.interval
        out.append([metric, iv.value, iv.lo, iv.hi, iv.method, iv.n, len(held), ri.sd, ri.window_lo, ri.window_hi, ri.noisier])
    return out
