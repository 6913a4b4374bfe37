"""The Interference section: one row per interference point (the interference view; docs/load.md, "Interference") —
the decoders' token gaps alone and while a prompt is in the engine, the longest stall, and the prompt's TTFT with and
without the decodes; and compare's section: each point the baseline and another run both ran alike, side by side."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.compare_data import INTERFERENCE_METRICS, Comparison
from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import fmt_ms_plain
from infermatrix.core.report.model import Block, Note, Section, Table
from infermatrix.core.report.sections.alike_table import alike_table

__all__ = ["interference_section", "interference_compare_section", "INTERFERENCE_TITLE", "INTERFERENCE_HEADERS"]

INTERFERENCE_TITLE = "Prefill–decode interference"
INTERFERENCE_HEADERS = ("Point", "TBT alone", "TBT during", "TBT p99 during", "Stall max", "Prefill TTFT", "TTFT alone", "Gaps", "Status")
_CAPTION = ("STREAMS@DECODE_CTX + PREFILLS×PREFILL_CTX; ms. TBT: the decoders' token gaps (median), alone: inside the "
            "window with no prompt in the engine, during: overlapping a prompt's send → first token; stall max: the longest "
            "such gap; prefill TTFT: the prompts' median with the decodes running, alone: the same context with nothing "
            "else; gaps: alone/during; more: the interference view")  # fmt: skip
_TITLES = {"tbt_during_ms": "TBT during", "stall_max_ms": "Stall max", "prefill_ttft_ms": "Prefill TTFT", "tbt_alone_ms": "TBT alone"}


def _point(r: dict[str, Any]) -> str:
    rate = f" at {r['prefill_rate']:g}/s" if r.get("prefill_rate") else ""
    return f"{r['decode_streams']}@{format_context(r['decode_context'])} + {r['prefills']}×{format_context(r['prefill_context'])}{rate}"


def _cells(r: dict[str, Any]) -> list[str]:
    return [
        _point(r), fmt_ms_plain(r.get("tbt_alone_ms")), fmt_ms_plain(r.get("tbt_during_ms")), fmt_ms_plain(r.get("tbt_p99_during_ms")),
        fmt_ms_plain(r.get("stall_max_ms")), fmt_ms_plain(r.get("prefill_ttft_ms")), fmt_ms_plain(r.get("prefill_ttft_alone_ms")),
        f"{r.get('alone_gaps') or 0}/{r.get('during_gaps') or 0}", r["status"],
    ]  # fmt: skip


def _note(r: dict[str, Any]) -> str | None:
    if r.get("reason"):
        return f"{r['label']}: {r['status']}: {r['reason']}"
    alone, stall, ttft, ttft_alone = r.get("tbt_alone_ms"), r.get("stall_max_ms"), r.get("prefill_ttft_ms"), r.get("prefill_ttft_alone_ms")
    if r["status"] != "valid" or not alone or stall is None or not ttft_alone or ttft is None:
        return None
    return (f"{r['label']}: a prompt in the engine stalled the decoders up to {stall / alone:.1f}× their gap alone "
            f"({fmt_ms_plain(stall)} vs {fmt_ms_plain(alone)} ms); the prompt's TTFT was {ttft / ttft_alone:.2f}× its TTFT alone.")


def interference_section(d: ReportData) -> Section | None:
    if not d.interference:
        return None
    rows = d.interference
    blocks: list[Block] = [Table(list(INTERFERENCE_HEADERS), [_cells(r) for r in rows], "l" + "r" * 7 + "l", caption=_CAPTION,
                                 name="interference", statuses=[r["status"] for r in rows], status_col=8)]  # fmt: skip
    blocks += [Note(n) for n in (_note(r) for r in rows) if n]
    return Section("interference", INTERFERENCE_TITLE, blocks)


def interference_compare_section(cmp: Comparison) -> Section | None:
    if not cmp.interference:
        return None
    a = cmp.letters[cmp.baseline]
    header, rows = alike_table(cmp, cmp.interference, "Point", _point, INTERFERENCE_METRICS, _TITLES, lambda _col, v: fmt_ms_plain(v))
    caption = (f"interference points valid in {a} and another run, sent alike; ms; other/{a} by the fixed rule (within 2 %: "
               "same; lower is better), a point being one measurement without an interval")  # fmt: skip
    return Section("interference", INTERFERENCE_TITLE, [Table(header, rows, "ll" + "r" * (len(header) - 2), caption=caption, name="interference")])
