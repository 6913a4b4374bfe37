"""The Engine and GPU section (docs/telemetry.md): per decode cell, what the engine's own metrics said over its window
(engine_cells: its tok/s against the client's, KV peak, preemptions, longest queue, held back) and, where NVML read
the GPUs, the energy (gpu_cells: W per GPU, joules per million output tokens, output tokens per joule, throttled).
In HTML, each cell's timeline (telemetry_chart.py). A run without any of these reads has no such section."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import DASH, fmt_float2, fmt_int, fmt_share, fmt_signed_share, fmt_tps, fmt_watts, fmt_yes
from infermatrix.core.report.model import Block, Bullets, Chart, Charts, Section, Table
from infermatrix.core.report.telemetry_chart import timeline_charts

__all__ = ["telemetry_section", "TELEMETRY_TITLE", "ENGINE_HEADERS", "ENERGY_HEADERS", "telemetry_caption"]

TELEMETRY_TITLE = "Engine and GPU"
ENGINE_HEADERS = ("Engine tok/s", "vs client", "KV peak", "Preempted", "Waiting max", "Held back")
ENERGY_HEADERS = ("W per GPU", "J / M tok", "tok / J", "Throttled")


def telemetry_caption(engine: bool, energy: bool) -> str:
    parts = []
    if engine:
        parts.append("the engine's own metrics read over each cell's window: its output tok/s (vs the client's total), peak KV "
                     "usage, preemptions, longest waiting queue; held back = it preempted or queued while the client held N")
    if energy:
        parts.append("NVML over the window: mean W per GPU, joules per million output tokens, output tokens per joule, "
                     "a power or thermal throttle reason seen")
    return "; ".join(parts)


def _engine_cells(e: dict[str, Any] | None) -> list[str]:
    if e is None:
        return [DASH] * len(ENGINE_HEADERS)
    kv = e.get("kv_peak_pct")
    return [fmt_tps(e.get("engine_tps")), fmt_signed_share(e.get("engine_vs_client")), fmt_share(None if kv is None else kv / 100),
            fmt_int(e.get("preemptions")), fmt_int(e.get("waiting_max")), fmt_yes(e.get("held_back"))]  # fmt: skip


def _energy_cells(g: dict[str, Any] | None) -> list[str]:
    if g is None:
        return [DASH] * len(ENERGY_HEADERS)
    return [fmt_watts(g.get("avg_w_per_gpu")), fmt_int(g.get("j_per_mtok")), fmt_float2(g.get("tok_per_j")),
            fmt_yes(g.get("throttled"), g.get("throttle_reasons"))]  # fmt: skip


def telemetry_section(d: ReportData, charts: bool = False) -> Section | None:
    tel = d.telemetry
    engine = any("engine" in t for t in tel.values())
    energy = any("gpu" in t for t in tel.values())
    if not (engine or energy):
        return None
    header = ["Context", "N", *(ENGINE_HEADERS if engine else ()), *(ENERGY_HEADERS if energy else ())]
    rows = []
    for (ctx, n), t in sorted(tel.items()):
        rows.append([format_context(ctx), str(n), *(_engine_cells(t.get("engine")) if engine else []),
                     *(_energy_cells(t.get("gpu")) if energy else [])])  # fmt: skip
    blocks: list[Block] = [Table(header, rows, "lr" + "r" * (len(header) - 2), caption=telemetry_caption(engine, energy), name="telemetry")]
    flagged = [f"{format_context(ctx)} × {n}: the engine held the load back ({fmt_int(t['engine'].get('preemptions'))} preemptions, "
               f"up to {fmt_int(t['engine'].get('waiting_max'))} waiting)"
               for (ctx, n), t in sorted(tel.items()) if (t.get("engine") or {}).get("held_back")]  # fmt: skip
    flagged += [f"{format_context(ctx)} × {n}: measured while a GPU throttled ({t['gpu'].get('throttle_reasons')})"
                for (ctx, n), t in sorted(tel.items()) if (t.get("gpu") or {}).get("throttled")]  # fmt: skip
    if flagged:
        blocks.append(Bullets(flagged))
    drawn = timeline_charts(tel) if charts else []
    if drawn:  # HTML: each cell's step as a timeline
        blocks.append(Charts([Chart(cid, title, caption, svg) for cid, title, caption, svg in drawn]))
    return Section("telemetry", TELEMETRY_TITLE, blocks)
