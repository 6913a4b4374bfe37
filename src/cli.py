"""The ``infermatrix`` command line (DESIGN §5). User mistakes are one line on stderr and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infermatrix import __version__
from infermatrix.core.config import ConfigError, apply_overrides, load_config, validate_config
from infermatrix.core.contexts import parse_context_list, parse_int_list
from infermatrix.core.plugins import get_plugin_manager, plugin_summary

__all__ = ["main", "cli"]

DEFAULT_DB = "infermatrix.duckdb"
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)


def _open_store(db: str, read_only: bool = False):
    from infermatrix.core.store import Store, StoreError

    try:
        return Store(db, read_only=read_only)
    except StoreError as exc:
        _fail(str(exc))


def _list_option(parse, text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="infermatrix")
def cli() -> None:
    """Benchmark LLM inference engines and compare them side by side."""


@cli.command()
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
                ("contexts", _list_option(parse_context_list, contexts, "--contexts")),
                ("prefill_contexts", _list_option(parse_context_list, prefill_contexts, "--prefill-contexts")),
                ("concurrency", _list_option(parse_int_list, concurrency, "--concurrency")),
                ("duration_s", duration), ("max_output", max_output), ("api", api),
            ):
                if value is not None:
                    matrix[key] = value
            if contexts is not None and prefill_contexts is None and not config_file:
                matrix.setdefault("prefill_contexts", [])
        store_path = db
        store = None
        if resume_id:
            store = _open_store(db or DEFAULT_DB)
            run_id = store.resolve_run(resume_id)
            stored = store.get_run(run_id)["config"]
            data = apply_overrides(stored, list(overrides))
        else:
            data = apply_overrides(data, list(overrides))
            run_id = None
        cfg = validate_config(pm, data, source)
        cfg.engine.api_key()  # a missing key is a user mistake: say so before anything starts
    except ConfigError as exc:
        _fail(str(exc))
    if store is None:
        store = _open_store(store_path or cfg.store.db or DEFAULT_DB)
    _execute(pm, cfg, store, run_id)


def _execute(pm, cfg, store, run_id: str | None) -> None:
    import anyio

    from infermatrix.core.runner import execute_run

    progress_console = Console(stderr=True)
    try:
        outcome = anyio.run(lambda: execute_run(pm, cfg, store, progress_console, run_id=run_id))
    except ConfigError as exc:
        store.close()
        _fail(str(exc))
    out = Console()
    if outcome.status == "failed":
        store.close()
        _fail(f"run {outcome.run_id} failed: {outcome.error}", EXIT_FAILED)
    _print_report(store, outcome.run_id, "text", None, out)
    out.print(f"run id: [bold cyan]{outcome.run_id}[/]  ·  database: {store.path}")
    store.close()
    if outcome.status == "interrupted":
        Console(stderr=True).print(f"interrupted: finished cells are kept; resume with infermatrix run --resume {outcome.run_id}")
        sys.exit(EXIT_INTERRUPTED)


def _print_report(store, run_id: str, fmt: str, output: str | None, console: Console) -> None:
    from infermatrix.core import report

    if fmt == "text":
        target = Console(file=open(output, "w"), width=200) if output else console
        report.render_text(store, run_id, target)
        return
    if fmt == "markdown":
        text = report.render_markdown(store, run_id)
    elif fmt == "json":
        import orjson

        text = orjson.dumps(report.render_json(store, run_id), option=orjson.OPT_INDENT_2).decode()
    elif fmt == "html":
        text = report.render_html(store, run_id)
    else:
        raise ConfigError(f"--format: unknown format {fmt!r}")
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text)


@cli.command("report")
@click.argument("run_id", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "json"]), default="text", show_default=True)
@click.option("-o", "--output", default=None, help="write to this file instead of the terminal")
def report_cmd(run_id, db, fmt, output) -> None:
    """Show a stored run (the latest when RUN_ID is omitted)."""
    from infermatrix.core.store import StoreError

    store = _open_store(db, read_only=True)
    try:
        rid = store.resolve_run(run_id)
        _print_report(store, rid, fmt, output, Console())
    except (StoreError, ConfigError) as exc:
        _fail(str(exc))
    finally:
        store.close()


@cli.command()
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html"]), default="text", show_default=True)
@click.option("-o", "--output", default=None, help="write to this file instead of the terminal")
def compare(run_ids, db, fmt, output) -> None:
    """Compare runs side by side over their common cells (ratio = later run / first run)."""
    from infermatrix.core import report
    from infermatrix.core.store import StoreError

    if len(run_ids) < 2:
        _fail("compare needs at least two run ids")
    store = _open_store(db, read_only=True)
    try:
        ids = [store.resolve_run(r) for r in run_ids]
        if fmt == "markdown":
            text = report.render_compare_markdown(store, ids)
        else:
            console = Console(record=fmt == "html", file=open(output, "w") if output and fmt == "text" else None, width=200 if output else None)
            report.render_compare_text(store, ids, console)
            if fmt != "html":
                return
            text = console.export_html(inline_styles=True)
        if output:
            Path(output).write_text(text)
        else:
            click.echo(text)
    except StoreError as exc:
        _fail(str(exc))
    finally:
        store.close()


@cli.command()
@click.argument("query")
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(query, db, fmt) -> None:
    """Run a SQL query against the results database (views: prefill_list, decode_matrix, engine_comparison …)."""
    from infermatrix.core.store import StoreError

    store = _open_store(db, read_only=True)
    try:
        columns, rows = store.query(query)
    except StoreError as exc:
        _fail(f"SQL: {str(exc).splitlines()[0]}")
    finally:
        store.close()
    if fmt == "json":
        import orjson

        click.echo(orjson.dumps([dict(zip(columns, r)) for r in rows], default=str, option=orjson.OPT_INDENT_2).decode())
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        from rich.table import Table

        t = Table(*columns, show_lines=False)
        for r in rows:
            t.add_row(*("" if v is None else str(v) for v in r))
        Console().print(t)


@cli.command()
def plugins() -> None:
    """List loaded plugins and the hooks each implements."""
    from rich.table import Table

    pm = get_plugin_manager()
    t = Table("plugin", "module", "hooks")
    for row in plugin_summary(pm):
        t.add_row(str(row["name"]), str(row["module"]), ", ".join(row["hooks"]))
    Console().print(t)


@cli.group()
def sim() -> None:
    """The built-in simulated engine."""


@sim.command("serve")
@click.option("--profile", default="demo", show_default=True, help="a built-in profile name or a TOML/JSON file")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
def sim_serve(profile, host, port) -> None:
    """Serve the OpenAI API from the simulated engine."""
    from infermatrix.plugins.sim.profile import load_profile
    from infermatrix.plugins.sim.server import serve

    try:
        prof = load_profile(profile)
    except ConfigError as exc:
        _fail(str(exc))
    serve(prof, host=host, port=port)


def main() -> None:
    pm = get_plugin_manager()
    pm.hook.register_commands(cli=cli)
    try:
        cli.main(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
