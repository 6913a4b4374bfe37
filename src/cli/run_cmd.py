"""``infermatrix run``: a config file or attach flags -> a measured matrix in the store -> the report."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from infermatrix.cli.results_cmds import print_report
from infermatrix.cli.common import DEFAULT_DB, EXIT_FAILED, EXIT_INTERRUPTED, fail, list_option, open_store
from infermatrix.core.config import ConfigError, apply_overrides, load_config, validate_config
from infermatrix.core.contexts import parse_context_list, parse_int_list
from infermatrix.core.plugins import get_plugin_manager

@click.command()
@click.argument("config_file", required=False, type=click.Path(dir_okay=False))
@click.option("--db", default=None, help=f"results database (default ./{DEFAULT_DB}, or the config's store.db)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="override a config field, e.g. matrix.duration_s=5")
@click.option("--resume", "resume_id", default=None, metavar="RUN_ID", help="run only the missing cells of a stored run")
@click.option("--engine", "engine_kind", default=None, help="engine kind when attaching without a config (e.g. openai)")
@click.option("--base-url", default=None, help="attach to a running OpenAI-compatible server")
@click.option("--model", default=None, help="served model name")
@click.option("--contexts", default=None, help="decode-matrix contexts, e.g. 1K,2K")
@click.option("--prefill-contexts", default=None, help="prefill contexts, e.g. 1K,8K")
@click.option("--concurrency", default=None, help="concurrency levels, e.g. 1,4,8")
@click.option("--duration", type=float, default=None, help="seconds per decode cell")
@click.option("--max-output", type=int, default=None, help="max output tokens per request")
@click.option("--api", type=click.Choice(["chat", "completions"]), default=None)
@click.option("--api-key-env", default=None, metavar="VAR", help="environment variable holding the API key")
def run(config_file, db, overrides, resume_id, engine_kind, base_url, model, contexts, prefill_contexts,
        concurrency, duration, max_output, api, api_key_env) -> None:
    """Run a benchmark matrix from CONFIG_FILE (TOML), or against --base-url."""
    pm = get_plugin_manager()
    try:
        if config_file:
            data = load_config(config_file)
            source = config_file
        elif resume_id:
            data, source = {}, f"run {resume_id}"
        elif base_url or engine_kind:
            data, source = {"engine": {"kind": engine_kind or "openai"}}, "command line"
        else:
            raise ConfigError("give a CONFIG_FILE, or --base-url URL --model NAME to attach to a running server")
        engine = data.setdefault("engine", {}) if not resume_id or config_file else None
        if engine is not None:
            for key, value in (("kind", engine_kind), ("base_url", base_url), ("model", model), ("api_key_env", api_key_env)):
                if value is not None:
                    engine[key] = value
            matrix = data.setdefault("matrix", {})
            for key, value in (
                ("contexts", list_option(parse_context_list, contexts, "--contexts")),
                ("prefill_contexts", list_option(parse_context_list, prefill_contexts, "--prefill-contexts")),
                ("concurrency", list_option(parse_int_list, concurrency, "--concurrency")),
                ("duration_s", duration), ("max_output", max_output), ("api", api),
            ):
                if value is not None:
                    matrix[key] = value
            if contexts is not None and prefill_contexts is None and not config_file:
                matrix.setdefault("prefill_contexts", [])
        store_path = db
        store = None
        if resume_id:
            store = open_store(db or DEFAULT_DB)
            run_id = store.resolve_run(resume_id)
            stored = store.get_run(run_id)["config"]
            data = apply_overrides(stored, list(overrides))
        else:
            data = apply_overrides(data, list(overrides))
            run_id = None
        cfg = validate_config(pm, data, source)
        cfg.engine.api_key()  # a missing key is a user mistake: say so before anything starts
    except ConfigError as exc:
        fail(str(exc))
    if store is None:
        store = open_store(store_path or cfg.store.db or DEFAULT_DB)
    _execute(pm, cfg, store, run_id)


def _execute(pm, cfg, store, run_id: str | None) -> None:
    import anyio

    from infermatrix.core.runner import execute_run

    progress_console = Console(stderr=True)
    try:
        outcome = anyio.run(lambda: execute_run(pm, cfg, store, progress_console, run_id=run_id))
    except ConfigError as exc:
        store.close()
        fail(str(exc))
    out = Console()
    if outcome.status == "failed":
        store.close()
        fail(f"run {outcome.run_id} failed: {outcome.error}", EXIT_FAILED)
    print_report(store, outcome.run_id, "text", None, out)
    out.print(f"run id: [bold cyan]{outcome.run_id}[/]  ·  database: {store.path}")
    store.close()
    if outcome.status == "interrupted":
        Console(stderr=True).print(f"interrupted: finished cells are kept; resume with infermatrix run --resume {outcome.run_id}")
        sys.exit(EXIT_INTERRUPTED)


COMMANDS = [run]
