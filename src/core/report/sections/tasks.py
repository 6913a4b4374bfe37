"""The task section (the ``tasks`` workload; docs/workloads.md, docs/metrics.md "Task accuracy"): per task set the
accuracy with its Wilson interval and the natural length of the completions (the task_results rows ReportData
loaded). Every format draws it; JSON has the rows under ``workload.tasks``."""

from __future__ import annotations

from typing import Any

from infermatrix.core.report.data import ReportData
from infermatrix.core.report.fmt import DASH, fmt_float1, fmt_int, fmt_pct
from infermatrix.core.report.model import Paragraph, Section, Styled, Table

__all__ = ["tasks_section", "task_cells", "TASK_HEADERS", "TASK_CAPTION"]

TASK_HEADERS = ("Task set", "Tasks", "Correct", "Accuracy", "95 % interval", "Output mean", "Mean 95 % interval", "p50", "p90",
                "Reasoning", "Cut at max")  # fmt: skip
TASK_CAPTION = ("sent without ignore_eos: output tokens are each completion's natural length (the server's count); "
                "accuracy interval Wilson's, the mean's Student t")  # fmt: skip


def _interval(lo: float | None, hi: float | None, fmt: Any) -> str:
    return DASH if lo is None or hi is None else f"{fmt(lo)} – {fmt(hi)}"


def task_cells(t: dict[str, Any]) -> list[str]:
    return [str(t["task_set"]), str(t["n"]), str(t["correct"]), fmt_pct(t.get("accuracy")),
            _interval(t.get("accuracy_lo"), t.get("accuracy_hi"), fmt_pct), fmt_float1(t.get("output_tokens_mean")),
            _interval(t.get("output_tokens_lo"), t.get("output_tokens_hi"), fmt_float1), fmt_int(t.get("output_tokens_p50")),
            fmt_int(t.get("output_tokens_p90")), fmt_float1(t.get("reasoning_tokens_mean")), str(t.get("truncated") or 0)]  # fmt: skip


def tasks_section(d: ReportData) -> Section | None:
    rows, r = d.workload.tasks, d.workload.reuse
    if not rows or r is None:
        return None
    stopped = rows[0].get("stopped_by") or "?"
    head = Paragraph([f"{r['requests']} requests, {r['failed']} failed · ", Styled(r["status"], r["status"]), f" · stopped: {stopped}"])
    table = Table(list(TASK_HEADERS), [task_cells(t) for t in rows], "l" + "r" * (len(TASK_HEADERS) - 1), caption=TASK_CAPTION)
    table.name = "tasks"
    return Section("tasks", "Tasks: accuracy and natural length", [head, table])
