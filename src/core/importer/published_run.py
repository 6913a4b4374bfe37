"""A parsed published page -> a run in the store, with status ``imported``.

The run's id is the first 8 hex digits of the page text's SHA-256, so importing the same page
twice finds the first import instead of adding a copy. Numbers are stored as printed (rounded to
the page's precision); what the page does not say (prompt tokens, API, prompt mode, token source,
KV capacity, latency distributions) stays NULL rather than guessed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import shlex
from pathlib import Path
from typing import Any

from infermatrix.core.importer.page_text import PageRow, PublishedPage, parse_number, parse_page
from infermatrix.core.redact import redact_argv, shell_join
from infermatrix.core.store import Store, StoreError
from infermatrix.core.types import CellResult, PrefillResult

__all__ = ["page_run_id", "run_fields", "import_page", "ImportResult"]

# Run-section fields that map to runs columns (the rest are kept as facts in notes).
_RUN_FIELDS = {"Served model", "Revision", "Benchmark tool", "Time per measurement", "Max output", "Decode test"}
_MAX_MODEL_LEN = re.compile(r"--max[-_]model[-_]len[= ](\d+)")


class ImportResult:
    """``run_id`` and whether it was ``created`` (False: that page was imported before)."""

    def __init__(self, run_id: str, created: bool, page: PublishedPage):
        self.run_id, self.created, self.page = run_id, created, page


def page_run_id(text: str) -> str:
    """Stable id of a page: the same text always imports as the same run."""
    normal = "\n".join(line.strip() for line in text.replace("\r\n", "\n").split("\n") if line.strip())
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:8]


def _key(label: str) -> str:
    """``"GPU count" -> "gpu_count"`` (the report's header turns it back into the label)."""
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_")


def _scalar(value: str) -> Any:
    v = value.strip()
    return int(v) if re.fullmatch(r"\d{1,9}", v) else v


def _redacted(command: str | None) -> str | None:
    if not command:
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return command  # unbalanced quotes: nothing we can take apart, keep it as printed
    clean = redact_argv(argv)
    return command if clean == argv else shell_join(clean)


def run_fields(page: PublishedPage, source: str, name: str | None = None) -> dict[str, Any]:
    """The ``create_run`` dict for a page (without run_id)."""
    engine = dict(page.sections.get("Engine", []))
    run = dict(page.sections.get("Run", []))
    extra: dict[str, Any] = {_key(k): _scalar(v) for k, v in engine.items() if k not in ("Engine", "Version")}
    if page.title_model:
        extra["model_name"] = page.title_model
    if run.get("Revision"):
        extra["revision"] = run["Revision"]
    facts: dict[str, Any] = {_key(k): v for k, v in run.items() if k not in _RUN_FIELDS}
    if run.get("Decode test") and run["Decode test"] != "Fixed duration":
        facts["decode_test"] = run["Decode test"]
    facts["numbers"] = "as printed on the published page (rounded to its precision)"
    duration = parse_number(run["Time per measurement"]) if run.get("Time per measurement") else None
    max_output = parse_number(run["Max output"]) if run.get("Max output") else None
    command = _redacted(page.launch_command)
    mml = _MAX_MODEL_LEN.search(command or "")
    return {
        "name": name,
        "engine": engine.get("Engine") or page.engine,
        "engine_version": engine.get("Version") or page.engine_version,
        "model": run.get("Served model") or page.title_model,
        "hardware": {_key(k): _scalar(v) for k, v in page.sections.get("Hardware", [])},
        "engine_extra": extra,
        "launch_command": command,
        "config": {"published": {s: dict(p) for s, p in page.sections.items()}, "title": [page.title_model, page.title_hardware]},
        "tool_version": run.get("Benchmark tool"),
        "duration_s": duration,
        "max_output": None if max_output is None else int(max_output),
        "max_model_len": int(mml.group(1)) if mml else None,
        "started_at": None,  # the page does not say when it was measured
        "status": "imported",
        "source": source,
        "imported_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
        "notes": facts,
    }


def _prefill(r: PageRow) -> PrefillResult:
    return PrefillResult(r.context_tokens, None, r.ttft_ms, r.total_tps, status=r.status)


def _cell(r: PageRow) -> CellResult:
    return CellResult(
        context_tokens=r.context_tokens, concurrency=r.concurrency, status=r.status,
        total_tps=r.total_tps, per_request_tps=r.per_request_tps, ttft_ms=r.ttft_ms, tbt_ms=r.tbt_ms,
        avg_active=r.avg_active, completed=r.completed, output_tokens=r.output_tokens, measured_s=r.measured_s,
        flags={"published": True},
    )


def import_page(store: Store, path: str | Path, name: str | None = None, replace: bool = False,
                run_id: str | None = None) -> ImportResult:
    """Parse the page text at ``path`` and store it as an imported run (see the module docstring).
    Raises :class:`~infermatrix.core.importer.page_text.PageError` for text it cannot read."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read {p}: {getattr(exc, 'strerror', None) or exc}") from None
    page = parse_page(text)
    rid = run_id or page_run_id(text)
    if store.get_run(rid) is not None:
        if not replace:
            return ImportResult(rid, False, page)
        store.delete_run(rid)
    info = run_fields(page, source=f"published page {p.name}", name=name or p.stem)
    store.create_run({"run_id": rid, **info})
    try:
        store.save_results(rid, [_prefill(r) for r in page.prefill], [_cell(r) for r in page.decode])
    except BaseException:
        store.delete_run(rid)  # all or nothing: a run without its numbers would compare wrongly
        raise
    return ImportResult(rid, True, page)
