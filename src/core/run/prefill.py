"""Prefill points: cold probes of one prompt length, and the client's own share of every TTFT.

A point is the median of ``matrix.prefill_samples`` cold probes (distinct, never-seen prompts,
``max_tokens = 1``) sent one at a time after one throwaway probe of the same length: the first request
of a length may pay one-time work on a real GPU (kernel compilation for a new shape, allocation), which
is not prefill. Every probe is kept (``prefill_samples`` table).

What the client adds to a probe's TTFT is kept small: the body is encoded before the clock starts, the
request goes over a keep-alive connection that an empty request just used (no connect inside TTFT),
and the clock starts when the request is handed to its connection (``stream_request``). What remains — the
transport both ways and both event loops — is measured, not subtracted: ``client_overhead_ms``, the
median round trip of that empty request (``GET /v1/models``), stored per run.

What the client's own event loop adds is checked, probe by probe (docs/metrics.md, "Prefill list"): a stall that held
a probe's send or its first-token read lengthened its TTFT by the stall, whole. Such a probe is *held*
(measure/selfcheck.py :func:`edge_hold_ms` past :func:`edge_hold_bound_ms`: max(3 ms, 1 % of its TTFT)): kept in ``prefill_samples`` with its reason, not in the
median, and another cold probe is sent in its place, at most ``REPLACEMENTS`` × ``prefill_samples`` more; a point still short of
``prefill_samples`` unheld probes is ``client_bound``.
"""

from __future__ import annotations

import secrets
import statistics
import time
from typing import Any, Awaitable, Callable

import anyio
import httpx

from infermatrix.core.intervals import Interval, median_interval
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.measure.engine_stats import counter_deltas
from infermatrix.core.measure.selfcheck import edge_hold_bound_ms, edge_hold_ms
from infermatrix.core.stream.loop_lag import TICK_S, ClientMonitor
from infermatrix.core.run.planning import prefill_target
from infermatrix.core.types import PrefillResult, PrefillSample, median_probes

__all__ = ["probe_prefill", "prefill_point", "prefill_intervals", "round_trip_ms", "RTT_PATH", "HELD", "REPLACEMENTS"]

RTT_PATH = "/v1/models"  # the one request every OpenAI-compatible server answers, with no work behind it
HELD = "held"  # a held probe's outcome starts with this; an unheld one's is "ok"
# Replacements for held probes, per kept probe asked for: beside a CPU burner 18 of 46 probes were held (real engines,
# 12-225 ms TTFTs), and three cold probes per kept one leave a point short of them about 2 % of the time there.
REPLACEMENTS = 2


async def round_trip_ms(client: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> float | None:
    """One empty request's round trip (ms) — it also leaves a warm keep-alive connection in the pool."""
    t0 = time.monotonic()
    try:
        r = await client.get(base_url + RTT_PATH, headers=headers)
        await r.aread()
    except httpx.HTTPError:
        return None
    return (time.monotonic() - t0) * 1000.0 if r.status_code < 400 else None


async def probe_prefill(runner: CellRunner, workload: Any, ctx: int, max_model_len: int | None, run_id: str,
                        rtts: list[float], on_phase: Any = None, reset: Callable[[], Awaitable[Any]] | None = None) -> PrefillResult:  # fmt: skip
    """One prefill point: a throwaway probe, then ``prefill_samples`` cold ones; ``rtts`` gains a round trip per probe.

    ``reset`` (where the engine declares a prefix-cache reset) is awaited before every probe: the probes' prompts
    are never-seen already, and with the cache emptied too a probe is cold even if a prompt repeats."""
    target, note = prefill_target(ctx, max_model_len)
    if on_phase is not None:
        on_phase("prompts", None)
    k = runner.matrix.prefill_samples

    def prompt(i: int) -> Awaitable[Any]:
        # Never-seen prefixes, so nothing of them is in the prefix cache: cold requests. A random nonce comes first in
        # the key, so probes of one length differ from their first KV block on (a prefix cache matches whole blocks).
        return workload.prompt(target, f"{secrets.token_hex(4)}/{run_id}/prefill/{ctx}/{i}", distinct=True)

    prompts = [await prompt(i) for i in range(k + 1)]
    samples: list[PrefillSample] = []
    monitor = ClientMonitor()
    async with anyio.create_task_group() as watch:  # the client's loop, watched through every probe
        watch.start_soon(monitor.sample)
        try:
            before = await _send_probes(runner, prompts, prompt, k, samples, monitor, rtts, on_phase, reset)
        finally:
            watch.cancel_scope.cancel()
    counters = counter_deltas(runner.traits.metrics, before, await runner.gauges.read() if before is not None else None)
    kept = median_probes(samples, "valid")  # the unheld cold probes
    failed = next((s for s in samples if s.ttft_ms is None), None)
    if failed is not None:
        return PrefillResult(context_tokens=ctx, prompt_tokens=samples[-1].prompt_tokens, ttft_ms=None, prompt_tps=None,
                             status="error", reason=failed.outcome, samples=samples, engine_counters=counters)  # fmt: skip
    if len(kept) < k:  # every probe answered, too many of them held by the client: its number, not the engine's
        held = [s for s in samples if not s.throwaway and s.outcome != "ok"]
        measured = median_probes(samples, "client_bound")  # every cold probe (all answered: none failed)
        tokens, ttft_ms, prompt_tps = prefill_point(measured, target)
        why = (f"the client's event loop held {len(held)} of {len(measured)} cold probes' send or first token past their "
               f"bound ({held[0].outcome}): its TTFTs are the client's, not the engine's")  # fmt: skip
        return PrefillResult(context_tokens=ctx, prompt_tokens=tokens, ttft_ms=ttft_ms, prompt_tps=prompt_tps,
                             status="client_bound", reason=why, samples=samples, engine_counters=counters)  # fmt: skip
    tokens, ttft_ms, prompt_tps = prefill_point(kept, target)
    runner.prefill_rates.add(ctx, tokens, ttft_ms / 1000.0)
    return PrefillResult(context_tokens=ctx, prompt_tokens=tokens, ttft_ms=ttft_ms, prompt_tps=prompt_tps,
                         status="valid", reason=note, samples=samples, engine_counters=counters,
                         intervals=prefill_intervals(kept, tokens, ttft_ms))  # fmt: skip


async def _send_probes(runner: CellRunner, prompts: list[Any], new_prompt: Callable[[int], Awaitable[Any]], k: int,
                       samples: list[PrefillSample], monitor: ClientMonitor, rtts: list[float], on_phase: Any, reset: Callable[[], Awaitable[Any]] | None) -> Any:  # fmt: skip
    """Send the throwaway and the cold probes one at a time into ``samples``, a held one replaced by a new cold probe
    (at most ``REPLACEMENTS * k`` of them), until ``k`` are unheld, one fails or the replacements run out; returns the engine's
    counters read before the first cold probe."""
    before = None
    last = (1 + REPLACEMENTS) * k  # the last cold probe's sample_no (the throwaway is 0)
    i = 0
    while True:
        unheld = len(median_probes(samples, "valid"))  # the probes a valid point's median would be of
        still_to_send = last - max(i, 1) + 1
        if unheld >= k or unheld + still_to_send < k:  # enough, or no longer reachable
            return before
        if i >= len(prompts):  # a replacement for a held probe: another never-seen prompt
            prompts.append(await new_prompt(i))
        if i == 1:  # the engine's counters around the cold probes (not the throwaway): prefix-cache hits should be ~0
            before = await runner.gauges.read()
        if on_phase is not None:
            on_phase(f"prefill {unheld + 1}/{k}" if i else "prefill (throwaway)", None)
        if reset is not None:
            await reset()
        rtt = await round_trip_ms(runner.client, runner.base_url, runner.headers)
        if rtt is not None:
            rtts.append(rtt)
        prompt = prompts[i]
        rec = await runner.one_shot(prompt, 1, kind="prefill", seq=i)
        ok = rec.outcome == "ok" and rec.ttft_s is not None
        outcome = rec.outcome if ok else (rec.error or ("no first token" if rec.outcome in ("ok", None) else rec.outcome))
        if ok and rec.first_token is not None and rec.ttft_s is not None:
            await anyio.sleep(TICK_S * 2)  # the ticks that tell whether the first token's read was held end within a tick of it
            hold, bound = edge_hold_ms(monitor.ticks, rec.sent, rec.first_token), edge_hold_bound_ms(rec.ttft_s * 1000.0)
            if hold > bound:
                outcome = f"{HELD}: the client's event loop stalled {hold:.1f} ms at its send or first token (bound {bound:.1f} ms)"
        samples.append(PrefillSample(
            sample_no=i, throwaway=i == 0, request_id=runner.request_id("prefill", prompt.tokens, 1, 0, i),
            prompt_tokens=rec.prompt_tokens if rec.prompt_tokens is not None else prompt.tokens,
            ttft_ms=rec.ttft_s * 1000.0 if ok and rec.ttft_s is not None else None, sent=rec.sent, first_token=rec.first_token,
            outcome=outcome,
        ))  # fmt: skip
        if not ok:
            return before  # a failed probe: the point is an error, no need to send the rest
        i += 1


def prefill_point(kept: list[PrefillSample], target: int) -> tuple[int, float, float]:
    """(prompt_tokens, ttft_ms, prompt_tps) of a prefill point from its kept probes (docs/metrics.md, prefill
    list): the medians of their prompt tokens (the target where the server did not say) and TTFTs, and
    prompt_tps = prompt_tokens / TTFT (s)."""
    ttft_ms = statistics.median(s.ttft_ms for s in kept if s.ttft_ms is not None)
    tokens = int(statistics.median(s.prompt_tokens or target for s in kept))
    return tokens, ttft_ms, tokens / (ttft_ms / 1000.0)


def prefill_intervals(kept: list[PrefillSample], tokens: int, ttft_ms: float) -> dict[str, Interval]:
    """The point's ``ttft_ms`` and ``prompt_tps`` with their 95 % intervals from its kept probes (docs/metrics.md,
    prefill list): the TTFTs' median interval (``median_interval``; no bounds from one probe), and prompt_tps =
    tokens ÷ TTFT its image, ends swapped (the point's median prompt tokens held fixed, as the number holds them)."""
    ttft = median_interval([s.ttft_ms for s in kept if s.ttft_ms is not None], ttft_ms)
    return {"ttft_ms": ttft, "prompt_tps": ttft.inverted(tokens * 1000.0)}
