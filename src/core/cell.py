"""One decode cell: warm the prefix cache, keep N closed-loop streams running, measure a fixed window."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import anyio
import httpx
import pluggy

from infermatrix.core import histograms
from infermatrix.core.client import endpoint_path, request_body, stream_request
from infermatrix.core.config import LoopConfig, MatrixConfig
from infermatrix.core.metrics import median_or_none, window_stats
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

    @property
    def url(self) -> str:
        return self.base_url + endpoint_path(self.matrix.api)

    def _body(self, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
        return request_body(self.matrix.api, self.model, prompt.text, max_tokens, ignore_eos=self.matrix.ignore_eos)

    def _phase(self, name: str, deadline: float | None = None) -> None:
        if self.on_phase is not None:
            self.on_phase(name, deadline)

    async def one_shot(self, prompt: Prompt, max_tokens: int = 1, stream_index: int = 0) -> RequestRecord:
        """A single streamed request (prefill probes, warm-up)."""
        record = RequestRecord(stream_index=stream_index, seq=0, sent=time.monotonic())
        return await stream_request(self.client, self.url, self._body(prompt, max_tokens), record, headers=self.headers)

    async def warm(self, prompts: list[Prompt]) -> list[RequestRecord]:
        """Send each prompt once with ``max_tokens = 1`` so the prefix cache holds it."""
        self._phase("warm-up")
        done: list[RequestRecord] = []

        async def one(i: int, p: Prompt) -> None:
            done.append(await self.one_shot(p, 1, i))

        async with anyio.create_task_group() as tg:
            for i, p in enumerate(prompts):
                tg.start_soon(one, i, p)
        return done

    async def measure(self, context_tokens: int, prompts: list[Prompt]) -> CellResult:
        n = len(prompts)
        started_at = time.time()
        warm_records = await self.warm(prompts) if self.matrix.warmup else []
        warm_failures = [r for r in warm_records if r.outcome != "ok"]
        if warm_failures and len(warm_failures) == len(warm_records):
            return self._failed(context_tokens, n, started_at, warm_failures, "every warm-up request failed")

        records: list[RequestRecord] = []
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
                    headers=self.headers, on_tokens=self.on_tokens,
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
            window_start = time.monotonic()
            self._phase("measure", window_start + self.matrix.duration_s)
            if ramp_ok:
                await anyio.sleep(self.matrix.duration_s)
            window_end = time.monotonic()
            tg.cancel_scope.cancel()  # close every open stream: the server aborts them

        return self._result(context_tokens, n, started_at, records, window_start, window_end, ramp_ok, dead)

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
            token_source="chunks" if "chunks" in sources else "usage",
            prompt_tokens=median_or_none([r.prompt_tokens for r in records if r.prompt_tokens is not None]),
            started_at=started_at, finished_at=time.time(), histograms=hist, flags=flags, requests=records,
        )
