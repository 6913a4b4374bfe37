"""The Markdown report: well-formed GitHub tables with the same content as the text report."""

from __future__ import annotations

import re

from imx_factories import RUN_INFO, make_cell
from infermatrix.core.contexts import format_context
from infermatrix.core.report.layout import LONG_COLUMNS
from infermatrix.core.report.markdown import md_escape, md_table, render_markdown
from report_expect import long_row, matrix_first_line, matrix_second_line, prefill_row


def cells_of(line: str) -> list[str]:
    inner = line.strip()
    assert inner.startswith("|") and inner.endswith("|"), line
    parts = re.split(r"(?<!\\)\|", inner[1:-1])
    return [p.strip().replace("\\|", "|").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") for p in parts]


def tables(md: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table: (header, rows); asserts GitHub table syntax on the way."""
    out, block = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            header, rule, *rows = block
            h = cells_of(header)
            r = cells_of(rule)
            assert len(r) == len(h) and all(re.fullmatch(r":?-{3,}:?", x) for x in r), rule
            parsed = [cells_of(x) for x in rows]
            assert all(len(x) == len(h) for x in parsed), block
            out.append((h, parsed))
            block = []
    return out


def test_markdown_tables_parse_and_match(filled):
    store, run_id, cells, prefill = filled
    md = render_markdown(store, run_id)
    assert md.startswith("# Speed test matrix")
    found = tables(md)
    long = [rows for header, rows in found if header == list(LONG_COLUMNS)]
    assert len(long) == 1
    expected = [prefill_row(p) for p in sorted(prefill, key=lambda p: p.context_tokens)]
    expected += [long_row(c) for c, _ in sorted(cells.values(), key=lambda x: (x[0].context_tokens, x[0].concurrency))]
    assert long[0] == expected

    concs = sorted({n for _, n in cells})
    matrix = [rows for header, rows in found if header == ["Context", *map(str, concs)]]
    assert len(matrix) == 1
    for row in matrix[0]:
        ctx = next(c for c, _ in cells if format_context(c) == row[0])
        for n, shown in zip(concs, row[1:]):
            if (ctx, n) not in cells:
                assert shown == "—"
                continue
            c = cells[(ctx, n)][0]
            if c.status == "valid":
                assert shown == f"{matrix_first_line(c)}<br>{matrix_second_line(c)}"
            else:
                assert shown == f"*{matrix_first_line(c)}*"

    prefill_table = [rows for header, rows in found if header[:2] == ["Context", "Prompt tok/s"]]
    assert [r[0] for r in prefill_table[0]] == [f"{format_context(p.context_tokens)} context" for p in prefill]


def test_launch_command_in_fence_and_redaction_visible(filled):
    store, run_id, _, _ = filled
    md = render_markdown(store, run_id)
    assert f"```sh\n{RUN_INFO['launch_command']}\n```" in md


def test_escaping_keeps_tables_intact(store):
    run_id = store.create_run(dict(RUN_INFO, hardware={"gpu": "A|B <x>"}, notes="line1\nline2 | x"))
    c, _ = make_cell(8192, 1, status="error", reason="bad | pipe")
    store.save_cell(run_id, c)
    md = render_markdown(store, run_id)
    found = tables(md)  # asserts every row has the header's cell count
    values = [row[1] for header, rows in found for row in rows if row and row[0] in ("**GPU**", "**Notes**")]
    assert "A|B <x>" in values and "line1 line2 | x" in values


def test_md_table_helpers():
    t = md_table(["a", "b"], [["1", "x|y"]], "lr")
    assert t.splitlines()[1] == "| --- | ---: |"
    assert tables(t) == [(["a", "b"], [["1", "x|y"]])]
    assert md_escape("<redacted>") == "&lt;redacted&gt;"
