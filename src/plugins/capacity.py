"""Capacity from vLLM-style Prometheus ``/metrics``: ``vllm:cache_config_info`` num_gpu_blocks × block_size."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from infermatrix.core.config import EngineConfig
from infermatrix.core.hookspecs import hookimpl
from infermatrix.core.types import Capacity, EngineInfo

__all__ = ["capacity_from_metrics", "metric_value"]


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value not in (None, "", "None") else None
    except ValueError:
        return None


def capacity_from_metrics(text: str) -> Capacity | None:
    """KV token budget from ``cache_config_info``; ``None`` when the metric or its labels are missing."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError):
        return None
    for family in families:
        if family.name.replace(":", "_").endswith("cache_config_info") or family.name.endswith("cache_config"):
            for sample in family.samples:
                blocks = _int(sample.labels.get("num_gpu_blocks"))
                if blocks is None:
                    blocks = _int(sample.labels.get("num_gpu_blocks_override"))
                block = _int(sample.labels.get("block_size"))
                if blocks and block:
                    return Capacity(
                        kv_tokens=blocks * block,
                        max_seqs=_int(sample.labels.get("max_num_seqs")),
                        source=f"{family.name} (num_gpu_blocks {blocks} × block_size {block})",
                        detail={"num_gpu_blocks": blocks, "block_size": block},
                    )
    return None


def metric_value(text: str, name: str) -> float | None:
    """Sum of a metric's samples across labels (e.g. ``vllm:num_requests_running``), or ``None``."""
    total, seen = 0.0, False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name or sample.name == f"{name}_total":
                    total += sample.value
                    seen = True
    except (ValueError, TypeError):
        return None
    return total if seen else None


@hookimpl(trylast=True)
def estimate_capacity(config: EngineConfig, info: EngineInfo, metrics_text: str | None) -> Capacity | None:
    return capacity_from_metrics(metrics_text) if metrics_text else None
