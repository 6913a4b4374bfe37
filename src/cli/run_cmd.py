"""``infermatrix run`` and ``infermatrix resume``: a config (or attach flags, or a stored run) ->
a measured matrix in the store -> the report. Reliability contract: docs/reliability.md."""

from __future__ import annotations

import signal
import sys

import click
from rich.console import Console

from infermatrix.cli.common import (
    DEFAULT_DB, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_SEARCH_STOPPED, OneLineErrors, err_console, fail, list_option, number_option,
    open_store, out_console,
)
from infermatrix.cli.attach_flags import ATTACH_FLAGS, attach_config, attach_options
from infermatrix.cli.burst_flags import BURST_FLAGS, apply_burst_flags, burst_options
from infermatrix.cli.mixed_flags import MIXED_FLAGS, apply_mixed_flags, mixed_options
from infermatrix.cli.load_flags import LOAD_FLAGS, apply_load_flags, load_options, points_take_max_output
from infermatrix.cli.results_cmds import print_report
from infermatrix.cli.slo_opts import attach_slos_after_run, parse_slo_flags, slo_options
from infermatrix.cli.trace_flags import apply_trace_flags, trace_options
from infermatrix.core.config import ConfigError
from infermatrix.core.run.prepare import config_slos, prepare_config
from infermatrix.core.contexts import parse_context_list, parse_int_list
from infermatrix.core.plugins import get_plugin_manager

# Flags that only make sense for a new run: with --resume the stored config is the run's definition.
_NEW_RUN_FLAGS = (*ATTACH_FLAGS, "--contexts", "--prefill-contexts", "--concurrency", "--no-loop-detection", "--repeat", *LOAD_FLAGS,
                  *BURST_FLAGS, *MIXED_FLAGS)


@click.command(cls=OneLineErrors)
@click.argument("config_file", required=False, type=click.Path(dir_okay=False))
@click.option("--db", default=None, help=f"results database (default ./{DEFAULT_DB}, or the config's store.db)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="override a config field, e.g. matrix.duration_s=5; engine.<field> reaches the engine kind's own fields too (docs/plugins.md)")
@click.option("--resume", "resume_id", default=None, metavar="RUN_ID", help="run only the missing cells of a stored run, with its stored config")
@click.option("--retry-errors", is_flag=True, help="with --resume: run the cells that ended in error again too")
@attach_options
@click.option("--contexts", default=None, help="decode-matrix contexts, e.g. 1K,2K")
@click.option("--prefill-contexts", default=None, help="prefill contexts, e.g. 1K,8K")
@click.option("--concurrency", default=None, help="concurrency levels, e.g. 1,4,8")
@click.option("--no-loop-detection", is_flag=True, default=False, help="don't check outputs for loops (loops.enabled = false)")
@click.option("--repeat", default=None, metavar="K",
              help="measure each decode cell K times, interleaved across the matrix (matrix.repeat; docs/metrics.md, Repeats)")
@load_options
@slo_options
@trace_options
@burst_options
@mixed_options
@click.option("--no-live", "--quiet", "no_live", is_flag=True,
              help="no live matrix on the terminal: one line per finished cell only (as off a terminal)")
def run(config_file, db, overrides, resume_id, retry_errors, engine_kind, base_url, model, contexts, prefill_contexts,
        concurrency, duration, max_output, api, api_key_env, api_key_file, no_loop_detection, repeat, rate, arrival, load_duration,
        max_in_flight, slo_texts, gpu_hour_price, trace_path=None, time_scale=None, trace_requests=None,
        burst=None, burst_context=None, no_live=False, mixed=None) -> None:
    """Run a benchmark matrix from CONFIG_FILE (TOML), or against --base-url."""
    pm = get_plugin_manager()
    try:
        slos = parse_slo_flags(slo_texts, gpu_hour_price)
        if resume_id:
            given = [flag for flag, value in zip(_NEW_RUN_FLAGS, (
                engine_kind, base_url, model, duration, max_output, api, api_key_env, api_key_file, contexts, prefill_contexts,
                concurrency, no_loop_detection or None, repeat, rate, arrival, load_duration, max_in_flight, burst, burst_context, mixed))
                if value is not None]  # fmt: skip
            if given:
                raise ConfigError(f"{given[0]}: not with --resume (the run's stored config is used; change a field with --set KEY=VALUE)")
            if config_file:
                Console(stderr=True).print(f"note: --resume {resume_id} uses the run's stored config; {config_file} is not read", highlight=False)
            if trace_path or time_scale or trace_requests:
                raise ConfigError("--trace: not with --resume (the run's stored config is used)")
            _resume(pm, resume_id, db, overrides, retry_errors, slos, not no_live)
            return
        data, source = attach_config(config_file, engine_kind=engine_kind, base_url=base_url, model=model, duration=duration,
                                     max_output=max_output, api=api, api_key_env=api_key_env, api_key_file=api_key_file)  # fmt: skip
        matrix = data["matrix"]
        for key, value in (
            ("contexts", list_option(parse_context_list, contexts, "--contexts")),
            ("prefill_contexts", list_option(parse_context_list, prefill_contexts, "--prefill-contexts")),
            ("concurrency", list_option(parse_int_list, concurrency, "--concurrency")),
            ("repeat", number_option(int, repeat, "--repeat")),
        ):
            if value is not None:
                matrix[key] = value
        if contexts is not None and prefill_contexts is None and not config_file:
            matrix.setdefault("prefill_contexts", [])
        if no_loop_detection:
            loops = data.setdefault("loops", {})
            if isinstance(loops, dict):
                loops["enabled"] = False
        apply_load_flags(data, rate, arrival, load_duration, max_in_flight)
        rate_points = list(data["load"]) if rate is not None else []
        apply_trace_flags(data, trace_path, time_scale, trace_requests)
        trace_points = list(data["load"]) if trace_path is not None else []
        flagged = [*rate_points, *trace_points, *apply_burst_flags(data, burst, burst_context), *apply_mixed_flags(mixed)]
        if flagged:  # any of --rate, --trace, --burst, --mixed: the rate points, the replay, the bursts, the interference points
            data["load"] = flagged
        points_take_max_output(data, matrix.get("max_output") if max_output is not None else None)
        cfg = prepare_config(pm, data, source, list(overrides))  # what infermatrix.api.run calls too
    except ConfigError as exc:
        fail(str(exc))
    # Opening the store checks its directory (missing, read-only) and its lock, before anything is launched.
    store = open_store(db or cfg.store.db or DEFAULT_DB)
    _execute(pm, cfg, store, None, False, slos, not no_live)


@click.command(cls=OneLineErrors)
@click.argument("run_id")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="the database that holds the run")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="override a stored config field, e.g. engine.ready_timeout_s=900")
@click.option("--retry-errors", is_flag=True, help="run the cells that ended in error again too")
@click.option("--no-live", "--quiet", "no_live", is_flag=True, help="no live matrix on the terminal: one line per finished cell only")
def resume(run_id, db, overrides, retry_errors, no_live) -> None:
    """Run the missing cells of a stored run (interrupted, failed, or cut short), with its stored config; or, given a
    sweep id, the sweep's runs that are missing, failed or interrupted (the completed ones are kept)."""
    _resume(get_plugin_manager(), run_id, db, overrides, retry_errors, live=not no_live)


def _resume(pm, resume_id: str, db: str | None, overrides, retry_errors: bool, slos=([], None), live: bool = True) -> None:
    from infermatrix.core.store import StoreError

    from pathlib import Path

    path = db or DEFAULT_DB
    if not Path(path).expanduser().exists():  # resuming never creates a database
        fail(f"no database at {path} (give the --db the run was written to)")
    store = open_store(path)
    try:
        from infermatrix.core.store.sweep_store import resolve_sweep

        found = resolve_sweep(store, resume_id)
    except StoreError as exc:
        store.close()
        fail(str(exc))
    if found is not None:  # a sweep: what of it is missing or failed (docs/tuning.md)
        from infermatrix.cli.sweep_cmd import resume_sweep

        return resume_sweep(pm, store, found, list(overrides), retry_errors)
    try:
        run_id = store.resolve_run(resume_id)
        run = store.get_run(run_id) or {}
        if not isinstance(run.get("config"), dict) or "engine" not in run["config"]:
            raise ConfigError(f"run {run_id} has no stored config to resume from (status {run.get('status')})")
        if run.get("status") == "imported":
            raise ConfigError(f"run {run_id} was imported, not measured here: there is nothing to resume")
        cfg = prepare_config(pm, run["config"], f"run {run_id}", list(overrides))
    except (ConfigError, StoreError) as exc:
        store.close()
        fail(str(exc))
    _execute(pm, cfg, store, run_id, retry_errors, slos, live)


def _internal_error(exc: Exception, cfg) -> str:
    import tempfile
    import traceback

    from infermatrix.core.redact import redact_text

    try:
        key = cfg.engine.api_key()
    except ConfigError:
        key = None
    secrets = [key] if key else []
    with tempfile.NamedTemporaryFile("w", prefix="infermatrix-error-", suffix=".txt", delete=False) as fh:
        fh.write(redact_text("".join(traceback.format_exception(exc)), secrets))
    return redact_text(f"run stopped by an internal error ({type(exc).__name__}: {exc}); finished cells are kept; details: {fh.name}", secrets)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _save_slos(store, rid: str, cfg, slos, err: Console) -> None:
    """The run's SLOs ([slo] and --slo) and --gpu-hour-price, stored with it for the report's views."""
    specs, price = slos
    attach_slos_after_run(store, [rid], config_slos(cfg, specs), price, err)


def _execute(pm, cfg, store, run_id: str | None, retry_errors: bool, slos=([], None), live: bool = True) -> None:
    import anyio

    from infermatrix.core.run.runner import execute_run
    from infermatrix.core.store import StoreError

    # Outside the run's own handling (before it starts, while the report prints), SIGTERM is a Ctrl-C.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    err = err_console()
    try:
        outcome = anyio.run(lambda: execute_run(pm, cfg, store, err, run_id=run_id, retry_errors=retry_errors, live=live))
    except ConfigError as exc:  # found before the run existed (an unreachable URL ...): a database made for it goes again
        store.close_unused()
        fail(str(exc))
    except StoreError as exc:
        store.close_unused()
        fail(f"run stopped: {exc}", EXIT_FAILED)
    except Exception as exc:  # a bug, not the engine's or the user's doing: one line (the run is marked failed), details in a file
        store.close_unused()
        fail(_internal_error(exc, cfg), EXIT_FAILED)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # asyncio put the default back when the run ended
    rid = outcome.run_id
    if rid is not None:
        _save_slos(store, rid, cfg, slos, err)
    hint = f"infermatrix resume {rid}" + (f" --db {store.path}" if store.path != DEFAULT_DB else "")
    if rid is None:  # interrupted before the run existed
        store.close_unused()
        err.print("interrupted before anything started", highlight=False)
        sys.exit(EXIT_INTERRUPTED)
    if outcome.hard_stop:
        store.close()
        err.print(f"interrupted: stopped at once; finished cells are kept. Resume with: {hint}", highlight=False)
        sys.exit(EXIT_INTERRUPTED)
    if outcome.status == "failed":
        store.close()
        from rich.markup import escape

        first, _, rest = (outcome.error or "unknown error").partition("\n")
        err.print(f"[bold red]error:[/] run {rid} failed: {escape(first)}", highlight=False, soft_wrap=True)
        if rest.strip():
            err.print(escape("\n".join("    " + ln for ln in rest.splitlines())), highlight=False, soft_wrap=True)
        err.print(f"finished cells are kept; resume with: {hint}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_FAILED)
    out = out_console()
    if outcome.nothing_to_do:
        err.print(f"run {rid}: every cell is already stored; nothing to run", highlight=False)
    print_report(store, rid, "text", None, out)
    out.print(f"run id: [bold cyan]{rid}[/]  ·  database: {store.path}")
    store.close()
    if outcome.status == "interrupted":
        err.print(f"interrupted: finished cells are kept; resume with: {hint}", highlight=False)
        sys.exit(EXIT_INTERRUPTED)
    if outcome.status == "stopped":  # the reason is the last line, the exit code 3 (docs/load.md, "Search")
        err.print(f"{outcome.error} (run {rid})", highlight=False, soft_wrap=True)
        sys.exit(EXIT_SEARCH_STOPPED)


COMMANDS = [run, resume]
