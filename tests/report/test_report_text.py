"""The terminal report: header, prefill list, decode matrix, legend, long table."""

from __future__ import annotations

import re

import pytest
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style

from imx_factories import RUN_INFO, fill_run, make_cell
from infermatrix.core.contexts import format_context
from infermatrix.core.report.data import fmt_int, status_label
from infermatrix.core.report.layout import LEGEND, LONG_COLUMNS, TTFT_COLD, TTFT_WARM
from infermatrix.core.report.text import STATUS_STYLES, render_text
from infermatrix.core.store import Store
from report_expect import long_row, matrix_first_line, matrix_second_line, prefill_row


def rendered(store, run_id) -> str:
    console = Console(record=True, width=200)
    render_text(store, run_id, console)
    return console.export_text()


def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│").split("│")]


def long_table(text: str) -> dict[tuple[str, str, str], list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = split_row(line)
        if len(cells) == len(LONG_COLUMNS) and cells[0] in ("Prefill", "Sustained decode"):
            rows[(cells[0], cells[1], cells[2])] = cells
    return rows


def matrix(text: str, concurrencies: list[int]) -> dict[str, tuple[list[str], list[str]]]:
    """Context label -> (first lines, second lines) of the decode matrix."""
    lines = text.splitlines()
    start = lines.index("Sustained decode")
    out, current = {}, None
    for line in lines[start:]:
        if line.startswith("│"):
            cells = split_row(line)
            if len(cells) != 1 + len(concurrencies):
                continue
            if cells[0]:
                current = cells[0]
                out[current] = (cells[1:], None)
            elif current and out[current][1] is None:
                out[current] = (out[current][0], cells[1:])
        elif line.startswith("└"):
            break
    return out


def test_long_table_matches_inputs(filled):
    store, run_id, cells, prefill = filled
    text = rendered(store, run_id)
    assert all(h in text for h in ("Phase", "Requests at once", "Measured for"))
    rows = long_table(text)
    assert len(rows) == len(cells) + len(prefill)
    for c, _ in cells.values():
        assert rows[("Sustained decode", format_context(c.context_tokens), str(c.concurrency))] == long_row(c)
    for p in prefill:
        assert rows[("Prefill", format_context(p.context_tokens), "1")] == prefill_row(p)


def test_matrix_cells(filled):
    store, run_id, cells, _ = filled
    text = rendered(store, run_id)
    concs = sorted({n for _, n in cells})
    ctxs = sorted({c for c, _ in cells})
    got = matrix(text, concs)
    assert list(got) == [format_context(c) for c in ctxs]
    for ctx in ctxs:
        first, second = got[format_context(ctx)]
        want_first = [matrix_first_line(cells[(ctx, n)][0]) if (ctx, n) in cells else "—" for n in concs]
        want_second = [matrix_second_line(cells[(ctx, n)][0]) if (ctx, n) in cells else "" for n in concs]
        assert first == want_first
        assert second == want_second


def test_header(filled):
    store, run_id, cells, prefill = filled
    text = rendered(store, run_id)
    for value in (RUN_INFO["engine"], RUN_INFO["engine_version"], RUN_INFO["model"], RUN_INFO["launch_command"],
                  run_id, RUN_INFO["host"], RUN_INFO["hardware"]["gpu"], RUN_INFO["capacity_source"]):
        assert value in text, value
    assert f"{fmt_int(RUN_INFO['kv_tokens'])} KV tokens" in text
    assert f"{int(RUN_INFO['duration_s'])} s" in text
    assert f"{fmt_int(RUN_INFO['max_output'])} tokens" in text
    assert f"{len({c for c, _ in cells})} contexts" in text
    assert "prefill at " + ", ".join(format_context(p.context_tokens) for p in prefill) in text


def test_legend_only_for_present_statuses(store):
    run_id = store.create_run(dict(RUN_INFO))
    store.save_cell(run_id, make_cell(8192, 1)[0])
    store.save_cell(run_id, make_cell(8192, 2, status="over_capacity", reason="too big")[0])
    text = " ".join(rendered(store, run_id).split())  # a long legend line wraps
    assert f"{status_label('over_capacity')}: {LEGEND['over_capacity']}" in text
    for s in ("looped", "error", "client_bound"):
        assert LEGEND[s] not in text
    assert TTFT_WARM in text


def test_cold_ttft_note(store):
    run_id = store.create_run(dict(RUN_INFO, config={"matrix": {"warmup": False}}))
    store.save_cell(run_id, make_cell(8192, 1)[0])
    text = rendered(store, run_id)
    assert TTFT_COLD in text and TTFT_WARM not in text


def test_reasons_listed(filled):
    store, run_id, cells, _ = filled
    text = " ".join(rendered(store, run_id).split())
    for c, _ in cells.values():
        if c.status != "valid":  # over-capacity cells too: the stored reason says which limit
            assert f"{format_context(c.context_tokens)} × {c.concurrency}: {status_label(c.status)} — {c.reason}" in text


def test_over_capacity_reasons_say_which_limit(store):
    """N above the engine's max sequences and a KV cache too small are different reasons, both shown as stored."""
    from infermatrix.core.run.planning import over_capacity_reason
    from infermatrix.core.types import Capacity

    cap = Capacity(kv_tokens=20_000, max_seqs=4, source="test")
    seqs = over_capacity_reason(1024, 8, 128, cap, None, "distinct")
    kv = over_capacity_reason(8192, 4, 128, cap, None, "distinct")
    assert "max sequences 4" in seqs and "KV tokens" in kv
    run_id = store.create_run(dict(RUN_INFO))
    store.save_cell(run_id, make_cell(1024, 8, status="over_capacity", reason=seqs)[0])
    store.save_cell(run_id, make_cell(8192, 4, status="over_capacity", reason=kv)[0])
    text = " ".join(rendered(store, run_id).split())
    assert f"1K × 8: {status_label('over_capacity')} — {seqs}" in text
    assert f"8K × 4: {status_label('over_capacity')} — {kv}" in text
    assert "maximum number of sequences" in text and "KV cache" in text  # the legend names both


def test_statuses_have_distinct_styles(filled):
    store, run_id, cells, _ = filled
    styles = [STATUS_STYLES[s] for s in ("looped", "over_capacity", "error", "client_bound", "interrupted")]
    assert len(set(styles)) == len(styles) and all(styles)
    console = Console(record=True, width=200, force_terminal=True, color_system="standard")
    render_text(store, run_id, console)
    ansi = console.export_text(styles=True)
    for status in {c.status for c, _ in cells.values()} - {"valid"}:
        label = status_label(status)
        on, off = Style.parse(STATUS_STYLES[status]).render(label, color_system=ColorSystem.STANDARD).split(label)
        # the table pads the styled cell, so spaces may sit inside the style
        assert re.search(re.escape(on + label) + r" *" + re.escape(off), ansi), status


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_report_reads_only_the_database(tmp_path):
    path = tmp_path / "r.duckdb"
    with Store(path) as s:
        run_id, cells, _ = fill_run(s)
        before = rendered(s, run_id)
    with Store(path, read_only=True) as s:  # a new process would see the same
        after = rendered(s, None)
        # change a stored number: the report follows the database, not any in-memory result
    with Store(path) as s:
        s.query("UPDATE cells SET total_tps = 123456.0 WHERE run_id = ? AND context_tokens = 8192 AND concurrency = 1", [run_id])
        changed = rendered(s, run_id)
    assert before == after
    assert "123.5K" in changed and "123.5K" not in before


def test_run_without_results(store):
    run_id = store.create_run({"engine": "sim", "model": "tiny"})
    text = rendered(store, run_id)
    assert "No measurements saved" in text and run_id in text and "tiny" in text


def test_compact_table_below_wide(filled):
    store, run_id, cells, prefill = filled
    console = Console(record=True, width=120)
    render_text(store, run_id, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 120
    for c, _ in cells.values():
        row = long_row(c)
        row[0] = "Decode"
        assert re.search(r"\s+".join(re.escape(x) for x in row), text), row
    for p in prefill:
        assert re.search(r"\s+".join(re.escape(x) for x in prefill_row(p)), text)


def test_one_line_per_measurement_when_narrow(filled):
    store, run_id, cells, _ = filled
    console = Console(record=True, width=80)
    render_text(store, run_id, console)
    flat = " ".join(console.export_text().split())
    for c, _ in cells.values():
        row = long_row(c)
        head = f"Sustained decode {row[1]} × {row[2]}: {row[3]}"
        assert head in flat
        if c.status == "valid":
            assert f"{head} · {row[4]} tok/s total · {row[5]} per request · TTFT {row[6]} · TBT {row[7]}" in flat


def test_header_shows_the_wall_time_split(filled):
    store, run_id, _, _ = filled
    assert "Wall time" not in rendered(store, run_id)  # runs stored before the accounting: no line
    store.update_run(run_id, phase_seconds={"engine": 2.0, "prefill": 3.0, "warm-up": 4.0, "ramp": 1.0, "measure": 60.0, "verdict": 4.0})
    text = rendered(store, run_id)
    line = next(ln for ln in text.splitlines() if "Wall time" in ln)
    assert "85 % measuring, 7 % warm-up, 8.1 % harness overhead (of 74 s)" in line
