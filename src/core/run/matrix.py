"""The matrix on a ready run, step by step: start the engine and read what it is (``start``), then each
prefill probe (``prefill_probe``) and each decode cell (``decode_cell``), each saved before the next.

Each probe and cell is one step of core/engine/step.py (``EngineSteps.step``): the engine checked first, the step
guarded, one the engine went down in saved as ``error`` with the reason and the engine brought back. An engine
that answers but fails every request for a while stops the run (``judge``). docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx
import pluggy
from rich.console import Console
from rich.markup import escape

from infermatrix.core.config import RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.engine.contract import Engine, EngineError
from infermatrix.core.engine.telemetry import GpuSampler
from infermatrix.core.workloads import make_workload
from infermatrix.core.engine.step import EngineSteps, Phase, StepEnd
from infermatrix.core.engine.watch import EngineDown, StepFailed, WatchedTransport, guarded
from infermatrix.core.load.context import RunContext
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.measure.steady import METRICS_NOT_FOUND
from infermatrix.core.measure.tokenizer import FileTokenizer, UsageTokenizer, pick_tokenizer
from infermatrix.core.measure.warmth import WarmCache
from infermatrix.core.run.accounting import account, apply_validity, cell_detail, partial_cell, redact_result, rejected_everything
from infermatrix.core.run.planning import known_max_model_len, over_capacity_cells, over_capacity_reason, resolve_capacity
from infermatrix.core.run.prefill import probe_prefill, round_trip_ms
from infermatrix.core.run.live import GridPlan, RunnerReadings, stored_marks
from infermatrix.core.run.progress import RunProgress
from infermatrix.core.run.steps import start_up
from infermatrix.core.store import Store
from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.telemetry import save_gpu_samples, save_series, save_telemetry_costs
from infermatrix.core.telemetry.recorder import Telemetry
from infermatrix.core.types import Capacity, CellResult, EngineInfo, PrefillResult, Prompt, Workload
from infermatrix.core.wallclock import PhaseClock

__all__ = ["MatrixRun", "REJECTED_UNITS", "CellStep", "cell_steps"]

# The run stops (failed) after this many measured cells/probes in a row in which no request succeeded
# while the engine kept answering /health: it is rejecting everything (bad key, overloaded, broken).
REJECTED_UNITS = 3


@dataclass
class MatrixRun:
    """One session of a run on its engine: what ``execute_run`` hands over once the run exists."""

    pm: pluggy.PluginManager
    cfg: RunConfig
    store: Store
    console: Console
    engine: Engine
    client: httpx.AsyncClient
    transport: WatchedTransport
    run_id: str
    clock: PhaseClock
    cells: dict[str, int]  # the outcome's count of saved cells by status, filled in as they are saved
    # set by start():
    runner: CellRunner = field(init=False)
    workload: Workload = field(init=False)
    capacity: Capacity = field(init=False)
    max_model_len: int | None = field(init=False)
    gauges_state: str = field(init=False)
    steps: EngineSteps = field(init=False)  # the engine's steps (core/engine/step.py), with the run's one Phase
    gpu: GpuSampler = field(default_factory=lambda: GpuSampler(interval_s=1.0))  # power, clocks, memory, utilisation per GPU, per cell
    telemetry: Telemetry | None = None  # the engine's metrics and the GPUs as time series (core/telemetry/), from start() on
    prompts: dict[tuple[int, int], Prompt] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)  # token sources of the valid cells, for the run's header
    rejected: int = 0  # units in a row in which the engine failed every request
    rtts: list[float] = field(default_factory=list)  # round trips of an empty request: the client's share of every TTFT
    notes: set[str] = field(default_factory=set)  # refusals already said once
    plan: list[str] = field(default_factory=list)  # the header's lines for what the run does (points.plan_lines), said at start
    live_view: bool = True  # the live matrix on a terminal (run --no-live: the per-cell lines only)
    gpu_now: list[Any] = field(default_factory=list)  # the current cell's GPU samples, for the live view's watts

    def __post_init__(self) -> None:
        self.steps = EngineSteps(self.engine, self.client, self.transport, self.console, Phase(clock=self.clock),
                                 self.cfg.engine.reconnect_timeout_s, on_recover=lambda: self.runner.warmth.forget())  # fmt: skip

    @property
    def phase(self) -> Phase:
        """The phase the run is in: named in a failed step's reason, its wall time on the clock."""
        return self.steps.phase

    def context(self) -> RunContext:
        """What a step after the matrix (points, traces, the search, the workload's pass) gets of the run."""
        self.tag("load")
        return RunContext(cfg=self.cfg, store=self.store, run_id=self.run_id, steps=self.steps, runner=self.runner, workload=self.workload,
                          capacity=self.capacity, max_model_len=self.max_model_len, live=self.live, count=self.count,
                          decode_cell=self.decode_cell)  # fmt: skip

    def count(self, status: str) -> None:
        """A saved step's status, counted in the run's outcome."""
        self.cells[status] = self.cells.get(status, 0) + 1

    async def run(self, todo: tuple[list[int], list[CellStep]]) -> None:
        """The whole matrix: start-up, the prefill probes, the client's round trip, the decode cells (each repeat of
        each, in the order cell_steps gives)."""
        todo_prefill, todo_cells = todo
        await self.start(list(dict.fromkeys((ctx, n) for ctx, n, _ in todo_cells)))
        with self.live(len(todo_prefill) + len(todo_cells)) as progress:
            progress.plan(self.grid_plan(todo_prefill, todo_cells))
            for ctx in todo_prefill:
                await self.prefill_probe(progress, ctx)
            await self.client_overhead()
            for ctx, n, repeat in todo_cells:
                await self.decode_cell(progress, ctx, n, repeat)

    @contextlib.contextmanager
    def live(self, total: int) -> Iterator[RunProgress]:
        """A step's live display over ``total`` units (the matrix's, the load points', the search's), with the
        run's phase forwarded to it: the load package gets its display from here, so it never imports run."""
        with RunProgress(self.console, total, self.live_view) as progress, self.phase.forwarding(progress.on_phase):
            self.runner.on_tokens = progress.on_tokens
            progress.add_source(RunnerReadings(self.runner, lambda: self.gpu_now))
            yield progress

    def grid_plan(self, todo_prefill: list[int], todo_cells: list[CellStep]) -> GridPlan:
        """The live view's matrix: the config's contexts × concurrencies, what is still to run (a cell over the
        engine's capacity takes no time), the cells a resumed run has stored already."""
        m = self.cfg.matrix
        over = sum(1 for c, n, _ in todo_cells if over_capacity_reason(c, n, m.max_output, self.capacity, self.max_model_len, m.prompt_mode))
        pending = Counter({"prefill": len(todo_prefill), "decode": len(todo_cells) - over, "over": over})
        return GridPlan(list(m.contexts), list(m.concurrency), list(m.prefill_contexts), pending,
                        {"decode": m.duration_s, "prefill": 0.0}, stored_marks(self.store, self.run_id))  # fmt: skip

    # -- start-up -------------------------------------------------------------------------------------

    async def start(self, todo_cells: list[tuple[int, int]]) -> None:
        """Launch (or reach) the engine, learn what it is and what it holds, and store that in the run's row."""
        cfg, m, engine, store = self.cfg, self.cfg.matrix, self.engine, self.store
        doing = f"attaching to the {engine.kind} engine at {engine.base_url}" if engine.attach else f"starting {engine.kind} engine"
        self.console.print(f"[bold]infermatrix[/] run [cyan]{self.run_id}[/]: {doing}")
        detected = _detected(store, self.run_id, engine)
        if engine.detected is not None:  # engine.kind = "auto": what was found, or that nothing was
            note = escape(engine.detected["note"])
            said = note if engine.detected["recognised"] else f"[yellow]{note}[/]"
            self.console.print(f"  {said} [dim]({engine.detected['ms']:.0f} ms)[/]", highlight=False, soft_wrap=True)
        planned = plan_before_launch(cfg, todo_cells, self.console)
        self.clock.enter("launch")
        await engine.start()
        self.clock.enter("ready")
        await engine.wait_ready(self.client, cfg.engine.ready_timeout_s)
        # Guarded: an engine that goes away here is restarted (or waited for) and asked again.
        info, _metrics_text, capacity, tokenizer = await start_up(engine, self.client, self.transport, self.console, self._describe, self.clock)
        self.capacity = capacity
        self.max_model_len = info.max_model_len or cfg.engine.max_model_len
        self.workload = make_workload(self.pm, m, tokenizer, cfg.workload)
        store.update_run(
            self.run_id, engine=info.engine, engine_version=info.version, model=info.model, hardware={**info.hardware, **cfg.hardware},
            launch_command=info.launch_command, max_model_len=self.max_model_len, kv_tokens=capacity.kv_tokens,
            max_seqs=capacity.max_seqs, capacity_source=capacity.source, tokenizer=tokenizer.source,
            engine_extra={**info.extra, **detected}, capacity_detail=capacity.detail, duration_s=m.duration_s, max_output=m.max_output,
        )
        self.console.print(
            f"  {info.engine} {info.version or ''} · model {info.model} · max_model_len {self.max_model_len or '?'} · "
            f"KV {capacity.kv_tokens if capacity.kv_tokens is not None else 'unlimited'} tokens ({capacity.source})"
        )
        if planned is not None and planned != over_capacity_cells(todo_cells, m.max_output, capacity, self.max_model_len, m.prompt_mode):
            self.console.print("  [yellow]the engine's capacity differs from the plan made before launch; its own is used[/]", highlight=False)
        self.runner = CellRunner(client=self.client, base_url=engine.base_url, headers=engine.headers, model=info.model, matrix=m, loops=cfg.loops,
                                 pm=self.pm, tokenizer=tokenizer, id_prefix=self.run_id, traits=engine.traits, watch=self.transport,
                                 warmth=WarmCache(capacity.kv_tokens), client_hosts=cfg.client)  # fmt: skip
        self.runner.on_phase = self.phase
        self.console.print(f"  client transport: {self.runner.transport.line()}", highlight=False)
        for line in self.plan:
            self.console.print(f"  {line}", highlight=False, soft_wrap=True)
        state = await start_up(engine, self.client, self.transport, self.console, self._probe_gauges, self.clock)
        self.gauges_state = record_gauges(self.store, self.run_id, self.runner, engine.traits, state, self.console)
        self.start_telemetry()

    # -- telemetry ------------------------------------------------------------------------------------

    def start_telemetry(self) -> None:
        """The engine's metrics and the GPUs read on threads of their own from here to the run's end (docs/telemetry.md);
        with NVML reading the GPUs, the per-cell nvidia-smi sampler is not needed."""
        t, gauges = self.cfg.telemetry, self.runner.gauges
        names = self.engine.traits.metrics
        metrics = (gauges.url, dict(gauges.headers), names) if names is not None and gauges.url and gauges.available else None
        self.telemetry = Telemetry(t.engine_interval_s, t.gpu_interval_s, metrics, lambda: self.phase.now)
        self.telemetry.start()
        if self.telemetry.nvml or not t.gpu_interval_s:
            self.gpu.off()
        self.save_telemetry()

    def tag(self, unit: str | None, ctx: int | None = None, n: int | None = None) -> None:
        """What the telemetry's next reads are of: a decode cell, a prefill probe (n = 0), the load after the matrix."""
        if self.telemetry is not None:
            self.telemetry.unit = (unit, ctx, n)

    def save_telemetry(self) -> None:
        """The telemetry read since the last save, appended; what could not be read, said once."""
        if self.telemetry is None:
            return
        engine_rows, gpu_rows = self.telemetry.drain()
        save_series(self.store, self.run_id, engine_rows, gpu_rows)
        for note in self.telemetry.take_notes():
            self.console.print(f"  [yellow]{escape(self.engine.redact(note))}[/]", highlight=False, soft_wrap=True)

    def close_telemetry(self) -> None:
        """Stop the samplers, save their last rows and what they cost (a store that cannot take them loses only them)."""
        if self.telemetry is None:
            return
        self.telemetry.stop()
        try:
            self.save_telemetry()
            save_telemetry_costs(self.store, self.run_id, self.telemetry.costs())
        except StoreError:
            pass
        self.telemetry = None

    async def _describe(self, phase: Phase) -> tuple[EngineInfo, str | None, Capacity, Any]:
        engine, client = self.engine, self.client
        phase("describe")
        info = await engine.describe(client)
        phase("capacity")
        metrics_text = await engine.metrics_page(client)
        capacity = resolve_capacity(self.pm, self.cfg, info, metrics_text, await engine.read_capacity(client))
        phase("tokenizer")
        return info, metrics_text, capacity, await self._tokenizer(info.model)

    async def _tokenizer(self, model: str) -> Any:
        """``engine.tokenizer`` (a local tokenizer.json), else a plugin's ``local_tokenizer``, else the
        engine's tokenize endpoint, else its usage counts (core/measure/tokenizer.py)."""
        engine, client, m = self.engine, self.client, self.cfg.matrix
        path = self.cfg.engine.tokenizer
        local = FileTokenizer(path, m.api) if path else self.pm.hook.local_tokenizer(config=self.cfg.engine, model=model, api=m.api)
        if local is None:
            return await pick_tokenizer(client, engine.base_url, model, m.api, engine.headers, engine.traits.tokenize)
        if isinstance(local, FileTokenizer) and m.api == "chat":  # the chat template's tokens, measured once
            await local.calibrate_chat(UsageTokenizer(client, engine.base_url, model, m.api, engine.headers))
        if not getattr(local, "source", None):
            local.source = f"local ({type(local).__name__})"
        return local

    async def _probe_gauges(self, phase: Phase) -> str:
        phase("gauges")
        return await self.runner.gauges.probe()

    # -- between steps --------------------------------------------------------------------------------

    def judge(self, result: CellResult | PrefillResult) -> None:
        """Stop the run when the engine has failed every request of :data:`REJECTED_UNITS` steps in a row."""
        verdict = rejected_everything(result)
        if verdict is None:
            return
        self.rejected = self.rejected + 1 if verdict else 0
        if self.rejected >= REJECTED_UNITS:
            raise EngineError(f"the engine answers but failed every request of the last {self.rejected} cells/probes; stopping. Last: {result.reason}")

    # -- prefill --------------------------------------------------------------------------------------

    async def prefill_probe(self, progress: RunProgress, ctx: int) -> None:
        """One prefill probe at ``ctx``, one step: saved (an engine lost in it: ``error``, then brought back)."""
        label = progress.cell_label(ctx)
        progress.cell(label, (ctx, None))
        self.tag(label, ctx, 0)
        reset = self.reset_prefix_cache if self.engine.traits.prefix_cache_reset is not None else None
        probe = functools.partial(probe_prefill, self.runner, self.workload, ctx, self.max_model_len, self.run_id, self.rtts, self.phase, reset)

        def ended(status: str, reason: str | None) -> PrefillResult:
            return PrefillResult(context_tokens=ctx, prompt_tokens=None, ttft_ms=None, prompt_tps=None, status=status, reason=reason)

        def save(end: StepEnd[PrefillResult]) -> None:
            result = ended("error", end.reason) if end.failed or end.value is None else end.value
            redact_result(self.engine, result)
            self.runner.warmth.wrote(sum((s.prompt_tokens or ctx) + 1 for s in result.samples))
            self.phase("save")
            self.store.save_prefill(self.run_id, result)
            self.save_telemetry()
            detail = f"{result.prompt_tps:,.0f} prompt tok/s, TTFT {result.ttft_ms:,.0f} ms" if result.status == "valid" else (result.reason or "")
            progress.finished(label, result.status, detail, (ctx, None), result.prompt_tps)
            if not end.down:  # an engine brought back is not one that rejects everything
                self.judge(result)

        def interrupted() -> None:
            self.store.save_prefill(self.run_id, ended("interrupted", "run interrupted during this probe"))

        await self.steps.step(probe, save, interrupted)

    async def reset_prefix_cache(self) -> None:
        """The engine's prefix cache emptied (before each prefill probe): nothing is warm after it. A refusal is
        said once; the probes' never-seen prompts still keep them cold."""
        note = await self.engine.reset_prefix_cache(self.client)
        self.runner.warmth.forget()
        if note is not None and not note.startswith("ok") and note not in self.notes:
            self.notes.add(note)
            self.console.print(f"  [yellow]prefix-cache reset before a prefill probe: {self.engine.redact(note)}[/]", highlight=False)

    async def client_overhead(self) -> None:
        """The run's ``client_overhead_ms`` (not measured when the engine fails it; the next health check brings it back)."""
        self.phase("round trip")
        try:
            await guarded(self.engine, self.client, self.transport, functools.partial(_client_overhead, self.store, self.run_id, self.runner, self.rtts))
        except (EngineDown, StepFailed):
            pass

    # -- decode cells ---------------------------------------------------------------------------------

    async def prompt_for(self, ctx: int, stream: int) -> Prompt:
        if (ctx, stream) not in self.prompts:
            # The stream first: the key's first tokens are what keeps the prompts' first KV blocks apart.
            self.prompts[(ctx, stream)] = await self.workload.prompt(ctx, f"s{stream}/decode/{ctx}")
        return self.prompts[(ctx, stream)]

    async def decode_cell(self, progress: RunProgress, ctx: int, n: int, repeat: int | None = None) -> None:
        """One decode cell (ctx × n), or one ``repeat`` of it (matrix.repeat > 1): over capacity, or measured; saved
        with its own wall-time split. An over-capacity cell is saved once, as a whole (its later repeats are said only)."""
        m = self.cfg.matrix
        label = progress.cell_label(ctx, n) + (f" #{repeat}" if repeat is not None else "")
        progress.cell(label, (ctx, n))
        self.tag(label, ctx, n)
        before = self.clock.totals()  # the cell's own phases_s: from here to its save
        too_big = over_capacity_reason(ctx, n, m.max_output, self.capacity, self.max_model_len, m.prompt_mode)
        if too_big and (repeat or 1) > 1:
            progress.finished(label, "over_capacity", too_big, (ctx, n))
        elif too_big:
            result = CellResult(context_tokens=ctx, concurrency=n, status="over_capacity", reason=too_big)
            self._save_cell(progress, label, result, before, [])
            self.judge(result)
        else:
            await self._measure_cell(progress, label, (ctx, n, repeat), before)

    async def _measure_cell(self, progress: RunProgress, label: str, step: CellStep, before: dict[str, float]) -> None:
        """The cell measured as one step (with its GPU samples), saved; an error keeps every request it had sent."""
        m, runner, phase = self.cfg.matrix, self.runner, self.phase
        ctx, n, repeat = step
        started_at = time.time()
        gpu_samples: list[Any] = []

        def begin() -> None:  # the engine is up: the cell starts now
            nonlocal started_at
            started_at = time.time()
            runner.last_warm, runner.live_records = [], []

        async def measure() -> CellResult:
            nonlocal gpu_samples
            async with self.gpu.sampling() as gpu_samples:  # nothing to sample where there is no nvidia-smi
                self.gpu_now = gpu_samples
                phase("prompts")
                cell_prompts = [await self.prompt_for(ctx, 0 if m.prompt_mode == "shared" else i) for i in range(n)]
                result = await runner.measure(ctx, cell_prompts)
                if self.engine.traits.abort is not None:  # nothing of this cell runs on into the next
                    phase("drain")
                    result.flags["abort"] = await self.engine.abort_requests(self.client)
            account(result, list(getattr(runner, "last_warm", None) or []))
            apply_validity(result, m, self.cfg.validity)
            return result

        def save(end: StepEnd[CellResult]) -> None:
            # an error (engine down, or a step outside the requests failed: a tokenize, a metrics read) keeps what was sent
            result = partial_cell(ctx, n, "error", end.reason or "", started_at, runner, end.flags) if end.failed or end.value is None else end.value
            self._save_cell(progress, label, result, before, gpu_samples, repeat)
            if not end.down:
                self.judge(result)

        def interrupted() -> None:
            partial = partial_cell(ctx, n, "interrupted", "run interrupted during this cell (resume runs it again)", started_at, runner, {})
            redact_result(self.engine, partial)
            self._store_cell(partial, repeat)

        await self.steps.step(measure, save, interrupted, begin)

    def _store_cell(self, result: CellResult, repeat: int | None) -> None:
        """The cell saved whole, or as its ``repeat`` (with the cell across its stored repeats: Store.save_repeat)."""
        if repeat is None:
            self.store.save_cell(self.run_id, result)
        else:
            self.store.save_repeat(self.run_id, result, repeat, self.cfg.matrix.repeat)

    def _save_cell(self, progress: RunProgress, label: str, result: CellResult, before: dict[str, float], gpu_samples: list[Any],
                   repeat: int | None = None) -> None:
        """Save the cell or its repeat (redacted, with its phases_s and GPU samples: a repeated cell keeps its last
        repeat's) and update the run's header."""
        store, run_id = self.store, self.run_id
        redact_result(self.engine, result)
        self.phase("save")
        result.flags["phases_s"] = self.clock.since(before)
        self._store_cell(result, repeat)
        if gpu_samples:
            save_gpu_samples(store, run_id, result.context_tokens, result.concurrency, gpu_samples)
        self.save_telemetry()
        self.count(result.status)
        if result.token_source and result.status == "valid":
            self.sources.add(result.token_source)
            store.update_run(run_id, token_source=self.sources.pop() if len(self.sources) == 1 else "mixed")
            self.sources.add(result.token_source)
        progress.finished(label, result.status, cell_detail(result), (result.context_tokens, result.concurrency), result.total_tps)
        if self.runner.gauges.state != self.gauges_state:  # a metrics page that did not answer at first, known now
            self.gauges_state = record_gauges(store, run_id, self.runner, self.engine.traits, self.runner.gauges.state, None)


# One decode step: (context tokens, concurrency, repeat 1 … K; None for a cell measured once, matrix.repeat = 1).
CellStep = tuple[int, int, int | None]


def cell_steps(cells: list[tuple[int, int]], k: int, done: set[tuple[int, int]], done_repeats: dict[tuple[int, int], set[int]]) -> list[CellStep]:
    """The decode steps still to measure, in order. K > 1 interleaves: repeat 1 of every cell, then repeat 2 of every
    cell …, so a drift of the machine over the run (heat, a neighbour's load, the engine's own state) is spread over
    every cell alike instead of landing on one cell's repeats, and each repeat's window is apart in time from the
    cell's others. ``done``: the cells stored final (Store.done_cells); ``done_repeats``: for cells with stored
    repeats, those stored final (Store.done_repeats). A cell done whole with no repeats (over capacity, or measured
    once) is skipped; one with repeats gets only its missing ones (resume)."""
    if k == 1:
        return [(c, n, None) for c, n in cells if (c, n) not in done]
    return [(c, n, r) for r in range(1, k + 1) for c, n in cells
            if ((c, n) in done_repeats and r not in done_repeats[(c, n)]) or ((c, n) not in done_repeats and (c, n) not in done)]  # fmt: skip


def plan_before_launch(cfg: RunConfig, cells: list[tuple[int, int]], console: Console) -> list[tuple[int, int]] | None:
    """Over-capacity cells as the config alone tells (``known_capacity``), said before the engine starts; the
    engine's own capacity, read once it is up, decides (resolve_capacity)."""
    known = cfg.engine.known_capacity()
    if known is None:
        return None
    m = cfg.matrix
    kv, seqs, source = known
    limit, _ = known_max_model_len(cfg)
    over = over_capacity_cells(cells, m.max_output, Capacity(kv_tokens=kv, max_seqs=seqs, source=source), limit, m.prompt_mode)
    what = f"KV {kv:,} tokens" if kv is not None else "KV unknown"
    what += f", {seqs} sequences" if seqs is not None else ""
    listed = ", ".join(f"{format_context(c)}×{n}" for c, n in over) if over else "none"
    console.print(f"  plan ({what}, {source}): {len(cells) - len(over)} of {len(cells)} cells fit; over capacity: {listed}", highlight=False)
    return over


def _detected(store: Store, run_id: str, engine: Engine) -> dict[str, Any]:
    """``engine_extra``'s ``detected`` (the header's line) and ``detection`` (the record) when ``auto`` chose
    the kind: this run's, or on resume the stored one (the stored config names the kind found then)."""
    if engine.detected is not None:
        record = {k: v for k, v in engine.detected.items() if k not in ("line", "note")}
        return {"detected": engine.detected["line"], "detection": record}
    stored = (store.get_run(run_id) or {}).get("engine_extra") or {}
    return {k: stored[k] for k in ("detected", "detection") if k in stored}


def record_gauges(store: Store, run_id: str, runner: CellRunner, traits: Any, state: str, console: Console | None) -> str:
    """Store (and say, in the run header) whether the engine's own gauges are there."""
    if state == "found":
        store.update_run(run_id, engine_metrics={"found": True, **traits.describe()})
    elif state == "absent":
        store.update_run(run_id, engine_metrics={"found": False, "note": METRICS_NOT_FOUND, **traits.describe()})
        if console is not None:
            console.print(f"  [yellow]{METRICS_NOT_FOUND}[/]", highlight=False)
    else:  # declared, but the page did not answer yet: unknown, asked again in every cell
        why = runner.gauges.last_error or "no answer"
        store.update_run(run_id, engine_metrics={"found": None, "note": f"engine metrics did not answer at the start ({why})", **traits.describe()})
        if console is not None:
            console.print(f"  [yellow]engine metrics did not answer ({why}); asked again in every cell[/]", highlight=False)
    return state


async def _client_overhead(store: Store, run_id: str, runner: CellRunner, rtts: list[float], tries: int = 5) -> None:
    """The run's ``client_overhead_ms``: the median round trip of an empty request (core/run/prefill.py)."""
    while len(rtts) < tries:
        rtt = await round_trip_ms(runner.client, runner.base_url, runner.headers)
        if rtt is None:
            break
        rtts.append(rtt)
    if rtts:
        store.update_run(run_id, client_overhead_ms=round(statistics.median(rtts), 3))
