"""The sweep on a Ray cluster (docs/distributed.md, "Sweeps"): each config is a Ray task that asks for the
GPUs a run needs, runs the run on its node into a node-local DuckDB, exports it as Parquet and returns the
files; the caller merges each into its database (core/store/parquet.py) as it arrives.

Ray is imported only here, and only when a sweep asks for it (`pip install 'infermatrix[ray]'`).

A node that dies takes the node-local database with it: the run's cells measured there are gone. The run is
then recorded in the caller's database under its id with its config and no cells (``record_lost_run``), and
``infermatrix resume RUN_ID`` runs it again, all of it. Tasks are never retried by Ray (``max_retries=0``):
a retry would re-run the whole run elsewhere behind the user's back.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from infermatrix.core.store import Store, StoreError
from infermatrix.core.run.sweep import LOST, NOT_STARTED, SweepEntry, record_lost_run, save_config_slo

__all__ = ["RaySettings", "RayMissing", "run_ray_sweep", "sweep_task"]

GPU = "GPU"  # Ray's own GPU resource (num_gpus); any other name is a custom resource
_RUN_FILE_LIMIT = 20 * 1024 * 1024  # run-directory files (engine log ...) shipped back up to this size each
STOP_WAIT_S = 180.0  # after Ctrl-C: how long the caller waits for the interrupted runs to come back


class RayMissing(Exception):
    """``--ray`` without Ray installed, or a cluster where no node has what a run asks for."""


def _check_fits(ray: Any, settings: RaySettings) -> None:
    """A run that no live node can hold would wait forever (Ray queues it as infeasible): say so instead."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    best = max((float(n.get("Resources", {}).get(settings.resource, 0)) for n in alive), default=0.0)
    if best < settings.gpus_per_run:
        have = sorted({k for n in alive for k in n.get("Resources", {}) if not k.startswith("node:") and "_group_" not in k})
        raise RayMissing(
            f"no node of the Ray cluster has {settings.gpus_per_run:g} {settings.resource} (the most on one node: {best:g}; "
            f"resources there: {', '.join(have)}); see --gpus-per-run and --gpu-resource"
        )


@dataclass
class RaySettings:
    address: str | None = None  # None: RAY_ADDRESS, a cluster already started here, or a new local one (ray.init())
    gpus_per_run: float = 1.0
    resource: str = GPU  # the resource each run asks for gpus_per_run of
    node_dir: str | None = None  # node-local scratch (the run's DuckDB and engine files); None: the node's temp dir


# ---- on the node -------------------------------------------------------------------------------------------------

def sweep_task(config: dict[str, Any], run_id: str, source: str, node_dir: str | None, board: Any) -> dict[str, Any]:
    """A Ray task: one run on this node into a node-local DuckDB, returned as its Parquet export's files.

    A Ctrl-C of the caller reaches the run as SIGINT (``ray.cancel``): it stops the way `infermatrix run`
    stops, and what it measured comes back like a finished run's."""
    import anyio
    import ray

    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.registry import validate_config
    from infermatrix.core.run.runner import execute_run
    from infermatrix.core.store.parquet import export_runs

    node = f"{ray.util.get_node_ip_address()} ({platform.node()})"
    try:
        board.put({"run_id": run_id, "node": node, "node_id": ray.get_runtime_context().get_node_id()}, timeout=10)
    except Exception:  # the note is for the caller's progress lines only; the run does not depend on it
        pass
    if node_dir:
        Path(node_dir).mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=f"infermatrix-sweep-{run_id}-", dir=node_dir))
    ray_sigint = signal.getsignal(signal.SIGINT)
    try:
        store = Store(base / "node.duckdb")
        result: dict[str, Any] = {"run_id": run_id, "node": node, "status": "failed", "error": None, "files": {}, "run_files": {}}
        with (base / "console.log").open("w") as log:
            try:
                pm = get_plugin_manager()
                cfg = validate_config(pm, config, source)
                outcome = anyio.run(lambda: execute_run(pm, cfg, store, Console(file=log, width=160), new_run_id_as=run_id))
                result.update(status=outcome.status, error=outcome.error)
            except Exception as exc:  # the caller reports it; what was measured still goes back
                result["error"] = f"{type(exc).__name__}: {exc}"
        # A second Ctrl-C while the export is read would lose the whole run: finish shipping first.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if store.get_run(run_id) is not None:
            export_runs(store, [run_id], base / "export")
            result["files"] = {p.name: p.read_bytes() for p in sorted((base / "export").iterdir())}
            run_dir = store.run_dir(run_id)
            result["run_files"] = {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file() and p.stat().st_size <= _RUN_FILE_LIMIT}
        store.close()
        return result
    finally:
        signal.signal(signal.SIGINT, ray_sigint)
        shutil.rmtree(base, ignore_errors=True)


# ---- on the caller -----------------------------------------------------------------------------------------------

def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing("--ray needs Ray: pip install 'infermatrix[ray]'") from None
    return ray


def _land(store: Store, entry: SweepEntry, result: dict[str, Any]) -> None:
    """Merge a run's export into the caller's database, with its engine files in the run's directory."""
    from infermatrix.core.store.parquet import import_runs

    entry.status, entry.error, entry.node = result["status"], result["error"], result["node"]
    if not result["files"]:
        return  # it failed before its run existed (e.g. its engine's base_url did not answer)
    with tempfile.TemporaryDirectory(prefix="infermatrix-sweep-import-") as tmp:
        for name, data in result["files"].items():
            (Path(tmp) / name).write_bytes(data)
        import_runs(store, tmp)
    entry.in_db = True
    run_dir = store.run_dir(entry.run_id)
    for name, data in result["run_files"].items():
        (run_dir / name).write_bytes(data)
    save_config_slo(store, entry)


def _lost(store: Store, entry: SweepEntry, exc: BaseException) -> None:
    """The task died with its node or worker: the run is recorded here for resume."""
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    entry.status = LOST
    entry.error = f"lost with its Ray node ({type(exc).__name__}: {why}); its cells measured there are gone, resume runs it again"
    try:
        record_lost_run(store, entry, entry.error)
    except StoreError as err:
        entry.error += f"; not recorded: {err}"


class _Sweep:
    """The caller's side: submit every config, land each result as it arrives, report starts and ends."""

    def __init__(self, ray: Any, entries: list[SweepEntry], store: Store, console: Console, settings: RaySettings):
        self.ray, self.entries, self.store, self.console, self.settings = ray, entries, store, console, settings
        from ray.util.queue import Queue

        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # Tasks say where they started through this queue; it lives on the caller's node, so that losing a
        # worker node never takes it down with it.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.board: Any = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
        if settings.resource == GPU:
            needs: dict[str, Any] = {"num_gpus": settings.gpus_per_run}
        else:
            needs = {"resources": {settings.resource: settings.gpus_per_run}}
        task = ray.remote(sweep_task).options(max_retries=0, **needs)
        self.pending = {
            task.remote(e.cfg.model_dump(mode="json"), e.run_id, e.source, settings.node_dir, self.board): e for e in entries
        }
        for e in entries:
            e.status = "queued"
        self.t0 = time.monotonic()
        self.stops = 0  # Ctrl-Cs counted by on_sigint, not yet acted on by collect

    def on_sigint(self, signum: int, frame: Any) -> None:
        """Count the Ctrl-C; :meth:`collect` raises it from our own code. A KeyboardInterrupt raised wherever the
        main thread happens to be can land inside Ray's client code, which is not ours to trust with it."""
        self.stops += 1

    def _say(self, text: str) -> None:
        self.console.print(f"  [{time.monotonic() - self.t0:6.1f} s] {text}", highlight=False, markup=False)

    def drain_board(self) -> None:
        from ray import exceptions as rex

        if self.board is None:
            return
        try:
            notes = self.board.get_nowait_batch(self.board.qsize()) if self.board.qsize() else []
        except rex.RayError as exc:  # only the start notes are lost; results come back without it
            self._say(f"warning: start notes unavailable ({type(exc).__name__})")
            self.board, notes = None, []
        for note in notes:
            entry = next((e for e in self.entries if e.run_id == note["run_id"]), None)
            if entry is not None:
                entry.status, entry.node = "running", note["node"]
                self._say(f"run {entry.run_id} ({entry.label}) started on {note['node']} · node id {note['node_id']}")

    def collect(self, timeout: float | None) -> None:
        """Land every result that arrives within ``timeout`` seconds (None: until all are in)."""
        ray = self.ray
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending and (deadline is None or time.monotonic() < deadline):
            if self.stops:
                self.stops -= 1
                raise KeyboardInterrupt
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=0.5)
            self.drain_board()
            for ref in ready:
                entry = self.pending.pop(ref)
                self._finish(entry, ref)

    def _finish(self, entry: SweepEntry, ref: Any) -> None:
        ray = self.ray
        from ray import exceptions as rex

        try:
            self._land_or_fail(entry, ray.get(ref))
        except rex.TaskCancelledError:
            entry.status = NOT_STARTED if entry.status == "queued" else "interrupted"
        except (rex.NodeDiedError, rex.WorkerCrashedError, rex.OwnerDiedError, rex.ObjectLostError) as exc:
            _lost(self.store, entry, exc)
        except rex.RayError as exc:  # a failure inside the task, outside the run's own handling
            entry.status, entry.error = "failed", str(exc).strip().splitlines()[-1][:300]
        self._say(f"run {entry.run_id} ({entry.label}): {entry.status}" + (f" — {entry.error.splitlines()[0]}" if entry.error else ""))

    def _land_or_fail(self, entry: SweepEntry, result: dict[str, Any]) -> None:
        try:
            _land(self.store, entry, result)
        except (StoreError, OSError) as exc:
            entry.status, entry.error = "failed", f"measured on {result['node']} but not merged: {exc}"

    def cancel(self, force: bool) -> None:
        for ref in self.pending:
            self.ray.cancel(ref, force=force)


def run_ray_sweep(entries: list[SweepEntry], store: Store, console: Console, settings: RaySettings) -> None:
    """Run the sweep's configs as Ray tasks, merging each run into ``store`` as it arrives. Ctrl-C cancels
    the tasks: running ones stop cleanly and come back as ``interrupted``, queued ones never start."""
    ray = _import_ray()
    t0 = time.monotonic()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(address=settings.address, log_to_driver=False, configure_logging=False)
    try:
        where = ray.get_runtime_context().gcs_address
        _check_fits(ray, settings)
        console.print(f"Ray cluster at {where} ({time.monotonic() - t0:.1f} s to connect): "
                      f"{len(entries)} run(s), each asking for {settings.gpus_per_run:g} {settings.resource}", highlight=False)  # fmt: skip
        sweep = _Sweep(ray, entries, store, console, settings)
        before = signal.signal(signal.SIGINT, sweep.on_sigint)
        try:
            sweep.collect(None)
        except KeyboardInterrupt:
            console.print("\n[yellow]interrupted[/]: stopping the runs (their measured cells come back); Ctrl-C again to kill them", highlight=False)
            sweep.cancel(force=False)
            try:
                sweep.collect(STOP_WAIT_S)
            except KeyboardInterrupt:
                sweep.cancel(force=True)
                sweep.collect(30)
            for entry in sweep.pending.values():
                entry.status, entry.error = "interrupted", "did not come back after Ctrl-C"
        finally:
            signal.signal(signal.SIGINT, before)
    finally:
        ray.shutdown()
