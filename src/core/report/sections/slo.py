"""The SLO, capacity, frontier, engine-statistics and SLO-search sections (their tables: core/report/slo_report.py),
and with run labels the frontier charts (HTML); the single-run report and compare both draw these."""

from __future__ import annotations

from infermatrix.core.report.frontier_chart import frontier_charts
from infermatrix.core.report.model import Block, Chart, Charts, Note, Section, Table
from infermatrix.core.report.slo_report import SloReport, gpus_unknown_line, slo_tables, unknown_gpu_runs

__all__ = ["slo_sections", "slug"]


def slug(title: str) -> str:
    """An HTML anchor from a title: ``"SLO capacity" -> "slo-capacity"``."""
    return "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")


def slo_sections(r: SloReport, many_runs: bool = False, labels: dict[str, str] | None = None) -> list[Section]:
    """One section per table; ``labels`` (run id -> legend label) adds the frontier charts, one per context."""
    unknown = unknown_gpu_runs(r)
    out = []
    for t in slo_tables(r, many_runs):
        blocks: list[Block] = [Table(t.header, t.rows, t.align, caption=t.caption, name="slo")]
        if t.title == "SLO capacity" and any(c["run_id"] in unknown for c in r.capacity):  # its tok/s per GPU column
            blocks.append(Note(gpus_unknown_line(unknown, "tok/s per GPU")))
        out.append(Section(slug(t.title), t.title, blocks))
    charts = frontier_charts(r, labels) if labels is not None else []
    blocks = [Charts([Chart(*c) for c in charts])] if charts else []
    if labels is not None and unknown:  # a run left off the charts is said where its chart would be
        blocks.append(Note(gpus_unknown_line(unknown, "the frontier chart (tok/s per GPU against tok/s per user)")))
    if blocks:
        out.append(Section("frontier-charts", "Frontier charts", blocks))
    return out
