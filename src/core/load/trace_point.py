"""A trace-replay load point (``[[load]] kind = "trace"``; docs/load.md): a trace file's requests sent at their
timestamps × ``time_scale`` through the open-loop sender (core/load/openloop.py), with the trace's own
prompt and output lengths and, for Mooncake, its shared prefixes (core/load/trace_prompts.py).

The point is judged like a rate point by its schedule lag (a trace is no named process, so there is no KS
fit: the lag of every request against its own timestamp is the check). It is saved in the same transaction
as its ``points`` row, with a ``trace_points`` row (file, its sha256, what was skipped and why) and one
``trace_requests`` row per request (its index in the trace, its lengths, the prefix it shares).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infermatrix.core.config import ConfigError, LoadConfig, RunConfig, TraceLoadConfig
from infermatrix.core.arrival_spec import Arrival
from infermatrix.core.load.arrivals import check_schedule
from infermatrix.core.stream.client import encode_body
from infermatrix.core.load.openloop import SendPlan, lag_bound_ms, percentile
from infermatrix.core.measure.tokenizer import UsageTokenizer
from infermatrix.core.load.trace_prompts import TracePromptBuilder
from infermatrix.core.load.traces import TraceRequest, read_trace, sniff_format
from infermatrix.core.load.point_send import request_row, send_point

if TYPE_CHECKING:
    from infermatrix.core.load.context import RunContext

__all__ = ["is_trace", "trace_label", "check_traces", "TracePlan", "plan_trace", "measure_trace_point", "trace_point_rows"]


def is_trace(lc: LoadConfig | TraceLoadConfig) -> bool:
    return isinstance(lc, TraceLoadConfig)


def check_traces(cfg: RunConfig) -> None:
    """Every trace point's file read once, before anything starts (config.py reads no files; the CLI's preflight
    calls this): a missing, unreadable or contradictory file is one line naming the point, ``load.I: …``."""
    for i, lc in enumerate(cfg.load or []):
        if isinstance(lc, TraceLoadConfig):
            try:
                read_trace(lc.path, lc.format, lc.block_tokens)
            except (ValueError, OSError) as exc:  # a TraceError, a file that is no text, one that can't be read
                raise ConfigError(f"load.{i}: {exc}") from None


def trace_label(lc: TraceLoadConfig) -> str:
    scale = f" ×{lc.time_scale:g}" if lc.time_scale != 1 else ""
    cap = f" cap {lc.max_in_flight}" if lc.max_in_flight else ""
    return f"trace {Path(lc.path).name}{scale}{cap}"


@dataclass
class TracePlan:
    """What of the trace is replayed: the kept requests, their trace indexes and scaled offsets."""

    fmt: str
    sha256: str
    in_file: int
    requests: list[TraceRequest] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)  # each kept request's index in the trace (time order)
    offsets: list[float] = field(default_factory=list)  # seconds from the first kept request, scaled
    skipped_failed: int = 0  # BurstGPT's failed rows (0 response tokens)
    skipped_empty: int = 0  # rows with 0 input or 0 output tokens otherwise: nothing to send or to generate
    skipped_too_long: int = 0  # input + output over the engine's max_model_len: the engine would refuse them
    cut: int = 0  # requests past max_requests / max_duration_s

    @property
    def span_s(self) -> float:
        return self.offsets[-1] if self.offsets else 0.0

    @property
    def rate(self) -> float | None:
        """The trace's own request rate over its (scaled) span: (n − 1) ÷ span, the mean gap's inverse."""
        return (len(self.offsets) - 1) / self.span_s if len(self.offsets) >= 2 and self.span_s > 0 else None


def plan_trace(lc: TraceLoadConfig, max_model_len: int | None = None) -> TracePlan:
    """Read the trace and keep what is replayed (a TraceError for a bad file: the preflight, check_traces, saw it first)."""
    path = Path(lc.path)
    fmt = lc.format or sniff_format(path)
    reqs = read_trace(path, fmt, lc.block_tokens)
    plan = TracePlan(fmt=fmt, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), in_file=len(reqs))
    t0: float | None = None
    for i, r in enumerate(reqs):
        if r.failed:
            plan.skipped_failed += 1
            continue
        if r.input_tokens == 0 or r.output_tokens == 0:
            plan.skipped_empty += 1
            continue
        if max_model_len is not None and r.input_tokens + r.output_tokens > max_model_len:
            plan.skipped_too_long += 1
            continue
        t0 = r.at_s if t0 is None else t0
        offset = (r.at_s - t0) * lc.time_scale
        if (lc.max_requests is not None and len(plan.requests) >= lc.max_requests) or (
            lc.max_duration_s is not None and offset >= lc.max_duration_s
        ):
            plan.cut += 1
            continue
        plan.requests.append(r)
        plan.indexes.append(i)
        plan.offsets.append(offset)
    return plan


async def measure_trace_point(rc: RunContext, index: int, lc: TraceLoadConfig, state: dict[str, Any]) -> None:
    """Prompts and bodies first (outside the schedule), then the trace sent; fills ``state``."""
    runner: Any = rc.runner  # its _body reads a prompt's text only: a TracePrompt's does as a Prompt's
    phase = rc.steps.phase
    plan = state["trace"] = plan_trace(lc, rc.max_model_len)
    state.update(offsets=plan.offsets, seed=lc.seed if lc.seed is not None else rc.cfg.matrix.seed, records={}, ids={})
    if not plan.requests:
        return
    phase("prompts")
    tokenizer = runner.tokenizer
    builder = TracePromptBuilder(tokenizer, state["seed"], lc.block_tokens, recount=not isinstance(tokenizer, UsageTokenizer))
    prompts = await builder.build(plan.requests)
    state["overhead"], state["inexact"] = builder.overhead, builder.inexact
    bodies = [encode_body(runner._body(p, r.output_tokens)) for p, r in zip(prompts, plan.requests)]
    state["prompts"] = [dataclasses.replace(p, text="") for p in prompts]  # the bodies hold the text: one copy in memory
    del prompts
    phase("measure")
    await send_point(runner, state, index, plan.offsets, bodies, lc.max_in_flight)


def _request_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per request sent, with the point_requests columns and the trace_requests ones."""
    sent_plan: SendPlan | None = state.get("plan")
    plan: TracePlan | None = state.get("trace")
    records, ids, prompts = state.get("records", {}), state.get("ids", {}), state.get("prompts", [])
    rows = []
    for s in sent_plan.sent if sent_plan is not None else []:
        rec = records.get(s.index)
        if rec is None or plan is None:
            continue
        req, sent = plan.requests[s.index], rec.sent
        prompt = prompts[s.index] if s.index < len(prompts) else None
        rows.append({
            **request_row(s, rec, ids.get(s.index)), "queued": s.queue_s > 0, "sent_at": sent,
            # trace_requests
            "trace_index": plan.indexes[s.index], "trace_at_s": req.at_s, "offset_s": plan.offsets[s.index],
            "trace_input_tokens": req.input_tokens, "trace_output_tokens": req.output_tokens, "hash_ids": len(req.hash_ids),
            "built_prompt_tokens": prompt.tokens if prompt else None, "shared_prefix_tokens": prompt.shared_prefix_tokens if prompt else None,
        })  # fmt: skip
    return rows


def _trace_row(lc: TraceLoadConfig, state: dict[str, Any]) -> dict[str, Any] | None:
    plan: TracePlan | None = state.get("trace")
    if plan is None:
        return None
    return {
        "path": str(Path(lc.path).resolve()), "format": plan.fmt, "sha256": plan.sha256, "time_scale": lc.time_scale,
        "block_tokens": lc.block_tokens, "in_file": plan.in_file, "replayed": len(plan.requests),
        "skipped_failed": plan.skipped_failed, "skipped_empty": plan.skipped_empty, "skipped_too_long": plan.skipped_too_long, "cut": plan.cut,
        "span_s": plan.span_s, "trace_rate": plan.rate, "prompt_overhead": state.get("overhead"),
        "inexact_prompts": state.get("inexact"), "shared_prefix_tokens": sum(p.shared_prefix_tokens for p in state.get("prompts", [])),
        "prompt_tokens": sum(p.tokens for p in state.get("prompts", [])),
    }  # fmt: skip


def _rate(offsets: list[float]) -> float | None:
    span = max(offsets) - min(offsets) if len(offsets) >= 2 else 0.0
    return (len(offsets) - 1) / span if span > 0 else None


def trace_point_rows(
    rc: RunContext, index: int, lc: TraceLoadConfig, state: dict[str, Any], status: str | None, reason: str | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The point's row and its request rows; ``status`` None: judge the replay by its schedule lag."""
    sent_plan: SendPlan | None = state.get("plan")
    plan: TracePlan | None = state.get("trace")
    reqs = _request_rows(state)
    origin = sent_plan.origin if sent_plan is not None else None
    sched_off = [r["scheduled"] - origin for r in reqs] if origin is not None else []
    actual_off = [r["sent_at"] - origin for r in reqs] if origin is not None else []
    ok = [r for r in reqs if r["outcome"] == "ok"]
    ends = [r["ended"] for r in reqs if r["ended"] is not None]
    out_tokens = sum(r["output_tokens"] or 0 for r in reqs)
    rate = plan.rate if plan is not None else None
    bound = lag_bound_ms(rate) if rate else lag_bound_ms(1.0)
    row: dict[str, Any] = {
        "point": index, "label": trace_label(lc), "arrival": "trace", "requested_rate": rate, "duration_s": plan.span_s if plan else None,
        "context_tokens": None, "max_output": None, "max_in_flight": lc.max_in_flight, "seed": state.get("seed"),
        "scheduled": len(plan.offsets) if plan else 0, "scheduled_rate": rate, "sent": len(actual_off), "lag_bound_ms": bound,
        "queued": sum(r["queued"] for r in reqs), "max_queue": sent_plan.max_queue if sent_plan else 0,
        "completed": len(ok), "failed": len(reqs) - len(ok), "output_tokens": out_tokens, "origin": origin,
        "output_tps": out_tokens / (max(ends) - origin) if ends and origin is not None and max(ends) > origin else None,
        "ttft_p50_ms": percentile([r["ttft_ms"] for r in ok if r["ttft_ms"] is not None], 0.5),
        "ttft_p99_ms": percentile([r["ttft_ms"] for r in ok if r["ttft_ms"] is not None], 0.99),
        "ttft_sent_p50_ms": percentile([r["ttft_sent_ms"] for r in ok if r["ttft_sent_ms"] is not None], 0.5),
        "ttft_sent_p99_ms": percentile([r["ttft_sent_ms"] for r in ok if r["ttft_sent_ms"] is not None], 0.99),
        "e2e_p50_ms": percentile([r["e2e_ms"] for r in ok if r["e2e_ms"] is not None], 0.5),
        "e2e_p99_ms": percentile([r["e2e_ms"] for r in ok if r["e2e_ms"] is not None], 0.99),
        "trace": _trace_row(lc, state),
    }  # fmt: skip
    judged, why = _judge(row, sched_off, actual_off, plan, lc)
    if status is None:
        status, reason = judged, why
        if row["failed"] and status == "valid":
            first = next((r["error"] or r["outcome"] for r in reqs if r["outcome"] != "ok"), "")
            status, reason = "error", f"{row['failed']} of {len(reqs)} requests failed (first: {first})"
    row.update(status=status, reason=reason)
    return row, reqs


def _judge(row: dict[str, Any], sched_off: list[float], actual_off: list[float], plan: TracePlan | None,
           lc: TraceLoadConfig) -> tuple[str, str | None]:  # fmt: skip
    """Fill the row's lag figures and achieved rate; (status, reason) by the lag bound alone."""
    if plan is not None and not plan.requests:
        return "error", f"no request of the trace left to replay ({_skips(plan)})"
    if not actual_off:
        return "error", "no request was sent"
    check = check_schedule(Arrival("constant"), row["requested_rate"] or 1.0, max(row["duration_s"] or 0.0, 1e-9), sched_off, actual_off)
    row.update(achieved_rate=_rate(actual_off), lag_p50_ms=check.lag_p50_ms, lag_p99_ms=check.lag_p99_ms, lag_max_ms=check.lag_max_ms)
    if check.lag_p99_ms > row["lag_bound_ms"]:
        cap = f"; {row['queued']} requests waited for the in-flight cap of {lc.max_in_flight}" if row["queued"] else ""
        return "client_bound", f"schedule lag p99 {check.lag_p99_ms:.1f} ms > bound {row['lag_bound_ms']:.1f} ms{cap}"
    return "valid", None


def _skips(plan: TracePlan) -> str:
    return (f"{plan.in_file} in the file: {plan.skipped_failed} failed, {plan.skipped_empty} with 0 input or output tokens, "
            f"{plan.skipped_too_long} over max_model_len, {plan.cut} past the limits")  # fmt: skip
