"""Readers for public LLM request traces (docs/workloads.md): Mooncake JSONL, Azure CSV, BurstGPT CSV.

Each reader turns a file into ``TraceRequest`` rows on one time axis (seconds from the trace's first
request) with exact token lengths. Mooncake's ``hash_ids`` name the trace's KV blocks (512 tokens by
default): two requests whose leading ids agree share that many blocks of prompt, which a replay must
turn into token-for-token shared prefixes. A file that contradicts itself — more blocks than its input
length needs, or too few to hold it — is refused with one line naming the row, never replayed as
something else.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

__all__ = ["TraceRequest", "TraceError", "read_trace", "TRACE_FORMATS", "MOONCAKE_BLOCK_TOKENS"]

MOONCAKE_BLOCK_TOKENS = 512
TRACE_FORMATS = ("mooncake", "azure", "burstgpt")


class TraceError(ValueError):
    """A trace file that can't be read as its format says; the message is one line for the user."""


@dataclass(frozen=True)
class TraceRequest:
    at_s: float  # seconds after the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = field(default=())  # Mooncake only: the prompt's KV blocks, in order
    failed: bool = False  # BurstGPT logs failed requests with 0 response tokens


def _count(value: object, what: str, where: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise TraceError(f"{where}: {what} {value!r} is not a whole number") from None
    if n < 0:
        raise TraceError(f"{where}: {what} {n} is negative")
    return n


def _mooncake(path: Path, block_tokens: int) -> list[tuple[float, TraceRequest]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path.name} line {lineno}"
            try:
                obj = json.loads(line)
                stamp_ms = float(obj["timestamp"])
                ids = tuple(int(i) for i in obj.get("hash_ids", ()))
                inp, out = obj["input_length"], obj["output_length"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise TraceError(f"{where}: not a Mooncake record ({type(e).__name__}: {e})") from None
            n_in = _count(inp, "input_length", where)
            if ids and len(ids) != math.ceil(n_in / block_tokens):
                raise TraceError(
                    f"{where}: {len(ids)} hash_ids for input_length {n_in}: at {block_tokens} tokens a block "
                    f"that needs {math.ceil(n_in / block_tokens)} (wrong block size?)"
                )
            rows.append((stamp_ms / 1000, TraceRequest(0.0, n_in, _count(out, "output_length", where), ids)))
    return rows


def _csv_rows(path: Path, needed: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in needed if c not in header]
        if missing:
            raise TraceError(f"{path.name}: missing column(s) {', '.join(missing)} (header: {', '.join(header)})")
        return [(i, {k.strip(): v for k, v in row.items() if k}) for i, row in enumerate(reader, 2)]


def _azure(path: Path) -> list[tuple[float, TraceRequest]]:
    rows = []
    for lineno, row in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        where = f"{path.name} line {lineno}"
        stamp = row["TIMESTAMP"].strip()
        try:  # "2023-11-16 18:15:46.6805900": Python's parser takes at most 6 fractional digits
            head, _, frac = stamp.partition(".")
            t = datetime.fromisoformat(head).timestamp() + (float("0." + frac) if frac else 0.0)
        except ValueError:
            raise TraceError(f"{where}: TIMESTAMP {stamp!r} is not a date and time") from None
        inp = _count(row["ContextTokens"], "ContextTokens", where)
        rows.append((t, TraceRequest(0.0, inp, _count(row["GeneratedTokens"], "GeneratedTokens", where))))
    return rows


def _burstgpt(path: Path) -> list[tuple[float, TraceRequest]]:
    rows = []
    for lineno, row in _csv_rows(path, ("Timestamp", "Request tokens", "Response tokens")):
        where = f"{path.name} line {lineno}"
        try:
            t = float(row["Timestamp"])
        except ValueError:
            raise TraceError(f"{where}: Timestamp {row['Timestamp']!r} is not a number of seconds") from None
        out = _count(row["Response tokens"], "Response tokens", where)
        rows.append((t, TraceRequest(0.0, _count(row["Request tokens"], "Request tokens", where), out, failed=out == 0)))
    return rows


def sniff_format(path: Path) -> str:
    """The trace format from the file's extension and header line."""
    if path.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    with path.open(encoding="utf-8") as f:
        header = f.readline()
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    raise TraceError(f"{path.name}: not a known trace format ({', '.join(TRACE_FORMATS)}); name it with format=")


def read_trace(path: str | Path, fmt: str | None = None, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[TraceRequest]:
    """Every request of the trace, in arrival order, timed from its first request."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file {p} does not exist")
    kind = fmt or sniff_format(p)
    if kind not in TRACE_FORMATS:
        raise TraceError(f"trace format {kind!r}: expected one of {', '.join(TRACE_FORMATS)}")
    if block_tokens <= 0:
        raise TraceError(f"block size {block_tokens}: must be positive")
    rows = _mooncake(p, block_tokens) if kind == "mooncake" else _azure(p) if kind == "azure" else _burstgpt(p)
    if not rows:
        raise TraceError(f"{p.name}: no requests in the trace")
    rows.sort(key=lambda r: r[0])  # stable: rows with one stamp keep the file's order
    t0 = rows[0][0]
    return [TraceRequest(t - t0, r.input_tokens, r.output_tokens, r.hash_ids, r.failed) for t, r in rows]
