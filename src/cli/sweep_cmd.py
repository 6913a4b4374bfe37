"""``infermatrix sweep CONFIG...``: several runs into one database, one after another here or spread over a
Ray cluster's GPU nodes (docs/distributed.md, "Sweeps")."""

from __future__ import annotations

import sys

import click

from infermatrix.cli.common import DEFAULT_DB, EXIT_FAILED, EXIT_INTERRUPTED, OneLineErrors, err_console, fail, number_option, open_store, out_console
from infermatrix.cli.slo_opts import attach_slos_after_run, parse_slo_flags, slo_options
from infermatrix.core.run.grid import MAX_RUNS_WITHOUT_YES


@click.command(cls=OneLineErrors)
@click.argument("config_files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--db", default=None, help=f"the database every run lands in (default ./{DEFAULT_DB}, or the first config's store.db)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="override a field in every config, e.g. matrix.duration_s=5")
@click.option("--ray", "use_ray", is_flag=True, help="run each config as a Ray task on a node with the GPUs it needs (pip install 'infermatrix[ray]')")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="with --ray: the cluster (e.g. 10.0.0.5:6379); default RAY_ADDRESS, a cluster started here with `ray start`, or a new local one")
@click.option("--gpus-per-run", default=None, metavar="N", help="with --ray: GPUs each run asks for (default 1)")
@click.option("--gpu-resource", default=None, metavar="NAME",
              help="with --ray: the Ray resource the GPUs are counted in (default GPU, Ray's own; any custom resource name works)")
@click.option("--node-dir", default=None, metavar="DIR",
              help="with --ray: the scratch directory on each node for its run's database and engine files (default the node's temp dir)")
@click.option("--grid", "grid", multiple=True, metavar="KEY=V1,V2,…",
              help="a setting to sweep: any key --set takes, e.g. engine.args.max_num_seqs=64,128 (one run, one engine launch, each)")
@click.option("--zip", "zip_all", is_flag=True, help="pair the --grid lists element by element (equal lengths) instead of every combination")
@click.option("--name", default=None, help="the sweep's name (default: the config's [sweep] name, else its settings' keys)")
@click.option("--yes", is_flag=True, help=f"run a grid of more than {MAX_RUNS_WITHOUT_YES} runs")
@slo_options
def sweep(config_files, db, overrides, use_ray, ray_address, gpus_per_run, gpu_resource, node_dir, grid, zip_all, name, yes,
          slo_texts, gpu_hour_price) -> None:  # fmt: skip
    """Run several CONFIG files, or a grid of settings over them (--grid, a config's [sweep] table), into one database:
    one after another, or with --ray one Ray task per run on the cluster's GPU nodes, each run merged into the
    database as it finishes. The sweep has an id (`infermatrix resume SWEEP_ID` runs what is missing or failed) and
    its views: sweep_runs, sweep_frontier, best_setting (docs/tuning.md). A summary table ends it;
    exit 1 if a run failed or was lost, 130 if interrupted, 3 if every run ended but a run's SLO search stopped
    without an answer. --slo and --gpu-hour-price are stored with every run that reached the database, as `run` stores them."""
    from infermatrix.core.config import ConfigError
    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.run.sweep_plan import SweepRequest, plan_sweep

    pm = get_plugin_manager()
    try:
        ray_flags = [f for f, v in (("--ray-address", ray_address), ("--gpus-per-run", gpus_per_run), ("--gpu-resource", gpu_resource),
                                    ("--node-dir", node_dir)) if v is not None]  # fmt: skip
        if ray_flags and not use_ray:
            raise ConfigError(f"{ray_flags[0]}: only with --ray")
        slos = parse_slo_flags(slo_texts, gpu_hour_price)
        req = SweepRequest(list(config_files), list(overrides), list(grid), zip_all, yes)
        combos, table_name = plan_sweep(pm, req)
        gpus = number_option(float, gpus_per_run, "--gpus-per-run") or 1.0
    except ConfigError as exc:
        fail(str(exc))
    store = open_store(db or combos[0].cfg.store.db or DEFAULT_DB)
    entries = _record(store, combos, req, name or table_name)
    _run(entries, store, use_ray, ray_address, gpus, gpu_resource, node_dir, slos)


def _record(store, combos, req, name: str | None) -> list:
    """Every run named and the sweep stored with its combinations, before the first engine starts."""
    from infermatrix.core.run.sweep import name_runs, record_sweep
    from infermatrix.core.store import StoreError
    from infermatrix.core.store.sweep_store import new_sweep_id

    entries = name_runs(store, [(c.source, c.cfg, c.setting) for c in combos])
    keys = list(dict.fromkeys(k for c in combos for k in c.setting))
    sweep_id = new_sweep_id()
    name = name or (" × ".join(keys) if keys else ", ".join(dict.fromkeys(c.source for c in combos)))
    spec = {"configs": req.config_files, "set": req.overrides, "grid": req.grid, "zip": req.zip_all}
    try:
        record_sweep(store, entries, sweep_id, name, spec)
    except StoreError as exc:
        store.close()
        fail(str(exc), EXIT_FAILED)
    err_console().print(f"sweep [bold cyan]{sweep_id}[/] ({name}): {len(entries)} run(s)", highlight=False, soft_wrap=True)
    for e in entries:
        e.sweep_id = sweep_id
    return entries


def _run(entries, store, use_ray: bool, address, gpus: float, resource, node_dir, slos) -> None:
    import signal

    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.run.sweep import run_local_sweep, summary_table, sweep_exit_code

    pm = get_plugin_manager()
    err = err_console()
    try:
        if use_ray:
            from infermatrix.core.run.sweep_ray import GPU, RayMissing, RaySettings, run_ray_sweep

            settings = RaySettings(address=address, gpus_per_run=gpus, resource=resource or GPU, node_dir=node_dir)
            try:
                run_ray_sweep(entries, store, err, settings)
            except RayMissing as exc:
                store.close()
                fail(str(exc))
        else:
            run_local_sweep(pm, entries, store, err)
    except KeyboardInterrupt:  # between two steps of the sweep itself: what is stored stays
        pass
    except Exception as exc:  # a bug, or the Ray cluster gone: what was merged stays; the summary says what is missing
        err.print(f"[bold red]error:[/] sweep stopped: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                  highlight=False, soft_wrap=True)  # fmt: skip
        for entry in entries:
            if entry.status not in ("completed", "stopped", "failed", "interrupted", "lost", "not started"):
                entry.status, entry.error = "failed", f"the sweep stopped before it came back ({type(exc).__name__})"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the summary is printed whatever happens now
    specs, price = slos  # each config's own [slo] is stored already
    attach_slos_after_run(store, [e.run_id for e in entries if e.in_db], specs, price, err)
    code = sweep_exit_code(entries)
    out = out_console()  # off a terminal every path, run id and note prints whole
    out.print(summary_table(store, entries, show_node=use_ray))
    sweep_id = entries[0].sweep_id if entries else None
    if sweep_id:
        _print_best(out, store, sweep_id)
        out.print(f"sweep id: [bold cyan]{sweep_id}[/]  ·  views: sweep_runs, sweep_frontier, best_setting  ·  "
                  f"resume: infermatrix resume {sweep_id} --db {store.path}  ·  "
                  f"report: infermatrix report --sweep {sweep_id} --db {store.path}", highlight=False, soft_wrap=True)  # fmt: skip
    out.print(f"database: {store.path}", highlight=False)
    store.close()
    if code:
        sys.exit(EXIT_INTERRUPTED if code == 130 else code)


def resume_sweep(pm, store, found: tuple[str, str], overrides: list[str], retry_errors: bool) -> None:
    """`infermatrix resume SWEEP_ID`: each combination not started runs as new under its planned id, each failed or
    interrupted one is resumed (its missing cells), completed ones stay as they are; locally, one after another."""
    from infermatrix.core.config import ConfigError
    from infermatrix.core.run.prepare import prepare_config
    from infermatrix.core.run.sweep import SweepEntry
    from infermatrix.core.store.sweep_store import sweep_members

    sweep_id, name = found
    from infermatrix.core.store.sweep_store import sweep_spec

    spec = sweep_spec(store, sweep_id)
    if "tune" in spec:  # a tune: finish its interrupted probe, then continue the search (docs/tuning.md, "The tuner")
        from infermatrix.cli.tune_cmd import resume_tune

        if overrides or retry_errors:
            store.close()
            fail(f"resume {sweep_id}: a tune resumes with its stored config (--set and --retry-errors are not taken)")
        return resume_tune(pm, store, found, spec["tune"])
    entries = []
    try:
        for m in sweep_members(store, sweep_id):
            run = store.get_run(m.run_id)
            cfg = prepare_config(pm, dict(run["config"]) if run else m.config, f"sweep {sweep_id} run {m.run_id}", overrides)
            entry = SweepEntry(m.source, cfg, m.run_id, setting=m.setting, sweep_id=sweep_id, in_db=run is not None)
            if run is not None and run.get("status") in ("completed", "stopped"):
                entry.status = run["status"]
            else:
                entry.resume, entry.retry_errors = run is not None, retry_errors
            entries.append(entry)
    except ConfigError as exc:
        store.close()
        fail(str(exc))
    todo = sum(1 for e in entries if e.status == "not started")
    err_console().print(f"sweep [bold cyan]{sweep_id}[/] ({name}): {todo} of {len(entries)} run(s) to finish", highlight=False, soft_wrap=True)
    _run(entries, store, False, None, 1.0, None, None, ([], None))


def _print_best(out, store, sweep_id: str) -> None:
    """The best setting per SLO and context (best_setting), when the sweep has an SLO and a grid."""
    from rich.table import Table

    from infermatrix.core.report.fmt import fmt_int, fmt_tps

    _, rows = store.query("SELECT slo, context_label, objective, setting, value, runner_up_setting, margin, beyond_noise, gpus_note "
                          "FROM best_setting WHERE sweep_id = ? ORDER BY slo, context_tokens, objective", [sweep_id])  # fmt: skip
    if not rows:
        return
    table = Table(title=f"best setting (sweep {sweep_id})", title_justify="left")
    for col in ("SLO", "context", "objective", "best", "value", "runner-up", "margin", "beyond noise"):
        table.add_column(col, overflow="fold")
    notes = set()
    for slo, ctx, objective, setting, value, ru, margin, beyond, note in rows:
        unit = " streams" if objective == "capacity" else " tok/s per server" if note else " tok/s/GPU"
        shown = (fmt_int(value) if objective == "capacity" else fmt_tps(value)) + unit
        table.add_row(slo, ctx, objective, setting, shown, ru or "—", "—" if margin is None else f"{margin * 100:+.1f} %",
                      "—" if beyond is None else ("yes" if beyond else "no (within noise)"))  # fmt: skip
        if note:
            notes.add(note)
    out.print(table)
    for note in sorted(notes):
        out.print(f"note: {note}", highlight=False, soft_wrap=True)


COMMANDS = [sweep]
