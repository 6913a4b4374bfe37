"""Open-loop load points, run after the matrix on the same engine: each point's prompts prepared, its
schedule sent (core/load/openloop.py), judged (valid / client_bound), and saved in one transaction.

A point is one step (core/engine/step.py), as a decode cell is: an engine lost inside it saves it as ``error``
with the reason and brings the engine back; a step that fails with the engine up is an ``error``; an interrupt
saves what was sent as ``interrupted`` (resume runs it again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infermatrix.core.config import LoadConfig, RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.arrival_spec import parse_arrival
from infermatrix.core.load.arrivals import schedule
from infermatrix.core.stream.client import encode_body
from infermatrix.core.load.openloop import SendPlan, judge_point, lag_bound_ms, percentile
from infermatrix.core.report.point_settings import DISTINCT_PROMPTS, rate_point_settings, trace_point_settings
from infermatrix.core.load.point_send import output_tokens, request_row, send_point
from infermatrix.core.load.trace_point import is_trace, measure_trace_point, trace_label, trace_point_rows
from infermatrix.core.load.burst_point import burst_label, burst_point_rows, is_burst, measure_burst_point
from infermatrix.core.load.mixed_point import is_mixed, measure_mixed_point, mixed_label, mixed_point_rows
from infermatrix.core.store.points import done_points, save_point
from infermatrix.core.types import RequestRecord

if TYPE_CHECKING:  # the run hands in its context (core/load/context.py); load never imports run at run time
    from infermatrix.core.load.context import RunContext
    from infermatrix.core.run.progress import RunProgress

__all__ = ["pending_points", "run_points", "run_point", "point_context", "point_label", "plan_lines"]


def point_context(cfg: RunConfig, lc: LoadConfig) -> int:
    """The point's prompt tokens: its own, else the first matrix context, else 1024."""
    return lc.context or (cfg.matrix.contexts[0] if cfg.matrix.contexts else 1024)


def point_label(cfg: RunConfig, lc: LoadConfig) -> str:
    if is_trace(lc):
        return trace_label(lc)  # type: ignore[arg-type]
    if is_burst(lc):
        return burst_label(cfg, lc)  # type: ignore[arg-type]
    if is_mixed(lc):
        return mixed_label(cfg, lc)  # type: ignore[arg-type]
    cap = f" cap {lc.max_in_flight}" if lc.max_in_flight else ""
    return f"{lc.arrival}@{lc.rate:g}/s {format_context(point_context(cfg, lc))}{cap}"


def plan_lines(cfg: RunConfig) -> list[str]:
    """The run header's lines for what runs, as the run starts (issue 27): the matrix's settings only when it has
    decode cells, then each ``[[load]]`` point with what it uses; the report's header says the same from the store."""
    m, lines = cfg.matrix, []
    if m.contexts and m.concurrency:
        mode = DISTINCT_PROMPTS if m.prompt_mode == "distinct" else "one prompt shared by every stream"
        lines.append(f"matrix: {len(m.contexts)} contexts × {len(m.concurrency)} concurrencies · {m.duration_s:g} s per cell · "
                     f"max output {m.max_output:,} tokens · {mode}")  # fmt: skip
    for i, lc in enumerate(getattr(cfg, "load", None) or []):
        if is_trace(lc):
            lines.append(f"point {i}: trace {trace_point_settings(lc.path, lc.time_scale)}")
        elif is_burst(lc):
            lines.append(f"point {i}: {burst_label(cfg, lc)} · max output {lc.max_output:,} tokens")
        elif is_mixed(lc):
            lines.append(f"point {i}: {mixed_label(cfg, lc)} · warm-up {lc.warmup_s:g} s, alone window {lc.window_s:g} s")
        else:
            lines.append(f"point {i}: {lc.rate:g}/s · {rate_point_settings(lc.arrival, lc.duration_s, point_context(cfg, lc), lc.max_output, lc.max_in_flight)}")
    return lines


def pending_points(store: Any, run_id: str | None, cfg: RunConfig, retry_errors: bool) -> list[int]:
    """Indexes of the ``[[load]]`` points still to run (all of them for a new run)."""
    loads = list(getattr(cfg, "load", None) or [])
    done = done_points(store, run_id, retry_errors) if run_id is not None else set()
    return [i for i in range(len(loads)) if i not in done]


async def run_points(rc: RunContext, todo: list[int]) -> None:
    """Every pending point, in order, each saved before the next starts."""
    if not todo:
        return
    with rc.live(len(todo)) as progress:
        for index in todo:
            await _one_point(rc, progress, index)


async def run_point(rc: RunContext, progress: RunProgress, index: int, lc: LoadConfig) -> None:
    """One point that is not a ``[[load]]`` entry (an SLO search's probe, core/load/search.py), stored as point ``index``."""
    await _one_point(rc, progress, index, lc)


async def _one_point(rc: RunContext, progress: RunProgress, index: int, lc: Any = None) -> None:
    lc = lc if lc is not None else rc.cfg.load[index]  # a LoadConfig, TraceLoadConfig (trace_point.py), BurstLoadConfig (burst_point.py) or MixedLoadConfig (mixed_point.py)
    state: dict[str, Any] = {}
    # A trace replay or a burst is measured and judged by its own pair; saved like any point.
    measure_point, point_rows = ((measure_trace_point, trace_point_rows) if is_trace(lc) else (measure_burst_point, burst_point_rows)
                                 if is_burst(lc) else (measure_mixed_point, mixed_point_rows) if is_mixed(lc)
                                 else (_measure_point, _point_rows))  # fmt: skip

    async def measure() -> None:
        await measure_point(rc, index, lc, state)

    def detail(row: dict[str, Any]) -> str:
        if is_mixed(lc):
            m = row["mixed"]
            return (f"TBT alone {m['tbt_alone_ms'] or 0:,.1f} ms, during {m['tbt_during_ms'] or 0:,.1f} ms, stall max "
                    f"{m['stall_max_ms'] or 0:,.1f} ms, prefill TTFT {m['prefill_ttft_ms'] or 0:,.0f} ms (alone {m['prefill_ttft_alone_ms'] or 0:,.0f})")
        if is_burst(lc):
            return f"{row['duration_s'] or 0:.2f} s, {row.get('output_tps') or 0:,.0f} tok/s, e2e p99 {row['e2e_p99_ms'] or 0:,.0f} ms"
        return f"{row.get('achieved_rate') or 0:.2f}/s achieved, lag p99 {row['lag_p99_ms']:.1f} ms, TTFT p50 {row['ttft_p50_ms'] or 0:,.0f} ms"

    await rc.row_step(progress, point_label(rc.cfg, lc), measure, lambda status, reason: point_rows(rc, index, lc, state, status, reason),
                      lambda row, reqs: save_point(rc.store, rc.run_id, row, reqs), detail,
                      "run interrupted during this point (resume runs it again)")  # fmt: skip


async def _measure_point(rc: RunContext, index: int, lc: LoadConfig, state: dict[str, Any]) -> None:
    """Prompts and bodies first (outside the schedule), then the schedule sent; fills ``state``."""
    runner, phase = rc.runner, rc.steps.phase
    ctx = point_context(rc.cfg, lc)
    seed = lc.seed if lc.seed is not None else rc.cfg.matrix.seed + index
    offsets = schedule(parse_arrival(lc.arrival), lc.rate, lc.duration_s, seed)
    state.update(offsets=offsets, seed=seed, records={}, ids={})
    phase("prompts")
    bodies = []
    for i in range(len(offsets)):
        prompt = await rc.workload.prompt(ctx, f"load{index}/r{i}", distinct=True)
        bodies.append(encode_body(runner._body(prompt, lc.max_output)))
    phase("measure")
    await send_point(runner, state, index, offsets, bodies, lc.max_in_flight)  # state["plan"] filled as requests go: kept if interrupted


def _sent_at(rec: RequestRecord | None) -> float | None:
    return None if rec is None else rec.sent


def _point_rows(
    rc: RunContext, index: int, lc: LoadConfig, state: dict[str, Any], status: str | None, reason: str | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The point's row and its request rows from what was sent; ``status`` None: judge the schedule."""
    offsets: list[float] = state.get("offsets", [])
    plan: SendPlan | None = state.get("plan")
    records: dict[int, RequestRecord] = state.get("records", {})
    ids: dict[int, str] = state.get("ids", {})
    origin = plan.origin if plan is not None else None
    reqs, sched_off, actual_off = [], [], []
    ttft, ttft_sent, e2e = [], [], []
    out_tokens, last_end, completed, failed, queued = 0, None, 0, 0, 0
    for s in (plan.sent if plan is not None else []):
        rec = records.get(s.index)
        sent = _sent_at(rec)
        if rec is None or sent is None:
            continue
        queued += s.queue_s > 0
        sched_off.append(s.scheduled - plan.origin)  # type: ignore[union-attr]
        actual_off.append(sent - plan.origin)  # type: ignore[union-attr]
        ok = rec.outcome == "ok"
        completed += ok
        failed += not ok
        out_tokens += output_tokens(rec)
        if rec.ended is not None:
            last_end = rec.ended if last_end is None else max(last_end, rec.ended)
        ft = rec.first_token
        if ok and ft is not None:
            ttft.append((ft - s.scheduled) * 1000)
            ttft_sent.append((ft - sent) * 1000)
        if ok and rec.ended is not None:
            e2e.append((rec.ended - s.scheduled) * 1000)
        reqs.append(request_row(s, rec, ids.get(s.index)))
    row: dict[str, Any] = {
        "point": index, "label": point_label(rc.cfg, lc), "arrival": lc.arrival, "requested_rate": lc.rate, "duration_s": lc.duration_s,
        "context_tokens": point_context(rc.cfg, lc), "max_output": lc.max_output, "max_in_flight": lc.max_in_flight,
        "seed": state.get("seed"), "scheduled": len(offsets), "scheduled_rate": len(offsets) / lc.duration_s, "sent": len(actual_off),
        "lag_bound_ms": lag_bound_ms(lc.rate), "queued": queued, "max_queue": plan.max_queue if plan else 0,
        "completed": completed, "failed": failed, "output_tokens": out_tokens, "origin": origin,
        "output_tps": out_tokens / (last_end - origin) if last_end is not None and origin is not None and last_end > origin else None,
        "ttft_p50_ms": percentile(ttft, 0.5), "ttft_p99_ms": percentile(ttft, 0.99),
        "ttft_sent_p50_ms": percentile(ttft_sent, 0.5), "ttft_sent_p99_ms": percentile(ttft_sent, 0.99),
        "e2e_p50_ms": percentile(e2e, 0.5), "e2e_p99_ms": percentile(e2e, 0.99),
    }  # fmt: skip
    if actual_off:
        check, judged, why = judge_point(parse_arrival(lc.arrival), lc.rate, lc.duration_s, sched_off, actual_off,
                                         max_in_flight=lc.max_in_flight, queued=queued)  # fmt: skip
        row.update(achieved_rate=check.achieved_rate, lag_p50_ms=check.lag_p50_ms, lag_p99_ms=check.lag_p99_ms,
                   lag_max_ms=check.lag_max_ms, ks_d=check.ks_d, ks_p=check.ks_p)  # fmt: skip
    else:
        judged, why = "error", "no request was sent"
    if status is None:
        status, reason = judged, why
        if failed and status == "valid":
            first = next((r["error"] or r["outcome"] for r in reqs if r["outcome"] != "ok"), "")
            status, reason = "error", f"{failed} of {len(reqs)} requests failed (first: {first})"
    row.update(status=status, reason=reason)
    return row, reqs
