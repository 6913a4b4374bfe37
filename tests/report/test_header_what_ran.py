"""issue 27 item 8: the run header describes only what ran. A run of load points or a trace alone has no matrix
lines (window, max output, prompt mode of a matrix that never ran); each kind of point says what it used. Read back
from a real DuckDB file, and the lines a run prints as it starts (from its validated config)."""

from __future__ import annotations

from infermatrix.core.registry import validate_config
from infermatrix.core.report.data import load_report
from infermatrix.core.report.layout import header_sections
from infermatrix.core.report.markdown import render_markdown
from infermatrix.core.store import Store
from infermatrix.core.store.points import save_point
from infermatrix.testing import plugin_manager

MATRIX_ROWS = {"Decode test", "Time per measurement", "Max output", "Prompt mode"}
ENGINE = {"kind": "openai", "base_url": "http://127.0.0.1:9"}
POINT = {"arrival": "constant", "duration_s": 3.0, "context_tokens": 1024, "max_output": 32, "scheduled": 12, "sent": 12,
         "completed": 12, "status": "valid"}  # fmt: skip
TRACE = {**POINT, "point": 2, "label": "trace t.jsonl", "arrival": "trace", "requested_rate": 2.0, "context_tokens": None,
         "max_output": None, "duration_s": 4.0,
         "trace": {"path": "/x/t.jsonl", "format": "mooncake", "time_scale": 0.5, "replayed": 8, "prompt_tokens": 20000,
                   "shared_prefix_tokens": 11776}}  # fmt: skip


def _run(s: Store, matrix: dict, load: list[dict]) -> str:
    cfg = validate_config(plugin_manager(), {"engine": ENGINE, "matrix": matrix, "load": load}, "t")
    return s.create_run({"engine": "openai", "status": "completed", "config": cfg.model_dump(mode="json"),
                         "duration_s": cfg.matrix.duration_s, "max_output": cfg.matrix.max_output,
                         "prompt_mode": cfg.matrix.prompt_mode, "api": "completions"})  # fmt: skip


def _fields(s: Store, run: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for _, rows in header_sections(load_report(s, run)):
        for k, v in rows:
            out.setdefault(k, []).append(v)
    return out


def test_a_load_and_trace_run_has_no_matrix_lines_and_says_what_each_point_used(tmp_path):
    load = [{"rate": 4, "arrival": "constant", "duration_s": 3, "max_output": 32},
            {"rate": 8, "arrival": "constant", "duration_s": 3, "max_output": 32}]  # fmt: skip
    with Store(tmp_path / "r.duckdb") as s:
        run = _run(s, {"contexts": [], "prefill_contexts": []}, load)
        for i, rate in enumerate((4.0, 8.0)):
            save_point(s, run, {**POINT, "point": i, "label": f"constant@{rate:g}/s 1K", "requested_rate": rate}, [])
        save_point(s, run, TRACE, [])
        fields = _fields(s, run)
        md = render_markdown(s, run)
        matrix_run = _run(s, {"contexts": ["1K"], "concurrency": [1], "max_output": 64, "duration_s": 5}, [])
        with_matrix = _fields(s, matrix_run)
    assert not MATRIX_ROWS & set(fields), fields  # "Time per measurement 30 s", "Max output 4,096 tokens" ... were shown
    assert fields["Open-loop points"] == [
        "4, 8/s · constant arrivals · 3 s of arrivals · 1K prompts · distinct prompts (no prefix shared) · max output 32 tokens"]
    (trace,) = fields["Trace replay"]
    assert trace.startswith("t.jsonl ×0.5 · 8 requests · each request's own prompt length and max output (the trace's)")
    assert "11,776 of 20,000 prompt tokens shared with earlier requests" in trace
    assert "Time per measurement" not in md and "**Open-loop points**" in md
    # A run with a matrix keeps its lines (and says the matrix's own values).
    assert with_matrix["Time per measurement"] == ["5 s"] and with_matrix["Max output"] == ["64 tokens"]
    assert "Open-loop points" not in with_matrix


def test_the_lines_a_run_prints_as_it_starts_say_only_what_runs():
    from infermatrix.core.load.points import plan_lines  # issue 27: new (a run printed no plan at all)

    pm = plugin_manager()
    only_points = validate_config(pm, {"engine": ENGINE, "matrix": {"contexts": [], "prefill_contexts": []},
                                       "load": [{"rate": 4, "arrival": "constant", "duration_s": 3, "max_output": 32}]}, "t")  # fmt: skip
    assert plan_lines(only_points) == [
        "point 0: 4/s · constant arrivals · 3 s of arrivals · 1K prompts · distinct prompts (no prefix shared) · max output 32 tokens"]
    both = validate_config(pm, {"engine": ENGINE, "matrix": {"contexts": ["1K", "2K"], "concurrency": [1, 4], "duration_s": 5,
                                                             "max_output": 64}, "load": [{"rate": 2, "context": "2K"}]}, "t")  # fmt: skip
    assert plan_lines(both) == [
        "matrix: 2 contexts × 2 concurrencies · 5 s per cell · max output 64 tokens · distinct prompts (no prefix shared)",
        "point 0: 2/s · poisson arrivals · 30 s of arrivals · 2K prompts · distinct prompts (no prefix shared) · max output 256 tokens",
    ]
