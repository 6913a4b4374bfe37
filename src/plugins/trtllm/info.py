"""What a ``trtllm-serve`` server says about itself. Pure functions, testable on recorded answers.

``GET /metrics`` is JSON: a list of iteration-statistics entries, *consumed* when read (each entry
is returned once), present only with ``enable_iter_perf_stats`` and only after the first iterations.
``GET /prometheus/metrics`` is Prometheus text (with ``return_perf_metrics``): the same numbers as
gauges (``trtllm_kv_cache_max_blocks``, ``trtllm_kv_cache_tokens_per_block`` …) once logged.
"""

from __future__ import annotations

from typing import Any

from infermatrix.plugin import Capacity, metric_value

__all__ = ["trtllm_capacity", "RUNNING", "WAITING", "KV_USAGE", "GENERATED", "PROMPT", "SPEC_DRAFT", "SPEC_ACCEPTED", "MAX_BLOCKS", "TOKENS_PER_BLOCK"]

RUNNING = "trtllm_num_requests_running"
WAITING = "trtllm_num_requests_waiting"
KV_USAGE = "trtllm_kv_cache_utilization"
GENERATED = "trtllm_generation_tokens_total"
PROMPT = "trtllm_prompt_tokens_total"
SPEC_DRAFT = "trtllm_spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "trtllm_spec_decode_num_accepted_tokens_total"
MAX_BLOCKS = "trtllm_kv_cache_max_blocks"
TOKENS_PER_BLOCK = "trtllm_kv_cache_tokens_per_block"
MAX_ACTIVE = "trtllm_max_num_active_requests"


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _latest_with_kv(stats: Any) -> dict[str, Any] | None:
    entries = [e for e in stats if isinstance(e, dict) and isinstance(e.get("kvCacheStats"), dict)] if isinstance(stats, list) else []
    return entries[-1] if entries else None


def trtllm_capacity(stats: Any, prometheus_page: str | None, max_batch_size: int | None = None) -> Capacity | None:
    """KV tokens = max blocks × tokens per block, from the newest iteration entry of ``/metrics``,
    else from the Prometheus gauges; most sequences from ``maxNumActiveRequests`` (else
    ``--max_batch_size``). ``None`` when neither source says anything."""
    entry = _latest_with_kv(stats)
    if entry is not None:
        kv = entry["kvCacheStats"]
        blocks, per_block = _int(kv.get("maxNumBlocks")), _int(kv.get("tokensPerBlock"))
        active = _int(entry.get("maxNumActiveRequests")) or _int(entry.get("maxBatchSizeStatic"))
        where = "/metrics iteration stats"
    else:
        page = prometheus_page or ""
        blocks, per_block = _int(metric_value(page, MAX_BLOCKS)), _int(metric_value(page, TOKENS_PER_BLOCK))
        active = _int(metric_value(page, MAX_ACTIVE))
        where = "/prometheus/metrics"
    max_seqs = active or max_batch_size
    seqs_note = f"; max active requests {active}" if active else (f"; max_batch_size {max_batch_size} (--max_batch_size)" if max_batch_size else "")
    if blocks and per_block:
        return Capacity(
            kv_tokens=blocks * per_block, max_seqs=max_seqs,
            source=f"{where}: maxNumBlocks {blocks:,} × tokensPerBlock {per_block}{seqs_note}",
            detail={"max_num_blocks": blocks, "tokens_per_block": per_block, "max_active_requests": active},
        )
    if max_seqs:
        return Capacity(kv_tokens=None, max_seqs=max_seqs, source=f"KV budget not reported yet (no iteration stats){seqs_note}")
    return None
