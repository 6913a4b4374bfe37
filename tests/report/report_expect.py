"""Expected report cells, computed from the saved inputs (not from the store)."""

from __future__ import annotations

from pathlib import Path

from infermatrix.core.contexts import format_context
from infermatrix.core.report.fmt import DASH, fmt_float1, fmt_int, fmt_ms, fmt_seconds, fmt_tps, status_label


def long_row(c) -> list[str]:
    """The All measurements row of a decode CellResult."""
    v = c.status == "valid"
    return [
        "Sustained decode", format_context(c.context_tokens), str(c.concurrency), status_label(c.status),
        fmt_tps(c.total_tps) if v else DASH, fmt_tps(c.per_request_tps) if v else DASH,
        fmt_ms(c.ttft_ms) if v else DASH, fmt_ms(c.tbt_ms) if v else DASH,
        fmt_float1(c.avg_active) if v else DASH, fmt_int(c.completed) if v else DASH,
        fmt_int(c.output_tokens) if v else DASH, fmt_seconds(c.measured_s) if v else DASH,
    ]


def prefill_row(p) -> list[str]:
    v = p.status == "valid"
    return [
        "Prefill", format_context(p.context_tokens), "1", status_label(p.status),
        fmt_tps(p.prompt_tps) if v else DASH, DASH, fmt_ms(p.ttft_ms) if v else DASH,
        DASH, DASH, "1" if v else DASH, DASH, DASH,
    ]


def matrix_first_line(c) -> str:
    return fmt_tps(c.total_tps) if c.status == "valid" else status_label(c.status)


def matrix_second_line(c) -> str:
    return f"{fmt_ms(c.ttft_ms)} TTFT" if c.status == "valid" else ""


# A copy of ../shared/reference/vllm-h200x4-qwen3.8-flash-next.txt (CI checkouts have no shared/).
REFERENCE_PAGE = Path(__file__).resolve().parents[1] / "importer" / "data" / "vllm-h200x4-qwen3.8-flash-next.txt"
