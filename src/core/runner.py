"""The run: engine ready -> capacity -> prompts -> prefill probes -> decode cells -> store (DESIGN §1–2)."""

from __future__ import annotations

import platform
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pluggy
from pydantic import BaseModel
from rich.console import Console

from infermatrix import __version__
from infermatrix.core.cell import CellRunner
from infermatrix.core.config import ConfigError
from infermatrix.core.engine import Engine, EngineError
from infermatrix.core.planning import over_capacity_reason, prefill_target
from infermatrix.core.progress import RunProgress
from infermatrix.core.store import Store
from infermatrix.core.tokenizer import pick_tokenizer
from infermatrix.core.types import Capacity, CellResult, EngineInfo, PrefillResult, Prompt

__all__ = ["RunOutcome", "execute_run", "resolve_capacity"]


@dataclass
class RunOutcome:
    run_id: str
    status: str  # completed | interrupted | failed
    error: str | None = None
    cells: dict[str, int] = field(default_factory=dict)


def resolve_capacity(pm: pluggy.PluginManager, cfg: BaseModel, info: EngineInfo, metrics_text: str | None) -> Capacity:
    """Config overrides first, then the engine's own answer (hook), else unlimited — and say which."""
    eng = cfg.engine
    found = pm.hook.estimate_capacity(config=eng, info=info, metrics_text=metrics_text)
    if eng.kv_tokens is not None or eng.max_seqs is not None:
        return Capacity(
            kv_tokens=eng.kv_tokens if eng.kv_tokens is not None else (found.kv_tokens if found else None),
            max_seqs=eng.max_seqs if eng.max_seqs is not None else (found.max_seqs if found else None),
            source="config",
        )
    if found is not None:
        return found
    return Capacity(kv_tokens=None, max_seqs=None, source="unknown: assumed unlimited (no metrics, no config)")


async def _get_metrics(client: httpx.AsyncClient, engine: Engine) -> str | None:
    try:
        r = await client.get(f"{engine.base_url}/metrics", headers=engine.headers, timeout=10)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


class _Interrupted(Exception):
    pass


async def execute_run(
    pm: pluggy.PluginManager, cfg: BaseModel, store: Store, console: Console, *, run_id: str | None = None
) -> RunOutcome:
    """Run the whole matrix; every finished cell is committed before the next starts."""
    resumed = run_id is not None
    if run_id is None:
        run_id = store.create_run(
            {
                "engine": cfg.engine.kind,
                "model": cfg.engine.model,
                "config": cfg.model_dump(mode="json"),
                "tool_version": __version__,
                "host": platform.node(),
                "api": cfg.matrix.api,
                "prompt_mode": cfg.matrix.prompt_mode,
                "status": "running",
            }
        )
    else:
        store.update_run(run_id, status="running", finished_at=None)
    workdir = store.run_dir(run_id)
    engine: Engine | None = pm.hook.launch_engine(config=cfg.engine, workdir=workdir)
    if engine is None:
        store.finish_run(run_id, "failed")
        raise ConfigError(f"engine.kind: no plugin launches engine kind {cfg.engine.kind!r}")
    outcome = RunOutcome(run_id=run_id, status="failed")
    interrupted = anyio.Event()

    async def watch_signals(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                interrupted.set()
                scope.cancel()
                return

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(connect=cfg.matrix.connect_timeout_s, read=cfg.matrix.idle_timeout_s, write=30, pool=None)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_signals, tg.cancel_scope)
                try:
                    await _run_matrix(pm, cfg, store, console, engine, client, run_id, resumed, outcome)
                finally:
                    tg.cancel_scope.cancel()
            outcome.status = "interrupted" if interrupted.is_set() else "completed"
        except EngineError as exc:
            outcome.status, outcome.error = "failed", engine.redact(str(exc))
        finally:
            with anyio.CancelScope(shield=True):
                if interrupted.is_set():
                    outcome.status = "interrupted"
                await engine.stop()
                store.finish_run(run_id, outcome.status, error=outcome.error)
    return outcome


async def _run_matrix(
    pm: pluggy.PluginManager, cfg: BaseModel, store: Store, console: Console, engine: Engine,
    client: httpx.AsyncClient, run_id: str, resumed: bool, outcome: RunOutcome,
) -> None:
    m = cfg.matrix
    console.print(f"[bold]infermatrix[/] run [cyan]{run_id}[/]: starting {engine.kind} engine" + (f" at {engine.base_url}" if engine.base_url else ""))
    await engine.start()
    await engine.wait_ready(client, cfg.engine.ready_timeout_s)
    info = await engine.describe(client)
    metrics_text = await _get_metrics(client, engine)
    capacity = resolve_capacity(pm, cfg, info, metrics_text)
    max_model_len = info.max_model_len or cfg.engine.max_model_len
    tokenizer = await pick_tokenizer(client, engine.base_url, info.model, m.api, engine.headers)
    workload = pm.hook.make_workload(config=m, tokenizer=tokenizer)
    hardware = {**info.hardware, **cfg.hardware}
    store.update_run(
        run_id, engine=info.engine, engine_version=info.version, model=info.model, hardware=hardware,
        launch_command=info.launch_command, max_model_len=max_model_len, kv_tokens=capacity.kv_tokens,
        max_seqs=capacity.max_seqs, capacity_source=capacity.source, tokenizer=tokenizer.source,
        engine_extra=info.extra, capacity_detail=capacity.detail, duration_s=m.duration_s, max_output=m.max_output,
    )
    console.print(
        f"  {info.engine} {info.version or ''} · model {info.model} · max_model_len {max_model_len or '?'} · "
        f"KV {capacity.kv_tokens if capacity.kv_tokens is not None else 'unlimited'} tokens ({capacity.source})"
    )
    done = store.done_cells(run_id) if resumed else set()
    done_prefill = store.done_prefill(run_id) if resumed else set()
    cells = [(c, n) for c in m.contexts for n in m.concurrency]
    runner = CellRunner(client=client, base_url=engine.base_url, headers=engine.headers, model=info.model, matrix=m, loops=cfg.loops, pm=pm, tokenizer=tokenizer, id_prefix=run_id)
    prompts: dict[tuple[int, int], Prompt] = {}
    sources: set[str] = set()  # token sources of the valid cells, for the run's header

    async def prompt_for(ctx: int, stream: int) -> Prompt:
        if (ctx, stream) not in prompts:
            prompts[(ctx, stream)] = await workload.prompt(ctx, f"decode/{ctx}/s{stream}")
        return prompts[(ctx, stream)]

    todo_prefill = [c for c in m.prefill_contexts if c not in done_prefill]
    todo_cells = [(c, n) for c, n in cells if (c, n) not in done]
    with RunProgress(console, len(todo_prefill) + len(todo_cells)) as progress:
        runner.on_tokens, runner.on_phase = progress.on_tokens, progress.on_phase
        for ctx in todo_prefill:
            label = progress.cell_label(ctx)
            progress.cell(label)
            result = await _prefill(runner, workload, ctx, max_model_len, run_id, progress)
            store.save_prefill(run_id, result)
            detail = f"{result.prompt_tps:,.0f} prompt tok/s, TTFT {result.ttft_ms:,.0f} ms" if result.status == "valid" else (result.reason or "")
            progress.finished(label, result.status, detail)
        for ctx, n in todo_cells:
            label = progress.cell_label(ctx, n)
            progress.cell(label)
            reason = over_capacity_reason(ctx, n, m.max_output, capacity, max_model_len, m.prompt_mode)
            if reason:
                result = CellResult(context_tokens=ctx, concurrency=n, status="over_capacity", reason=reason)
            else:
                if not engine.alive():
                    raise EngineError(f"{engine.kind} died{engine._tail_note()}")
                progress.on_phase("prompts", None)
                cell_prompts = [await prompt_for(ctx, 0 if m.prompt_mode == "shared" else i) for i in range(n)]
                try:
                    result = await runner.measure(ctx, cell_prompts)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        store.save_cell(run_id, CellResult(context_tokens=ctx, concurrency=n, status="interrupted", reason="run interrupted during this cell"))
                    raise
            store.save_cell(run_id, result)
            outcome.cells[result.status] = outcome.cells.get(result.status, 0) + 1
            if result.token_source and result.status == "valid":
                sources.add(result.token_source)
                store.update_run(run_id, token_source=sources.pop() if len(sources) == 1 else "mixed")
                sources.add(result.token_source)
            progress.finished(label, result.status, _cell_detail(result))


def _cell_detail(r: CellResult) -> str:
    if r.status == "valid":
        return f"{r.total_tps:,.1f} tok/s total, {r.per_request_tps:,.1f}/req, TTFT {r.ttft_ms:,.0f} ms, TBT {r.tbt_ms:.1f} ms"
    return r.reason or ""


async def _prefill(runner: CellRunner, workload: Any, ctx: int, max_model_len: int | None, run_id: str, progress: RunProgress) -> PrefillResult:
    target, note = prefill_target(ctx, max_model_len)
    progress.on_phase("prompts", None)
    # A never-seen prefix (run id + nonce), so nothing of it is in the prefix cache: a cold request.
    prompt = await workload.prompt(target, f"{run_id}/prefill/{ctx}/{time.time_ns()}", distinct=True)
    progress.on_phase("prefill", None)
    rec = await runner.one_shot(prompt, 1)
    if rec.outcome != "ok" or rec.ttft_s is None:
        return PrefillResult(context_tokens=ctx, prompt_tokens=rec.prompt_tokens, ttft_ms=None, prompt_tps=None, status="error", reason=rec.error or "no first token")
    tokens = rec.prompt_tokens if rec.prompt_tokens is not None else prompt.tokens
    return PrefillResult(context_tokens=ctx, prompt_tokens=tokens, ttft_ms=rec.ttft_s * 1000, prompt_tps=tokens / rec.ttft_s, status="valid", reason=note)
