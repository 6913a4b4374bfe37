"""Run rows: which columns exist, run ids, and building a run's info from what the engine said."""

from __future__ import annotations

import secrets
import socket
from typing import Any

from infermatrix.core.types import Capacity, EngineInfo

__all__ = ["RUN_COLUMNS", "RUN_JSON_COLUMNS", "RUN_TIME_COLUMNS", "RUN_STATUSES", "new_run_id", "run_info"]

# Column order of the runs table (schema.sql); create_run/update_run accept exactly these keys.
RUN_COLUMNS = (
    "run_id", "name", "engine", "engine_version", "model", "hardware", "engine_extra", "launch_command",
    "config", "tool_version", "host", "api", "prompt_mode", "token_source", "duration_s", "max_output",
    "max_model_len", "kv_tokens", "max_seqs", "capacity_source", "capacity_detail", "tokenizer",
    "started_at", "finished_at", "status", "error", "notes", "source", "imported_at", "engine_metrics",
    "client_overhead_ms", "phase_seconds",
)
RUN_JSON_COLUMNS = frozenset({"hardware", "engine_extra", "config", "capacity_detail", "engine_metrics", "phase_seconds"})
RUN_TIME_COLUMNS = frozenset({"started_at", "finished_at", "imported_at"})
# stopped: the run ended, but its SLO search stopped without an answer (runs.error says why; exit code 3).
RUN_STATUSES = ("running", "completed", "stopped", "interrupted", "failed", "imported")


def new_run_id() -> str:
    """8 hex characters: short enough to type, and prefixes resolve (``report 3fa2``)."""
    return secrets.token_hex(4)


def run_info(
    engine: EngineInfo,
    capacity: Capacity | None = None,
    config: Any = None,
    **more: Any,
) -> dict[str, Any]:
    """The ``create_run`` dict for a ready engine: engine facts, capacity, and the matrix settings
    read from ``config`` (a validated RunConfig, or its dict). ``more`` overrides any key."""
    info: dict[str, Any] = {
        "engine": engine.engine,
        "engine_version": engine.version,
        "model": engine.model,
        "hardware": dict(engine.hardware),
        "engine_extra": dict(engine.extra),
        "launch_command": engine.launch_command,
        "max_model_len": engine.max_model_len,
        "host": socket.gethostname(),
        "tool_version": _tool_version(),
    }
    if capacity is not None:
        info.update(
            kv_tokens=capacity.kv_tokens, max_seqs=capacity.max_seqs, capacity_source=capacity.source,
            capacity_detail=dict(capacity.detail),
        )
    if config is not None:
        data = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config)
        matrix = data.get("matrix") or {}
        info.update(
            config=data,
            name=data.get("name"),
            api=matrix.get("api"),
            prompt_mode=matrix.get("prompt_mode"),
            duration_s=matrix.get("duration_s"),
            max_output=matrix.get("max_output"),
        )
        if data.get("hardware") and not info["hardware"]:
            info["hardware"] = data["hardware"]
        elif data.get("hardware"):
            # What the user wrote in [hardware] wins over what was detected.
            info["hardware"] = {**info["hardware"], **data["hardware"]}
    info.update(more)
    return info


def _tool_version() -> str:
    from infermatrix import __version__

    return f"infermatrix {__version__}"
