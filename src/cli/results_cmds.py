"""Reading results: ``report``, ``compare``, ``sql``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from infermatrix.cli.common import DEFAULT_DB, fail, open_store
from infermatrix.core.config import ConfigError

def print_report(store, run_id: str, fmt: str, output: str | None, console: Console) -> None:
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


@click.command("report")
@click.argument("run_id", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "json"]), default="text", show_default=True)
@click.option("-o", "--output", default=None, help="write to this file instead of the terminal")
def report_cmd(run_id, db, fmt, output) -> None:
    """Show a stored run (the latest when RUN_ID is omitted)."""
    from infermatrix.core.store import StoreError

    store = open_store(db, read_only=True)
    try:
        rid = store.resolve_run(run_id)
        print_report(store, rid, fmt, output, Console())
    except (StoreError, ConfigError) as exc:
        fail(str(exc))
    finally:
        store.close()


@click.command()
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html"]), default="text", show_default=True)
@click.option("-o", "--output", default=None, help="write to this file instead of the terminal")
def compare(run_ids, db, fmt, output) -> None:
    """Compare runs side by side over their common cells (ratio = later run / first run)."""
    from infermatrix.core import report
    from infermatrix.core.store import StoreError

    if len(run_ids) < 2:
        fail("compare needs at least two run ids")
    store = open_store(db, read_only=True)
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
        fail(str(exc))
    finally:
        store.close()


@click.command()
@click.argument("query")
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(query, db, fmt) -> None:
    """Run a SQL query against the results database (views: prefill_list, decode_matrix, engine_comparison …)."""
    from infermatrix.core.store import StoreError

    store = open_store(db, read_only=True)
    try:
        columns, rows = store.query(query)
    except StoreError as exc:
        fail(f"SQL: {str(exc).splitlines()[0]}")
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


COMMANDS = [report_cmd, compare, sql]
