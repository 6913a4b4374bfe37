"""The run: engine ready -> capacity -> prompts -> prefill probes -> decode cells -> store (DESIGN §1–2).

Reliability (docs/reliability.md): every finished cell is committed before the next starts; an
engine that goes down is noticed (process exit, or consecutive connection failures and a failed
health probe), its cell is saved as ``error`` with the reason and the log tail, and the engine is
restarted (launch) or waited for (attach); the first SIGINT/SIGTERM closes the open streams, saves
the partial cell as ``interrupted`` and shuts the engine down; a second kills the engine at once.
"""

from __future__ import annotations

import platform
import signal
from dataclasses import dataclass, field

import anyio
import anyio.abc
import httpx
import pluggy
from infermatrix import __version__
from infermatrix.core.config import ConfigError, RunConfig
from infermatrix.core.engine.contract import Engine, EngineError, probe_reachable
from infermatrix.core.engine.detect import AUTO_KIND, Detection, detect_engine, resolve_auto
from infermatrix.core.redact import redact_text
from infermatrix.core.registry import build_engine
from infermatrix.core.store import Store, StoreError
from infermatrix.core.workloads import workload_name
from infermatrix.core.store.runs import new_run_id
from infermatrix.core.engine.watch import EngineDown, StepFailed, WatchedTransport
from infermatrix.core.run.matrix import CellStep, MatrixRun, cell_steps
from infermatrix.core.load.points import pending_points, plan_lines, run_points
from infermatrix.core.run.sessions import run_sessions
from infermatrix.core.store.workload_store import pass_done
from infermatrix.core.load.search import run_search, search_pending, search_stopped
from infermatrix.core.wallclock import PhaseClock, add_totals
from rich.console import Console

__all__ = ["RunOutcome", "execute_run", "WatchedTransport"]


@dataclass
class RunOutcome:
    run_id: str | None
    status: str  # completed | stopped (its SLO search found no answer; error: why) | interrupted | failed
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
    run_id: str | None = None, retry_errors: bool = False, new_run_id_as: str | None = None, live: bool = True,
) -> RunOutcome:
    """Run the whole matrix; every finished cell is committed before the next starts.

    ``run_id`` resumes a stored run: only its missing cells run (and its ``error`` cells too with
    ``retry_errors``). ``new_run_id_as``: a new run's id, chosen by its caller (a sweep's runs are named before
    they start); ``live``: the live matrix on a terminal (False: run --no-live). Raises :class:`ConfigError` for user mistakes found before the run exists.
    """
    m = cfg.matrix
    sig = _Signals()
    work = anyio.CancelScope()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    # A short connect timeout, a per-read idle timeout, no total: a decode stream may run for minutes.
    timeout = httpx.Timeout(connect=m.connect_timeout_s, read=m.idle_timeout_s, write=30, pool=None)
    transport = WatchedTransport(httpx.AsyncHTTPTransport(limits=limits))
    engine: Engine | None = None
    clock = PhaseClock()  # the run's wall time by phase group, from here to the run's end (core/wallclock.py)

    async def watch_signals(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            # Started only once the receiver is installed: until then the CLI's handler turns a signal into a
            # KeyboardInterrupt, which would land anywhere, e.g. inside the engine's launch (Popen), and fail the run.
            task_status.started()
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
                run_id, engine, todo = await _open_run(pm, cfg, store, client, run_id, retry_errors, new_run_id_as)
                outcome.run_id = run_id
                if todo is None or engine is None:
                    outcome.nothing_to_do = True
                    return _ended(outcome, store, cfg, False)
                created = True
                outcome.status = "failed"
                matrix_run = MatrixRun(pm, cfg, store, console, engine, client, transport, run_id, clock, outcome.cells, plan=plan_lines(cfg), live_view=live)
                await _measure(matrix_run, todo, retry_errors)
            _ended(outcome, store, cfg, work.cancelled_caught)
        except (EngineError, StoreError) as exc:  # the engine failed; or a result could not be saved (a full disk): resumable
            if isinstance(exc, StoreError) and not created:
                raise
            outcome.status, outcome.error = "failed", engine.redact(str(exc)) if engine else str(exc)
        except (EngineDown, StepFailed) as exc:  # a guarded step the loop does not handle itself: the run stops, cleanly
            outcome.status = "failed"
            outcome.error = engine.redact(f"lost the engine: {exc.why}") if engine else f"lost the engine: {exc.why}"
        except httpx.HTTPError as exc:  # lost the engine outside a watched cell (describe, tokenizer ...)
            outcome.status = "failed"
            where = engine.base_url if engine else cfg.engine.base_url
            text = f"lost the engine at {where}: {type(exc).__name__}: {exc}"
            outcome.error = engine.redact(text) if engine else text
        except BaseException as exc:  # a bug: the run is failed, and the error shown
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
                    _store_outcome(store, run_id, clock, outcome, sig.hard)
        return outcome

    error: BaseException | None = None
    outcome: RunOutcome | None = None
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
        async with anyio.create_task_group() as outer:  # the signal watcher lives until the engine is down and the run saved
            await outer.start(watch_signals)
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


def _ended(outcome: RunOutcome, store: Store, cfg: RunConfig, cancelled: bool) -> RunOutcome:
    """The status of a run whose work ended: interrupted, ``stopped`` (its SLO search stopped without an answer, the
    reason in ``error``: exit code 3, docs/load.md "Search"), or completed."""
    stopped = None if cancelled or outcome.run_id is None else search_stopped(store, outcome.run_id, cfg)
    outcome.status = "interrupted" if cancelled else "stopped" if stopped else "completed"
    outcome.error = stopped or outcome.error
    return outcome


async def _open_run(
    pm: pluggy.PluginManager, cfg: RunConfig, store: Store, client: httpx.AsyncClient, run_id: str | None, retry_errors: bool,
    new_run_id_as: str | None = None,
) -> tuple[str, Engine | None, tuple[list[int], list[CellStep]] | None]:
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
        steps = cell_steps(cells, m.repeat, done, store.done_repeats(run_id, retry_errors=retry_errors))
        done_prefill = store.done_prefill(run_id)
        if retry_errors:
            _, errs = store.query("SELECT context_tokens FROM prefill WHERE run_id = ? AND status = 'error'", [run_id])
            done_prefill -= {int(r[0]) for r in errs}
        todo = ([c for c in m.prefill_contexts if c not in done_prefill], steps)
        pass_pending = workload_name(m, cfg.workload) is not None and not pass_done(store, run_id, retry_errors)
        pending = pending_points(store, run_id, cfg, retry_errors) or search_pending(store, run_id, cfg, retry_errors) or pass_pending
        if not todo[0] and not todo[1] and not pending:
            stopped = search_stopped(store, run_id, cfg)
            if (store.get_run(run_id) or {}).get("status") != ("stopped" if stopped else "completed"):
                store.finish_run(run_id, "stopped" if stopped else "completed", error=stopped)
            return run_id, None, None
        new = False
    else:
        run_id = new_run_id_as or new_run_id()
        todo = (list(m.prefill_contexts), cell_steps(cells, m.repeat, set(), {}))
        new = True
    workdir = store.run_dir(run_id)
    engine: Engine | None = build_engine(pm, cfg.engine, workdir)
    try:
        if engine is None:
            raise ConfigError(f"engine.kind: no plugin launches engine kind {cfg.engine.kind!r}")
        engine.preflight()  # e.g. a launch executable that does not exist: one line, before the run exists
        if cfg.client.backend == "ray":  # Ray missing or its cluster unreachable: one line, before the run exists
            from infermatrix.core.distributed.ray_pool import ray_module

            ray_module(cfg.client.ray_address)
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


async def _measure(matrix_run: MatrixRun, todo: tuple[list[int], list[CellStep]], retry_errors: bool) -> None:
    """The matrix, then what comes after it; the telemetry samplers' threads end with the run's work, however it ends."""
    try:
        await matrix_run.run(todo)
        await _after_matrix(matrix_run, matrix_run.store, matrix_run.run_id, matrix_run.cfg, retry_errors)
    finally:
        matrix_run.close_telemetry()


async def _after_matrix(matrix_run: MatrixRun, store: Store, run_id: str, cfg: RunConfig, retry_errors: bool) -> None:
    """What a run measures after its matrix, on the same engine, in this order; each gets the run's context, not the run."""
    rc = matrix_run.context()
    await run_points(rc, pending_points(store, run_id, cfg, retry_errors))  # open-loop points ([[load]], --rate)
    await run_search(rc, retry_errors)  # the SLO search ([search])
    await run_sessions(rc, retry_errors)  # a workload's own traffic (shared-prefix, multi-turn), last


def _store_outcome(store: Store, run_id: str, clock: PhaseClock, outcome: RunOutcome, hard_stop: bool) -> None:
    """The run's wall time and final status. A store that cannot take them (the disk still full) leaves the run
    ``running`` in the database, which ``resume`` takes as it is; the outcome says so."""
    outcome.hard_stop = hard_stop
    try:
        _save_phase_seconds(store, run_id, clock)
        store.finish_run(run_id, outcome.status, error=outcome.error)
    except StoreError as exc:
        outcome.status = "failed"
        outcome.error = f"{outcome.error or 'run stopped'}; its status could not be saved either ({exc})"


def _save_phase_seconds(store: Store, run_id: str, clock: PhaseClock) -> None:
    """The run's wall time by phase group; a resumed run adds this session's to what is stored."""
    stored = (store.get_run(run_id) or {}).get("phase_seconds")
    store.update_run(run_id, phase_seconds=add_totals(stored if isinstance(stored, dict) else None, clock.totals()))
