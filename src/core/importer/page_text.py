"""Reading the text of a published "Speed test matrix" page (the reference report's layout).

The text is what a browser gives when the page is copied or saved as text: headings, ``- key`` /
``- value`` lists, and tables as ``| a | b |`` lines. Copying glues some pieces together (a
heading to the end of the line before it, a table to its caption, a matrix cell's tok/s to its
TTFT: ``224.2154 ms TTFT`` is 224.2 tok/s and 154 ms), and this module takes them apart again.

``parse_page(text)`` returns a :class:`PublishedPage`; every number is as printed (so rounded to the
page's precision). Anything it cannot read is a :class:`PageError` naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.contexts import parse_context
from infermatrix.core.report.fmt import DASH, STATUS_LABELS

__all__ = ["PageError", "PublishedPage", "PageRow", "parse_page", "parse_number", "split_matrix_cell", "SECTIONS"]

TITLE = "Speed test matrix"
# Headings in page order; the long table's columns as the page names them.
SECTIONS = ("Hardware", "Engine", "Run", "Launch command", "Prefill", "Sustained decode", "All measurements")
LONG_HEADER = (
    "Phase", "Context", "Requests at once", "Status", "Total tok/s", "Per request tok/s", "TTFT",
    "Time between tokens", "Average active requests", "Completed requests", "Output tokens", "Measured for",
)
_STATUS_OF_LABEL = {label.lower(): status for status, label in STATUS_LABELS.items()}
_NUMBER = re.compile(r"^(-?\d[\d,]*(?:\.\d+)?)\s*(K|M)?\s*(ms|s|tokens?)?$")
# A matrix cell: tok/s printed with exactly one decimal (or as 28.1K), then the TTFT, glued.
_MATRIX_CELL = re.compile(r"^(\d[\d,]*\.\d[KM]?|\d[\d,]*[KM])\s*(\d[\d,]*(?:\.\d+)?)\s*ms TTFT$")
_PREFILL_LINE = re.compile(r"^(\S+) context\s*(.*)$")
# Section captions, which copying glues to the first line after them.
CAPTIONS = ("prompt tok/s by context length",)


class PageError(ValueError):
    """The text is not a page this importer can read; the message is one line saying where."""


@dataclass
class PageRow:
    """One row of the All measurements table (or what the prefill list / matrix say of it)."""

    phase: str  # "prefill" | "decode"
    context_tokens: int
    concurrency: int
    status: str
    total_tps: float | None = None  # prompt tok/s for prefill rows
    per_request_tps: float | None = None
    ttft_ms: float | None = None
    tbt_ms: float | None = None
    avg_active: float | None = None
    completed: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None


@dataclass
class PublishedPage:
    title_model: str | None
    title_hardware: str | None
    engine: str | None
    engine_version: str | None
    sections: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # Hardware/Engine/Run pairs
    launch_command: str | None = None
    prefill: list[PageRow] = field(default_factory=list)
    decode: list[PageRow] = field(default_factory=list)
    has_long_table: bool = False


def parse_number(text: str) -> float | None:
    """``"28.1K" -> 28100``, ``"1,806 ms" -> 1806``, ``"30.0 s" -> 30``, ``"—" -> None``."""
    t = text.strip()
    if t in (DASH, "-", ""):
        return None
    m = _NUMBER.match(t)
    if not m:
        raise PageError(f"not a number: {text!r}")
    value = float(m.group(1).replace(",", ""))
    return value * {"K": 1e3, "M": 1e6}.get(m.group(2) or "", 1.0)


def _int(text: str) -> int | None:
    v = parse_number(text)
    return None if v is None else int(round(v))


def _status(label: str, where: str) -> str:
    s = _STATUS_OF_LABEL.get(label.strip().lower())
    if s is None:
        raise PageError(f"{where}: unknown status {label.strip()!r}")
    return s


def split_matrix_cell(text: str) -> tuple[str, float | None, float | None]:
    """``"224.2154 ms TTFT" -> ("valid", 224.2, 154.0)``; ``"Looped" -> ("looped", None, None)``."""
    t = text.strip()
    m = _MATRIX_CELL.match(t)
    if m:
        return "valid", parse_number(m.group(1)), parse_number(m.group(2))
    if t in (DASH, ""):
        return "missing", None, None
    return _status(t, f"matrix cell {t!r}"), None, None


def _lines(text: str) -> list[str]:
    """Non-empty lines, with glued pieces taken apart: ``caption| a | b |`` -> caption, table line;
    ``... command'Prefill`` (a heading glued to the line before) -> the line, the heading."""
    out: list[str] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if not line:
            continue
        caption = next((c for c in CAPTIONS if line.startswith(c) and line != c), None)
        if caption:
            out += [caption, line[len(caption):].strip()]
            continue
        bar = line.find("| ")
        if bar > 0 and not line.startswith("|") and line.endswith("|"):
            out += [line[:bar].strip(), line[bar:].strip()]
            continue
        out.append(line)
    fixed: list[str] = []
    for i, line in enumerate(out):
        nxt = out[i + 1] if i + 1 < len(out) else ""
        for name in SECTIONS:
            # A heading glued to the end of a line: the next line is that section's caption/table.
            if line.endswith(name) and line != name and nxt and _is_section_start(name, nxt):
                fixed += [line[: -len(name)].rstrip(), name]
                break
        else:
            fixed.append(line)
    return fixed


def _is_section_start(name: str, nxt: str) -> bool:
    if name == "Prefill":
        return nxt.startswith("prompt tok/s")
    if name == "Sustained decode":
        return nxt.startswith("total tok/s")
    if name == "All measurements":
        return nxt.startswith("Latencies")
    return False


def _split_sections(lines: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"": []}
    current = ""
    for line in lines:
        if line in SECTIONS and line not in found:
            current = line
            found[current] = []
        else:
            found[current].append(line)
    return found


def _pairs(lines: list[str], name: str) -> list[tuple[str, str]]:
    items = [line[2:].strip() if line.startswith("- ") else line for line in lines]
    if len(items) % 2:
        raise PageError(f"section {name}: a key without a value ({items[-1]!r})")
    return [(items[i], items[i + 1]) for i in range(0, len(items), 2)]


def _table(lines: list[str], where: str) -> tuple[list[str], list[list[str]]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    if len(rows) < 2 or not all(re.fullmatch(r":?-{3,}:?", c) for c in rows[1]):
        raise PageError(f"{where}: no table")
    header, body = rows[0], rows[2:]
    for r in body:
        if len(r) != len(header):
            raise PageError(f"{where}: row {'|'.join(r)!r} has {len(r)} cells, the header {len(header)}")
    return header, body


def _long_table(lines: list[str]) -> tuple[list[PageRow], list[PageRow]]:
    header, body = _table(lines, "All measurements")
    if tuple(header) != LONG_HEADER:
        raise PageError(f"All measurements: unexpected columns {', '.join(header)}")
    prefill: list[Any] = []
    decode: list[Any] = []
    for cells in body:
        phase, ctx, n, status, total, per_req, ttft, tbt, active, done, tokens, window = cells
        where = f"All measurements row {phase} {ctx} × {n}"
        try:
            row = PageRow(
                phase="prefill" if phase == "Prefill" else "decode", context_tokens=parse_context(ctx),
                concurrency=int(n), status=_status(status, where), total_tps=parse_number(total),
                per_request_tps=parse_number(per_req), ttft_ms=parse_number(ttft), tbt_ms=parse_number(tbt),
                avg_active=parse_number(active), completed=_int(done), output_tokens=_int(tokens),
                measured_s=parse_number(window),
            )
        except ValueError as exc:
            raise PageError(f"{where}: {exc}") from None
        if phase not in ("Prefill", "Sustained decode"):
            raise PageError(f"{where}: unknown phase {phase!r}")
        (prefill if row.phase == "prefill" else decode).append(row)
    return prefill, decode


def _prefill_list(lines: list[str]) -> list[PageRow]:
    rows = []
    for line in lines:
        m = _PREFILL_LINE.match(line)
        if not m:
            continue
        ctx = parse_context(m.group(1))
        status, tps, ttft = split_matrix_cell(m.group(2))
        rows.append(PageRow("prefill", ctx, 1, status, total_tps=tps, ttft_ms=ttft, completed=1 if status == "valid" else None))
    return rows


def _matrix(lines: list[str]) -> list[PageRow]:
    header, body = _table(lines, "Sustained decode")
    if header[0] != "Context":
        raise PageError("Sustained decode: the matrix's first column is not Context")
    concurrency = [int(h) for h in header[1:]]
    rows = []
    for cells in body:
        ctx = parse_context(cells[0])
        for n, cell in zip(concurrency, cells[1:]):
            status, tps, ttft = split_matrix_cell(cell)
            if status != "missing":
                rows.append(PageRow("decode", ctx, n, status, total_tps=tps, ttft_ms=ttft))
    return rows


def _check(derived: list[PageRow], long: list[PageRow], what: str) -> None:
    """The prefill list and the matrix repeat the long table; a disagreement means a misread."""
    by_key = {(r.context_tokens, r.concurrency): r for r in long}
    for r in derived:
        other = by_key.get((r.context_tokens, r.concurrency))
        if other is None:
            raise PageError(f"{what} has {r.context_tokens} × {r.concurrency}, the All measurements table does not")
        if (other.status, other.total_tps, other.ttft_ms) != (r.status, r.total_tps, r.ttft_ms):
            raise PageError(
                f"{what} and All measurements disagree at {r.context_tokens} tokens × {r.concurrency}: "
                f"{r.status} {r.total_tps} tok/s {r.ttft_ms} ms vs {other.status} {other.total_tps} tok/s {other.ttft_ms} ms"
            )


def parse_page(text: str) -> PublishedPage:
    lines = _lines(text)
    if not lines or lines[0] != TITLE:
        raise PageError(
            f"not a published benchmark page: the first line is not {TITLE!r} (import the page's text, as a browser saves or copies it)"
        )
    sections = _split_sections(lines[1:])
    top = sections[""]
    model, _, hardware = (top[0] if top else "").partition(" on ")
    summary = top[1].split(" · ") if len(top) > 1 else []
    page = PublishedPage(
        title_model=model.strip() or None, title_hardware=hardware.strip() or None,
        engine=summary[0].strip() if summary else None,
        engine_version=summary[1].strip() if len(summary) > 1 else None,
    )
    for name in ("Hardware", "Engine", "Run"):
        if name in sections:
            page.sections[name] = _pairs(sections[name], name)
    if sections.get("Launch command"):
        page.launch_command = " ".join(sections["Launch command"])
    prefill = _prefill_list(sections.get("Prefill", []))
    decode = _matrix(sections["Sustained decode"]) if "Sustained decode" in sections else []
    if "All measurements" in sections:
        page.prefill, page.decode = _long_table(sections["All measurements"])
        page.has_long_table = True
        _check(prefill, page.prefill, "the prefill list")
        _check(decode, page.decode, "the decode matrix")
    else:
        page.prefill, page.decode = prefill, decode
    if not (page.prefill or page.decode):
        raise PageError("the page has neither a prefill list nor a decode matrix")
    return page
