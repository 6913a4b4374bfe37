"""A finished (or cut-short) cell's bookkeeping: request counts, validity rules, redaction, verdicts.

Every request counts (failed warm-ups included); a cell that misses a validity rule is an ``error``,
never a clean number (docs/reliability.md).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.engine.contract import Engine
from infermatrix.core.redact import redact_text
from infermatrix.core.types import CellResult, PrefillResult, RequestRecord

__all__ = ["NOT_FAILED", "count_outcomes", "account", "apply_validity", "redact_result", "rejected_everything", "partial_cell", "cell_detail"]

# Request-specific answers that say nothing about the engine as a whole (e.g. a too-long prompt).
REQUEST_SPECIFIC = ("HTTP 400", "HTTP 404", "HTTP 413", "HTTP 422")
NOT_FAILED = ("ok", "cancelled")  # the outcomes that are not failures


def count_outcomes(records: list[RequestRecord]) -> dict[str, Any]:
    failed = [r for r in records if r.outcome not in NOT_FAILED]
    return {"requests": len(records), "failed_requests": len(failed), "outcomes": dict(Counter(r.outcome for r in records))}


def account(result: CellResult, warm: list[RequestRecord]) -> None:
    """Every request counts: failed warm-ups join the cell's requests, and the success rate is stored."""
    f = result.flags
    if "requests" not in f:  # a cell that ended before its window (every warm-up failed, engine down ...)
        f.update(count_outcomes(result.requests))
        f["warmup_requests"] = len(warm)
        f["warmup_failed"] = sum(1 for r in warm if r.outcome not in NOT_FAILED)
    else:
        stored = {id(r) for r in result.requests}
        warm_failed = [r for r in warm if r.outcome not in NOT_FAILED and id(r) not in stored]
        f["warmup_requests"] = len(warm)
        f["warmup_failed"] = len(warm_failed)
        if warm_failed:
            result.requests = [*warm_failed, *result.requests]
            f["requests"] += len(warm_failed)
            f["failed_requests"] += len(warm_failed)
            outcomes = Counter(f.get("outcomes") or {})
            outcomes.update(r.outcome for r in warm_failed)
            f["outcomes"] = dict(outcomes)
            if result.status in ("valid", "client_bound", "admission_limited"):  # failed requests outrank a pace verdict
                result.status = "error"
                result.reason = (
                    f"{len(warm_failed)} of {len(warm)} warm-up requests failed "
                    f"({dict(Counter(r.outcome for r in warm_failed))}): {warm_failed[0].error}"
                )
    n, bad = f["requests"], f["failed_requests"]
    f["success_rate"] = round((n - bad) / n, 4) if n else None


def apply_validity(result: CellResult, m: Any, v: Any) -> None:
    """The rules a measured cell's numbers must meet, stored per cell; a miss is never a clean number."""
    if result.measured_s is None:
        return
    f = result.flags
    n = result.concurrency
    requests, failed = f.get("requests") or 0, f.get("failed_requests") or 0
    checks: dict[str, dict[str, Any]] = {
        "window_s": {"value": round(result.measured_s, 3), "min": round(v.min_window_fraction * m.duration_s, 3)},
        "output_tokens": {"value": result.output_tokens or 0, "min": v.min_output_tokens},
        # The client's in-flight share (avg_active may be the engine's count, judged apart: cells.flags.admission).
        "active_fraction": {"value": round((f.get("client_active", result.avg_active) or 0.0) / n, 4), "min": v.min_active_fraction},
        "error_rate": {"value": round(failed / requests, 4) if requests else 1.0, "max": v.max_error_rate},
    }
    misses = []
    for name, c in checks.items():
        c["ok"] = c["value"] >= c["min"] if "min" in c else c["value"] <= c["max"]
        if not c["ok"]:
            bound = f">= {c['min']}" if "min" in c else f"<= {c['max']}"
            misses.append(f"{name} {c['value']} (needs {bound})")
    f["validity"] = {"ok": not misses, "checks": checks}
    if misses and result.status == "valid":
        result.status, result.reason = "error", "invalid measurement: " + "; ".join(misses)


def redact_result(engine: Engine, result: CellResult | PrefillResult) -> None:
    secrets = [engine.api_key] if engine.api_key else []
    if not secrets:
        return
    result.reason = redact_text(result.reason, secrets) if result.reason else result.reason
    for r in getattr(result, "requests", []):
        if r.error:
            r.error = redact_text(r.error, secrets)
        if r.text:
            r.text = redact_text(r.text, secrets)
    flags = getattr(result, "flags", None)
    if flags and isinstance(flags.get("engine_log_tail"), str):
        flags["engine_log_tail"] = redact_text(flags["engine_log_tail"], secrets)


def rejected_everything(result: CellResult | PrefillResult) -> bool | None:
    """True: no request of this unit succeeded, for a reason that is not the request's own shape.
    None: the unit sent nothing (over capacity), so it says nothing."""
    if result.status == "over_capacity":
        return None
    if isinstance(result, PrefillResult):
        return result.status == "error" and not (result.reason or "").startswith(REQUEST_SPECIFIC)
    if result.status != "error" or (result.flags.get("outcomes") or {}).get("ok"):
        return False
    errors = [r.error or "" for r in result.requests if r.outcome not in NOT_FAILED]
    return bool(errors) and not all(e.startswith(REQUEST_SPECIFIC) for e in errors)


def partial_cell(ctx: int, n: int, status: str, reason: str, started_at: float, runner: CellRunner, flags: dict[str, Any]) -> CellResult:
    """A cell cut short: its status, why, and every request it had sent (no numbers)."""
    warm = list(getattr(runner, "last_warm", None) or [])
    records = list(getattr(runner, "live_records", None) or [])
    requests = [*(r for r in warm if r.outcome not in NOT_FAILED), *records]
    result = CellResult(context_tokens=ctx, concurrency=n, status=status, reason=reason, started_at=started_at,
                        finished_at=time.time(), requests=requests, flags=dict(flags))  # fmt: skip
    result.flags.update(count_outcomes(requests))
    result.flags["warmup_requests"] = len(warm)
    result.flags["warmup_failed"] = sum(1 for r in warm if r.outcome not in NOT_FAILED)
    total = result.flags["requests"]
    result.flags["success_rate"] = round((total - result.flags["failed_requests"]) / total, 4) if total else None
    return result


def cell_detail(r: CellResult) -> str:
    if r.status == "valid":
        # Any of these can be unknown in a valid cell (e.g. no request spanned the minimum for a rate).
        return (f"{_num(r.total_tps, ',.1f')} tok/s total, {_num(r.per_request_tps, ',.1f')}/req, "
                f"TTFT {_num(r.ttft_ms, ',.0f')} ms, TBT {_num(r.tbt_ms, '.1f')} ms")  # fmt: skip
    return r.reason or ""


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)
