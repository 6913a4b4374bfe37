"""What the engine's own counters say a cell (or a set of prefill probes) did: speculative decoding and
the prefix cache, as counter differences between a read before and a read after (docs/metrics.md).

The result is stored as JSON (``cells.flags.engine_counters``, ``prefill.engine_counters``); the rates
are computed once, in the view ``cell_engine_stats``. A missing figure carries its reason.
"""

from __future__ import annotations

from typing import Any

from infermatrix.core.engine.traits import Gauges, MetricNames

__all__ = ["counter_deltas", "COUNTERS"]

COUNTERS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens", "prefix_cache_queries", "prefix_cache_hits")


def _delta(before: Gauges, after: Gauges, name: str) -> float | None:
    b, a = getattr(before, name), getattr(after, name)
    if a is None or b is None or a < b:  # a counter that went down: the engine restarted in between
        return None
    return a - b


def _why(names: MetricNames | None, before: Gauges | None, after: Gauges | None) -> str | None:
    if names is None:
        return "the engine declares no metrics"
    if names.counted_at_request_end:
        return "the engine's counters move only when requests end"
    if before is None or after is None:
        return "the engine's metrics did not answer before and after"
    return None


def counter_deltas(names: MetricNames | None, before: Gauges | None, after: Gauges | None) -> dict[str, Any]:
    """Counter differences, with ``spec_note`` / ``prefix_cache_note`` saying why a figure is missing."""
    why = _why(names, before, after)
    if why is not None or names is None or before is None or after is None:
        return {"spec_note": why, "prefix_cache_note": why}
    out: dict[str, Any] = {c: _delta(before, after, c) for c in COUNTERS}
    b, a = before.spec_accepted_per_pos or {}, after.spec_accepted_per_pos or {}
    out["spec_accepted_per_pos"] = [a[k] - b.get(k, 0.0) for k in sorted(a)] if a else None
    if not (names.spec_draft_tokens and names.spec_accepted_tokens):
        out["spec_note"] = "the engine reports no speculative-decoding counters"
    elif out["spec_draft_tokens"] is None:
        out["spec_note"] = "no speculative-decoding counters on the metrics page (speculative decoding off?)"
    elif not out["spec_draft_tokens"]:
        out["spec_note"] = "no draft tokens in this span"
    if not (names.prefix_cache_queries and names.prefix_cache_hits):
        out["prefix_cache_note"] = "the engine reports no prefix-cache counters"
    elif out["prefix_cache_queries"] is None:
        out["prefix_cache_note"] = "no prefix-cache counters on the metrics page"
    elif not out["prefix_cache_queries"]:
        out["prefix_cache_note"] = "no prefix-cache queries in this span"
    return out
