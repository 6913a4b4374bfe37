"""What a report says, as plain strings: header fields, matrix cells, table rows, legend.

Text, Markdown and HTML only differ in how they draw these, so the wording lives here once.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.wallclock import wall_split
from infermatrix.core.report.point_settings import load_rows, matrix_ran
from infermatrix.core.report.data import (
    DASH,
    ReportData,
    fmt_duration,
    fmt_float1,
    fmt_int,
    fmt_ms_pm,
    fmt_seconds,
    fmt_time,
    fmt_tokens,
    fmt_tps,
    fmt_tps_pm,
    status_label,
)

__all__ = [
    "TITLE",
    "LONG_COLUMNS",
    "title_lines",
    "header_sections",
    "matrix_cell",
    "PM_NOTE",
    "long_rows",
    "legend_lines",
    "cell_notes",
    "prefill_notes",
    "LONG_NOTE",
    "DOUBTFUL_MARK",
    "DOUBTFUL_NOTE",
    "doubtful_columns",
]

TITLE = "Speed test matrix"

LONG_COLUMNS = (
    "Phase", "Context", "Requests at once", "Status", "Total tok/s", "Per request tok/s", "TTFT",
    "Time between tokens", "Average active requests", "Completed requests", "Output tokens", "Measured for",
)
LONG_NOTE = "Latencies are medians. Total tok/s is output across all simultaneous requests."

LEGEND = {
    "looped": "the model kept repeating the same text, so the benchmark discarded this measurement.",
    "over_capacity": "not run: the server could not hold this many requests at this context (more than its maximum number of "
    "sequences at once, more than its KV cache, or past max_model_len); the notes give each cell's reason.",
    "error": "requests failed (HTTP errors, broken streams or timeouts), so the benchmark discarded this measurement.",
    "client_bound": "the benchmark client, not the engine, set the pace, so the benchmark discarded this measurement.",
    "interrupted": "the run was stopped before this measurement finished.",
    "admission_limited": "the engine never ran this many requests at once (its limit on running requests or its KV cache "
    "held the rest back, or it preempted some), so the numbers would describe fewer; the notes say how many ran.",
}
# A valid cell's number the client verdict marked doubtful (docs/metrics.md, client verdict): kept, and marked.
DOUBTFUL_MARK = "~"
DOUBTFUL_NOTE = (
    f"{DOUBTFUL_MARK} before a number: the benchmark client's own clock may have moved it by more than the usual "
    "measurement error (the client was stalled while timing it); the notes say why and by how much."
)
PM_NOTE = (
    "± after a number: its 95 % interval from the cell's own data (a prefill point's: its cold probes; the larger of its two sides), shown where it is wider "
    "than the number's last printed digit; ±? where the data bound one side of nothing (too few values)."
)
REPEATS_NOTE = (
    "A cell measured more than once (run --repeat K): its numbers are the repeats' means and ± their 95 % interval across "
    "the repeats; the notes give the run-to-run spread beside what one window's interval says (docs/metrics.md, Repeats)."
)
_DOUBTFUL_NAMES = {
    "total_tps": "total tok/s", "per_request_tps": "per request tok/s", "ttft_ms": "TTFT", "tbt_ms": "time between tokens",
    "itl": "inter-token latency percentiles",
}
TTFT_WARM = "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly excludes prefill."
TTFT_COLD = "TTFT includes prefill: the prompt cache was not warmed before measuring."

_PROMPT_MODES = {
    "distinct": "distinct (each stream has its own prompt; no prefix shared between streams)",
    "shared": "shared (all streams send one prompt; prefix cache shared)",
}
_TOKEN_SOURCES = {
    "usage": "server usage counts (continuous usage stats)",
    "chunks": "one per streamed chunk, reconciled with the tokenizer",
}
_ACRONYMS = {"gpu": "GPU", "gpus": "GPUs", "vram": "VRAM", "os": "OS", "cpu": "CPU", "ram": "RAM", "id": "ID"}
_UNITS = {"gb": "(GB)", "gib": "(GiB)", "mb": "(MB)", "mib": "(MiB)", "w": "(W)", "mhz": "(MHz)"}


def _humanize(key: str) -> str:
    """``gpu_count -> "GPU count"``, ``vram_gb -> "VRAM (GB)"``, ``quantization -> "Quantization"``."""
    words = [w for w in key.replace("-", "_").split("_") if w]
    out = [_ACRONYMS.get(w.lower(), w) for w in words]
    if len(out) > 1 and words[-1].lower() in _UNITS:
        out[-1] = _UNITS[words[-1].lower()]
    if out and out[0] == words[0]:
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)


def _value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_value(x)}" for k, x in v.items())
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return str(v)


def _hardware_short(hw: dict[str, Any]) -> str | None:
    gpu = hw.get("gpu") or hw.get("gpu_name") or hw.get("accelerator")
    if not gpu:
        return None
    count = hw.get("gpu_count") or hw.get("count")
    return f"{gpu} ×{count}" if count and count != 1 else str(gpu)


def _span(labels: list[str], noun: str) -> str:
    if not labels:
        return f"no {noun}s"
    many = f"{len(labels)} {noun}{'s' if len(labels) != 1 else ''}"
    return f"{many} ({labels[0]}–{labels[-1]})" if len(labels) > 1 else f"{many} ({labels[0]})"


def title_lines(d: ReportData) -> list[str]:
    """The title, 'model on hardware', and the one-line summary of what was measured."""
    run = d.run
    hw = _hardware_short(run.get("hardware") or {})
    # An imported page names the model in its title; its served name is the `model` column.
    model = (run.get("engine_extra") or {}).get("model_name") or run.get("model") or "unknown model"
    second = f"{model} on {hw}" if hw else model
    parts = [p for p in (run.get("engine"), run.get("engine_version")) if p]
    if d.decode:
        parts.append(
            _span([format_context(c) for c in d.contexts], "context")
            + " × "
            + _span([str(n) for n in d.concurrencies], "concurrency level")
        )
    if d.prefill:
        parts.append("prefill at " + ", ".join(p["context_label"] for p in d.prefill))
    return [TITLE, second, " · ".join(parts)]


def _capacity(d: ReportData) -> str:
    run = d.run
    bits = []
    if run.get("kv_tokens"):
        bits.append(f"{fmt_int(run['kv_tokens'])} KV tokens")
    if run.get("max_seqs"):
        bits.append(f"{fmt_int(run['max_seqs'])} sequences at once")
    if not bits and run.get("status") == "imported":
        return "not published"
    if not bits:
        text = "unknown (treated as unlimited)"
    else:
        text = " · ".join(bits)
    source = run.get("capacity_source")
    return f"{text} (from {source})" if source and source != "unknown" else text


def _whole_seconds(v: float | None) -> str:
    """``30.0 -> "30 s"`` (a setting, not a measurement), ``2.5 -> "2.5 s"``."""
    if v is None:
        return DASH
    return f"{int(v)} s" if float(v).is_integer() else fmt_seconds(v)


def _facts(items: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Header rows for a dict of facts: scalars and short lists only. Nested tables (a sim profile,
    a capacity breakdown) would swamp the header; they stay in the database and the JSON report."""
    out = []
    for k, v in (items or {}).items():
        if v in (None, "", [], {}) or isinstance(v, dict):
            continue
        if isinstance(v, (list, tuple)) and (len(v) > 8 or any(isinstance(x, (dict, list)) for x in v)):
            continue
        out.append((_humanize(k), _value(v)))
    return out


def _notes(run: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Notes may be free text or a JSON object of extra facts; returns (facts, text)."""
    notes = run.get("notes")
    if isinstance(notes, str) and notes.startswith("{"):
        try:
            parsed = json.loads(notes)
        except ValueError:
            return {}, notes
        if isinstance(parsed, dict):
            return parsed, None
    return {}, notes or None


def _token_source(d: ReportData) -> str:
    """The run's setting, else what its cells say (the runner records it per cell)."""
    src = d.run.get("token_source")
    if src:
        return _TOKEN_SOURCES.get(src, src)
    seen = Counter(x["token_source"] for x in d.details.values() if x.get("token_source"))
    if not seen:
        return DASH
    if len(seen) == 1:
        (only,) = seen
        return _TOKEN_SOURCES.get(only, only)
    return ", ".join(f"{_TOKEN_SOURCES.get(s, s)} ({n} cells)" for s, n in seen.most_common())


def _transport(d: ReportData) -> str | None:
    """How the cells' streams were read, and why (``cells.flags.transport``; none for older stores)."""
    seen = Counter(f"{t['used']} ({t['why']})" for x in d.details.values()
                   if isinstance(t := (x.get("flags") or {}).get("transport"), dict) and t.get("used"))  # fmt: skip
    if not seen:
        return None
    return ", ".join(f"{k} — {n} cells" if len(seen) > 1 else k for k, n in seen.most_common())


def _tool(v: str | None) -> str:
    if not v:
        return DASH
    return v if v[:1].isalpha() else f"infermatrix {v}"


def _matrix_rows(duration: Any, max_output: Any, prompt_mode: Any) -> list[tuple[str, str]]:
    return [
        ("Decode test", "Fixed duration"),
        ("Time per measurement", _whole_seconds(duration)),
        ("Max output", fmt_tokens(max_output) if max_output is not None else DASH),
        ("Prompt mode", _PROMPT_MODES.get(prompt_mode, prompt_mode or DASH)),
    ]


def header_sections(d: ReportData) -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(section, [(label, value), ...]), ...]``: Hardware, Engine, Run, Launch command."""
    run = d.run
    facts, note_text = _notes(run)
    hardware = _facts(run.get("hardware"))
    engine = [("Engine", run.get("engine") or DASH), ("Version", run.get("engine_version") or DASH)]
    extra = run.get("engine_extra") or facts.pop("engine_extra", None) or {}
    engine += _facts(extra)
    if run.get("max_model_len"):
        engine.append(("Max model length", fmt_tokens(run["max_model_len"])))

    started, finished = run.get("started_at"), run.get("finished_at")
    took = fmt_duration((finished - started).total_seconds()) if started and finished else None
    duration = d.setting("duration_s", "matrix", "duration_s")
    max_output = d.setting("max_output", "matrix", "max_output")
    prompt_mode = d.setting("prompt_mode", "matrix", "prompt_mode")
    matrix, ran = _matrix_rows(duration, max_output, prompt_mode), matrix_ran(d)
    tokenizer = run.get("tokenizer") or facts.pop("tokenizer", None)
    facts.pop("capacity_detail", None)  # the summary line says enough; the JSON stays in the database
    runinfo = [
        ("Run", run["run_id"] + (f" ({run['name']})" if run.get("name") else "")),
        ("Status", run.get("status") or DASH),
        ("Date", fmt_time(started) + (f" · took {took}" if took else "")),
        ("Served model", run.get("model") or DASH),
        ("Benchmark tool", _tool(run.get("tool_version"))),
        ("Host", run.get("host") or DASH),
        # The matrix's settings only when a matrix runs; then what each point, replay or workload pass used (issue 27).
        *(matrix[:3] if ran else []),
        ("API", d.setting("api", "matrix", "api") or DASH),
        *(matrix[3:] if ran else []),
        *load_rows(d),
        ("Token source", _token_source(d)),
        ("Capacity", _capacity(d)),
    ]
    if tokenizer:
        runinfo.insert(-2, ("Prompt lengths", f"counted by {tokenizer}"))
    temperature = d.setting("temperature", "matrix", "temperature")
    if isinstance(temperature, (int, float)):
        runinfo.insert(-2, ("Temperature", "0 (greedy)" if temperature == 0 else f"{temperature:g}"))
    overhead = run.get("client_overhead_ms")
    if isinstance(overhead, (int, float)):
        runinfo.insert(-2, ("Client overhead", f"{overhead:.1f} ms round trip of an empty request (inside every TTFT, not subtracted)"))
    split = wall_split(run.get("phase_seconds") if isinstance(run.get("phase_seconds"), dict) else None)
    if split is not None:
        runinfo.insert(-2, ("Wall time", split.line()))
    if run.get("source") or run.get("imported_at"):
        imported = f"imported {fmt_time(run['imported_at'])}" if run.get("imported_at") else ""
        runinfo.insert(2, ("Source", " · ".join(x for x in (run.get("source"), imported) if x)))
    transport = _transport(d)
    if transport:
        runinfo.insert(-2, ("Client transport", transport))
    metrics = run.get("engine_metrics")
    if isinstance(metrics, dict) and metrics.get("found") is False:
        runinfo.append(("Engine metrics", metrics.get("note") or "not found"))
    if run.get("error"):
        runinfo.append(("Error", run["error"]))
    runinfo += _facts(facts)
    if note_text:
        runinfo.append(("Notes", note_text))
    sections = [("Hardware", hardware), ("Engine", engine), ("Run", runinfo)]
    if not hardware:
        sections = sections[1:]
    return sections


def doubtful_columns(row: dict[str, Any] | None) -> set[str]:
    """The columns of a valid decode_matrix row marked doubtful (its ``doubtful`` column; none for older stores)."""
    if row is None or row.get("status") != "valid":
        return set()
    return set(row.get("doubtful") or ())


def _marked(text: str, column: str, doubtful: set[str]) -> str:
    return f"{DOUBTFUL_MARK}{text}" if column in doubtful and text != DASH else text


def matrix_cell(d: ReportData, row: dict[str, Any] | None) -> tuple[str, str | None, str]:
    """``(first line, second line or None, status)`` of one decode-matrix cell (its numbers with ``±`` where their
    intervals are wider than printed)."""
    if row is None:
        return DASH, None, "missing"
    if row["status"] == "valid":
        m = doubtful_columns(row)
        tps = _marked(fmt_tps_pm(row["total_tps"], d.bounds(row, "total_tps")), "total_tps", m)
        return tps, f"{_marked(fmt_ms_pm(row['ttft_ms'], d.bounds(row, 'ttft_ms')), 'ttft_ms', m)} TTFT", "valid"
    if row["status"] == "admission_limited" and row.get("ran_at_most") is not None:
        return status_label(row["status"]), f"ran at most {row['ran_at_most']:g} of {row['concurrency']}", row["status"]
    return status_label(row["status"]), None, row["status"]


def long_rows(d: ReportData) -> list[tuple[str, list[str]]]:
    """``(status, cells)`` per row of the All measurements table: prefill first, then decode."""
    out: list[tuple[str, list[str]]] = []
    for p in d.prefill:
        valid = p["status"] == "valid"
        out.append((p["status"], [
            "Prefill", p["context_label"], "1", status_label(p["status"]), fmt_tps_pm(p["prompt_tps"], d.prefill_bounds(p, "prompt_tps")),
            DASH, fmt_ms_pm(p["ttft_ms"], d.prefill_bounds(p, "ttft_ms")), DASH, DASH, (str(p.get("samples") or 1)) if valid else DASH, DASH, DASH,
        ]))
    for r in d.decode:
        m = doubtful_columns(r)
        out.append((r["status"], [
            "Sustained decode", r["context_label"], str(r["concurrency"]), status_label(r["status"]),
            *(_marked(fmt_tps_pm(r[c], d.bounds(r, c)), c, m) for c in ("total_tps", "per_request_tps")),
            *(_marked(fmt_ms_pm(r[c], d.bounds(r, c)), c, m) for c in ("ttft_ms", "tbt_ms")),
            fmt_float1(r["avg_active"]), fmt_int(r["completed"]), fmt_int(r["output_tokens"]),
            fmt_seconds(r["measured_s"]),
        ]))
    return out


def legend_lines(d: ReportData) -> list[str]:
    """What each non-valid status means (only those present), then how TTFT was measured."""
    present = set(d.statuses) | {p["status"] for p in d.prefill}
    lines = [f"{status_label(s)}: {text}" for s, text in LEGEND.items() if s in present]
    if any(doubtful_columns(r) for r in d.decode):
        lines.append(DOUBTFUL_NOTE)
    if d.intervals or d.prefill_intervals:  # runs without intervals (older stores, imported pages) keep their legend
        lines.append(PM_NOTE)
    if any((r.get("repeats") or 1) > 1 for r in d.decode):
        lines.append(REPEATS_NOTE)
    if d.decode:
        warm = d.run.get("config") or {}
        warm = (warm.get("matrix") or {}).get("warmup", True) if isinstance(warm, dict) else True
        lines.append(TTFT_WARM if warm is not False else TTFT_COLD)
    return lines


def repeat_notes(d: ReportData, r: dict[str, Any], flags: dict[str, Any]) -> list[str]:
    """A valid cell of K > 1 repeats: how many were measured, total tok/s's spread from repeat to repeat beside the
    windows' own interval, and the numbers whose repeats spread more than their windows allow (noisier_than_window)."""
    k, of = r.get("repeats"), (flags.get("repeats") or {}).get("of")
    if not k or not of or of < 2:
        return []
    line = f"mean of {k} repeats" if k >= of else f"{k} of {of} repeats measured"
    s = d.spreads.get((r["context_tokens"], r["concurrency"]), {}).get("total_tps")
    if s and s.get("sd") is not None:
        line += f"; total tok/s sd {fmt_tps(s['sd'])} from repeat to repeat"
        if s.get("window_lo") is not None and s.get("window_hi") is not None:
            line += f" (its windows' own interval ±{fmt_tps((s['window_hi'] - s['window_lo']) / 2)})"
    noisy = r.get("noisier_than_window") or []
    if noisy:
        names = ", ".join(_DOUBTFUL_NAMES.get(m, m.replace("_", " ")) for m in noisy)
        line += f"; noisier than its windows say ({names}): one window's interval understates the run-to-run noise"
    return [line]


def cell_notes(d: ReportData) -> list[str]:
    """Why cells were discarded or not run, one line each, with the reason the run stored (an over-capacity
    cell's says which limit: max sequences, KV cache or max_model_len)."""
    notes = []
    for r in d.decode:
        if r["status"] == "valid":
            continue
        reason = d.reason(r["context_tokens"], r["concurrency"])
        line = f"{r['context_label']} × {r['concurrency']}: {status_label(r['status'])}"
        notes.append(f"{line} — {reason}" if reason else line)
    for r in d.decode:
        if r["status"] == "valid":
            notes.extend(f"{r['context_label']} × {r['concurrency']}: {n}" for n in flag_notes(d, r))
    return notes


def prefill_notes(d: ReportData) -> list[str]:
    """Why prefill points are not valid, one line each, with the reason the run stored (an over-capacity point's
    status says it all)."""
    notes = []
    for p in d.prefill:
        if p["status"] not in ("valid", "over_capacity"):
            reason = d.prefill_reasons.get(p["context_tokens"])
            line = f"{p['context_label']}: {status_label(p['status'])}"
            notes.append(f"{line} — {reason}" if reason else line)
    return notes


def flag_notes(d: ReportData, r: dict[str, Any]) -> list[str]:
    """What a valid cell's provenance flags say that a reader must know (docs/metrics.md, cells.flags)."""
    details = d.details.get((r["context_tokens"], r["concurrency"])) or {}
    flags = details.get("flags") or {}
    out = repeat_notes(d, r, flags)
    client = flags.get("client")
    why = client.get("doubtful") if isinstance(client, dict) else None
    why = why if isinstance(why, dict) else {}
    for col in sorted(doubtful_columns(r), key=lambda c: list(_DOUBTFUL_NAMES).index(c) if c in _DOUBTFUL_NAMES else 99):
        reason = why.get(col)
        out.append(f"{DOUBTFUL_MARK} {_DOUBTFUL_NAMES.get(col, col)} doubtful" + (f": {reason}" if reason else ""))
    batch = flags.get("batch")
    if isinstance(batch, dict) and batch.get("differ"):
        # docs/metrics.md, cells.flags.batch: the engine's running count beside the client's, where they differ by > 2 %
        out.append(f"engine ran {batch.get('engine_running_mean', 0):.1f} on average, the client counted "
                   f"{batch.get('client_in_flight_mean', 0):.1f} in flight ({batch.get('reads')} reads of the engine's gauges)")  # fmt: skip
    tokens = flags.get("tokens") or {}
    if tokens and tokens.get("agree") is False:
        out.append(f"token counts disagree by {100 * (tokens.get('disagreement') or 0):.1f} % "
                   f"(usage {tokens.get('usage')}, tokenizer {tokens.get('tokenizer')}, engine {tokens.get('engine')})")  # fmt: skip
    if details.get("token_source") == "chunks":
        out.append("tokens counted one per chunk (no usage, no /tokenize): undercounts under speculative decoding")
    return out
