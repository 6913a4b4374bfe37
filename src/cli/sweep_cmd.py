"""``infermatrix sweep CONFIG...``: several runs into one database, one after another here or spread over a
Ray cluster's GPU nodes (docs/distributed.md, "Sweeps")."""

from __future__ import annotations

import sys

import click

from infermatrix.cli.common import DEFAULT_DB, EXIT_INTERRUPTED, OneLineErrors, err_console, fail, number_option, open_store, out_console
from infermatrix.cli.slo_opts import attach_slos_after_run, parse_slo_flags, slo_options


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
@slo_options
def sweep(config_files, db, overrides, use_ray, ray_address, gpus_per_run, gpu_resource, node_dir, slo_texts, gpu_hour_price) -> None:
    """Run several CONFIG files into one database: one after another, or with --ray one Ray task per config
    on the cluster's GPU nodes, each run merged into the database as it finishes. A summary table ends it;
    exit 1 if a run failed or was lost (resume it with `infermatrix resume RUN_ID`), 130 if interrupted, 3 if every run
    ended but a run's SLO search stopped without an answer.
    --slo and --gpu-hour-price are stored with every run that reached the database, as `run` stores them."""
    from infermatrix.core.config import ConfigError
    from infermatrix.core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    try:
        ray_flags = [f for f, v in (("--ray-address", ray_address), ("--gpus-per-run", gpus_per_run), ("--gpu-resource", gpu_resource),
                                    ("--node-dir", node_dir)) if v is not None]  # fmt: skip
        if ray_flags and not use_ray:
            raise ConfigError(f"{ray_flags[0]}: only with --ray")
        slos = parse_slo_flags(slo_texts, gpu_hour_price)
        configs = _load_configs(pm, config_files, overrides)
        gpus = number_option(float, gpus_per_run, "--gpus-per-run") or 1.0
    except ConfigError as exc:
        fail(str(exc))
    store = open_store(db or configs[0][1].store.db or DEFAULT_DB)
    _run(pm, configs, store, use_ray, ray_address, gpus, gpu_resource, node_dir, slos)


def _load_configs(pm, config_files, overrides) -> list:
    """Every config read, overridden and checked before anything starts: a bad one is one line, exit 2."""
    from infermatrix.core.config import ConfigError, apply_overrides, load_config
    from infermatrix.core.run.prepare import preflight
    from infermatrix.core.registry import validate_config

    if len(set(config_files)) != len(config_files):
        dup = next(c for c in config_files if config_files.count(c) > 1)
        raise ConfigError(f"{dup}: given twice (each config is one run of the sweep)")
    configs = []
    for path in config_files:
        data = apply_overrides(load_config(path), list(overrides))
        cfg = validate_config(pm, data, path)
        try:
            preflight(cfg)
        except ConfigError as exc:  # named by its file, as validate_config's errors are
            raise ConfigError(f"{path}: {exc}") from None
        configs.append((path, cfg))
    return configs


def _run(pm, configs, store, use_ray: bool, address, gpus: float, resource, node_dir, slos) -> None:
    import signal

    from infermatrix.core.run.sweep import name_runs, run_local_sweep, summary_table, sweep_exit_code

    err = err_console()
    entries = name_runs(store, configs)
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
    out.print(f"database: {store.path}", highlight=False)
    store.close()
    if code:
        sys.exit(EXIT_INTERRUPTED if code == 130 else code)


COMMANDS = [sweep]
