"""``infermatrix tune``: the tuner's driver (docs/tuning.md, "The tuner").

A tune is a sweep whose combinations are chosen as it goes: the pure search (core/tune) says which setting to probe
next and with which window; each probe is one run of the sweep (one engine launch, its setting stored in
``run_settings`` with the probe's ``matrix.duration_s``), added to the sweep just before it starts; its objective is
read back from the sweep's own view (``sweep_setting_scores``, the figures ``best_setting`` ranks), so the tuner and
the view judge a setting by one definition. Everything the search needs is stored with the sweep (``sweeps.spec``),
so ``infermatrix resume SWEEP_ID`` finishes an interrupted probe and continues the search from the stored results.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import pluggy
from rich.console import Console

from infermatrix.core.config import ConfigError, RunConfig, load_config
from infermatrix.core.contexts import format_context
from infermatrix.core.run.grid import value_text
from infermatrix.core.run.sweep import SweepEntry, name_runs, run_entry
from infermatrix.core.run.sweep_plan import combination_config
from infermatrix.core.slo import parse_slo
from infermatrix.core.slo.search import parse_resolution
from infermatrix.core.store import Store, StoreError
from infermatrix.core.tune import ETA, Axis, Probe, Result, Tuner, parse_over

__all__ = ["TuneRequest", "TunePlan", "plan_tune", "plan_from_spec", "run_tune", "stored_results", "WINDOW_KEY", "DEFAULT_BUDGET",
           "DEFAULT_RESOLUTION"]

WINDOW_KEY = "matrix.duration_s"  # each probe's window: a key of its setting, so sweep_runs shows it
DEFAULT_BUDGET = 16  # runs, each an engine launch (the sweep's MAX_RUNS_WITHOUT_YES)
DEFAULT_RESOLUTION = "25%"


@dataclass
class TuneRequest:
    """What the tune command was given."""

    config_file: str
    over: list[str]
    slo: str
    objective: str = "goodput"
    budget: int = DEFAULT_BUDGET
    resolution: str = DEFAULT_RESOLUTION
    context: str | None = None  # a decode context label of the config; default its longest
    overrides: list[str] = field(default_factory=list)


@dataclass
class TunePlan:
    """The checked request: the base config (``--set`` applied, without the searched keys), the search, the SLO
    (its stored name), the context searched at and the full window."""

    source: str
    base: dict[str, Any]
    tuner: Tuner
    slo_text: str
    slo_name: str
    context_tokens: int
    full_window_s: float
    spec: dict[str, Any]

    def setting(self, probe: Probe) -> dict[str, Any]:
        window = self.full_window_s * self.tuner.window_share(probe.rung)
        return {**{a.key: v for a, v in zip(self.tuner.axes, probe.point)}, WINDOW_KEY: round(window, 6)}


def _numeric_at(cfg: RunConfig, key: str) -> Any:
    node: Any = cfg.model_dump(mode="json")
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _axes(pm: pluggy.PluginManager, source: str, base: dict[str, Any], over: list[str]) -> tuple[list[Axis], RunConfig]:
    """Each ``--over`` range, checked: a key the config model knows, numeric, both ends accepted by the model."""
    if not over:
        raise ConfigError("--over: give at least one range to search, e.g. --over engine.args.max_num_seqs=8..512")
    axes = [parse_over(t) for t in over]
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"--over {next(k for k in keys if keys.count(k) > 1)}: given twice")
    if WINDOW_KEY in keys:
        raise ConfigError(f"--over {WINDOW_KEY}: the tuner sets each probe's window itself (short probes first)")
    cfg = None
    for end in ("lo", "hi"):
        setting = {a.key: a.value(getattr(a, end)) for a in axes}
        cfg = combination_config(pm, source, base, [], setting, flag="--over")
        for a in axes:
            got = _numeric_at(cfg, a.key)
            if isinstance(got, bool) or not isinstance(got, (int, float)):
                raise ConfigError(f"--over {a.key}: not a numeric setting (the config holds {value_text(got)!s} there): "
                                  "the tuner searches numbers; use `infermatrix sweep --grid` for others")  # fmt: skip
    assert cfg is not None
    # a key the model holds as an integer is searched over integers, however its ends were written (1..64.0)
    ints = {a.key for a in axes if isinstance(_numeric_at(cfg, a.key), int)}
    return [Axis(a.key, a.lo, a.hi, a.integer or a.key in ints) for a in axes], cfg


def plan_tune(pm: pluggy.PluginManager, req: TuneRequest) -> TunePlan:
    """Everything checked before any engine starts: a mistake is one ConfigError (the CLI's one line, exit 2)."""
    if req.budget < 1:
        raise ConfigError(f"--budget-runs {req.budget}: must be at least 1 (each run is an engine launch)")
    data = load_config(req.config_file)
    if "sweep" in data:
        raise ConfigError(f"{req.config_file}: has a [sweep] table: the tuner searches its --over ranges (run the grid with `infermatrix sweep`)")
    from infermatrix.core.config import apply_overrides

    base = apply_overrides(copy.deepcopy(data), req.overrides)
    spec = {"config": req.config_file, "base": base, "over": list(req.over), "slo": req.slo, "objective": req.objective,
            "budget": req.budget, "resolution": req.resolution, "context": req.context}  # fmt: skip
    return plan_from_spec(pm, spec)


def plan_from_spec(pm: pluggy.PluginManager, spec: dict[str, Any]) -> TunePlan:
    """The plan a stored tune was made with (``sweeps.spec['tune']``; ``resume`` rebuilds the search from it)."""
    source, base = spec["config"], spec["base"]
    axes, cfg = _axes(pm, source, base, spec["over"])
    slo = parse_slo(spec["slo"])
    resolution = parse_resolution(spec["resolution"], "rate")
    if not resolution.relative:
        raise ConfigError(f"--resolution {spec['resolution']}: give a share, e.g. 25% (the search is on a log scale)")
    contexts = list(cfg.matrix.contexts)
    if not contexts:
        raise ConfigError(f"{source}: the matrix has no decode context to judge a setting at")
    context = max(contexts)
    if spec.get("context"):
        from infermatrix.core.contexts import parse_context

        try:
            context = parse_context(spec["context"])
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"--context {spec['context']}: {exc}") from None
        if context not in contexts:
            raise ConfigError(f"--context {spec['context']}: not a decode context of the matrix ({', '.join(format_context(c) for c in contexts)})")
    tuner = Tuner(axes, spec["objective"], int(spec["budget"]), resolution)
    return TunePlan(source, base, tuner, spec["slo"], slo.name, context, float(cfg.matrix.duration_s), {"tune": spec})


def _read_result(store: Store, plan: TunePlan, sweep_id: str, run_id: str, probe: Probe) -> Result:
    """The probe's objective from ``sweep_setting_scores``; 0 when its run ended but no cell met the SLO; None when
    the run failed. Goodput's interval: the cell's total tok/s interval, relative (docs/tuning.md, "The noise rule")."""
    run = store.get_run(run_id)
    if run is None or run.get("status") not in ("completed", "stopped"):
        return Result(probe.point, probe.rung, None)
    _, rows = store.query(
        "SELECT s.value, s.tps_lo, s.tps_hi, i.value FROM sweep_setting_scores s "
        "LEFT JOIN cell_intervals i ON i.run_id = s.run_id AND i.context_tokens = s.context_tokens "
        "AND i.concurrency = s.concurrency AND i.metric = 'total_tps' "
        "WHERE s.sweep_id = ? AND s.run_id = ? AND s.slo = ? AND s.context_tokens = ? AND s.objective = ?",
        [sweep_id, run_id, plan.slo_name, plan.context_tokens, plan.tuner.objective])  # fmt: skip
    if not rows:
        return Result(probe.point, probe.rung, 0.0)
    value, lo, hi, tps = rows[0]
    if plan.tuner.objective == "goodput" and lo is not None and hi is not None and tps:
        return Result(probe.point, probe.rung, float(value), float(value) * lo / tps, float(value) * hi / tps)
    return Result(probe.point, probe.rung, float(value))


def _probe_of(plan: TunePlan, setting: dict[str, str]) -> Probe:
    """A stored probe's point and rung, read back from its setting (the window gives the rung)."""
    point = tuple(a.value(float(setting[a.key])) for a in plan.tuner.axes)
    share = float(setting[WINDOW_KEY]) / plan.full_window_s
    rung = plan.tuner.rungs - 1 + round(math.log(share, ETA))
    return Probe(point, rung)


def stored_results(store: Store, plan: TunePlan, sweep_id: str) -> tuple[list[Result], list[SweepEntry]]:
    """The results of a stored tune's probes so far, and the entries of those still to finish (interrupted, not started)."""
    from infermatrix.core.store.sweep_store import sweep_members

    results, unfinished = [], []
    for m in sweep_members(store, sweep_id):
        probe = _probe_of(plan, m.setting)
        run = store.get_run(m.run_id)
        if run is None or run.get("status") not in ("completed", "stopped", "failed"):
            cfg = combination_config(_pm(), plan.source, plan.base, [], plan.setting(probe), flag="--over")
            entry = SweepEntry(plan.source, cfg, m.run_id, setting=m.setting, sweep_id=sweep_id, in_db=run is not None, resume=run is not None)
            unfinished.append(entry)
        else:
            results.append(_read_result(store, plan, sweep_id, m.run_id, probe))
    return results, unfinished


def _pm() -> pluggy.PluginManager:
    from infermatrix.core.plugins import get_plugin_manager

    return get_plugin_manager()


def progress_line(k: int, budget: int, setting: dict[str, Any], run_id: str, started: float, done_s: list[float]) -> str:
    """``tune probe 3 of ≤ 12 · engine.args.max_num_seqs=16, matrix.duration_s=0.5 → run 3fa2c1d0 · ETA ≤ 2 min · 40 s so far``
    (the ETA: the mean time of the probes so far times those the budget leaves, this one included — an upper bound:
    the search may end sooner)."""
    eta = ""
    if done_s:
        left = sum(done_s) / len(done_s) * (budget - k + 1)
        eta = f" · ETA ≤ {left / 60:.0f} min" if left >= 90 else f" · ETA ≤ {left:.0f} s"
    shown = ", ".join(f"{key}={value_text(v)}" for key, v in setting.items())
    return f"[bold]tune probe {k} of ≤ {budget}[/] · {shown} → run {run_id}{eta} · {time.monotonic() - started:.0f} s so far"


def _save_slo(store: Store, plan: TunePlan, entry: SweepEntry) -> None:
    from infermatrix.core.store.slo_store import save_slos

    if entry.in_db:
        save_slos(store, entry.run_id, [parse_slo(plan.slo_text)])


def run_tune(pm: pluggy.PluginManager, plan: TunePlan, store: Store, sweep_id: str, console: Console,
             results: list[Result] | None = None, unfinished: list[SweepEntry] | None = None) -> tuple[list[Result], bool]:
    """Probe until the search ends or the budget is spent: each probe a run added to the sweep, then run here, its
    SLO stored and its objective read back. ``results``/``unfinished``: a resumed tune's. Returns the results and
    whether the tune was interrupted (Ctrl-C: the probe in progress stops as a run stops; resume continues)."""
    from infermatrix.core.store.sweep_store import SweepMember, add_sweep_member

    results = list(results or [])
    started, done_s = time.monotonic(), list[float]()
    queue = list(unfinished or [])
    while True:
        k = len(results) + 1
        if queue:
            entry = queue.pop(0)
            probe = _probe_of(plan, entry.setting)
        else:
            nxt = plan.tuner.next_probe(results)
            if nxt is None:
                return results, False
            probe, setting = nxt, plan.setting(nxt)
            cfg = combination_config(pm, plan.source, plan.base, [], setting, flag="--over")
            entry = name_runs(store, [(plan.source, cfg, {key: value_text(v) for key, v in setting.items()})])[0]
            entry.sweep_id = sweep_id
            add_sweep_member(store, sweep_id, SweepMember(k, entry.run_id, plan.source, cfg.model_dump(mode="json"), entry.setting))
        console.print(progress_line(k, plan.tuner.budget, entry.setting, entry.run_id, started, done_s), highlight=False, soft_wrap=True)
        t0 = time.monotonic()
        if not run_entry(pm, entry, store, console):
            return results, True
        try:
            _save_slo(store, plan, entry)
        except StoreError as exc:
            console.print(f"warning: SLO not stored with run {entry.run_id}: {exc}", highlight=False)
        results.append(_read_result(store, plan, sweep_id, entry.run_id, probe))
        done_s.append(time.monotonic() - t0)
        console.print(_outcome_line(store, plan, entry, results[-1].value), highlight=False, soft_wrap=True)


def _outcome_line(store: Store, plan: TunePlan, entry: SweepEntry, got: float | None) -> str:
    """``  → capacity at 1K: 6 streams``; for a probe that failed, its error's first line; for one where no cell met
    the SLO, its cells by status (a window too short to measure shows as cells that are not valid)."""
    head = f"  → {plan.tuner.objective} at {format_context(plan.context_tokens)}: "
    if got is None:
        return head + "failed" + (f" ({entry.error.splitlines()[0][:200]})" if entry.error else "")
    unit = " streams" if plan.tuner.objective == "capacity" else " tok/s/GPU"
    if got > 0:
        return head + (f"{got:,.0f}" if plan.tuner.objective == "capacity" else f"{got:,.1f}") + unit
    _, rows = store.query("SELECT status, count(*) FROM decode_matrix WHERE run_id = ? AND context_tokens = ? GROUP BY status "
                          "ORDER BY count(*) DESC, status", [entry.run_id, plan.context_tokens])  # fmt: skip
    return head + f"0{unit} (no cell met the SLO; cells: {', '.join(f'{n} {st}' for st, n in rows) or 'none'})"
