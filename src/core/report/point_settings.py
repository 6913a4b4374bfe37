"""What each kind of load point used, in words: one wording for the line a run prints as a point starts and for
the report header's rows (issue 27: a header described a matrix that never ran, and not what the points used).

Pure functions of plain values, so the run (from its config) and the report (from the stored rows) say the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from infermatrix.core.contexts import format_context

if TYPE_CHECKING:
    from infermatrix.core.report.data import ReportData

__all__ = ["rate_point_settings", "trace_point_settings", "workload_settings", "DISTINCT_PROMPTS", "matrix_ran", "load_rows"]

DISTINCT_PROMPTS = "distinct prompts (no prefix shared)"  # a rate point's prompts: never a prefix-cache hit of another


def _tokens(n: Any) -> str:
    return f"{n:,} tokens" if isinstance(n, int) else "—"


def rate_point_settings(arrival: str, duration_s: float | None, context_tokens: int | None, max_output: int | None,
                        max_in_flight: int | None = None) -> str:  # fmt: skip
    """``constant arrivals · 3 s · 1K prompts, distinct prompts (no prefix shared) · max output 32 tokens``."""
    parts = [f"{arrival} arrivals", f"{duration_s:g} s of arrivals" if duration_s is not None else "—",
             f"{format_context(context_tokens)} prompts" if context_tokens else "—", DISTINCT_PROMPTS,
             f"max output {_tokens(max_output)}"]  # fmt: skip
    if max_in_flight:
        parts.append(f"at most {max_in_flight} in flight")
    return " · ".join(parts)


def trace_point_settings(path: str, time_scale: float | None, requests: int | None = None, shared_tokens: int | None = None,
                         prompt_tokens: int | None = None) -> str:  # fmt: skip
    """``trace.jsonl ×0.5 · 40 requests · each request's own prompt and max output (the trace's) · 11,776 of …``.

    Without the counts (before the replay is built) it says how sharing is decided instead."""
    scale = f" ×{time_scale:g}" if time_scale not in (None, 1) else ""
    parts = [f"{Path(path).name}{scale}"]
    if requests is not None:
        parts.append(f"{requests:,} requests")
    parts.append("each request's own prompt length and max output (the trace's)")
    if shared_tokens is None:
        parts.append("prompts share what the trace's hash_ids share")
    elif shared_tokens:
        total = f" of {prompt_tokens:,}" if isinstance(prompt_tokens, int) else ""
        parts.append(f"{shared_tokens:,}{total} prompt tokens shared with earlier requests (the trace's hash_ids)")
    else:
        parts.append("no prompt tokens shared")
    return " · ".join(parts)


def workload_settings(workload: str, params: dict[str, Any] | None) -> str:
    """``shared-prefix · max output 64 tokens · prefixes shared by design``."""
    p = params or {}
    if p.get("natural_length"):  # tasks: sent without ignore_eos, each stops where the model stops it
        return " · ".join([workload, f"max output {_tokens(p.get('max_tokens'))} ([workload] max_tokens)",
                           "natural length: sent without ignore_eos (its own section)"])  # fmt: skip
    out = p.get("output_tokens")
    parts = [workload, f"max output {_tokens(out)} ([workload] output_tokens)" if out is not None else "max output: the workload's own"]
    parts.append("prompts share prefixes by design (its own section)")
    return " · ".join(parts)


def matrix_ran(d: ReportData) -> bool:
    """Whether the run has decode cells (stored, or planned by its config): the header's matrix settings (time per
    measurement, max output, prompt mode) describe only those. A run of points, a trace or prefill probes alone has none."""
    if d.decode:
        return True
    matrix = (d.run.get("config") or {}).get("matrix")
    if not isinstance(matrix, dict):  # an imported or older run without its config: the matrix is all it has
        return not (d.points or d.traces or d.prefill or d.workload.reuse)
    return bool(matrix.get("contexts")) and bool(matrix.get("concurrency"))


def load_rows(d: ReportData) -> list[tuple[str, str]]:
    """The header's rows for what ran besides the matrix, each saying what it used: rate points (those with the same
    settings on one row, their rates listed), SLO search probes, trace replays, bursts, interference points, a workload pass."""
    loads = (d.run.get("config") or {}).get("load")
    configured = len(loads) if isinstance(loads, list) else None  # points past the [[load]] entries are search probes
    traces = {t["point"]: t for t in d.traces}
    groups: dict[tuple[str, str], list[float]] = {}
    rows: list[tuple[str, str]] = []
    for p in d.points:
        if p.get("arrival") == "trace":
            t = traces.get(p["point"], {})
            rows.append(("Trace replay", trace_point_settings(t.get("path") or p.get("label") or "trace", t.get("time_scale"),
                                                              t.get("replayed"), t.get("shared_prefix_tokens"), t.get("prompt_tokens"))))
            continue
        if p.get("arrival") == "burst":  # one row per burst: its own settings (burst_points has the rest)
            rows.append(("Burst", f"{p.get('label') or 'burst'} · max output {_tokens(p.get('max_output'))}"))
            continue
        if p.get("arrival") == "mixed":  # one row per interference point: its own settings (the interference view has the rest)
            rows.append(("Interference", f"{p.get('label') or 'mixed'} · prefill max output {_tokens(p.get('max_output'))}"))
            continue
        label = "Search probes" if configured is not None and p["point"] >= configured else "Open-loop points"
        what = rate_point_settings(p["arrival"], p.get("duration_s"), p.get("context_tokens"), p.get("max_output"), p.get("max_in_flight"))
        groups.setdefault((label, what), []).append(p["requested_rate"])
    for (label, what), rates in groups.items():
        rows.append((label, f"{', '.join(f'{r:g}' for r in rates)}/s · {what}"))
    reuse = d.workload.reuse
    if reuse:
        rows.append(("Workload pass", workload_settings(reuse.get("workload") or "workload", d.workload.params)))
    return rows
