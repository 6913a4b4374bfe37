"""The run: engine ready -> capacity -> prompts -> prefill probes -> decode cells -> store (DESIGN §1–2).

Reliability (docs/reliability.md): every finished cell is committed before the next starts; an
engine that goes down is noticed (process exit, or consecutive connection failures and a failed
health probe), its cell is saved as ``error`` with the reason and the log tail, and the engine is
restarted (launch) or waited for (attach); the first SIGINT/SIGTERM closes the open streams, saves
the partial cell as ``interrupted`` and shuts the engine down; a second kills the engine at once.
"""

from __future__ import annotations

import functools
import platform
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pluggy
from infermatrix import __version__
from infermatrix.core.run.accounting import (
    account,
    apply_validity,
    cell_detail,
    partial_cell,
    redact_result,
    rejected_everything,
)
from infermatrix.core.measure.cell import CellRunner
from infermatrix.core.config import ConfigError, RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.engine.contract import Engine, EngineError, probe_reachable
from infermatrix.core.engine.detect import AUTO_KIND, Detection, detect_engine, resolve_auto
from infermatrix.core.run.planning import known_max_model_len, over_capacity_cells, over_capacity_reason, resolve_capacity
from infermatrix.core.run.prefill import probe_prefill, round_trip_ms
from infermatrix.core.run.progress import RunProgress
from infermatrix.core.redact import redact_text
from infermatrix.core.registry import build_engine
from infermatrix.core.measure.steady import METRICS_NOT_FOUND
from infermatrix.core.store import Store
from infermatrix.core.store.runs import new_run_id
from infermatrix.core.store.telemetry import save_gpu_samples
from infermatrix.core.engine.telemetry import GpuSampler
from infermatrix.core.measure.tokenizer import pick_tokenizer
from infermatrix.core.types import (
    Capacity,
    CellResult,
    EngineInfo,
    PrefillResult,
    Prompt,
)
from infermatrix.core.engine.watch import EngineDown, StepFailed, WatchedTransport, down_reason, guarded
from infermatrix.core.run.steps import Phase, start_up
from infermatrix.core.run.wallclock import PhaseClock, add_totals
from infermatrix.core.run.warmth import WarmCache
from rich.console import Console
from rich.markup import escape

__all__ = ["RunOutcome", "execute_run", "WatchedTransport"]

# The run stops (failed) after this many measured cells/probes in a row in which no request succeeded
# while the engine kept answering /health: it is rejecting everything (bad key, overloaded, broken).
REJECTED_UNITS = 3


@dataclass
class RunOutcome:
    run_id: str | None
    status: str  # completed | interrupted | failed
    error: str | None = None
    cells: dict[str, int] = field(default_factory=dict)
    hard_stop: bool = False  # a second signal: the engine was killed, the run stopped at once
    nothing_to_do: bool = False  # resume: every cell was already stored


@dataclass
class _Signals:
    first: str | None = None  # the name of the first signal received
    hard: bool = False  # a second one came


async def execute_run(
    pm: pluggy.PluginManager, cfg: RunConfig, store: Store, console: Console, *,
    run_id: str | None = None, retry_errors: bool = False,
) -> RunOutcome:
    """Run the whole matrix; every finished cell is committed before the next starts.

    ``run_id`` resumes a stored run: only its missing cells run (and its ``error`` cells too with
    ``retry_errors``). Raises :class:`ConfigError` for user mistakes found before the run exists.
    """
    m = cfg.matrix
    sig = _Signals()
    work = anyio.CancelScope()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    # A short connect timeout, a per-read idle timeout, no total: a decode stream may run for minutes.
    timeout = httpx.Timeout(connect=m.connect_timeout_s, read=m.idle_timeout_s, write=30, pool=None)
    transport = WatchedTransport(httpx.AsyncHTTPTransport(limits=limits))
    engine: Engine | None = None
    clock = PhaseClock()  # the run's wall time by phase group, from here to the run's end (core/run/wallclock.py)

    async def watch_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if sig.first is None:
                    sig.first = name
                    console.print(
                        f"\n[yellow]{name}[/]: stopping — closing open streams, saving the partial cell, shutting the "
                        "engine down (send it again to stop at once)", highlight=False,
                    )
                    work.cancel()
                elif not sig.hard:
                    sig.hard = True
                    console.print(f"[yellow]{name}[/] again: killing the engine and stopping at once", highlight=False)
                    if engine is not None:
                        engine.kill()

    async def body(client: httpx.AsyncClient) -> RunOutcome:
        nonlocal engine, run_id
        outcome = RunOutcome(run_id=run_id, status="interrupted")
        created = False
        try:
            with work:
                run_id, engine, todo = await _open_run(pm, cfg, store, client, run_id, retry_errors)
                outcome.run_id = run_id
                if todo is None or engine is None:
                    outcome.status, outcome.nothing_to_do = "completed", True
                    return outcome
                created = True
                outcome.status = "failed"
                await _run_matrix(pm, cfg, store, console, engine, client, transport, run_id, todo, outcome, clock)
            outcome.status = "interrupted" if work.cancelled_caught else "completed"
        except EngineError as exc:
            outcome.status, outcome.error = "failed", engine.redact(str(exc)) if engine else str(exc)
        except (EngineDown, StepFailed) as exc:  # a guarded step the loop does not handle itself: the run stops, cleanly
            outcome.status = "failed"
            outcome.error = engine.redact(f"lost the engine: {exc.why}") if engine else f"lost the engine: {exc.why}"
        except httpx.HTTPError as exc:  # lost the engine outside a watched cell (describe, tokenizer ...)
            outcome.status = "failed"
            where = engine.base_url if engine else cfg.engine.base_url
            text = f"lost the engine at {where}: {type(exc).__name__}: {exc}"
            outcome.error = engine.redact(text) if engine else text
        except BaseException as exc:  # a bug or a store failure: the run is failed, and the error shown
            if created and engine is not None:
                outcome.status, outcome.error = "failed", engine.redact(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            if created and engine is not None and run_id is not None:
                with anyio.CancelScope(shield=True):
                    if work.cancelled_caught and outcome.status != "failed":
                        outcome.status = "interrupted"
                    if not engine.attach:
                        console.print(f"  {engine.kind} killed" if sig.hard else f"  stopping {engine.kind} …", highlight=False)
                    clock.enter("stop")
                    await engine.stop()
                    _save_phase_seconds(store, run_id, clock)
                    store.finish_run(run_id, outcome.status, error=outcome.error)
                    outcome.hard_stop = sig.hard
        return outcome

    error: BaseException | None = None
    outcome: RunOutcome | None = None
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
        async with anyio.create_task_group() as outer:  # the signal watcher lives until the engine is down and the run saved
            outer.start_soon(watch_signals)
            try:
                outcome = await body(client)
            except Exception as exc:  # raised below, not wrapped in the task group's ExceptionGroup
                error = exc
            finally:
                outer.cancel_scope.cancel()
    if error is not None:
        raise error
    assert outcome is not None
    return outcome


async def _open_run(
    pm: pluggy.PluginManager, cfg: RunConfig, store: Store, client: httpx.AsyncClient, run_id: str | None, retry_errors: bool,
) -> tuple[str, Engine | None, tuple[list[int], list[tuple[int, int]]] | None]:
    """Check what can be checked, then create (or reopen) the run and its engine object."""
    m = cfg.matrix
    key = cfg.engine.api_key()
    if cfg.engine.base_url:  # attach: nothing answering there is a user mistake, found before the run exists
        why = await probe_reachable(client, cfg.engine.base_url, m.connect_timeout_s, {"Authorization": f"Bearer {key}"} if key else None)
        if why:
            hint = "" if "API key" in why else "; is the server running?"
            raise ConfigError(redact_text(f"engine.base_url: {why}{hint}", [key] if key else []))
    detection: Detection | None = None
    if cfg.engine.kind == AUTO_KIND:  # before the run exists: the stored config names the kind found
        detection = await detect_engine(pm, client, cfg.engine.base_url or "", {"Authorization": f"Bearer {key}"} if key else None)
        resolve_auto(pm, cfg, detection)
    cells = [(c, n) for c in m.contexts for n in m.concurrency]
    if run_id is not None:
        done = store.done_cells(run_id, retry_errors=retry_errors)
        done_prefill = store.done_prefill(run_id)
        if retry_errors:
            _, errs = store.query("SELECT context_tokens FROM prefill WHERE run_id = ? AND status = 'error'", [run_id])
            done_prefill -= {int(r[0]) for r in errs}
        todo = ([c for c in m.prefill_contexts if c not in done_prefill], [c for c in cells if c not in done])
        if not todo[0] and not todo[1]:
            if (store.get_run(run_id) or {}).get("status") != "completed":
                store.finish_run(run_id, "completed")
            return run_id, None, None
        new = False
    else:
        run_id = new_run_id()
        todo = (list(m.prefill_contexts), cells)
        new = True
    workdir = store.run_dir(run_id)
    engine: Engine | None = build_engine(pm, cfg.engine, workdir)
    try:
        if engine is None:
            raise ConfigError(f"engine.kind: no plugin launches engine kind {cfg.engine.kind!r}")
        engine.preflight()  # e.g. a launch executable that does not exist: one line, before the run exists
    except ConfigError:
        if new:
            try:
                workdir.rmdir()
            except OSError:
                pass
        raise
    if detection is not None:
        engine.detected = {"line": detection.line(), "note": detection.note(), **detection.record()}
    if new:
        store.create_run(
            {
                "run_id": run_id,
                "engine": cfg.engine.kind,
                "model": cfg.engine.model,
                "config": cfg.model_dump(mode="json"),
                "tool_version": __version__,
                "host": platform.node(),
                "api": m.api,
                "prompt_mode": m.prompt_mode,
                "status": "running",
            }
        )
    else:
        store.update_run(run_id, status="running", finished_at=None, error=None)
    return run_id, engine, todo


async def _run_matrix(
    pm: pluggy.PluginManager, cfg: RunConfig, store: Store, console: Console, engine: Engine,
    client: httpx.AsyncClient, transport: WatchedTransport, run_id: str,
    todo: tuple[list[int], list[tuple[int, int]]], outcome: RunOutcome, clock: PhaseClock,
) -> None:
    m = cfg.matrix
    console.print(f"[bold]infermatrix[/] run [cyan]{run_id}[/]: starting {engine.kind} engine" + (f" at {engine.base_url}" if engine.base_url else ""))
    detected = _detected(store, run_id, engine)
    if engine.detected is not None:  # engine.kind = "auto": what was found, or that nothing was
        note = escape(engine.detected["note"])
        said = note if engine.detected["recognised"] else f"[yellow]{note}[/]"
        console.print(f"  {said} [dim]({engine.detected['ms']:.0f} ms)[/]", highlight=False, soft_wrap=True)
    planned = _plan_before_launch(cfg, todo[1], console)
    clock.enter("launch")
    await engine.start()
    clock.enter("ready")
    await engine.wait_ready(client, cfg.engine.ready_timeout_s)

    async def describe(phase: Phase) -> tuple[EngineInfo, str | None, Capacity, Any]:
        phase("describe")
        info = await engine.describe(client)
        phase("capacity")
        metrics_text = await engine.metrics_page(client)
        capacity = resolve_capacity(pm, cfg, info, metrics_text, await engine.read_capacity(client))
        phase("tokenizer")
        tokenizer = await pick_tokenizer(client, engine.base_url, info.model, m.api, engine.headers, engine.traits.tokenize)
        return info, metrics_text, capacity, tokenizer

    # Guarded: an engine that goes away here is restarted (or waited for) and asked again.
    info, metrics_text, capacity, tokenizer = await start_up(engine, client, transport, console, describe, clock)
    traits = engine.traits
    max_model_len = info.max_model_len or cfg.engine.max_model_len
    workload = pm.hook.make_workload(config=m, tokenizer=tokenizer)
    hardware = {**info.hardware, **cfg.hardware}
    store.update_run(
        run_id, engine=info.engine, engine_version=info.version, model=info.model, hardware=hardware,
        launch_command=info.launch_command, max_model_len=max_model_len, kv_tokens=capacity.kv_tokens,
        max_seqs=capacity.max_seqs, capacity_source=capacity.source, tokenizer=tokenizer.source,
        engine_extra={**info.extra, **detected}, capacity_detail=capacity.detail, duration_s=m.duration_s, max_output=m.max_output,
    )
    console.print(
        f"  {info.engine} {info.version or ''} · model {info.model} · max_model_len {max_model_len or '?'} · "
        f"KV {capacity.kv_tokens if capacity.kv_tokens is not None else 'unlimited'} tokens ({capacity.source})"
    )
    if planned is not None and planned != over_capacity_cells(todo[1], m.max_output, capacity, max_model_len, m.prompt_mode):
        console.print("  [yellow]the engine's capacity differs from the plan made before launch; its own is used[/]", highlight=False)
    runner = CellRunner(client=client, base_url=engine.base_url, headers=engine.headers, model=info.model, matrix=m, loops=cfg.loops,
                        pm=pm, tokenizer=tokenizer, id_prefix=run_id, traits=traits, watch=transport,
                        warmth=WarmCache(capacity.kv_tokens))  # fmt: skip

    async def probe_gauges(phase: Phase) -> str:
        phase("gauges")
        return await runner.gauges.probe()

    gauges_state = _record_gauges(store, run_id, runner, traits, await start_up(engine, client, transport, console, probe_gauges, clock), console)
    gpu = GpuSampler(interval_s=1.0)  # power, clocks, memory, utilisation per GPU, once a second, per cell
    prompts: dict[tuple[int, int], Prompt] = {}
    sources: set[str] = set()  # token sources of the valid cells, for the run's header
    rejected = 0  # units in a row in which the engine failed every request

    async def prompt_for(ctx: int, stream: int) -> Prompt:
        if (ctx, stream) not in prompts:
            # The stream first: the key's first tokens are what keeps the prompts' first KV blocks apart.
            prompts[(ctx, stream)] = await workload.prompt(ctx, f"s{stream}/decode/{ctx}")
        return prompts[(ctx, stream)]

    async def ensure_up() -> None:
        phase("health")
        why = await down_reason(engine, client)  # gone between cells: no cell to blame, bring it back first
        if why is not None:
            console.print(f"  [red]{engine.redact(why)}[/] between cells", highlight=False)
            if engine.attach:
                console.print(f"  waiting up to {cfg.engine.reconnect_timeout_s:g} s for {engine.base_url} to come back …", highlight=False)
            phase("recover")
            runner.warmth.forget()
            console.print(f"  {await engine.recover(client)}", highlight=False)

    async def went_down(why: str) -> tuple[str, dict[str, Any]]:
        tail = engine.redact(engine.log_tail(20))
        last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
        reason = engine.redact(f"engine down during this cell ({phase.now}): {why}" + (f"; last log line: {last}" if last else ""))
        console.print(f"  [red]{reason}[/]", highlight=False)
        console.print(f"  {'restarting ' + engine.kind if not engine.attach else f'waiting up to {cfg.engine.reconnect_timeout_s:g} s for {engine.base_url} to come back'} …", highlight=False)
        return reason, {"engine_down": engine.redact(why), "engine_log_tail": tail, "failed_phase": phase.now}

    def judge(result: CellResult | PrefillResult) -> None:
        nonlocal rejected
        verdict = rejected_everything(result)
        if verdict is None:
            return
        rejected = rejected + 1 if verdict else 0
        if rejected >= REJECTED_UNITS:
            raise EngineError(
                f"the engine answers but failed every request of the last {rejected} cells/probes; stopping. Last: {result.reason}"
            )

    todo_prefill, todo_cells = todo
    rtts: list[float] = []  # round trips of an empty request: the client's share of every TTFT
    with RunProgress(console, len(todo_prefill) + len(todo_cells)) as progress:
        phase = Phase(progress.on_phase, clock)  # the phase a step fails in is named in its reason; the clock times it
        runner.on_tokens, runner.on_phase = progress.on_tokens, phase
        for ctx in todo_prefill:
            label = progress.cell_label(ctx)
            progress.cell(label)
            await ensure_up()
            recover = None
            try:
                result = await guarded(engine, client, transport, functools.partial(_prefill, runner, workload, ctx, max_model_len, run_id, phase, rtts))
            except EngineDown as down:
                reason, _ = await went_down(down.why)
                result = PrefillResult(context_tokens=ctx, prompt_tokens=None, ttft_ms=None, prompt_tps=None, status="error", reason=reason)
                recover = True
            except StepFailed as exc:  # the engine answers, but a step of the probe failed: the probe is an error
                result = PrefillResult(context_tokens=ctx, prompt_tokens=None, ttft_ms=None, prompt_tps=None, status="error",
                                       reason=f"failed in {phase.now}: {exc.why}")  # fmt: skip
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    store.save_prefill(run_id, PrefillResult(context_tokens=ctx, prompt_tokens=None, ttft_ms=None, prompt_tps=None,
                                                             status="interrupted", reason="run interrupted during this probe"))  # fmt: skip
                raise
            redact_result(engine, result)
            runner.warmth.wrote(sum((s.prompt_tokens or ctx) + 1 for s in result.samples))
            phase("save")
            store.save_prefill(run_id, result)
            detail = f"{result.prompt_tps:,.0f} prompt tok/s, TTFT {result.ttft_ms:,.0f} ms" if result.status == "valid" else (result.reason or "")
            progress.finished(label, result.status, detail)
            if recover:
                phase("recover")
                runner.warmth.forget()
                console.print(f"  {await engine.recover(client)}", highlight=False)
            else:
                judge(result)
        phase("round trip")
        try:
            await guarded(engine, client, transport, functools.partial(_client_overhead, store, run_id, runner, rtts))
        except (EngineDown, StepFailed):
            pass  # not measured then; the health check before the next cell brings the engine back
        for ctx, n in todo_cells:
            label = progress.cell_label(ctx, n)
            progress.cell(label)
            recover = None
            gpu_samples: list[Any] = []
            before = clock.totals()  # the cell's own phases_s: from here to its save
            too_big = over_capacity_reason(ctx, n, m.max_output, capacity, max_model_len, m.prompt_mode)
            if too_big:
                result = CellResult(context_tokens=ctx, concurrency=n, status="over_capacity", reason=too_big)
            else:
                await ensure_up()
                started_at = time.time()
                runner.last_warm, runner.live_records = [], []

                async def measure(ctx: int = ctx, n: int = n) -> CellResult:  # bound now: called in this iteration
                    phase("prompts")
                    cell_prompts = [await prompt_for(ctx, 0 if m.prompt_mode == "shared" else i) for i in range(n)]
                    return await runner.measure(ctx, cell_prompts)

                try:
                    async with gpu.sampling() as gpu_samples:  # nothing to sample where there is no nvidia-smi
                        result = await guarded(engine, client, transport, measure)
                    account(result, list(getattr(runner, "last_warm", None) or []))
                    apply_validity(result, m, cfg.validity)
                except EngineDown as down:
                    reason, flags = await went_down(down.why)
                    result = partial_cell(ctx, n, "error", reason, started_at, runner, flags)
                    recover = True
                except StepFailed as exc:  # the engine answers, but a step outside the requests failed (a tokenize, a metrics read)
                    result = partial_cell(ctx, n, "error", f"failed in {phase.now}: {exc.why}", started_at, runner,
                                         {"failed_phase": phase.now, "engine_log_tail": engine.redact(engine.log_tail(20))})  # fmt: skip
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        partial = partial_cell(ctx, n, "interrupted", "run interrupted during this cell (resume runs it again)", started_at, runner, {})
                        redact_result(engine, partial)
                        store.save_cell(run_id, partial)
                    raise
            redact_result(engine, result)
            phase("save")
            result.flags["phases_s"] = clock.since(before)
            store.save_cell(run_id, result)
            if gpu_samples:
                save_gpu_samples(store, run_id, ctx, n, gpu_samples)
            outcome.cells[result.status] = outcome.cells.get(result.status, 0) + 1
            if result.token_source and result.status == "valid":
                sources.add(result.token_source)
                store.update_run(run_id, token_source=sources.pop() if len(sources) == 1 else "mixed")
                sources.add(result.token_source)
            progress.finished(label, result.status, cell_detail(result))
            if runner.gauges.state != gauges_state:  # a metrics page that did not answer at first, known now
                gauges_state = _record_gauges(store, run_id, runner, traits, runner.gauges.state, None)
            if recover:
                phase("recover")
                runner.warmth.forget()
                console.print(f"  {await engine.recover(client)}", highlight=False)
            else:
                judge(result)


def _plan_before_launch(cfg: RunConfig, cells: list[tuple[int, int]], console: Console) -> list[tuple[int, int]] | None:
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


def _save_phase_seconds(store: Store, run_id: str, clock: PhaseClock) -> None:
    """The run's wall time by phase group; a resumed run adds this session's to what is stored."""
    stored = (store.get_run(run_id) or {}).get("phase_seconds")
    store.update_run(run_id, phase_seconds=add_totals(stored if isinstance(stored, dict) else None, clock.totals()))


def _detected(store: Store, run_id: str, engine: Engine) -> dict[str, Any]:
    """``engine_extra``'s ``detected`` (the header's line) and ``detection`` (the record) when ``auto`` chose
    the kind: this run's, or on resume the stored one (the stored config names the kind found then)."""
    if engine.detected is not None:
        record = {k: v for k, v in engine.detected.items() if k not in ("line", "note")}
        return {"detected": engine.detected["line"], "detection": record}
    stored = (store.get_run(run_id) or {}).get("engine_extra") or {}
    return {k: stored[k] for k in ("detected", "detection") if k in stored}


def _record_gauges(store: Store, run_id: str, runner: CellRunner, traits: Any, state: str, console: Console | None) -> str:
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


async def _prefill(runner: CellRunner, workload: Any, ctx: int, max_model_len: int | None, run_id: str, phase: Phase,
                   rtts: list[float]) -> PrefillResult:  # fmt: skip
    return await probe_prefill(runner, workload, ctx, max_model_len, run_id, rtts, phase)


async def _client_overhead(store: Store, run_id: str, runner: CellRunner, rtts: list[float], tries: int = 5) -> None:
    """The run's ``client_overhead_ms``: the median round trip of an empty request (core/run/prefill.py)."""
    while len(rtts) < tries:
        rtt = await round_trip_ms(runner.client, runner.base_url, runner.headers)
        if rtt is None:
            break
        rtts.append(rtt)
    if rtts:
        store.update_run(run_id, client_overhead_ms=round(statistics.median(rtts), 3))
