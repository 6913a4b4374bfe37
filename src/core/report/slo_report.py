"""The SLO, capacity, frontier and engine-statistics sections of a report, read from their views.

Every renderer (text, Markdown, HTML) draws the same tables, as sections (core/report/sections/slo.py), from
:func:`slo_tables`; the numbers are exactly what ``slo_cells``, ``slo_capacity``, ``frontier`` and ``cell_engine_stats`` hold (docs/slo.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.report.fmt import DASH, fmt_ms, fmt_share, fmt_tps, fmt_usd
from infermatrix.core.report.query import view_rows
from infermatrix.core.store import Store
from infermatrix.core.store.slo_search import times_measured

__all__ = ["SloReport", "SloTable", "load_slo_report", "slo_tables", "fmt_share", "fmt_usd", "price_line", "GPUS_HOW", "GPUS_UNKNOWN",
           "gpus_unknown_line", "unknown_gpu_runs"]


@dataclass
class SloTable:
    """One SLO table with its title (sections/slo.py makes each a report section): a title, a caption, its header,
    rows of text and column alignment."""

    title: str
    caption: str
    header: list[str]
    rows: list[list[str]]
    align: str


@dataclass
class SloReport:
    """The rows of the SLO views for some runs, in report order."""

    cells: list[dict[str, Any]] = field(default_factory=list)
    capacity: list[dict[str, Any]] = field(default_factory=list)
    frontier: list[dict[str, Any]] = field(default_factory=list)
    engine_stats: list[dict[str, Any]] = field(default_factory=list)
    tpot_bounds: dict[str, float] = field(default_factory=dict)  # SLO -> tightest per-token bound (ms)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # run -> run_gpus row
    search: list[dict[str, Any]] = field(default_factory=list)  # slo_search rows (docs/load.md, "Search")
    search_probes: list[dict[str, Any]] = field(default_factory=list)  # slo_search_probes rows, in probe order

    @property
    def slos(self) -> list[str]:
        return list(dict.fromkeys(r["slo"] for r in self.cells))


def load_slo_report(store: Store, run_ids: list[str]) -> SloReport:
    """The SLO views' rows for ``run_ids``."""
    ids = list(run_ids)
    where = "WHERE list_contains(?, run_id)"
    out = SloReport(
        cells=view_rows(store, f"SELECT * FROM slo_cells {where} ORDER BY run_id, slo, context_tokens, concurrency", [ids]),
        capacity=view_rows(store, f"SELECT * FROM slo_capacity {where} ORDER BY run_id, slo, context_tokens", [ids]),
        frontier=view_rows(store, f"SELECT * FROM frontier {where} ORDER BY context_tokens, run_id, concurrency", [ids]),
        gpus={r["run_id"]: r for r in view_rows(store, f"SELECT * FROM run_gpus {where}", [ids])},
    )
    out.search = view_rows(store, f"SELECT * FROM slo_search {where} ORDER BY run_id", [ids])
    out.search_probes = view_rows(store, f"SELECT * FROM slo_search_probes {where} ORDER BY run_id, probe", [ids])
    out.engine_stats = view_rows(store, f"SELECT * FROM cell_engine_stats {where} ORDER BY run_id, context_tokens, concurrency", [ids])
    _, bounds = store.query(
        "SELECT slo, min(CASE metric WHEN 'tpot_ms' THEN limit_value WHEN 'tps' THEN 1000.0 / limit_value END) "
        f"FROM slo_limits {where} AND metric IN ('tpot_ms', 'tps') GROUP BY slo",
        [ids],
    )
    out.tpot_bounds = {b[0]: float(b[1]) for b in bounds if b[1] is not None}
    return out


def price_line(r: SloReport, run_ids: list[str]) -> str:
    """The GPU-hour price the costs of ``run_ids`` were computed at and where it came from (run_gpus): one phrase
    when every run has the same, else one per run. A price given for this report says what the run has stored."""
    def phrase(g: dict[str, Any]) -> str:
        usd, source, own = g.get("gpu_hour_usd"), g.get("gpu_hour_source"), g.get("stored_gpu_hour_usd")
        if usd is None:
            return "no GPU-hour price, so no cost (run --gpu-hour-price, or hardware.gpu_hour_usd in the config)"
        if source == "report":
            return f"priced at ${usd:,.2f}/GPU-hour for this report (stored: {DASH if own is None else f'${own:,.2f}'})"
        where = "the config's hardware.gpu_hour_usd" if source == "config" else "stored with the run"
        return f"priced at ${usd:,.2f}/GPU-hour ({where})"

    phrases = {rid: phrase(r.gpus.get(rid, {})) for rid in run_ids}
    if len(set(phrases.values())) == 1:
        return next(iter(phrases.values()))
    return "; ".join(f"{rid}: {p}" for rid, p in phrases.items())


def _meets(v: bool | None) -> str:
    return "yes" if v is True else "no" if v is False else "can't tell"


def _slo_table(r: SloReport, slo: str, many_runs: bool) -> SloTable:
    rows = []
    for c in (c for c in r.cells if c["slo"] == slo):
        ci = DASH if c["attainment"] is None else f"{fmt_share(c['attainment_lo'])} – {fmt_share(c['attainment_hi'])}"
        rows.append([*([c["run_id"]] if many_runs else []), c["context_label"], str(c["concurrency"]),
                     f"{c['good_requests']} / {c['judged_requests']}", fmt_share(c["attainment"]), ci,
                     DASH if c["request_goodput"] is None else f"{c['request_goodput']:.2f}", fmt_tps(c["token_goodput"]), _meets(c["meets"])])  # fmt: skip
    return SloTable(
        f"SLO {slo}",
        "attainment: share of the requests that ended in the window meeting every limit (95 % Wilson interval); "
        "goodput: good requests and their output tokens per second; meets: every limit holds for the cell",
        [*(["Run"] if many_runs else []), "Context", "N", "Good / judged", "Attainment", "95 % interval", "Good req/s",
         "Good tok/s", "Meets"],
        rows, ("l" if many_runs else "") + "lrrrrrrl",
    )  # fmt: skip


def _capacity_table(r: SloReport, many_runs: bool) -> SloTable:
    rows = []
    for c in r.capacity:
        n = c["max_concurrency_meeting"]
        rows.append([*([c["run_id"]] if many_runs else []), c["slo"], c["context_label"], DASH if n is None else str(n),
                     fmt_tps(c["total_tps_at_max"]), fmt_tps(c["tps_per_gpu_at_max"])])  # fmt: skip
    return SloTable(
        "SLO capacity", "the largest concurrency whose cell meets the SLO, per context, and its throughput",
        [*(["Run"] if many_runs else []), "SLO", "Context", "Max N meeting", "Total tok/s", "tok/s per GPU"],
        rows, ("l" if many_runs else "") + "llrrr",
    )  # fmt: skip


def _frontier_table(r: SloReport, many_runs: bool) -> SloTable:
    rows = []
    for f in (f for f in r.frontier if f["on_frontier"]):
        rows.append([*([f"{f['run_id']} ({f['engine']})"] if many_runs else []), f["context_label"], str(f["concurrency"]),
                     fmt_tps(f["tps_per_gpu"]), fmt_tps(f["tps_per_user"]), fmt_usd(f["usd_per_mtok"]),
                     fmt_usd(f.get("usd_per_mtok_total"))])  # fmt: skip
    gpus = "; ".join(f"{rid}: {g['gpus']} GPU(s) from {g['gpus_source']}" for rid, g in r.gpus.items() if g.get("gpus"))
    shown = list(dict.fromkeys(f["run_id"] for f in r.frontier if f["on_frontier"]))
    return SloTable(
        "Throughput–interactivity frontier",
        "the cells no other cell of the run beats on both tok/s per GPU and tok/s per user; $ per million output tokens, "
        f"and per million prompt + output tokens, {price_line(r, shown)}" + (f"; GPUs: {gpus}" if gpus else ""),
        [*(["Run"] if many_runs else []), "Context", "N", "tok/s per GPU", "tok/s per user", "$ / M out tok", "$ / M total tok"],
        rows, ("l" if many_runs else "") + "lrrrrr",
    )  # fmt: skip


def _engine_table(r: SloReport, many_runs: bool) -> SloTable | None:
    shown = [e for e in r.engine_stats if e["status"] == "valid"  # a discarded cell's counters are evidence, not results
             and (e.get("acceptance_rate") is not None or e.get("prefix_cache_hit_rate") is not None)]
    if not shown:
        return None
    rows = []
    for e in shown:
        per_pos = e.get("acceptance_per_position")
        n = "prefill" if e["concurrency"] is None else str(e["concurrency"])
        rows.append([*([e["run_id"]] if many_runs else []), e["context_label"], n,
                     fmt_share(e.get("acceptance_rate")),
                     DASH if e.get("mean_acceptance_length") is None else f"{e['mean_acceptance_length']:.2f}",
                     DASH if not per_pos else " / ".join(fmt_share(p) for p in per_pos),
                     fmt_share(e.get("prefix_cache_hit_rate"))])  # fmt: skip
    return SloTable(
        "What the engine did", "from the engine's own counters over each decode cell (prefill: over its cold probes): "
        "speculative decoding and the prefix cache",
        [*(["Run"] if many_runs else []), "Context", "N", "Acceptance", "Mean accept. length", "Per position", "Prefix-cache hits"],
        rows, ("l" if many_runs else "") + "lrrrrr",
    )  # fmt: skip


def _load(v: float | None, over: str) -> str:
    if v is None:
        return DASH
    return f"{v:g}/s" if over == "rate" else f"N = {v:g}"


def _search_tables(r: SloReport, many_runs: bool) -> list[SloTable]:
    """The SLO search: its answer, then its probes in order (docs/load.md, "Search")."""
    if not r.search:
        return []
    rows = []
    for s in r.search:
        rows.append([*([s["run_id"]] if many_runs else []), s["slo"], s["over"], s["context_label"], _load(s["highest_pass"], s["over"]),
                     _load(s["lowest_fail"], s["over"]), s["resolution"] or DASH, str(s["probes"]), s["status"]])  # fmt: skip
    notes = "; ".join(f"{s['run_id'] + ': ' if many_runs else ''}{s['reason']}" for s in r.search if s.get("reason"))
    starts = "; ".join(f"start {_load(s['start'], s['over'])} ({s['start_source']})" for s in r.search if s.get("start") is not None)
    answer = SloTable(
        "SLO search", "the highest load that met the SLO and the lowest that did not (rate: as delivered), narrowed to the resolution"
        + (f"; {starts}" if starts else "") + (f"; {notes}" if notes else ""),
        [*(["Run"] if many_runs else []), "SLO", "Over", "Context", "Highest pass", "Lowest fail", "Resolution", "Probes", "Status"],
        rows, ("l" if many_runs else "") + "lllrrrrl",
    )  # fmt: skip
    over = {s["run_id"]: s["over"] for s in r.search}
    probe_rows = []
    for p in r.search_probes:
        achieved = DASH if p["achieved"] is None else f"{p['achieved']:.2f}"
        probe_rows.append([*([p["run_id"]] if many_runs else []), str(p["probe"]), p["step"] or DASH, _load(p["load"], over.get(p["run_id"], "rate")),
                           achieved, p["status"] or DASH, fmt_share(p["attainment"]), fmt_ms(p["ttft_p99_ms"]), fmt_ms(p["tpot_p99_ms"]),
                           fmt_tps(p["output_tps"]), p["verdict"] or DASH])  # fmt: skip
    # A probe measured again because the client could not deliver it (search.client_retries) says so; a stop's reason
    # is the search's, in the table above.
    again = "; ".join(f"{p['run_id'] + ' ' if many_runs else ''}probe {p['probe']}: {p['reason']}" for p in r.search_probes
                      if p["verdict"] in ("pass", "fail") and times_measured(p) > 1)  # fmt: skip
    probes = SloTable(
        "SLO search probes", "every probe in order, stored as an open-loop point (rate) or a decode cell (concurrency); load: "
        "asked; achieved: requests/s delivered (the rate a rate probe counts at), or mean requests in flight; TPOT p99: per "
        "request, over the judged requests the verdict used; a probe that is not valid stops the search (verdict stop), a "
        "client_bound one is measured again first" + (f"; {again}" if again else ""),
        [*(["Run"] if many_runs else []), "Probe", "Step", "Load", "Achieved", "Status", "Attainment", "TTFT p99", "TPOT p99",
         "tok/s", "Verdict"],
        probe_rows, ("l" if many_runs else "") + "rlrrlrrrrl",
    )  # fmt: skip
    return [answer, probes]


GPUS_HOW = "give it with --set hardware.gpus=N (or hardware.gpus in the config)"
GPUS_UNKNOWN = f"GPU count unknown: {GPUS_HOW}"


def gpus_unknown_line(run_ids: list[str], where: str) -> str:
    """The sentence every report says where per-GPU figures, the frontier or a cost would be and a run's GPU count is
    unknown (run report, compare, sweep report; docs/tuning.md, "GPU count"): which runs, why it can be, and how to give it."""
    return (f"GPU count unknown for {', '.join(run_ids)} (an attached server on a CPU, or an engine that does not report its "
            f"parallelism): {where} cannot be shown without it — {GPUS_HOW}")  # fmt: skip


def unknown_gpu_runs(r: SloReport) -> list[str]:
    """The runs with valid cells whose tok/s per GPU is unknown for want of a GPU count."""
    return list(dict.fromkeys(f["run_id"] for f in r.frontier if f["tps_per_gpu"] is None))


def _gpus_unknown_table(r: SloReport) -> SloTable | None:
    """Where a run's GPU count is unknown its tok/s per GPU, frontier and cost cannot be shown: say so, and how to give
    it, where they would be (issue 29: they were a bare "—" and a missing chart)."""
    runs = unknown_gpu_runs(r)
    if not runs:
        return None
    return SloTable("GPU count unknown", "tok/s per GPU, the throughput–interactivity frontier and the cost per token need "
                    "the run's GPU count, which neither its engine nor its config gave",
                    ["Run", "GPUs"], [[rid, GPUS_UNKNOWN] for rid in runs], "ll")  # fmt: skip


def slo_tables(r: SloReport, many_runs: bool = False) -> list[SloTable]:
    """The section's tables: one per SLO, the capacity, the frontier, the engine statistics, the SLO search (when any)."""
    out = [_slo_table(r, s, many_runs) for s in r.slos]
    if r.capacity:
        out.append(_capacity_table(r, many_runs))
    if any(f["on_frontier"] for f in r.frontier):
        out.append(_frontier_table(r, many_runs))
    unknown = _gpus_unknown_table(r)
    if unknown is not None:
        out.append(unknown)
    engine = _engine_table(r, many_runs)
    if engine is not None:
        out.append(engine)
    return out + _search_tables(r, many_runs)


def fmt_bound(ms: float) -> str:
    return f"TPOT ≤ {fmt_ms(ms)} ({fmt_tps(1000.0 / ms)} tok/s per user)"
