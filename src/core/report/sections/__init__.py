"""A run's report as sections (core/report/model.py), in the order every format shows them; one module per
section builds its tables and notes from the rows ReportData loaded, so every number has one implementation.

The text (rich), Markdown and HTML renderers draw these same sections; ``charts=True`` (HTML) adds the charts."""

from __future__ import annotations

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.model import Section
from infermatrix.core.report.sections.answer import answer_section
from infermatrix.core.report.sections.burst import burst_section
from infermatrix.core.report.sections.interference import interference_section
from infermatrix.core.report.sections.charts import charts_section
from infermatrix.core.report.sections.decode import decode_section
from infermatrix.core.report.sections.measurements import measurements_section, nothing_section
from infermatrix.core.report.sections.openloop import openloop_section
from infermatrix.core.report.sections.prefill import prefill_section
from infermatrix.core.report.sections.slo import slo_sections
from infermatrix.core.report.sections.tasks import tasks_section
from infermatrix.core.report.sections.telemetry import telemetry_section
from infermatrix.core.report.sections.trace import trace_section
from infermatrix.core.report.sections.workload import workload_section

__all__ = ["report_sections", "slo_sections"]


def report_sections(d: ReportData, charts: bool = False) -> list[Section]:
    """The run's sections after its header: prefill, the decode matrix, (charts), the SLO sections, the engine and GPU
    telemetry, all measurements, time to first answer token (reasoning runs), open-loop points, bursts, interference points, trace replay,
    the workload pass, judged tasks; or a notice that nothing was measured. Those a run lacks are left out."""
    labels = {d.run_id: f"{d.run_id} ({d.run.get('engine') or '?'})"} if charts else None
    found = [
        prefill_section(d), decode_section(d), charts_section(d) if charts else None, *slo_sections(d.slo, labels=labels),
        telemetry_section(d, charts), measurements_section(d), answer_section(d), openloop_section(d, charts), burst_section(d),
        interference_section(d),
        trace_section(d), workload_section(d), tasks_section(d),
        nothing_section(d),
    ]  # fmt: skip
    return [s for s in found if s is not None]
