"""The reference report's numbers (vLLM, 4xH200, Qwen3.8-Flash-Next), parsed from its text export.

A deliberately small parser for one file's "All measurements" table, so the sim fit and its
rehearsal don't depend on the full importer (src/core/importer/). Rows look like

    | Prefill | 8K | 1 | Valid | 28.1K | — | 292 ms | — | — | 1 | — | — |
    | Sustained decode | 8K | 1 | Valid | 224.2 | 225.7 | 154 ms | 4.4 ms | 1.0 | 1 | 6,726 | 30.0 s |

The file lives outside the repository (``shared/reference/`` next to the checkout, or inside it);
``INFERMATRIX_REFERENCE`` points at another copy.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REFERENCE_NAME", "RefPrefill", "RefCell", "Reference", "find_reference", "parse_reference", "load_reference"]

REFERENCE_NAME = "vllm-h200x4-qwen3.8-flash-next.txt"
_ROOT = Path(__file__).resolve().parents[2]
_STATUS = {"valid": "valid", "looped": "looped", "over capacity": "over_capacity", "error": "error"}


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


def _tokens(label: str) -> int:
    m = re.fullmatch(r"(\d+)K", label.strip())
    if not m:
        raise ValueError(f"not a context label: {label!r}")
    return int(m.group(1)) * 1024


def _num(text: str) -> float | None:
    """``28.1K`` -> 28100, ``1,806 ms`` -> 1806, ``30.0 s`` -> 30, ``—`` -> None."""
    t = text.strip().replace(",", "")
    if t in ("", "—", "-"):
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(K|M)?\s*(ms|s)?", t)
    if not m:
        raise ValueError(f"not a number: {text!r}")
    value = float(m.group(1)) * {None: 1, "K": 1e3, "M": 1e6}[m.group(2)]
    return value


def parse_reference(text: str) -> Reference:
    prefill: dict[int, RefPrefill] = {}
    cells: dict[tuple[int, int], RefCell] = {}
    for line in text.splitlines():
        if not line.startswith("| Prefill |") and not line.startswith("| Sustained decode |"):
            continue
        f = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(f) != 12:
            raise ValueError(f"unexpected row ({len(f)} fields): {line!r}")
        phase, label, n, status = f[0], f[1], int(f[2]), _STATUS[f[3].lower()]
        ctx = _tokens(label)
        if phase == "Prefill":
            if status == "valid":
                prefill[ctx] = RefPrefill(label, ctx, _num(f[4]) or 0.0, _num(f[6]) or 0.0)
            continue
        if status != "valid":
            cells[(ctx, n)] = RefCell(label, ctx, n, status)
            continue
        completed, out = _num(f[9]), _num(f[10])
        cells[(ctx, n)] = RefCell(
            label, ctx, n, status, total_tps=_num(f[4]), per_request_tps=_num(f[5]), ttft_ms=_num(f[6]),
            tbt_ms=_num(f[7]), avg_active=_num(f[8]), completed=None if completed is None else int(completed),
            output_tokens=None if out is None else int(out), measured_s=_num(f[11]),
        )  # fmt: skip
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
