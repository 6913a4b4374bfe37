"""A workload's own traffic (shared-prefix groups, multi-turn conversations), run after the matrix and the
load points on the same engine, and saved as one pass (core/store/workload_store.py; docs/workloads.md).

The workload hands over sessions (``SessionWorkload.sessions()``); each session's requests go one after the other
(the next built from the previous reply), up to ``concurrency`` sessions side by side. Around the pass the
engine's prefix-cache counters are read, so the reuse the workload implies (each request's ``shared_tokens``
floored to whole KV blocks) stands beside what the engine says it found, over the same span.

The pass is one step (core/engine/step.py), as a load point is: an engine lost inside it saves it as ``error``
with what was sent and brings the engine back; an interrupt saves it as ``interrupted`` (resume runs it again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from infermatrix.core.stream.client import endpoint_path, request_body, stream_request
from infermatrix.core.measure.engine_stats import counter_deltas
from infermatrix.core.load.context import RunContext
from infermatrix.core.store.workload_store import pass_done, save_workload_pass
from infermatrix.core.tasks.judge import judge
from infermatrix.core.types import RequestRecord, Session, SessionWorkload, TaskOutcome, WorkloadRequest

__all__ = ["run_sessions", "expected_cached", "DEFAULT_BLOCK_TOKENS"]

DEFAULT_BLOCK_TOKENS = 16  # a common engine default KV block (docs/workloads.md), when neither the engine nor [workload] says


def expected_cached(shared_tokens: int, prompt_tokens: int | None, block: int) -> int:
    """Tokens a prefix cache with ``block``-token blocks can serve: the shared tokens in whole blocks, and never
    the block holding the last prompt token (it is computed for the first output token's logits)."""
    whole = shared_tokens // block * block
    if prompt_tokens is None:
        return whole
    return max(0, min(whole, (prompt_tokens - 1) // block * block))


@dataclass
class _Sent:
    request_no: int
    session: int
    req: WorkloadRequest
    rec: RequestRecord
    request_id: str
    outcome: TaskOutcome | None = None  # a task's judgement (req.task), once the request ended


@dataclass
class _Pass:
    sent: list[_Sent] = field(default_factory=list)
    sessions: int = 0
    span_start: float | None = None
    span_end: float | None = None
    before: Any = None
    after: Any = None


def _block(rc: RunContext, workload: SessionWorkload) -> tuple[int, str]:
    own = workload.block_tokens
    if own:
        return int(own), "config"
    engine = (rc.capacity.detail or {}).get("block_size") if rc.capacity is not None else None
    if isinstance(engine, int) and engine > 0:
        return engine, "engine"
    return DEFAULT_BLOCK_TOKENS, "default"


async def run_sessions(rc: RunContext, retry_errors: bool = False) -> None:
    """The workload's pass, when it has one and it is not saved yet."""
    workload = rc.workload
    if not isinstance(workload, SessionWorkload) or pass_done(rc.store, rc.run_id, retry_errors):
        return
    state = _Pass()
    with rc.live(1) as progress:
        await rc.row_step(progress, workload.name, lambda: _send_pass(rc, workload, state),
                          lambda status, reason: _rows(rc, workload, state, status or "valid", reason),
                          lambda row, reqs: save_workload_pass(rc.store, rc.run_id, row, reqs), _detail,
                          "run interrupted during the workload pass (resume runs it again)")  # fmt: skip


def _detail(row: dict[str, Any]) -> str:
    if row.get("tasks_judged") is not None:  # a pass of tasks: accuracy, not prefix reuse
        n, good = row["tasks_judged"], row["tasks_correct"]
        return f"{row['requests']} tasks, {good} of {n} right" + (f" ({good / n:.1%})" if n else "")
    implied = row.get("implied_reuse")
    text = f"{row['requests']} requests, implied reuse {implied:.1%}" if implied is not None else f"{row['requests']} requests"
    if row.get("engine_hit_rate") is not None:
        text += f", engine hit rate {row['engine_hit_rate']:.1%}"
    return text


async def _send_pass(rc: RunContext, workload: SessionWorkload, state: _Pass) -> None:
    """Build the sessions, read the counters, run the sessions, read the counters again."""
    runner, phase = rc.runner, rc.steps.phase
    phase("prompts")
    sessions = await workload.sessions()
    state.sessions = len(sessions)
    limit = anyio.Semaphore(max(1, int(workload.concurrency or len(sessions) or 1)))
    phase("metrics")
    state.before = await runner.gauges.read()
    state.span_start = time.monotonic()
    phase("measure")

    async def one_session(index: int, session: Session) -> None:
        async with limit:
            reply: str | None = None
            prompt_tokens: int | None = None
            observe = getattr(session, "observe", None)
            while (req := await session.next(reply, prompt_tokens)) is not None:
                if req.think_s > 0:
                    await anyio.sleep(req.think_s)
                sent = await _send(rc, state, index, req)
                rec = sent.rec
                if sent.outcome is not None and callable(observe):
                    observe(sent.outcome)  # before the next request: the tasks workload's auto-stop
                ok = rec.outcome == "ok"
                reply, prompt_tokens = (rec.text if ok else None), (rec.prompt_tokens if ok else None)

    try:
        async with anyio.create_task_group() as tg:
            for i, s in enumerate(sessions):
                tg.start_soon(one_session, i, s)
    finally:
        with anyio.CancelScope(shield=True):
            await runner._close_streams()
    state.span_end = time.monotonic()
    phase("metrics")
    state.after = await runner.gauges.read()


async def _send(rc: RunContext, state: _Pass, session: int, req: WorkloadRequest) -> _Sent:
    runner, m = rc.runner, rc.cfg.matrix
    api = "chat" if req.messages is not None else "completions"
    ignore_eos = m.ignore_eos if req.ignore_eos is None else req.ignore_eos
    body = request_body(api, runner.model, req.prompt or "", req.max_tokens, ignore_eos=ignore_eos, traits=runner.traits)
    body["temperature"] = m.temperature
    if req.messages is not None:
        body["messages"] = req.messages
    no = len(state.sent)
    rid = f"{runner.id_prefix}-wl-{session}-r{no}"
    rec = RequestRecord(stream_index=session, seq=no, sent=time.monotonic())
    sent = _Sent(no, session, req, rec, rid)
    state.sent.append(sent)
    await stream_request(runner.streams, runner.base_url + endpoint_path(api), body, rec, headers=runner._headers(rid),
                         on_tokens=runner.on_tokens, count_path=runner._count_path())  # fmt: skip
    if req.task is not None:
        sent.outcome = _judged(req, rec)
    return sent


def _output_tokens(rec: RequestRecord) -> int:
    return rec.final_usage_tokens if rec.final_usage_tokens is not None else rec.output_tokens


def _judged(req: WorkloadRequest, rec: RequestRecord) -> TaskOutcome:
    """A task's reply judged (core/tasks/judge.py); a failed request is kept, never right."""
    task, ok = req.task, rec.outcome == "ok"
    assert task is not None
    verdict = judge(rec.text, task.answer, task.regex) if ok else None
    return TaskOutcome(task, _output_tokens(rec) if ok else None, rec.reasoning_tokens, verdict.extracted if verdict else None,
                       bool(verdict and verdict.correct), ok)  # fmt: skip


def _request_row(s: _Sent, block: int) -> dict[str, Any]:
    rec, req = s.rec, s.req
    ms = lambda a, b: None if a is None or b is None else round((a - b) * 1000, 3)  # noqa: E731
    expected = expected_cached(req.shared_tokens, rec.prompt_tokens, block)
    labels = req.labels
    return {
        "request_no": s.request_no, "session": s.session, "grp": labels.get("group"), "member": labels.get("member"),
        "conversation": labels.get("conversation"), "turn": labels.get("turn"), "request_id": s.request_id,
        "sent": rec.sent if rec.written else None, "first_token": rec.first_token, "ended": rec.ended,
        "ttft_ms": ms(rec.first_token, rec.sent), "e2e_ms": ms(rec.ended, rec.sent), "prompt_tokens": rec.prompt_tokens,
        "shared_tokens": req.shared_tokens, "expected_cached_tokens": expected,
        "expected_cached_fraction": expected / rec.prompt_tokens if rec.prompt_tokens else None,
        "output_tokens": _output_tokens(rec),
        "outcome": rec.outcome, "error": rec.error,
        "reply": rec.text if "conversation" in labels or req.task is not None else None,
        "messages": req.messages if req.messages is not None and len(req.messages) > 1 else None,
        **_task_fields(s.outcome, rec),
    }  # fmt: skip


def _task_fields(o: TaskOutcome | None, rec: RequestRecord) -> dict[str, Any]:
    """A task's columns (task_requests, core/store/tasks.sql); none for a request without a task."""
    if o is None:
        return {}
    t = o.task
    return {"task_set": t.task_set, "task_id": t.id, "task_kind": t.kind, "expected": t.answer, "regex": t.regex,
            "extracted": o.extracted, "correct": o.correct, "reasoning_tokens": o.reasoning_tokens,
            "finish_reason": rec.finish_reason}  # fmt: skip


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


def _rows(rc: RunContext, workload: SessionWorkload, state: _Pass, status: str, reason: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The pass's row (implied reuse beside the engine's counters) and its request rows."""
    block, source = _block(rc, workload)
    reqs = [_request_row(s, block) for s in state.sent]
    prefilled = [r for r in reqs if r["first_token"] is not None and r["prompt_tokens"]]
    prompt = sum(r["prompt_tokens"] for r in prefilled)
    expected = sum(r["expected_cached_tokens"] for r in prefilled)
    failed = sum(r["outcome"] != "ok" for r in reqs)
    deltas = counter_deltas(rc.steps.engine.traits.metrics, state.before, state.after) if state.after is not None else {
        "prefix_cache_note": "the pass did not finish"}  # fmt: skip
    queries, hits = _number(deltas.get("prefix_cache_queries")), _number(deltas.get("prefix_cache_hits"))
    if status == "valid" and failed:
        first = next((r["error"] or r["outcome"] for r in reqs if r["outcome"] != "ok"), "")
        status, reason = "error", f"{failed} of {len(reqs)} requests failed (first: {first})"
    row: dict[str, Any] = {
        "workload": workload.name, "params": workload.describe(),
        "block_tokens": block, "block_source": source, "sessions": state.sessions,
        "concurrency": workload.concurrency, "requests": len(reqs), "failed": failed,
        "prompt_tokens": prompt, "expected_cached_tokens": expected, "implied_reuse": expected / prompt if prompt else None,
        "engine_queries": queries, "engine_hits": hits, "engine_hit_rate": hits / queries if queries and hits is not None else None,
        "engine_note": deltas.get("prefix_cache_note"), "span_start": state.span_start, "span_end": state.span_end,
        "status": status, "reason": reason,
    }  # fmt: skip
    judged = [r for r in reqs if r.get("task_id") is not None and r["outcome"] == "ok"]
    if judged:  # not stored: the progress line's (task_results has them)
        row["tasks_judged"], row["tasks_correct"] = len(judged), sum(bool(r["correct"]) for r in judged)
    return row, reqs
