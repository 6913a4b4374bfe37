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
from infermatrix.core.stream.client import encode_body, endpoint_path, request_body, stream_request
from infermatrix.core.config import ClientConfig, LoopConfig, MatrixConfig
from infermatrix.core.measure.cell_intervals import cell_intervals
from infermatrix.core.measure.metrics import median_or_none, window_stats
from infermatrix.core.measure.admission import EngineSample, judge_admission, settle_admission
from infermatrix.core.measure.batch import window_batch
from infermatrix.core.measure.hosts import host_numbers, settle_hosts
from infermatrix.core.measure.inflight import ClientCounts
from infermatrix.core.measure.engine_stats import counter_deltas
from infermatrix.core.measure.reconcile import reconcile_tokens, recount_chunks
from infermatrix.core.measure.selfcheck import client_verdict, settle_status
from infermatrix.core.measure.stagger import first_max_tokens
from infermatrix.core.measure.steady import RAMP_END_READ_S, RAMP_END_TRIES, EngineGauges, GaugeSample
from infermatrix.core.measure.priority import client_priority
from infermatrix.core.measure.ramp_check import ramp_check, ramp_verdict, streams_started_by
from infermatrix.core.stream.loop_lag import ClientMonitor, worst
from infermatrix.core.stream.transport import RawClient
from infermatrix.core.stream.transport_choice import choose_transport
from infermatrix.core.distributed.workers import MAX_CONSECUTIVE_FAILURES, WorkerPool, WorkerSpec, run_stream, worker_count
from infermatrix.core.measure.warmth import WarmCache
from infermatrix.core.measure.warmup import PrefillRates, warm_prompts
from infermatrix.core.engine.traits import EngineTraits
from infermatrix.core.types import CellResult, Prompt, RequestRecord

__all__ = ["CellRunner", "MAX_CONSECUTIVE_FAILURES"]

# After the window: how long requests sent inside it may take to get their first token — this many times
# the longest TTFT the cell has seen, at least TTFT_WAIT_MIN_S, at most ramp_timeout_s.
TTFT_WAIT_FACTOR = 2.0
TTFT_WAIT_MIN_S = 2.0


@dataclass
class _LiveCell:
    """What a cell's phases share while it runs: its records, its streams' state and the reads taken."""

    n: int
    records: list[RequestRecord] = field(default_factory=list)
    by_stream: list[list[RequestRecord]] = field(default_factory=list)
    dead: set[int] = field(default_factory=set)  # streams that gave up (too many failures in a row)
    closing: bool = False  # the window has closed: no stream starts another request
    workers: int = 0  # worker processes or Ray actors (0: the streams run in this process)
    pool: Any = None  # workers.WorkerPool, or ray_pool.RayPool
    ramp_ok: bool = True
    steady: Any = None
    window_start: float = 0.0
    window_end: float = 0.0
    ramp_monitor: ClientMonitor = field(default_factory=ClientMonitor)
    monitor: ClientMonitor = field(default_factory=ClientMonitor)
    gauge_samples: list[GaugeSample] = field(default_factory=list)
    steady_samples: list[GaugeSample] = field(default_factory=list)  # the steady-state wait's reads: compared with the client's count too
    streams_from: float = 0.0  # monotonic, just after the engine's counters were read before the streams started
    ramp_end_reads: list[GaugeSample] = field(default_factory=list)  # a ramp that gave up: the engine read then (ramp_check.py)
    ramp_gave_up: float | None = None  # monotonic: when the ramp's timeout passed (streams that started later did not start in time)

    def __post_init__(self) -> None:
        self.by_stream = [[] for _ in range(self.n)]

    def started(self, i: int) -> bool:
        if self.pool is not None:
            return i in self.pool.started
        return any(r.first_token is not None for r in self.by_stream[i])


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
    prefill_rates: PrefillRates = field(default_factory=PrefillRates)  # measured prefill rates: size warm-ups
    watch: Any = None  # the run's WatchedTransport: the raw transport reports its connect failures there too
    warmth: WarmCache = field(default_factory=lambda: WarmCache(None))  # which prompts are still warm (the run sets kv_tokens)
    client_hosts: ClientConfig = field(default_factory=ClientConfig)  # [client]: this host, or Ray actors (docs/distributed.md)

    def __post_init__(self) -> None:
        self.gauges = EngineGauges(self.client, self.base_url, self.headers, self.traits.metrics)
        self.last_warm_plan: dict[str, float] | None = None  # the last cell's warm-up sizing, for its flags
        # Streams go through the raw asyncio reader or httpx: matrix.transport, "auto" by default (transport_choice.py).
        self.transport = choose_transport(self.matrix.transport, self.base_url)
        self.streams: Any = self.client
        self.clock_history: dict[str, list[Any]] = {}  # Ray hosts' clock estimates over the run (distributed/ray_pool.py): the drift fit
        if self.transport.used == "raw":
            self.streams = RawClient(connect_timeout_s=self.matrix.connect_timeout_s, idle_timeout_s=self.matrix.idle_timeout_s, watch=self.watch)

    async def _close_streams(self) -> None:
        """Close the raw transport's pooled connections (httpx's pool is the run's, closed with it)."""
        if self.streams is not self.client:
            await self.streams.aclose()

    @property
    def url(self) -> str:
        return self.base_url + endpoint_path(self.matrix.api)

    def _body(self, prompt: Prompt, max_tokens: int, ignore_eos: bool | None = None) -> dict[str, Any]:
        """A request's body; ``ignore_eos`` None: the matrix's setting (a burst with ``natural_stop`` passes False)."""
        eos = self.matrix.ignore_eos if ignore_eos is None else ignore_eos
        body = request_body(self.matrix.api, self.model, prompt.text, max_tokens, ignore_eos=eos, traits=self.traits)
        body["temperature"] = self.matrix.temperature  # a recorded [matrix] field (0: greedy)
        return body

    def _phase(self, name: str, deadline: float | None = None) -> None:
        if self.on_phase is not None:
            self.on_phase(name, deadline)

    def request_id(self, kind: str, context: int, n: int, stream: int, seq: int) -> str:
        return f"{self.id_prefix}-{kind}-{context}-{n}-s{stream}-r{seq}"

    def _count_path(self) -> tuple[str, ...]:
        return tuple(self.traits.per_chunk_usage_path) if self.traits.per_chunk_usage else ()

    def _headers(self, request_id: str) -> dict[str, str]:
        return {**self.headers, "X-Request-Id": request_id}

    async def one_shot(
        self, prompt: Prompt, max_tokens: int = 1, stream_index: int = 0, kind: str = "prefill", *,
        read_timeout_s: float | None = None, seq: int | None = None,
    ) -> RequestRecord:
        """A single streamed request (prefill probes, warm-up); its body encoded before the clock starts."""
        record = RequestRecord(stream_index=stream_index, seq=0, sent=time.monotonic())
        rid = self.request_id(kind, prompt.tokens, 1, stream_index, time.monotonic_ns() if seq is None else seq)
        timeout = None
        if read_timeout_s is not None:
            t = self.client.timeout
            timeout = httpx.Timeout(connect=t.connect, read=read_timeout_s, write=t.write, pool=t.pool)
        body = encode_body(self._body(prompt, max_tokens))
        # A prefill probe is one request at a time, off the hot path: under "auto" it goes through httpx, over the
        # keep-alive connection the run's empty round trip has just used (docs/metrics.md, prefill list).
        via = self.streams if kind != "prefill" or self.transport.setting == "raw" else self.client
        try:
            return await stream_request(via, self.url, body, record, headers=self._headers(rid), timeout=timeout,
                                        count_path=self._count_path())  # fmt: skip
        finally:
            if kind == "prefill" and via is not self.client:  # a probe stands alone: leave no raw connection open behind it
                await self._close_streams()

    async def warm(self, context: int, prompts: list[Prompt]) -> list[RequestRecord]:
        """Send each prompt not still warm once with ``max_tokens = 1`` so the prefix cache holds it
        (core/measure/warmup.py; which are still warm: core/measure/warmth.py)."""
        self._phase("warm-up")
        cold = self.warmth.cold(prompts) if self.matrix.warm_reuse else [True] * len(prompts)
        done, plan = await warm_prompts(self, context, prompts, self.on_phase, cold)
        answered = {r.stream_index for r in done if r.first_token is not None}  # warm-ups are sent by prompt index
        self.warmth.sent(prompts, cold, outputs=len(done), answered=[not c or i in answered for i, c in enumerate(cold)])
        self.last_warm_plan = {"concurrency": plan.concurrency, "timeout_s": round(plan.timeout_s, 1),
                               "warmed": sum(cold), "still_warm": len(prompts) - sum(cold)}  # fmt: skip
        return done

    async def measure(self, context_tokens: int, prompts: list[Prompt]) -> CellResult:
        """Warm, ramp, measure one window, judge (at ``matrix.client_nice`` when set: measure/priority.py)."""
        prio: dict[str, object] = {}
        with client_priority(self.matrix.client_nice, prio):
            result = await self._measure(context_tokens, prompts)
        if prio:
            result.flags["client_priority"] = prio
        return result

    async def _measure(self, context_tokens: int, prompts: list[Prompt]) -> CellResult:
        """Warm the prompts, hold N streams through ramp, steady state and the window, then judge the cell."""
        n = len(prompts)
        started_at = time.time()
        self.last_warm_plan = None
        warm_records = await self.warm(context_tokens, prompts) if self.matrix.warmup else []
        if not self.matrix.warmup:  # sent cold in the ramp instead
            self.warmth.sent(prompts, self.warmth.cold(prompts))
        self.last_warm = warm_records  # the runner counts failed warm-ups in the cell's accounting
        warm_failures = [r for r in warm_records if r.outcome != "ok"]
        if warm_failures and len(warm_failures) == len(warm_records):
            return self._failed(context_tokens, n, started_at, warm_failures, "every warm-up request failed")

        live = _LiveCell(n)
        self.live_records = live.records  # the runner keeps these when the cell is cut short (signal, engine down)
        # Above matrix.client_workers_above streams the streams run in worker processes (docs/performance.md).
        if self.client_hosts.backend == "ray":  # every cell's streams on Ray actors (distributed/ray_pool.py; Ray imported only there)
            await self._open_ray_pool(live, context_tokens, prompts)
        else:
            live.workers = worker_count(n, self.matrix.client_workers_above, self.matrix.client_workers)
            if live.workers:
                live.pool = WorkerPool(self._worker_spec(context_tokens, prompts), live.workers, live.records, self.on_tokens)
        self._phase("metrics")
        before = await self.gauges.read()
        live.streams_from = time.monotonic()
        await self._hold_streams(live, context_tokens, prompts)
        await self._close_streams()
        return await self._conclude(live, context_tokens, prompts, started_at, before)

    async def _open_ray_pool(self, live: _LiveCell, context_tokens: int, prompts: list[Prompt]) -> None:
        from infermatrix.core.distributed.ray_pool import RayPool, ray_module

        self._phase("ray actors")
        k = self.client_hosts.hosts
        if k <= 0:
            ray = await anyio.to_thread.run_sync(ray_module, self.client_hosts.ray_address)
            k = max(1, sum(1 for node in ray.nodes() if node.get("Alive")))
        live.workers = min(k, live.n)
        live.pool = RayPool(self._worker_spec(context_tokens, prompts), live.workers, live.records, self.on_tokens, self.client_hosts, self.clock_history)
        await live.pool.open()

    def _stream_worker(self, live: _LiveCell, context_tokens: int, prompts: list[Prompt]) -> Callable[[int], Any]:
        """Stream i's closed loop in this process: send, restart when it ends, until the window closes."""
        n = len(prompts)
        count_path = self._count_path()

        async def worker(i: int) -> None:
            body = encode_body(self._body(prompts[i], self.matrix.max_output))  # encoded once for every restart of this stream
            first = self._first_body(prompts[i], i, n)  # staggered phases (measure/stagger.py); None: the same as the rest

            async def send(rec: RequestRecord) -> RequestRecord:
                rid = self.request_id("decode", context_tokens, n, i, rec.seq)
                rec.staggered = first is not None and rec.seq == 0
                return await stream_request(self.streams, self.url, first if first is not None and rec.staggered else body, rec, headers=self._headers(rid),
                                            on_tokens=self.on_tokens, count_path=count_path)  # fmt: skip

            def begin(rec: RequestRecord) -> None:
                live.records.append(rec)
                live.by_stream[i].append(rec)

            if not await run_stream(i, send, begin, lambda: not live.closing):
                live.dead.add(i)

        return worker

    async def _hold_streams(self, live: _LiveCell, context_tokens: int, prompts: list[Prompt]) -> None:
        """Start the N streams, wait for the ramp and steady state, measure the window, then stop them."""
        n, pool = live.n, live.pool
        async with anyio.create_task_group() as tg:
            if pool is not None:
                live.dead = pool.dead
                tg.start_soon(pool.run)
            else:
                worker = self._stream_worker(live, context_tokens, prompts)
                for i in range(n):
                    tg.start_soon(worker, i)
            self._phase("ramp", time.monotonic() + self.matrix.ramp_timeout_s)
            async with anyio.create_task_group() as ramp_watch:
                if self.matrix.check_client:  # every TTFT at high N is measured in the ramp: the client is watched there too
                    ramp_watch.start_soon(live.ramp_monitor.sample)
                with anyio.move_on_after(self.matrix.ramp_timeout_s) as ramp:
                    while not all(live.started(i) for i in range(n)):
                        if live.dead and len(live.dead) + sum(live.started(i) for i in range(n)) >= n:
                            break
                        await anyio.sleep(0.005)
                live.ramp_ok = not ramp.cancelled_caught and not live.dead
                if ramp.cancelled_caught:
                    live.ramp_gave_up = time.monotonic()
                if not live.ramp_ok and self.matrix.check_client:  # whose failure was it? (ramp_check.py)
                    await self.gauges.edge_read(live.ramp_end_reads, RAMP_END_READ_S, RAMP_END_TRIES)
                if live.ramp_ok:
                    # Steady state: the engine itself runs all N and queues none (when it reports it).
                    self._phase("steady", time.monotonic() + self.matrix.steady_timeout_s)
                    live.steady = await self.gauges.wait_steady(n, self.matrix.steady_timeout_s, live.steady_samples)
                ramp_watch.cancel_scope.cancel()
            live.window_start = time.monotonic()
            self._phase("measure", live.window_start + self.matrix.duration_s)
            if live.ramp_ok:
                async with anyio.create_task_group() as watchers:
                    if self.matrix.check_client:
                        watchers.start_soon(live.monitor.sample)
                    watchers.start_soon(self.gauges.watch, live.gauge_samples)  # at most once a second (docs/performance.md)
                    await anyio.sleep(self.matrix.duration_s)
                    watchers.cancel_scope.cancel()
            live.window_end = time.monotonic()
            self._phase("drain")
            if live.ramp_ok:  # the window's end edge, read before any stream stops (measure/batch.py)
                await self.gauges.edge_read(live.gauge_samples)
            live.closing = True
            if pool is not None:  # the workers wait for their first tokens the same way, then hand over their records
                await pool.stop(live.window_end, self._ttft_wait_bound(live.records) if live.ramp_ok else 0.0)
            elif live.ramp_ok:
                await self._await_first_tokens(live.records, live.window_end)
            tg.cancel_scope.cancel()  # close every open stream: the server aborts them

    async def _conclude(
        self, live: _LiveCell, context_tokens: int, prompts: list[Prompt], started_at: float, before: Any,
    ) -> CellResult:
        """The cell's numbers from its records, reconciled with the engine's counters, then judged."""
        n, records, pool = live.n, live.records, live.pool
        window_start, window_end = live.window_start, live.window_end
        # What the cell wrote into the KV cache after its prompts: each request's output, counted at max_output.
        answered = {r.stream_index for r in records if r.first_token is not None}
        self.warmth.sent(prompts, [False] * n, outputs=len(records) * self.matrix.max_output, answered=[i in answered for i in range(n)])
        # Each read paired with the client's own in-flight count at its moment (every process's records are here by now).
        counts = ClientCounts(records)

        def paired(reads: list[GaugeSample]) -> list[EngineSample]:
            return [EngineSample(s.t, s.gauges.running, s.gauges.waiting, counts.read(s.t, s.took_s)) for s in reads if s.gauges.running is not None]

        samples, steady_reads = paired(live.gauge_samples), paired(live.steady_samples)

        count = getattr(self.tokenizer, "count_output", None)
        # Tokenizer fallback first, so the numbers below are computed once, from the corrected counts.
        recounted = await recount_chunks(records, count, window_start, window_end) if count is not None else 0
        result = self._result(context_tokens, n, started_at, records, window_start, window_end, live.ramp_ok, live.ramp_gave_up)
        after = await self.gauges.read()
        after_at = time.monotonic()  # the counter was read by now: the engine stopped the closed streams before
        result.flags["tokens"] = await reconcile_tokens(n, records, before, after, recounted, count, after_at)
        result.flags["engine_counters"] = counter_deltas(self.traits.metrics, before, after)  # docs/metrics.md, engine statistics
        steady = live.steady
        result.flags["steady_state"] = None if steady is None else {
            "reached": steady.reached, "engine_max_running": steady.achieved, "waited_s": round(steady.waited_s, 3),
            "engine_metrics": steady.metrics,
        }  # fmt: skip
        result.flags["engine_gauges"] = {"state": self.gauges.state, "failed_reads": self.gauges.failures}
        if self.last_warm_plan is not None:
            result.flags["warmup_plan"] = self.last_warm_plan
        self._judge_admission(result, steady, samples, before, after, steady_reads)
        batch = window_batch(live.gauge_samples, counts, window_start, window_end)
        result.flags["batch"] = None if batch is None else batch.as_dict()
        result.flags["transport"] = self.transport.as_dict()
        if self.matrix.check_client and live.ramp_ok:
            verdict = client_verdict(
                n, records, (window_start, window_end), window_load=worst([live.monitor.result(), *(pool.loads if pool else [])]),
                ramp_load=live.ramp_monitor.result(), engine=live.gauge_samples, ttft_ms=result.ttft_ms, tbt_ms=result.tbt_ms,
                ticks=[*live.ramp_monitor.ticks, *live.monitor.ticks, *(pool.ticks if pool else [])], batch=batch,
                client_active=result.flags.get("client_active"),
            )
            result.flags["client"] = {**verdict.as_dict(), "worker_processes": live.workers}
            result.status, result.reason = settle_status(result.status, result.reason, verdict, result.flags.get("admission"))
        if self.matrix.check_client and not live.ramp_ok:
            self._judge_ramp(result, live, before)
        if hasattr(pool, "host_flags"):
            self._judge_hosts(result, live)
        return result

    def _judge_ramp(self, result: CellResult, live: _LiveCell, before: Any) -> None:
        """A ramp that gave up while the engine generated tokens the client never read is the client's failure:
        ``client_bound`` with both reasons, not ``error`` (measure/ramp_check.py; docs/metrics.md, "Client verdict")."""
        check = ramp_check(live.n, live.records, before, live.ramp_end_reads[0] if live.ramp_end_reads else None, live.streams_from)
        result.flags["ramp_check"] = None if check is None else check.as_dict()
        unanswered = self.gauges.state == "found" and not live.ramp_end_reads
        result.status, result.reason = ramp_verdict(result.status, result.reason, check, unanswered)

    def _judge_hosts(self, result: CellResult, live: _LiveCell) -> None:
        """Ray actors: per-host numbers and clocks, and one slow or badly timed host makes the cell client_bound
        naming it (measure/hosts.py)."""
        pool, window = live.pool, (live.window_start, live.window_end)
        hosts = host_numbers(pool.host_flags(), live.workers, live.records, window, pool.host_loads, pool.host_ticks)
        settle_hosts(result, hosts, pool.failures, window, judged=live.ramp_ok)

    def _first_body(self, prompt: Prompt, i: int, n: int) -> bytes | None:
        """Stream ``i``'s first request, shortened so the streams' ends spread out (measure/stagger.py); None when
        it is as long as every other."""
        k = first_max_tokens(i, n, self.matrix.max_output, self.matrix.stagger)
        return encode_body(self._body(prompt, k)) if k < self.matrix.max_output else None

    def _worker_spec(self, context_tokens: int, prompts: list[Prompt]) -> WorkerSpec:
        n = len(prompts)
        template = {i: self.request_id("decode", context_tokens, n, i, 0).replace("{", "{{").replace("}", "}}")[:-1] + "{seq}" for i in range(n)}
        bodies = {i: encode_body(self._body(p, self.matrix.max_output)) for i, p in enumerate(prompts)}
        firsts = {i: b for i, b in ((i, self._first_body(p, i, n)) for i, p in enumerate(prompts)) if b is not None}
        return WorkerSpec(url=self.url, transport=self.transport.used, connect_timeout_s=self.matrix.connect_timeout_s,
                          idle_timeout_s=self.matrix.idle_timeout_s, streams=bodies, headers={i: self.headers for i in range(n)},
                          id_template=template, count_path=self._count_path(), first=firsts)  # fmt: skip

    def _ttft_wait_bound(self, records: list[RequestRecord]) -> float:
        seen = [r.first_token - r.sent for r in records if r.first_token is not None]
        return min(self.matrix.ramp_timeout_s, max(TTFT_WAIT_MIN_S, TTFT_WAIT_FACTOR * max(seen, default=0.0)))

    async def _await_first_tokens(self, records: list[RequestRecord], window_end: float) -> None:
        """Requests sent before the window closed still get their first token (bounded), so a restart whose
        first token lands after the window is measured, not dropped (docs/metrics.md, ``ttft_ms``)."""
        bound = self._ttft_wait_bound(records)

        def pending() -> bool:
            return any(r.first_token is None and r.ended is None and r.sent <= window_end for r in records)

        with anyio.move_on_after(bound):
            while pending():
                await anyio.sleep(0.002)

    def _judge_admission(
        self, result: CellResult, steady: Any, samples: list[EngineSample], before: Any, after: Any, steady_reads: list[EngineSample],
    ) -> None:
        """Whether the engine ran N (core/measure/admission.py), and if not whether the client sent fewer;
        ``avg_active`` is the engine's count when it has one."""
        verdict = judge_admission(
            result.concurrency, self.gauges.state == "found", steady.achieved if steady is not None else None, samples,
            getattr(before, "preemptions", None), getattr(after, "preemptions", None), steady_reads,
        )  # fmt: skip
        settle_admission(result, verdict, [*steady_reads, *samples])

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
        ws: float, we: float, ramp_ok: bool, gave_up: float | None,
    ) -> CellResult:
        self._phase("verdict")
        looped = 0
        for r in records:
            tokens = max(r.output_tokens, r.final_usage_tokens or 0)  # the server's count where it gave one
            if r.text or tokens:  # an empty or invisible output with many tokens is judged too
                findings = [f for f in self.pm.hook.detect_loop(text=r.text, output_tokens=tokens, config=self.loops) if f]
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
            "ttft_without_first_token": stats.ttft_missing,
        }
        if looped:
            status, reason = "looped", f"{looped} of {len(records)} requests repeated themselves"
        elif not ramp_ok:
            got = streams_started_by(records, n, gave_up)
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
            "ttfo": histograms.histogram_of(stats.ttfo_values_s),
        }
        return CellResult(
            context_tokens=ctx, concurrency=n, status=status, reason=reason,
            total_tps=stats.total_tps, per_request_tps=stats.per_request_tps, ttft_ms=stats.ttft_ms,
            tbt_ms=stats.tbt_ms, avg_active=stats.avg_active, completed=stats.completed,
            output_tokens=stats.output_tokens, measured_s=stats.measured_s,
            window_start=ws, window_end=we,
            ttft_burst_ms=stats.ttft_burst.median_ms, ttft_burst_n=stats.ttft_burst.count,
            ttft_restart_ms=stats.ttft_restart.median_ms, ttft_restart_n=stats.ttft_restart.count,
            token_source="chunks" if "chunks" in sources else ("tokenizer" if "tokenizer" in sources else "usage"),
            prompt_tokens=median_or_none([r.prompt_tokens for r in records if r.prompt_tokens is not None]),
            started_at=started_at, finished_at=time.time(), histograms=hist, flags=flags, requests=records,
            intervals=cell_intervals(records, ws, we, stats),
        )
