"""A sweep's report as sections (core/report/model.py; rows: core/report/sweep_data.py): the settings table, the best
setting per SLO and context with its margin, a "why" line per losing setting, and per context the frontier across
settings (a table in every format; the HTML report adds a chart with a colour per setting and the envelope drawn)."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.fmt import DASH, fmt_int, fmt_seconds, fmt_share, fmt_tps, fmt_usd
from infermatrix.core.report.frontier_chart import sweep_frontier_chart
from infermatrix.core.report.model import Bullets, Chart, Charts, Note, Notice, Paragraph, Section, Table
from infermatrix.core.report.slo_report import gpus_unknown_line
from infermatrix.core.report.sweep_data import SweepReport

__all__ = ["sweep_sections", "sweep_title", "why_line"]

# A run's status -> the look of a cell status (text and HTML), so a failed combination stands out.
_LOOK = {"completed": "valid", "stopped": "valid", "failed": "error", "interrupted": "interrupted", "not started": "missing"}


def sweep_title(r: SweepReport) -> list[str]:
    """The title, the sweep's id and name, and what it was asked."""
    spec = r.sweep.get("spec") or {}
    grid = spec.get("grid") if isinstance(spec, dict) else None
    asked = f"grid {', '.join(map(str, grid))}" if grid else ""
    done = sum(1 for s in r.settings if s["status"] in ("completed", "stopped"))
    return ["Settings sweep", f"sweep {r.sweep_id} ({r.sweep.get('name') or DASH})",
            " · ".join(x for x in (asked, f"{done} of {len(r.settings)} combination(s) ran") if x)]


def _reported(s: dict[str, Any]) -> str:
    said = [f"{x['name']}={x['value']}" + (f" (asked {x['asked']})" if x["asked"] is not None else "") for x in s["reported"]]
    if s.get("max_seqs"):
        said.append(f"{fmt_int(s['max_seqs'])} seqs at once")
    if s.get("kv_tokens"):
        said.append(f"KV {fmt_int(s['kv_tokens'])} tokens")
    return " · ".join(said) or DASH


def _startup(s: dict[str, Any]) -> str:
    if s.get("attached"):
        return "attached"
    return fmt_seconds(s["startup_s"]) if s.get("startup_s") is not None else DASH


def _settings_section(r: SweepReport) -> Section:
    rows = []
    for s in r.settings:
        engine = " ".join(x for x in (s.get("engine"), s.get("engine_version")) if x) or DASH
        gpus = DASH if s.get("engine") is None else "unknown" if s.get("gpus") is None else f"{s['gpus']} ({s['gpus_source']})"
        rows.append([str(s["k"]), s["setting"], s["status"], s["run_id"], _startup(s), engine, _reported(s), gpus])
    blocks: list[Any] = [Table(
        ["#", "Setting", "Status", "Run", "Start-up", "Engine", "Engine reported", "GPUs"], rows, "rllllll" + "l",
        caption="one row per combination, each its own engine launch; start-up: launch to ready; engine reported: the setting "
        "as the engine itself described it, and the capacity it reported", name="sweep-settings",
        statuses=[_LOOK.get(s["status"], "missing") for s in r.settings], status_col=2)]  # fmt: skip
    failed = [f"{s['setting']} (run {s['run_id']}): {s['status']} — {s['reason'] or 'no reason stored'}"
              for s in r.settings if s["status"] not in ("completed", "stopped")]  # fmt: skip
    if failed:
        blocks.append(Bullets(failed))
    return Section("settings", "Settings", blocks)


def _best_value(v: float | None, objective: str, per: str) -> str:
    if v is None:
        return DASH
    return f"N = {fmt_int(v)}" if objective == "capacity" else f"{fmt_tps(v)} tok/s per {per}"


def _best_section(r: SweepReport) -> Section:
    if not r.best:
        return Section("best-setting", "Best setting", [Notice(
            f"No setting chosen: no SLO is stored with this sweep's runs, or no cell met it. Give one with "
            f"infermatrix report --sweep {r.sweep_id} --slo ttft_p99_ms=…,tpot_p99_ms=… (stored; the choice is made again "
            f"from the stored cells, nothing is rerun).")])  # fmt: skip
    rows = []
    for b in r.best:
        per = "server" if b.get("gpus_note") else "GPU"
        beyond = DASH if b["beyond_noise"] is None else ("yes" if b["beyond_noise"] else "no, within noise")
        rows.append([b["slo"], b["context_label"], b["objective"], b["setting"], _best_value(b["value"], b["objective"], per),
                     b["runner_up_setting"] or DASH, _best_value(b["runner_up_value"], b["objective"], per),
                     DASH if b["margin"] is None else f"+{fmt_share(b['margin'])}",
                     beyond + (f" ({b['noise_method']})" if b.get("noise_method") else "")])  # fmt: skip
    blocks: list[Any] = [Table(
        ["SLO", "Context", "Objective", "Best setting", "Value", "Runner-up", "Runner-up value", "Margin", "Beyond noise"], rows,
        "llllrlrrl", name="sweep-best",
        caption="goodput: the most SLO goodput per GPU over the cells meeting the SLO; capacity: the largest load meeting it; "
        "margin: value ÷ runner-up − 1; beyond noise: larger than the two cells' intervals allow (docs/tuning.md)")]  # fmt: skip
    notes = sorted({b["gpus_note"] for b in r.best if b.get("gpus_note")})
    blocks += [Note(n) for n in notes]
    return Section("best-setting", "Best setting", blocks)


def why_line(w: dict[str, Any]) -> str:
    """Why a setting lost, in one line: over capacity at N, SLO lost at N, and how much less goodput per GPU it made."""
    parts = []
    if w["over_capacity_at"] is not None:
        held = " (admission-limited: the engine never ran that many at once)" if w.get("over_capacity_status") == "admission_limited" else ""
        parts.append(f"over capacity at {w['over_capacity_at']}{held}")
    if w["slo_lost_at"] is not None:
        parts.append(f"SLO lost at {w['slo_lost_at']}")
    per = w["per"]
    if w["value"] is None and not w["judged_cells"]:
        parts.append("no cell could be judged under the SLO (no request ended inside a window: a longer matrix.duration_s)")
    elif w["value"] is None:
        parts.append("no cell met the SLO")
    elif w["shortfall"] is not None and w["shortfall"] > 0:
        parts.append(f"slower per {per}: {fmt_share(w['shortfall'])} less SLO goodput than {w['best_setting']} "
                     f"({fmt_tps(w['value'])} vs {fmt_tps(w['best_value'])} tok/s per {per})")  # fmt: skip
    else:
        parts.append(f"as much SLO goodput as {w['best_setting']} ({fmt_tps(w['value'])} tok/s per {per}); lost the tie-break")
    return f"{w['setting']}: " + "; ".join(parts)


def _why_section(r: SweepReport) -> Section | None:
    if not r.why:
        return None
    blocks: list[Any] = []
    for slo, ctx in dict.fromkeys((w["slo"], w["context_tokens"]) for w in r.why):
        mine = [w for w in r.why if w["slo"] == slo and w["context_tokens"] == ctx]
        blocks += [Paragraph([f"SLO {slo}, {mine[0]['context_label']} context (goodput; best: {mine[0]['best_setting']}):"]),
                   Bullets([why_line(w) for w in mine])]  # fmt: skip
    blocks.append(Note("over capacity at N: its first load the engine could not hold (not run, or admission-limited); SLO lost at N: its first measured cell "
                       "that does not meet the SLO; slower: its best cell meeting the SLO against the winner's"))  # fmt: skip
    return Section("why", "Why the other settings lost", blocks)


def _frontier_sections(r: SweepReport, charts: bool) -> list[Section]:
    out, drawn = [], []
    unknown = [s["run_id"] for s in r.unknown_gpus]
    labels = {s["run_id"]: s["setting"] for s in r.settings}
    for ctx, label in r.contexts.items():
        pts = [f for f in r.frontier if f["context_tokens"] == ctx]
        rows = [[f["setting"], str(f["concurrency"]), fmt_tps(f["tps_per_gpu"]), fmt_tps(f["tps_per_user"]), fmt_usd(f["usd_per_mtok"]),
                 DASH if f["on_frontier"] is None else "yes" if f["on_frontier"] else ""] for f in pts]  # fmt: skip
        blocks: list[Any] = []
        if rows:
            blocks.append(Table(["Setting", "N", "tok/s per GPU", "tok/s per user", "$ / M out tok", "Envelope"], rows, "lrrrrl",
                                caption="every valid cell of every setting; envelope: no cell of any setting has as much of "
                                "both and more of one", name="sweep-frontier"))  # fmt: skip
        if unknown and any(f["tps_per_gpu"] is None for f in pts):
            blocks.append(Notice(gpus_unknown_line(sorted({f["run_id"] for f in pts if f["tps_per_gpu"] is None}),
                                                   "tok/s per GPU, the frontier and the cost per token")))  # fmt: skip
        if not blocks:
            blocks.append(Notice(f"no valid cell at {label}"))
        out.append(Section(f"frontier-{format_context(ctx)}", f"Frontier — {label} context", blocks))
        chart = sweep_frontier_chart(ctx, pts, labels) if charts else None
        if chart is not None:
            drawn.append(Chart(*chart))
    if drawn:
        out.append(Section("frontier-charts", "Frontier charts", [Charts(drawn)]))
    return out


def sweep_sections(r: SweepReport, charts: bool = False) -> list[Section]:
    """The sweep's sections in report order; ``charts`` (HTML) adds a frontier chart per context."""
    found = [_settings_section(r), _best_section(r), _why_section(r), *_frontier_sections(r, charts)]
    return [s for s in found if s is not None]
