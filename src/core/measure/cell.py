"""One decode cell: warm the prefix cache, keep N closed-loop streams running, measure a fixed window."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio
import httpx
import pluggy

from infermatrix.core.measure import histograms
from infermatrix.core.measure.client import endpoint_path, request_body, stream_request
from infermatrix.core.config import LoopConfig, MatrixConfig
from infermatrix.core.measure.metrics import median_or_none, window_stats
from infermatrix.core.measure.reconcile import RECONCILE_LIMIT, disagreement, recount_chunks, tokenizer_total
from infermatrix.core.measure.selfcheck import ClientMonitor
from infermatrix.core.measure.steady import EngineGauges
from infermatrix.core.engine.traits import EngineTraits
from infermatrix.core.types import CellResult, Prompt, RequestRecord

__all__ = ["CellRunner", "MAX_CONSECUTIVE_FAILURES"]

# A stream that fails this many times in a row stops; the cell is then an error, not a hang.
MAX_CONSECUTIVE_FAILURES = 3


@dataclass
class CellRunner:
    """Runs decode cells against one ready engine."""

    client: httpx.AsyncClient
    base_url: str
    headers: dict[str, str]
    model: str
    matrix: MatrixConfig
    loops: LoopConfig
    pm: pluggy.PluginManager
    on_tokens: Callable[[int], None] | None = None
    on_phase: Callable[[str, float | None], None] | None = None
    tokenizer: Any = None  # counts generated text (``count_output``) for recounts and reconciliation
    id_prefix: str = "imx"  # X-Request-Id = {id_prefix}-{context}-{n}-s{stream}-r{seq}: joins our records to the server's
    traits: EngineTraits = field(default_factory=EngineTraits)  # what the engine offers beyond the OpenAI API

    def __post_init__(self) -> None:
        self.gauges = EngineGauges(self.client, self.base_url, self.headers, self.traits.metrics)

    @property
    def url(self) -> str:
        return self.base_url + endpoint_path(self.matrix.api)

    def _body(self, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
        return request_body(self.matrix.api, self.model, prompt.text, max_tokens, ignore_eos=self.matrix.ignore_eos, traits=self.traits)

    def _phase(self, name: str, deadline: float | None = None) -> None:
        if self.on_phase is not None:
            self.on_phase(name, deadline)

    def request_id(self, kind: str, context: int, n: int, stream: int, seq: int) -> str:
        return f"{self.id_prefix}-{kind}-{context}-{n}-s{stream}-r{seq}"

    def _read_usage(self) -> Callable[[Any], tuple[int | None, int | None]] | None:
        return self.traits.per_chunk_usage_read if self.traits.per_chunk_usage else None

    def _headers(self, request_id: str) -> dict[str, str]:
        return {**self.headers, "X-Request-Id": request_id}

    async def one_shot(self, prompt: Prompt, max_tokens: int = 1, stream_index: int = 0, kind: str = "prefill") -> RequestRecord:
        """A single streamed request (prefill probes, warm-up)."""
        record = RequestRecord(stream_index=stream_index, seq=0, sent=time.monotonic())
        rid = self.request_id(kind, prompt.tokens, 1, stream_index, time.monotonic_ns())
        return await stream_request(self.client, self.url, self._body(prompt, max_tokens), record, headers=self._headers(rid),
                                    read_usage=self._read_usage())  # fmt: skip

    async def warm(self, prompts: list[Prompt]) -> list[RequestRecord]:
        """Send each prompt once with ``max_tokens = 1`` so the prefix cache holds it."""
        self._phase("warm-up")
        done: list[RequestRecord] = []

        async def one(i: int, p: Prompt) -> None:
            done.append(await self.one_shot(p, 1, i, kind="warm"))

        async with anyio.create_task_group() as tg:
            for i, p in enumerate(prompts):
                tg.start_soon(one, i, p)
        return done

    async def measure(self, context_tokens: int, prompts: list[Prompt]) -> CellResult:
        n = len(prompts)
        started_at = time.time()
        warm_records = await self.warm(prompts) if self.matrix.warmup else []
        self.last_warm = warm_records  # the runner counts failed warm-ups in the cell's accounting
        warm_failures = [r for r in warm_records if r.outcome != "ok"]
        if warm_failures and len(warm_failures) == len(warm_records):
            return self._failed(context_tokens, n, started_at, warm_failures, "every warm-up request failed")

        records: list[RequestRecord] = []
        self.live_records = records  # the runner keeps these when the cell is cut short (signal, engine down)
        by_stream: list[list[RequestRecord]] = [[] for _ in range(n)]
        dead: set[int] = set()

        async def worker(i: int) -> None:
            failures = 0
            seq = 0
            while True:
                rec = RequestRecord(stream_index=i, seq=seq, sent=time.monotonic())
                records.append(rec)
                by_stream[i].append(rec)
                await stream_request(
                    self.client, self.url, self._body(prompts[i], self.matrix.max_output), rec,
                    headers=self._headers(self.request_id("decode", context_tokens, n, i, seq)), on_tokens=self.on_tokens,
                    read_usage=self._read_usage(),
                )
                seq += 1
                if rec.outcome == "ok":
                    failures = 0
                    continue  # closed loop: restart at once with the same, already cached prompt
                failures += 1
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    dead.add(i)
                    return
                await anyio.sleep(0.2)

        def started(i: int) -> bool:
            return any(r.first_token is not None for r in by_stream[i])

        ramp_ok = True
        before = await self.gauges.read()
        monitor = ClientMonitor()
        engine_running: list[float] = []
        steady = None

        async def watch_engine() -> None:
            while True:  # the engine's running count through the window, for achieved concurrency
                g = await self.gauges.read()
                if g is None or g.running is None:
                    return
                engine_running.append(g.running)
                await anyio.sleep(0.25)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(worker, i)
            self._phase("ramp", time.monotonic() + self.matrix.ramp_timeout_s)
            with anyio.move_on_after(self.matrix.ramp_timeout_s) as ramp:
                while not all(started(i) for i in range(n)):
                    if dead and len(dead) + sum(started(i) for i in range(n)) >= n:
                        break
                    await anyio.sleep(0.005)
            ramp_ok = not ramp.cancelled_caught and not dead
            if ramp_ok:
                # Steady state: the engine itself runs all N and queues none (when it reports it).
                steady = await self.gauges.wait_steady(n, self.matrix.steady_timeout_s)
            window_start = time.monotonic()
            self._phase("measure", window_start + self.matrix.duration_s)
            if ramp_ok:
                async with anyio.create_task_group() as watchers:
                    if self.matrix.check_client:
                        watchers.start_soon(monitor.sample)
                    watchers.start_soon(watch_engine)
                    await anyio.sleep(self.matrix.duration_s)
                    watchers.cancel_scope.cancel()
            window_end = time.monotonic()
            tg.cancel_scope.cancel()  # close every open stream: the server aborts them

        count = getattr(self.tokenizer, "count_output", None)
        # Tokenizer fallback first, so the numbers below are computed once, from the corrected counts.
        recounted = await recount_chunks(records, count, window_start, window_end) if count is not None else 0
        result = self._result(context_tokens, n, started_at, records, window_start, window_end, ramp_ok, dead)
        await self._reconcile(result, records, before, recounted, count)
        result.flags["steady_state"] = None if steady is None else {
            "reached": steady.reached, "engine_max_running": steady.achieved, "waited_s": round(steady.waited_s, 3),
            "engine_metrics": steady.metrics,
        }  # fmt: skip
        result.flags["engine_gauges"] = {"state": self.gauges.state, "failed_reads": self.gauges.failures}
        if engine_running:
            result.flags["engine_running_mean"] = sum(engine_running) / len(engine_running)
            result.flags["achieved_concurrency"] = max(engine_running)
        if steady is not None and not steady.reached:
            result.flags["admission_limited"] = True
            result.flags["achieved_concurrency"] = steady.achieved
        if self.matrix.check_client and ramp_ok:
            load = monitor.result()
            result.flags["client"] = load.as_dict()
            if load.bound and result.status == "valid":
                result.status, result.reason = "client_bound", "; ".join(load.why)
        return result

    async def _reconcile(
        self, result: CellResult, records: list[RequestRecord], before: Any, recounted: int, count: Any
    ) -> None:
        """Usage deltas vs the tokenizer's count (``count``, or None) vs the engine's generation counter."""
        usage = sum(r.output_tokens for r in records if r.token_source == "usage")
        all_usage = all(r.token_source == "usage" for r in records if r.events)
        after = await self.gauges.read()
        sources: dict[str, float | None] = {
            "usage": usage if all_usage and records else None,
            "tokenizer": await tokenizer_total(records, count) if count is not None and records else None,
            "engine": None,
        }
        in_flight = 0
        names = self.traits.metrics
        per_token = names is None or not names.counted_at_request_end
        if per_token and before is not None and after is not None and before.generation_tokens is not None and after.generation_tokens is not None:
            sources["engine"] = after.generation_tokens - before.generation_tokens
            # The engine also counted what it generated for the streams closed at the window's end but never
            # delivered: at most one chunk per stream. Allow that much before calling the sources apart.
            in_flight = result.concurrency * max((n for r in records for _, n in r.events), default=1)
        client = sources["usage"] if sources["usage"] is not None else sources["tokenizer"]
        compared = dict(sources)
        if compared["engine"] is not None and client is not None and client <= compared["engine"] <= client + in_flight:
            compared["engine"] = client
        gap = disagreement(compared)
        result.flags["tokens"] = {**sources, "engine_in_flight_allowance": in_flight, "disagreement": gap,
                                  "agree": gap is None or gap <= RECONCILE_LIMIT, "recounted_requests": recounted}  # fmt: skip

    def _failed(self, ctx: int, n: int, started_at: float, failed: list[RequestRecord], why: str) -> CellResult:
        kinds = Counter(r.outcome for r in failed)
        first_error = next((r.error for r in failed if r.error), None)
        return CellResult(
            context_tokens=ctx, concurrency=n, status="error",
            reason=f"{why} ({dict(kinds)}): {first_error}", started_at=started_at, finished_at=time.time(),
            requests=failed,
        )

    def _result(
        self, ctx: int, n: int, started_at: float, records: list[RequestRecord],
        ws: float, we: float, ramp_ok: bool, dead: set[int],
    ) -> CellResult:
        self._phase("verdict")
        looped = 0
        for r in records:
            if r.text:
                findings = [f for f in self.pm.hook.detect_loop(text=r.text, output_tokens=r.output_tokens, config=self.loops) if f]
                if findings:
                    r.loop = findings[0]
                    looped += 1
        failed = [r for r in records if r.outcome not in ("ok", "cancelled")]
        stats = window_stats(records, ws, we)
        sources = {r.token_source for r in records if r.events}
        flags: dict[str, Any] = {
            "ramp_ok": ramp_ok,
            "requests": len(records),
            "failed_requests": len(failed),
            "looped_requests": looped,
            "outcomes": dict(Counter(r.outcome for r in records)),
        }
        if looped:
            status, reason = "looped", f"{looped} of {len(records)} requests repeated themselves"
        elif not ramp_ok:
            got = sum(1 for i in range(n) if any(r.first_token for r in records if r.stream_index == i))
            status = "error"
            reason = f"only {got} of {n} streams got a first token within {self.matrix.ramp_timeout_s:.0f} s"
            if failed:
                reason += f"; first error: {failed[0].error}"
        elif failed:
            status = "error"
            reason = f"{len(failed)} of {len(records)} requests failed ({dict(Counter(r.outcome for r in failed))}): {failed[0].error}"
        else:
            status, reason = "valid", None
        hist = {
            "ttft": histograms.histogram_of(stats.ttft_values_s),
            "tbt": histograms.histogram_of(stats.tbt_values_s),
            "e2e": histograms.histogram_of(stats.e2e_values_s),
            "itl": histograms.histogram_of(stats.itl_values_s),
        }
        return CellResult(
            context_tokens=ctx, concurrency=n, status=status, reason=reason,
            total_tps=stats.total_tps, per_request_tps=stats.per_request_tps, ttft_ms=stats.ttft_ms,
            tbt_ms=stats.tbt_ms, avg_active=stats.avg_active, completed=stats.completed,
            output_tokens=stats.output_tokens, measured_s=stats.measured_s,
            window_start=ws, window_end=we,
            token_source="chunks" if "chunks" in sources else ("tokenizer" if "tokenizer" in sources else "usage"),
            prompt_tokens=median_or_none([r.prompt_tokens for r in records if r.prompt_tokens is not None]),
            started_at=started_at, finished_at=time.time(), histograms=hist, flags=flags, requests=records,
        )
