"""The reference report's numbers (vLLM, 4xH200, Qwen3.8-Flash-Next), parsed from its text export.

The rows come from the importer's parser (``infermatrix.core.importer.page_text.parse_page``, which
also checks the matrix and prefill list against the long table), shaped for the fit and its rehearsal.

The file lives outside the repository (``shared/reference/`` next to the checkout, or inside it);
``INFERMATRIX_REFERENCE`` points at another copy.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from infermatrix.core.contexts import format_context
from infermatrix.core.importer.page_text import parse_page

__all__ = ["REFERENCE_NAME", "RefPrefill", "RefCell", "Reference", "find_reference", "parse_reference", "load_reference"]

REFERENCE_NAME = "vllm-h200x4-qwen3.8-flash-next.txt"
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RefPrefill:
    context_label: str
    context_tokens: int
    prompt_tps: float
    ttft_ms: float


@dataclass(frozen=True)
class RefCell:
    context_label: str
    context_tokens: int
    concurrency: int
    status: str  # valid | looped | over_capacity | error
    total_tps: float | None = None
    per_request_tps: float | None = None
    ttft_ms: float | None = None
    tbt_ms: float | None = None
    avg_active: float | None = None
    completed: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None


@dataclass
class Reference:
    model: str | None
    max_model_len: int | None
    duration_s: float | None
    max_output: int | None
    prefill: dict[int, RefPrefill]
    cells: dict[tuple[int, int], RefCell]

    @property
    def contexts(self) -> list[int]:
        return sorted({c for c, _ in self.cells})

    @property
    def concurrency(self) -> list[int]:
        return sorted({n for _, n in self.cells})

    def with_status(self, status: str) -> set[tuple[int, int]]:
        return {k for k, c in self.cells.items() if c.status == status}


def parse_reference(text: str) -> Reference:
    """The page's rows through the project's own importer parser; the run settings from its text."""
    page = parse_page(text)
    prefill = {
        r.context_tokens: RefPrefill(format_context(r.context_tokens), r.context_tokens, r.total_tps or 0.0, r.ttft_ms or 0.0)
        for r in page.prefill
        if r.status == "valid"
    }
    cells = {
        (r.context_tokens, r.concurrency): RefCell(
            format_context(r.context_tokens), r.context_tokens, r.concurrency, r.status,
            **({} if r.status != "valid" else {
                "total_tps": r.total_tps, "per_request_tps": r.per_request_tps, "ttft_ms": r.ttft_ms,
                "tbt_ms": r.tbt_ms, "avg_active": r.avg_active, "completed": r.completed,
                "output_tokens": r.output_tokens, "measured_s": r.measured_s,
            }),
        )  # fmt: skip
        for r in page.decode
    }
    if not cells or not prefill:
        raise ValueError("no 'All measurements' rows found")
    model = re.search(r"--served-model-name\s+(\S+)", text)
    mml = re.search(r"--max-model-len\s+(\d+)", text)
    dur = re.search(r"Time per measurement\s*\n-\s*([0-9.]+)\s*s", text)
    mo = re.search(r"Max output\s*\n-\s*([0-9,]+)\s*tokens", text)
    return Reference(
        model=model.group(1) if model else None,
        max_model_len=int(mml.group(1)) if mml else None,
        duration_s=float(dur.group(1)) if dur else None,
        max_output=int(mo.group(1).replace(",", "")) if mo else None,
        prefill=prefill,
        cells=cells,
    )


def find_reference() -> Path | None:
    """The reference text file: ``$INFERMATRIX_REFERENCE``, else ``shared/reference/`` in or beside the checkout."""
    env = os.environ.get("INFERMATRIX_REFERENCE")
    candidates = [Path(env)] if env else []
    candidates += [_ROOT / "shared" / "reference" / REFERENCE_NAME, _ROOT.parent / "shared" / "reference" / REFERENCE_NAME,
                   # the copy the importer tests keep (checked against the shared one when both exist)
                   _ROOT / "tests" / "importer" / "data" / REFERENCE_NAME]
    return next((p for p in candidates if p.is_file()), None)


def load_reference(path: str | Path | None = None) -> Reference:
    p = Path(path) if path is not None else find_reference()
    if p is None:
        raise FileNotFoundError(f"reference report {REFERENCE_NAME} not found (set INFERMATRIX_REFERENCE)")
    return parse_reference(p.read_text())
