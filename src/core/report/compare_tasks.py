"""Two runs' task results compared (the tasks workload; docs/workloads.md, "Comparing two runs' answers").

Per task set: when both runs judged the same tasks (the same task ids, e.g. the built-in set from one seed, or one
task file), the tasks are paired and the exact McNemar test reads the tasks one run got right and the other wrong;
otherwise (an auto-stop ended them at different counts, different files) the two accuracies are compared by the
pooled two-proportion z test. Either way: the test's name, its p-value, and a verdict — ``same`` unless p < 0.05,
then ``more accurate`` / ``less accurate`` (B against A). The natural length is compared beside it (B's mean
output tokens / A's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infermatrix.core.report.fmt import DASH, fmt_p, fmt_pct, fmt_ratio
from infermatrix.core.report.query import view_rows
from infermatrix.core.store import Store
from infermatrix.core.tasks.stats import SIGNIFICANCE, mcnemar_exact, two_proportions

__all__ = ["TaskComparison", "compare_tasks", "task_compare_rows", "TASK_COMPARE_HEADERS", "TASK_COMPARE_CAPTION"]

TASK_COMPARE_HEADERS = ("Task set", "Tasks A", "Accuracy A", "Tasks B", "Accuracy B", "Test", "A only right", "B only right",
                        "p-value", "Verdict", "Output B/A")  # fmt: skip
TASK_COMPARE_CAPTION = ("tasks: paired by task id with the exact McNemar test when both runs judged the same tasks, "
                        "else the two-proportion z test; a difference at p < 0.05 is a verdict, else 'same'")  # fmt: skip


@dataclass
class TaskComparison:
    task_set: str
    a: dict[str, Any]  # the task_results rows
    b: dict[str, Any]
    test: str  # mcnemar-exact | two-proportion-z
    p_value: float | None
    verdict: str  # same | more accurate | less accurate | not comparable
    a_only: int | None = None  # McNemar: tasks right in A only
    b_only: int | None = None
    output_ratio: float | None = None  # B's mean output tokens / A's


def _judged(store: Store, run_id: str) -> dict[str, dict[str, bool]]:
    rows = view_rows(store, "SELECT t.task_set, t.task_id, t.correct FROM task_requests t JOIN workload_requests r USING (run_id, request_no) "
                            "WHERE t.run_id = ? AND r.outcome = 'ok'", [run_id])  # fmt: skip
    out: dict[str, dict[str, bool]] = {}
    for r in rows:
        out.setdefault(r["task_set"], {})[r["task_id"]] = bool(r["correct"])
    return out


def _one(task_set: str, a: dict[str, Any], b: dict[str, Any], ja: dict[str, bool], jb: dict[str, bool]) -> TaskComparison:
    a_only: int | None = None
    b_only: int | None = None
    p: float | None
    if ja and ja.keys() == jb.keys():
        a_only = sum(ja[k] and not jb[k] for k in ja)
        b_only = sum(jb[k] and not ja[k] for k in ja)
        test, p, diff = "mcnemar-exact", mcnemar_exact(a_only, b_only), b_only - a_only
    else:
        test, p = "two-proportion-z", two_proportions(a["correct"], a["n"], b["correct"], b["n"])
        diff = (b["accuracy"] or 0) - (a["accuracy"] or 0)
    verdict = "not comparable" if p is None else "same" if p >= SIGNIFICANCE or diff == 0 else "more accurate" if diff > 0 else "less accurate"
    ma, mb = a.get("output_tokens_mean"), b.get("output_tokens_mean")
    return TaskComparison(task_set, a, b, test, p, verdict, a_only, b_only, mb / ma if ma and mb is not None else None)


def compare_tasks(store: Store, run_a: str, run_b: str) -> list[TaskComparison]:
    """Each task set both runs judged, compared (empty when either has no tasks)."""
    rows_a = {r["task_set"]: r for r in view_rows(store, "SELECT * FROM task_results WHERE run_id = ?", [run_a])}
    rows_b = {r["task_set"]: r for r in view_rows(store, "SELECT * FROM task_results WHERE run_id = ?", [run_b])}
    if not rows_a or not rows_b:
        return []
    ja, jb = _judged(store, run_a), _judged(store, run_b)
    return [_one(s, rows_a[s], rows_b[s], ja.get(s, {}), jb.get(s, {})) for s in sorted(rows_a.keys() & rows_b.keys())]


def task_compare_rows(found: list[TaskComparison]) -> list[list[str]]:
    """The rows every comparison format shows (text, Markdown, HTML); JSON has the numbers."""
    def count(v: int | None) -> str:
        return DASH if v is None else str(v)

    return [[t.task_set, str(t.a["n"]), fmt_pct(t.a["accuracy"]), str(t.b["n"]), fmt_pct(t.b["accuracy"]), t.test, count(t.a_only),
             count(t.b_only), fmt_p(t.p_value), t.verdict, fmt_ratio(t.output_ratio)]
            for t in found]  # fmt: skip
