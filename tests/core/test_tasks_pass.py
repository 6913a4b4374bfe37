"""The tasks workload against the sim (issue 31 item 2): real HTTP, a real DuckDB file, and the sim's own record
(``/debug/truth``: the answer it gave each task, whether that was right, the tokens it emitted) as truth. The sim
is told its accuracy (``task_accuracy``) and natural length (``natural_tokens``); the stored accuracy and token
statistics are checked against those, and every stored judgement against what the sim did."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from infermatrix.core.report.compare import render_compare_markdown, render_compare_text
from infermatrix.core.report.compare_html import render_compare_html
from infermatrix.core.report.html import render_html
from infermatrix.core.report.json_report import render_compare_json, render_json
from infermatrix.core.report.markdown import render_markdown
from infermatrix.core.report.text import render_text
from infermatrix.core.store import open_store
from infermatrix.core.tasks.builtin import make_tasks
from infermatrix.core.tasks.stats import mean_interval
from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow


def _tasks_run(sim, workload: dict, db=None, api: str = "completions"):
    r = run_matrix({"kind": "sim", "base_url": sim.base_url}, matrix={"contexts": [], "workload": "tasks", "api": api},
                   config={"workload": workload}, db=db)  # fmt: skip
    assert r.status == "completed", (r.error, r.output)
    return r


def _per_task(r) -> list[dict]:
    return r.query("SELECT t.*, w.request_id, w.output_tokens, w.outcome, w.reply FROM task_requests t "
                   f"JOIN workload_requests w USING (run_id, request_no) WHERE run_id = '{r.run_id}' ORDER BY request_no")  # fmt: skip


def _nearest_rank(values: list[int], q: float) -> int:
    ranked = sorted(values)
    return ranked[max(1, math.ceil(round(q * len(ranked), 6))) - 1]  # as views.sql's nearest_rank


def test_accuracy_and_natural_length_match_what_the_sim_was_told() -> None:
    # One task at a time: the sim's per-request draws follow its request ids, so the run is the same every time.
    with sim_server("tiny", natural_tokens=[20, 60], task_accuracy=0.7, reasoning_tokens=6) as sim:
        r = _tasks_run(sim, {"tasks": 100, "max_tokens": 300, "concurrency": 1}, api="chat")
        truth = {t["request_id"]: t for t in sim.truth()["requests"]}
    rows = _per_task(r)
    assert len(rows) == 100 and all(q["outcome"] == "ok" for q in rows)
    for q in rows:  # every judgement is what the sim did: its answer, right or wrong, and its tokens
        seen = truth[q["request_id"]]
        assert q["correct"] == seen["task_correct"] and q["extracted"] == seen["answered"], (q, seen)
        assert q["output_tokens"] == seen["output_tokens"] and q["finish_reason"] == "stop"
        assert 20 <= q["output_tokens"] <= 60 and q["reasoning_tokens"] == 6
    (res,) = r.query("SELECT * FROM task_results")
    assert list(res)[:12] == ["run_id", "point", "task_set", "n", "correct", "accuracy", "accuracy_lo", "accuracy_hi",
                              "output_tokens_mean", "output_tokens_p50", "output_tokens_p90", "reasoning_tokens_mean"]  # fmt: skip
    assert res["task_set"] == "builtin" and res["n"] == 100 and res["correct"] == sum(q["correct"] for q in rows)
    assert res["accuracy_lo"] <= 0.7 <= res["accuracy_hi"]  # the sim's accuracy inside the stored Wilson interval
    assert res["output_tokens_lo"] <= 40 <= res["output_tokens_hi"]  # the mean of uniform [20, 60]
    tokens = [q["output_tokens"] for q in rows]
    assert res["output_tokens_mean"] == pytest.approx(sum(seen["output_tokens"] for seen in truth.values()) / 100)
    assert (res["output_tokens_p50"], res["output_tokens_p90"]) == (_nearest_rank(tokens, 0.5), _nearest_rank(tokens, 0.9))
    assert res["reasoning_tokens_mean"] == 6 and res["stopped_by"] == "all tasks sent" and res["truncated"] == 0
    assert sum(1 for t in truth.values() if t.get("task_answer") is not None) == 100  # the sim saw 100 tasks


def test_auto_stop_ends_the_pass_when_the_interval_is_narrow_enough() -> None:
    with sim_server("tiny", natural_tokens=[20, 60]) as sim:
        r = _tasks_run(sim, {"tasks": 300, "max_tokens": 200, "concurrency": 1, "stop_when_ci_below": 0.2, "min_tasks": 10})
        received = len(sim.truth()["requests"])
    rows = _per_task(r)
    n = len(rows)
    assert 10 <= n < 300 and received == n  # the sim got exactly the tasks the store holds
    tokens = [float(q["output_tokens"]) for q in rows]
    mean, lo, hi = mean_interval(tokens)
    assert (hi - lo) / mean < 0.2  # narrower than asked when it stopped ...
    if n > 10:
        m0, lo0, hi0 = mean_interval(tokens[:-1])
        assert (hi0 - lo0) / m0 >= 0.2  # ... and not one task earlier
    (res,) = r.query("SELECT * FROM task_results")
    assert res["n"] == n and res["output_tokens_lo"] == pytest.approx(lo) and res["output_tokens_hi"] == pytest.approx(hi)
    assert res["stopped_by"].startswith("interval of output_tokens")


def _text(fn, *args) -> str:
    out = io.StringIO()
    fn(*args, Console(file=out, width=220, color_system=None))
    return out.getvalue()


def test_compare_pairs_the_same_tasks_with_mcnemar_and_reports_in_every_format(tmp_path) -> None:
    db = tmp_path / "runs.duckdb"
    with sim_server("tiny", natural_tokens=[10, 30], task_accuracy=0.95) as sim:
        a = _tasks_run(sim, {"tasks": 60, "max_tokens": 100}, db=db)
    with sim_server("tiny", natural_tokens=[10, 30], task_accuracy=0.3) as sim:
        b = _tasks_run(sim, {"tasks": 60, "max_tokens": 100}, db=db)
    with sim_server("tiny", natural_tokens=[10, 30], task_accuracy=0.95) as sim:
        c = _tasks_run(sim, {"tasks": 30, "max_tokens": 100}, db=db)  # other tasks: not paired
    store = open_store(str(db), read_only=True)
    try:
        cmp = render_compare_json(store, [a.run_id, b.run_id, c.run_id])
        md = render_compare_markdown(store, [a.run_id, b.run_id])
        html = render_compare_html(store, [a.run_id, b.run_id])
        text = _text(render_compare_text, store, [a.run_id, b.run_id])
        report = json.loads(json.dumps(render_json(store, a.run_id)))
        one = [render_markdown(store, a.run_id), render_html(store, a.run_id), _text(render_text, store, a.run_id)]
    finally:
        store.close()
    (ab,) = cmp["pairs"][0]["tasks"]
    ja, jb = ({q["task_id"]: q["correct"] for q in _per_task(x)} for x in (a, b))
    assert ab["test"] == "mcnemar-exact" and ab["verdict"] == "less accurate" and ab["p_value"] < 0.001
    assert (ab["a_only_right"], ab["b_only_right"]) == (sum(ja[k] and not jb[k] for k in ja), sum(jb[k] and not ja[k] for k in ja))
    (ac,) = cmp["pairs"][1]["tasks"]
    assert ac["test"] == "two-proportion-z" and ac["a_only_right"] is None and ac["b"]["n"] == 30
    for page in (md, html, text):
        assert "mcnemar-exact" in page and "less accurate" in page
    assert report["workload"]["tasks"][0]["n"] == 60 and report["workload"]["reuse"]["workload"] == "tasks"
    for page in one:
        assert "Tasks: accuracy and natural length" in page and "natural length: sent without ignore_eos" in page


def test_a_task_file_is_judged_by_answer_and_by_regex(tmp_path) -> None:
    built = make_tasks(5, 8)
    lines = [{"id": f"q{i}", "prompt": t.prompt, **({"answer": t.answer} if i % 2 else {"regex": r"Answer: (\S.*)$"})}
             for i, t in enumerate(built)]  # fmt: skip
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with sim_server("tiny", natural_tokens=25, task_accuracy=1.0) as sim:
        r = _tasks_run(sim, {"file": str(path), "max_tokens": 100, "concurrency": 4})
    rows = {q["task_id"]: q for q in _per_task(r)}
    assert len(rows) == 8 and all(q["task_set"] == "mine.jsonl" and q["correct"] for q in rows.values())
    assert all(q["output_tokens"] == 25 for q in rows.values())  # a fixed natural length
    assert rows["q0"]["regex"] and rows["q0"]["extracted"] == built[0].answer and rows["q1"]["expected"] == built[1].answer
