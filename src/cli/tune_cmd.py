"""``infermatrix tune CONFIG --over KEY=LO..HI --slo SPEC``: search numeric settings for the best one under an SLO,
short probes first and longer ones only for the survivors, every probe a stored run of a sweep (docs/tuning.md,
"The tuner")."""

from __future__ import annotations

import sys

import click

from infermatrix.cli.common import DEFAULT_DB, EXIT_FAILED, EXIT_INTERRUPTED, OneLineErrors, err_console, fail, open_store, out_console
from infermatrix.core.run.tune import DEFAULT_BUDGET, DEFAULT_RESOLUTION


@click.command(cls=OneLineErrors)
@click.argument("config_file", type=click.Path(dir_okay=False))
@click.option("--over", "over", multiple=True, metavar="KEY=LO..HI",
              help="a numeric setting to search over, e.g. engine.args.max_num_seqs=8..512 (any key --set takes; repeatable)")
@click.option("--slo", "slo", required=True, metavar="SPEC", help="the SLO a setting is judged under, e.g. ttft_p99_ms=200 (docs/slo.md)")
@click.option("--objective", type=click.Choice(["goodput", "capacity"]), default="goodput", show_default=True,
              help="goodput: most SLO goodput per GPU at a load meeting the SLO; capacity: the largest load meeting it")
@click.option("--budget-runs", "budget", type=int, default=DEFAULT_BUDGET, show_default=True, help="at most this many runs (engine launches)")
@click.option("--resolution", default=DEFAULT_RESOLUTION, show_default=True,
              help="stop refining when the best setting's probed neighbours are within this ratio of it")
@click.option("--context", default=None, metavar="LABEL", help="the decode context a setting is judged at (default: the matrix's longest)")
@click.option("--db", default=None, help=f"the database every probe lands in (default ./{DEFAULT_DB}, or the config's store.db)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="override a field of the config, e.g. matrix.concurrency=[1,2,4]")
@click.option("--name", default=None, help="the tune's name as a sweep (default: tune and its keys)")
def tune(config_file, over, slo, objective, budget, resolution, context, db, overrides, name) -> None:
    """Find the best value of numeric settings (--over) under an SLO: a log-spaced grid probed with short windows,
    successive halving to longer windows for the better half, then refinement between the best and its neighbours
    until the resolution or the budget. Every probe is a run (an engine launch) of a sweep: sweep_runs,
    sweep_frontier and best_setting read it, `infermatrix resume SWEEP_ID` continues it. Exit 1 when no probe gave
    an answer, 130 when interrupted."""
    from infermatrix.core.config import ConfigError
    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.run.tune import TuneRequest, plan_tune

    pm = get_plugin_manager()
    try:
        req = TuneRequest(config_file, list(over), slo, objective, budget, resolution, context, list(overrides))
        plan = plan_tune(pm, req)
    except ConfigError as exc:
        fail(str(exc))
    store = open_store(db or plan.base.get("store", {}).get("db") or DEFAULT_DB)
    sweep_id = _record(store, plan, name)
    _go(pm, store, plan, sweep_id)


def _record(store, plan, name: str | None) -> str:
    from infermatrix.core.store import StoreError
    from infermatrix.core.store.sweep_store import new_sweep_id, save_sweep

    sweep_id = new_sweep_id()
    name = name or "tune " + " × ".join(a.key for a in plan.tuner.axes)
    try:
        save_sweep(store, sweep_id, name, plan.spec, [])
    except StoreError as exc:
        store.close()
        fail(str(exc), EXIT_FAILED)
    grid = ", ".join(str(p[0]) if len(p) == 1 else str(p) for p in plan.tuner.grid)
    err_console().print(f"tune [bold cyan]{sweep_id}[/] ({name}): at most {plan.tuner.budget} run(s); grid {grid}, "
                        f"{plan.tuner.rungs} window(s) up to {plan.full_window_s:g} s; {plan.tuner.objective} under {plan.slo_name}",
                        highlight=False, soft_wrap=True)  # fmt: skip
    return sweep_id


def _go(pm, store, plan, sweep_id: str, results=None, unfinished=None) -> None:
    """Run the search (from ``results`` on a resume), then print the answer and exit with its code."""
    import signal

    from infermatrix.core.run.tune import run_tune

    from infermatrix.core.config import ConfigError

    err = err_console()
    interrupted = refused = False
    try:
        results, interrupted = run_tune(pm, plan, store, sweep_id, err, results, unfinished)
    except KeyboardInterrupt:
        interrupted = True
    except ConfigError as exc:  # a value inside the range the config model refuses (both ends were accepted)
        err.print(f"[bold red]error:[/] the tune stopped: {exc}", highlight=False, soft_wrap=True)
        refused = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the answer is printed whatever happens now
    from infermatrix.core.run.tune import stored_results

    results, _ = stored_results(store, plan, sweep_id)
    answer = plan.tuner.answer(results)
    out = out_console()
    _print_answer(out, store, plan, sweep_id, answer, interrupted)
    store.close()
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if answer.best is None or refused:
        sys.exit(EXIT_FAILED)


def _value(plan, v: float | None) -> str:
    from infermatrix.core.report.fmt import fmt_int, fmt_tps

    if v is None:
        return "—"
    return f"{fmt_int(v)} streams" if plan.tuner.objective == "capacity" else f"{fmt_tps(v)} tok/s/GPU"


def _setting(plan, point) -> str:
    from infermatrix.core.run.grid import value_text

    return ", ".join(f"{a.key}={value_text(x)}" for a, x in zip(plan.tuner.axes, point))


def _print_answer(out, store, plan, sweep_id: str, answer, interrupted: bool) -> None:
    """The answer: best setting and value (interval), runner-up and margin, bracket per axis, relaunches, why it stopped."""
    from infermatrix.core.contexts import format_context

    where = f"at {format_context(plan.context_tokens)} under {plan.slo_name}"
    reason = "interrupted" if interrupted else answer.reason
    out.print(f"tune {sweep_id}: {answer.probes} run(s) (engine relaunches); {reason}", highlight=False, soft_wrap=True)
    b = answer.best
    if b is None:
        out.print(f"no answer: {answer.reason}", highlight=False, soft_wrap=True)
    else:
        iv = f" [{_value(plan, b.lo).split(' ')[0]} – {_value(plan, b.hi)}]" if b.lo is not None and b.hi is not None else ""
        noise = "load grid" if plan.tuner.objective == "capacity" else ("95 % interval" if iv else "fixed 2 % rule")
        out.print(f"best: {_setting(plan, b.point)} · {plan.tuner.objective} {_value(plan, b.value)}{iv} {where}", highlight=False, soft_wrap=True)
        ru = answer.runner_up
        if ru is not None:
            margin = "—" if answer.margin is None else f"{answer.margin * 100:+.1f} %"
            verdict = "beyond noise" if answer.beyond_noise else "within noise (the smaller setting is preferred)"
            out.print(f"runner-up: {_setting(plan, ru.point)} · {_value(plan, ru.value)} · margin {margin}, {verdict} ({noise})",
                      highlight=False, soft_wrap=True)  # fmt: skip
        for axis, (lo, hi), x in zip(plan.tuner.axes, answer.bracket, b.point):
            out.print(f"resolution: {axis.key}={x} lies between the probed {lo if lo is not None else '—'} and "
                      f"{hi if hi is not None else '—'} (range {axis.text().split('=')[1]}, goal {plan.tuner.resolution.text()})",
                      highlight=False, soft_wrap=True)  # fmt: skip
    out.print(f"sweep id: [bold cyan]{sweep_id}[/]  ·  views: sweep_runs, best_setting, sweep_frontier  ·  "
              f"continue: infermatrix resume {sweep_id} --db {store.path}", highlight=False, soft_wrap=True)  # fmt: skip


def resume_tune(pm, store, found: tuple[str, str], spec: dict) -> None:
    """`infermatrix resume SWEEP_ID` on a tune: the interrupted probe is finished (its missing cells), then the search
    continues from the stored results, as if it had not stopped (the next probe is a function of the results)."""
    from infermatrix.core.config import ConfigError
    from infermatrix.core.run.tune import plan_from_spec, stored_results

    sweep_id, name = found
    try:
        plan = plan_from_spec(pm, spec)
        results, unfinished = stored_results(store, plan, sweep_id)
    except ConfigError as exc:
        store.close()
        fail(str(exc))
    err_console().print(f"tune [bold cyan]{sweep_id}[/] ({name}): {len(results)} probe(s) stored, {len(unfinished)} to finish; "
                        "continuing the search", highlight=False, soft_wrap=True)  # fmt: skip
    _go(pm, store, plan, sweep_id, results, unfinished)


COMMANDS = [tune]
