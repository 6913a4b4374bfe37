"""Sweeps: several run configs into one database (docs/distributed.md, "Sweeps").

Every run of a sweep is named (its run id chosen) before the sweep starts, so a run that is lost — its
Ray node died — is still known by id, and is recorded in the caller's database under that id with its
config, ready for ``infermatrix resume``. The local sweep runs the configs one after another in this
process; the Ray sweep (``sweep_ray``) runs each as a Ray task on a node with the GPUs it asks for.
"""

from __future__ import annotations

import functools
import platform
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pluggy
from rich.console import Console
from rich.table import Table

from infermatrix import __version__
from infermatrix.core.config import ConfigError, RunConfig
from infermatrix.core.store import Store, StoreError
from infermatrix.core.store.runs import new_run_id

__all__ = ["SweepEntry", "name_runs", "record_sweep", "progress_line", "run_local_sweep", "run_entry", "record_lost_run", "save_config_slo", "shown_path", "summary_table", "sweep_exit_code"]

# Sweep-level statuses beyond a run's own (completed | interrupted | failed):
LOST = "lost"  # its Ray node (or worker process) died while it ran; recorded for resume
NOT_STARTED = "not started"  # the sweep stopped (Ctrl-C, or a run interrupted) before it began


@dataclass
class SweepEntry:
    """One config of a sweep and what became of its run."""

    source: str  # the config file as given
    cfg: RunConfig
    run_id: str  # chosen before the sweep starts
    status: str = NOT_STARTED
    error: str | None = None
    node: str | None = None  # where it ran (Ray: the node's address)
    in_db: bool = False  # the run is in the caller's database
    setting: dict[str, str] = field(default_factory=dict)  # the grid's key -> value of this run (docs/tuning.md)
    resume: bool = False  # `resume SWEEP_ID`: the run exists; only what it is missing runs
    retry_errors: bool = False  # ...its error cells too
    sweep_id: str | None = None  # the stored sweep it belongs to (sweeps.sql)

    @property
    def label(self) -> str:
        """The setting as a person reads it, or the config file for a sweep without a grid."""
        from infermatrix.core.run.grid import setting_text

        return setting_text(self.setting) if self.setting else shown_path(self.source)


def name_runs(store: Store, entries: list[tuple[str, RunConfig]] | list[tuple[str, RunConfig, dict[str, str]]]) -> list[SweepEntry]:
    """A fresh run id for each config (and its setting, when a grid made it): unused in ``store`` and unique in the sweep."""
    taken: set[str] = set()
    out = []
    for item in entries:
        rid = new_run_id()
        while rid in taken or store.get_run(rid) is not None:
            rid = new_run_id()
        taken.add(rid)
        out.append(SweepEntry(item[0], item[1], rid, setting=dict(item[2]) if len(item) > 2 else {}))
    return out


def record_sweep(store: Store, entries: list[SweepEntry], sweep_id: str, name: str, spec: dict[str, Any]) -> None:
    """The sweep and every combination in it, stored before the first engine starts (``resume SWEEP_ID`` reads it)."""
    from infermatrix.core.store.sweep_store import SweepMember, save_sweep

    members = [SweepMember(k, e.run_id, e.source, e.cfg.model_dump(mode="json"), e.setting) for k, e in enumerate(entries, 1)]
    save_sweep(store, sweep_id, name, spec, members)


def progress_line(n: int, total: int, entry: SweepEntry, started: float, done_s: list[float]) -> str:
    """``sweep 2/4 · engine.args.max_num_seqs=16 → run 3fa2c1d0 · ETA 3 min`` (the ETA: the mean time of the
    combinations run so far, times those left including this one; none before the first has finished)."""
    eta = ""
    if done_s:
        left = sum(done_s) / len(done_s) * (total - n + 1)
        eta = f" · ETA {left / 60:.0f} min" if left >= 90 else f" · ETA {left:.0f} s"
    what = "resume run" if entry.resume else "run"
    return f"[bold]sweep {n}/{total}[/] · {entry.label} → {what} {entry.run_id}{eta} · {time.monotonic() - started:.0f} s so far"


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_local_sweep(pm: pluggy.PluginManager, entries: list[SweepEntry], store: Store, console: Console) -> None:
    """Run the configs one after another into ``store``. A run that fails does not stop the sweep; Ctrl-C
    (or SIGTERM) does: the run in progress stops the way `infermatrix run` stops (partial cell saved,
    engine shut down), finished runs are kept, and the rest are left ``not started``."""
    started, done_s = time.monotonic(), list[float]()
    todo = [e for e in entries if e.status == NOT_STARTED]  # resume: the completed ones are not run again
    for n, entry in enumerate(todo, 1):
        console.print(progress_line(n, len(todo), entry, started, done_s), highlight=False, soft_wrap=True)
        t0 = time.monotonic()
        if not run_entry(pm, entry, store, console):
            return
        done_s.append(time.monotonic() - t0)


def run_entry(pm: pluggy.PluginManager, entry: SweepEntry, store: Store, console: Console) -> bool:
    """One combination of a sweep (or one probe of a tune), here: ``entry`` gets its status and error; False when
    it was interrupted (Ctrl-C, SIGTERM, a hard stop) and nothing more should start."""
    from infermatrix.core.run.runner import execute_run

    # Between runs (and before the run's own watcher is up) SIGTERM is a Ctrl-C, as for `infermatrix run`.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    which = dict(run_id=entry.run_id, retry_errors=entry.retry_errors) if entry.resume else dict(new_run_id_as=entry.run_id)
    try:
        outcome = anyio.run(functools.partial(execute_run, pm, entry.cfg, store, console, **which))
    except KeyboardInterrupt:
        entry.status, entry.in_db = "interrupted", store.get_run(entry.run_id) is not None
        return False
    except (ConfigError, StoreError) as exc:
        entry.status, entry.error = "failed", str(exc)
    except Exception as exc:  # a bug: this run is marked failed (by the runner); the sweep goes on
        entry.status, entry.error = "failed", f"internal error ({type(exc).__name__}: {exc})"
    else:
        entry.status, entry.error = outcome.status, outcome.error
        if outcome.status == "interrupted" or outcome.hard_stop:
            entry.status = "interrupted"
    entry.in_db = store.get_run(entry.run_id) is not None
    if entry.in_db:
        save_config_slo(store, entry)
    return entry.status != "interrupted"


def save_config_slo(store: Store, entry: SweepEntry) -> None:
    """The config's [slo] table, stored with its run as `infermatrix run` stores it (docs/slo.md)."""
    if entry.cfg.slo is None:
        return
    from infermatrix.core.slo import slo_from_table
    from infermatrix.core.store.slo_store import save_slos

    try:
        save_slos(store, entry.run_id, [slo_from_table(entry.cfg.slo)])
    except (StoreError, ConfigError) as exc:  # the measurements are kept; only the SLO is missing
        entry.error = (entry.error + "; " if entry.error else "") + f"SLO not stored: {exc}"


def record_lost_run(store: Store, entry: SweepEntry, why: str) -> None:
    """A run lost with its node: recorded here under its id, with its config and no cells, status
    ``failed``, so `infermatrix resume RUN_ID` runs it (all of it: its cells were on the lost node)."""
    m = entry.cfg.matrix
    store.create_run({
        "run_id": entry.run_id, "name": entry.cfg.name, "engine": entry.cfg.engine.kind, "model": entry.cfg.engine.model,
        "config": entry.cfg.model_dump(mode="json"), "tool_version": f"infermatrix {__version__}", "host": entry.node or platform.node(),
        "api": m.api, "prompt_mode": m.prompt_mode, "status": "failed",
    })  # fmt: skip
    store.finish_run(entry.run_id, "failed", error=why)
    entry.in_db = True


def _cell_counts(store: Store, run_id: str) -> str:
    _, rows = store.query("SELECT status, count(*) FROM cells WHERE run_id = ? GROUP BY status ORDER BY count(*) DESC, status", [run_id])
    return ", ".join(f"{n} {status}" for status, n in rows) or "none"


def shown_path(source: str) -> str:
    """A config path as the reader gave it, or relative to the working directory when it lies below it
    (an absolute temp path would otherwise fill the table)."""
    path = Path(source)
    if path.is_absolute():
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return source
    return source


def summary_table(store: Store, entries: list[SweepEntry], show_node: bool) -> Table:
    """One row per config: its run, status, stored cells by status (and node), and why it did not complete."""
    table = Table(title="sweep", title_justify="left")
    grid = any(e.setting for e in entries)
    for col in ("setting" if grid else "config", "run id", "status", "cells", *(["node"] if show_node else []), "note"):
        table.add_column(col, overflow="fold")
    for e in entries:
        cells = _cell_counts(store, e.run_id) if e.in_db else "—"
        note = (e.error or "").splitlines()[0][:160] if e.error else ""
        if e.sweep_id and e.in_db and e.status == "failed":  # the engine's own last words beside the first line (sweep_runs)
            _, why = store.query("SELECT reason FROM sweep_runs WHERE sweep_id = ? AND run_id = ?", [e.sweep_id, e.run_id])
            note = (why[0][0] or note)[:300] if why else note
        if e.in_db and e.status != "completed":
            note = (note + " · " if note else "") + f"resume: infermatrix resume {e.run_id} --db {store.path}"
        style = {"completed": "green", "stopped": "yellow", "interrupted": "yellow", NOT_STARTED: "dim"}.get(e.status, "red")
        table.add_row(e.label if grid else shown_path(e.source), e.run_id if e.in_db else f"({e.run_id})", f"[{style}]{e.status}[/]", cells,
                      *([e.node or "—"] if show_node else []), note)  # fmt: skip
    return table


def sweep_exit_code(entries: list[SweepEntry]) -> int:
    """0 every run completed; 3 every run ended, but a run's SLO search stopped without an answer (run status
    ``stopped``); 130 the sweep was interrupted; 1 a run failed or was lost."""
    statuses = {e.status for e in entries}
    if statuses <= {"completed"}:
        return 0
    if statuses <= {"completed", "stopped"}:
        return 3
    if "interrupted" in statuses or (NOT_STARTED in statuses and not statuses & {"failed", LOST}):
        return 130
    return 1
