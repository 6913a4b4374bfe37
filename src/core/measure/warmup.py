"""Warm-up before a decode cell: each of its N prompts once, ``max_tokens = 1``, so the prefix cache holds them.

All N at once is what made long-context cells fail: at 128K × 32 that is ~4M cold tokens queued in the
engine behind one read timeout, and the last requests time out although the engine is busy with them.
So warm-ups are bounded: at most ``plan.concurrency`` in flight (about ``WARM_TOKENS_IN_FLIGHT`` prompt
tokens queued), and each request's read timeout is sized from the measured prefill rate — what can be
ahead of it plus itself, times a margin — never below the run's ``idle_timeout_s``. A slow warm-up is
progress (shown as ``warm-up k/N``), not an error. The rate comes from the prefill probes (the nearest
context); with none known yet, the first prompt goes alone and measures it. (Rates are not taken from a
cell's warm-ups as a whole: prompts reused from an earlier cell are already cached and would overstate it.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import anyio

from infermatrix.core.types import Prompt, RequestRecord

if TYPE_CHECKING:
    from infermatrix.core.measure.cell import CellRunner

__all__ = ["PrefillRates", "WarmupPlan", "plan_warmup", "warm_prompts", "WARM_TOKENS_IN_FLIGHT", "TIMEOUT_MARGIN"]

# Prompt tokens kept in flight: enough to keep any engine's prefill busy (engines commonly schedule 8–16K tokens a
# step by default), few enough that queueing stays short. One prompt at least, N at most.
WARM_TOKENS_IN_FLIGHT = 32_768
# A request's timeout: this many times its expected wait (the queue ahead of it and its own prefill) ...
TIMEOUT_MARGIN = 3.0
# ... plus this, for the round trip and a scheduler that is slower than its average for a moment.
TIMEOUT_SLACK_S = 10.0


@dataclass
class PrefillRates:
    """Prefill rates (prompt tokens/s) measured so far, by context: probes and warm-ups."""

    by_context: dict[int, float] = field(default_factory=dict)

    def add(self, context: int, tokens: float, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            self.by_context[context] = tokens / seconds

    def rate_for(self, context: int) -> float | None:
        """The rate measured at the context nearest ``context`` (on a log scale), or None."""
        if not self.by_context:
            return None
        nearest = min(self.by_context, key=lambda c: abs(math.log(c / context)))
        return self.by_context[nearest]


@dataclass
class WarmupPlan:
    concurrency: int
    timeout_s: float  # read timeout of each warm-up request
    expected_s: float | None  # the whole warm-up, at the known rate


def plan_warmup(context: int, n: int, rate_tps: float | None, idle_timeout_s: float, concurrency: int | None = None) -> WarmupPlan:
    """How many warm-ups in flight, and each one's timeout, for ``n`` prompts of ``context`` tokens."""
    c = concurrency if concurrency is not None else max(1, WARM_TOKENS_IN_FLIGHT // max(1, context))
    c = max(1, min(n, c))
    if rate_tps is None:
        return WarmupPlan(concurrency=c, timeout_s=idle_timeout_s, expected_s=None)
    one = context / rate_tps
    timeout = max(idle_timeout_s, TIMEOUT_MARGIN * c * one + TIMEOUT_SLACK_S)
    return WarmupPlan(concurrency=c, timeout_s=timeout, expected_s=n * one)


async def warm_prompts(
    runner: CellRunner, context: int, prompts: list[Prompt], on_progress: Callable[[str, float | None], None] | None = None,
    cold: list[bool] | None = None,
) -> tuple[list[RequestRecord], WarmupPlan]:
    """Send each prompt once — each ``cold`` one, when given (core/measure/warmth.py) — bounded, see the module
    doc; returns every warm-up request and the plan."""
    m = runner.matrix
    rates = runner.prefill_rates
    done: list[RequestRecord] = []
    todo = [(i, p) for i, p in enumerate(prompts) if cold is None or cold[i]]
    total = len(todo)
    t0 = time.monotonic()

    def say(plan: WarmupPlan) -> None:
        if on_progress is not None:
            deadline = None if plan.expected_s is None else t0 + plan.expected_s
            on_progress(f"warm-up {len(done)}/{total}", deadline)

    if rates.rate_for(context) is None and todo:  # measure the rate on the first prompt alone
        i, p = todo.pop(0)
        say(WarmupPlan(1, m.idle_timeout_s, None))
        rec = await runner.one_shot(p, 1, i, kind="warm", read_timeout_s=m.idle_timeout_s)
        done.append(rec)
        if rec.outcome == "ok" and rec.ttft_s:
            rates.add(context, rec.prompt_tokens or p.tokens, rec.ttft_s)
    plan = plan_warmup(context, max(1, total), rates.rate_for(context), m.idle_timeout_s, m.warmup_concurrency)
    say(plan)
    limit = anyio.Semaphore(plan.concurrency)

    async def one(i: int, p: Prompt) -> None:
        async with limit:
            rec = await runner.one_shot(p, 1, i, kind="warm", read_timeout_s=plan.timeout_s)
        done.append(rec)
        say(plan)

    async with anyio.create_task_group() as tg:
        for i, p in todo:
            tg.start_soon(one, i, p)
    return done, plan
