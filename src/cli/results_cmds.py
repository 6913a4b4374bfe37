"""Reading results: ``report``, ``compare``, ``sql``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from infermatrix.cli.common import DEFAULT_DB, fail, open_store, out_console
from infermatrix.cli.slo_opts import attach_slos, parse_report_flags, price_report, slo_options, store_price_option
from infermatrix.core.config import ConfigError

def _write(text: str, output: str | None) -> None:
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"-o {output}: {exc.strerror or exc}") from None
    else:
        click.echo(text)


def _text_to(output: str | None, draw) -> None:
    """Draw a rich report on the terminal, or into a file (plain text, every value whole)."""
    if not output:
        draw(out_console())
        return
    try:
        with open(output, "w", encoding="utf-8") as fh:
            draw(out_console(fh))
    except OSError as exc:
        raise ConfigError(f"-o {output}: {exc.strerror or exc}") from None


def print_report(store, run_id: str, fmt: str, output: str | None, console: Console | None = None) -> None:
    from infermatrix.core import report

    if fmt == "text":
        if console is not None and not output:
            report.render_text(store, run_id, console)
        else:
            _text_to(output, lambda c: report.render_text(store, run_id, c))
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
    _write(text, output)


def _open_for_slos(db: str, write: bool):
    """The store, read-only unless an SLO or a price is to be stored; never a new database."""
    if write and not Path(db).expanduser().exists():
        fail(f"no database at {db} (nothing has been run with this --db yet)")
    return open_store(db, read_only=not write)


def print_sweep_report(store, sweep_id: str, fmt: str, output: str | None) -> None:
    """``report --sweep``: the sweep's report (docs/tuning.md, "The report") in ``fmt``."""
    from infermatrix.core.report import sweep_report

    if fmt == "text":
        _text_to(output, lambda c: sweep_report.render_sweep_text(store, sweep_id, c))
        return
    if fmt == "json":
        import orjson

        text = orjson.dumps(sweep_report.render_sweep_json(store, sweep_id), option=orjson.OPT_INDENT_2).decode()
    else:
        text = sweep_report.render_sweep_markdown(store, sweep_id) if fmt == "markdown" else sweep_report.render_sweep_html(store, sweep_id)
    _write(text, output)


def _sweep_runs(store, sweep_id: str) -> list[str]:
    """The sweep's runs that reached the database (an SLO or a price is stored with each)."""
    _, rows = store.query("SELECT m.run_id FROM sweep_members m JOIN runs r ON r.run_id = m.run_id WHERE m.sweep_id = ? "
                          "ORDER BY m.k", [sweep_id])  # fmt: skip
    return [r[0] for r in rows]


@click.command("report")
@click.argument("run_id", required=False)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--sweep", "sweep_arg", default=None, metavar="SWEEP_ID",
              help="report a settings sweep instead of a run: its settings, best setting per SLO and context, why the others "
              "lost, the frontier across settings (an id, a prefix, or 'latest'; docs/tuning.md)")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "json"]), default="text", show_default=True)
@click.option("-o", "--output", default=None, help="write to this file instead of the terminal")
@slo_options
@store_price_option
def report_cmd(run_id, db, sweep_arg, fmt, output, slo_texts, gpu_hour_price, store_price) -> None:
    """Show a stored run (the latest when RUN_ID is omitted), or with --sweep a settings sweep. --format html
    writes one self-contained page with charts (opens offline). --slo judges it again under other limits (for a
    sweep: every run of it, and the best setting is chosen again); --gpu-hour-price prices this report only (with
    --store-price: stored with the run)."""
    from infermatrix.core.report.sweep_data import resolve_sweep_arg
    from infermatrix.core.store import StoreError

    if sweep_arg is not None and run_id is not None:
        fail(f"give a run id or --sweep SWEEP_ID, not both (infermatrix report {run_id}, or infermatrix report --sweep {sweep_arg})")
    if sweep_arg is not None and not sweep_arg.strip():
        fail("--sweep: give a sweep id, a prefix of one, or 'latest'")
    try:
        specs, price = parse_report_flags(slo_texts, gpu_hour_price, store_price)
    except ConfigError as exc:
        fail(str(exc))
    # An SLO (or a price the user asks to store) is stored with the run, so the views show it later too: a write.
    store = _open_for_slos(db, bool(specs) or store_price)
    try:
        if sweep_arg is not None:
            sweep_id = resolve_sweep_arg(store, sweep_arg.strip())
            ids = _sweep_runs(store, sweep_id)
            attach_slos(store, ids, specs, None)
            price_report(store, ids, price, store_price)
            print_sweep_report(store, sweep_id, fmt, output)
            return
        rid = store.resolve_run(run_id)
        attach_slos(store, [rid], specs, None)
        price_report(store, [rid], price, store_price)
        print_report(store, rid, fmt, output)
    except (StoreError, ConfigError) as exc:
        fail(str(exc))
    finally:
        store.close()


@click.command()
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "json"]), default="text", show_default=True)
@click.option("-o", "--output", default=None, help="write to this file instead of the terminal")
@slo_options
@store_price_option
@click.option("--fail-if-slower", "fail_pct", type=float, default=None, metavar="PCT",
              help="exit 1 when a run is slower than the baseline by more than PCT % with confidence in any cell (docs/ci.md)")
@click.option("--metric", "gate_metrics", multiple=True, metavar="NAME",
              help="what --fail-if-slower judges: total_tps (default), per_request_tps, ttft_ms, tbt_ms, ttft_p99, tbt_p99")
def compare(run_ids, db, fmt, output, slo_texts, gpu_hour_price, store_price, fail_pct, gate_metrics) -> None:
    """Compare runs side by side over their common cells: the first run is the baseline A, each
    other run is shown against it (ratio = other / A), with the cells only one side could run."""
    from infermatrix.core import report
    from infermatrix.core.report.compare_data import GATE_METRICS
    from infermatrix.core.store import StoreError

    if len(run_ids) < 2:
        fail("compare needs at least two run ids")
    if fail_pct is not None and not 0 <= fail_pct < 100:
        fail(f"--fail-if-slower takes a percentage from 0 to 100, not {fail_pct:g}")
    unknown = [m for m in gate_metrics if m not in GATE_METRICS]
    if unknown:
        fail(f"unknown --metric {unknown[0]!r} (one of {', '.join(GATE_METRICS)})")
    if gate_metrics and fail_pct is None:
        fail("--metric chooses what --fail-if-slower judges: give --fail-if-slower PCT too")
    try:
        specs, price = parse_report_flags(slo_texts, gpu_hour_price, store_price)
    except ConfigError as exc:
        fail(str(exc))
    store = _open_for_slos(db, bool(specs) or store_price)
    try:
        ids = [store.resolve_run(r) for r in run_ids]
        attach_slos(store, ids, specs, None)
        price_report(store, ids, price, store_price)
        if fmt == "text":
            _text_to(output, lambda c: report.render_compare_text(store, ids, c))
        elif fmt == "markdown":
            text = report.render_compare_markdown(store, ids)
        elif fmt == "json":
            import orjson

            text = orjson.dumps(report.render_compare_json(store, ids), option=orjson.OPT_INDENT_2).decode()
        else:
            text = report.render_compare_html(store, ids)
        if fmt != "text":
            _write(text, output)
        failed = fail_pct is not None and _gate(store, ids, fail_pct, list(gate_metrics) or ["total_tps"])
    except (StoreError, ConfigError) as exc:
        fail(str(exc))
    finally:
        store.close()
    if failed:
        raise SystemExit(1)


def _gate(store, ids: list[str], pct: float, metrics: list[str]) -> bool:
    """The regression gate, on stderr (stdout may carry a JSON report): True when a run failed it."""
    from infermatrix.core.report.compare_data import gate, load_comparison

    cmp = load_comparison(store, ids)
    hits = gate(cmp, pct, metrics)
    say = sys.stderr
    for h in hits:
        v = h.judged
        band = "no interval (fixed rule)" if v.lo is None or v.hi is None else f"95 % interval {v.lo:.3f}–{v.hi:.3f}"
        word = "FAIL" if h.confident else "within noise"
        say.write(f"{word}: {cmp.letters[h.run_b]} {h.context_label} × {h.concurrency} {h.metric}: ratio {v.ratio:.3f} ({band})\n")
    bad = [h for h in hits if h.confident]
    what = ", ".join(metrics)
    if bad:
        say.write(f"regression gate failed: {len(bad)} cell(s) slower than the baseline by more than {pct:g} % with confidence ({what})\n")
    else:
        noisy = f"; {len(hits)} cell(s) slower by more than {pct:g} % but within noise" if hits else ""
        say.write(f"regression gate passed: no cell slower than the baseline by more than {pct:g} % with confidence ({what}){noisy}\n")
    return bool(bad)


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

        w = csv.writer(sys.stdout, lineterminator="\n")  # not the module's \r\n: a shell reading a value would keep the \r
        w.writerow(columns)
        w.writerows(rows)
    else:
        from rich.table import Table

        t = Table(*columns, show_lines=False)
        for r in rows:
            t.add_row(*map(_sql_cell, r))
        out_console().print(t)


def _sql_cell(v: object) -> str:
    """A value as the ``sql`` table shows it: a float to 4 decimals (1739.5818, not 1739.581818181818; tiny ones
    to 3 significant digits), anything else as is. ``--format csv|json`` keep every digit."""
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        if v == 0 or abs(v) >= 0.01:
            return f"{v:.4f}".rstrip("0").rstrip(".")
        return f"{v:.3g}"
    return str(v)


COMMANDS = [report_cmd, compare, sql]
