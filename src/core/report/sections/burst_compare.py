"""The comparison's Bursts section: each burst the baseline A and another run both ran alike (same requests,
concurrency, context, max output, stop rule), valid in both — time, output tok/s, e2e p99 and TTFT p99 side by side
with B/A and its word by the fixed rule (a burst is one measurement, so no interval; docs/load.md, "Bursts")."""

from __future__ import annotations

from infermatrix.core.contexts import format_context
from infermatrix.core.report.compare_data import BURST_METRICS, Comparison
from infermatrix.core.report.fmt import fmt_ms_plain, fmt_span, fmt_tps
from infermatrix.core.report.model import Section, Table
from infermatrix.core.report.sections.alike_table import alike_table

__all__ = ["burst_compare_section"]

_TITLES = {"duration_s": "Time", "output_tps": "Out tok/s", "e2e_p99_ms": "E2E p99", "ttft_p99_ms": "TTFT p99"}
_FMT = {"duration_s": fmt_span, "output_tps": fmt_tps, "e2e_p99_ms": fmt_ms_plain, "ttft_p99_ms": fmt_ms_plain}


def _label(r: dict) -> str:
    return f"{r['requests']}@{r['concurrency']} {format_context(r['context_tokens'])}"


def burst_compare_section(cmp: Comparison) -> Section | None:
    if not cmp.bursts:
        return None
    a = cmp.letters[cmp.baseline]
    header, rows = alike_table(cmp, cmp.bursts, "Burst", _label, BURST_METRICS, _TITLES, lambda col, v: _FMT[col](v))
    caption = (f"bursts valid in {a} and another run, sent alike; other/{a} by the fixed rule (within 2 %: same), a burst being one "
               "measurement without an interval; latencies in ms from each request's send")  # fmt: skip
    return Section("bursts", "Bursts", [Table(header, rows, "ll" + "r" * (len(header) - 2), caption=caption, name="bursts")])
