"""What an LMDeploy server says about itself. Pure functions, testable on recorded answers.

``GET /distserve/engine_info`` answers the engine's parallel sizes and KV-cache geometry
(``num_gpu_blocks``, ``block_size``). The server builds the answer with pydantic's
``model_dump_json()`` and returns that *string*, so the HTTP body is JSON text of a JSON string; both
that and a plain object are read. A server runs one data-parallel rank (``dp_rank``), so its own
blocks are its capacity.
"""

from __future__ import annotations

import json
from typing import Any

from infermatrix.plugin import Capacity

__all__ = ["engine_info", "lmdeploy_capacity", "RUNNING", "WAITING", "KV_USAGE", "GENERATED", "PROMPT"]

RUNNING = "lmdeploy:num_requests_running"
WAITING = "lmdeploy:num_requests_waiting"
KV_USAGE = "lmdeploy:gpu_cache_usage_perc"
GENERATED = "lmdeploy:generation_tokens_total"
PROMPT = "lmdeploy:prompt_tokens_total"


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def engine_info(body: Any) -> dict[str, Any] | None:
    """The engine-info object from a decoded ``/distserve/engine_info`` body (object, or JSON string of one)."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    return body if isinstance(body, dict) else None


def lmdeploy_capacity(info: dict[str, Any] | None, max_batch_size: int | None = None) -> Capacity | None:
    """KV tokens = ``num_gpu_blocks × block_size``; most sequences from ``--max-batch-size`` (the
    endpoint does not say). ``None`` when neither is known."""
    info = info or {}
    blocks, block = _int(info.get("num_gpu_blocks")), _int(info.get("block_size"))
    seqs_note = f"; max_batch_size {max_batch_size} (--max-batch-size)" if max_batch_size else ""
    if blocks and block:
        detail = {k: info.get(k) for k in ("num_gpu_blocks", "block_size", "num_cpu_blocks", "tp_size", "dp_size", "dp_rank", "ep_size")}
        return Capacity(
            kv_tokens=blocks * block, max_seqs=max_batch_size,
            source=f"/distserve/engine_info: num_gpu_blocks {blocks:,} × block_size {block}{seqs_note}", detail=detail,
        )
    if max_batch_size:
        return Capacity(kv_tokens=None, max_seqs=max_batch_size, source=f"KV budget not reported (no /distserve/engine_info){seqs_note}")
    return None
