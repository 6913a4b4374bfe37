"""What a vLLM server is: read from its command line, its ``/metrics`` and its start-up log.

Pure functions (no I/O), so each source can be tested on recorded text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["args_summary", "cache_config_labels", "kv_tokens_from_log", "version_details", "quantization_label"]

# "GPU KV cache size: 1,234,567 tokens" (CUDA) / "CPU KV cache size: 4,096 tokens" (CPU backend).
_KV_LINE = re.compile(r"\b(GPU|CPU|XPU|TPU)?\s*KV cache size:\s*([\d,_]+)\s*tokens", re.IGNORECASE)
_MAX_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request:\s*([\d.]+)x")
_COMMIT = re.compile(r"\+g([0-9a-f]{7,40})")

# flag -> (key in the summary, how to read its value). "bool" flags take no value.
_FLAGS: dict[str, tuple[str, str]] = {
    "--tensor-parallel-size": ("tensor_parallel_size", "int"), "-tp": ("tensor_parallel_size", "int"),
    "--pipeline-parallel-size": ("pipeline_parallel_size", "int"), "-pp": ("pipeline_parallel_size", "int"),
    "--data-parallel-size": ("data_parallel_size", "int"), "-dp": ("data_parallel_size", "int"),
    "--enable-expert-parallel": ("expert_parallel", "bool"),
    "--dtype": ("dtype", "str"),
    "--quantization": ("quantization", "str"), "-q": ("quantization", "str"),
    "--kv-cache-dtype": ("kv_cache_dtype", "str"),
    "--enable-prefix-caching": ("prefix_caching", "bool"),
    "--no-enable-prefix-caching": ("prefix_caching", "false"),
    "--max-num-seqs": ("max_num_seqs", "int"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "--max-model-len": ("max_model_len", "int"),
    "--gpu-memory-utilization": ("gpu_memory_utilization", "float"),
    "--block-size": ("block_size", "int"),
    "--num-gpu-blocks-override": ("num_gpu_blocks_override", "int"),
    "--speculative-config": ("speculative_config", "json"),
    "--served-model-name": ("served_model_name", "str"),
    "--reasoning-parser": ("reasoning_parser", "str"),
    "--tool-call-parser": ("tool_call_parser", "str"),
    "--enforce-eager": ("enforce_eager", "bool"),
    "--load-format": ("load_format", "str"),
}


def _read(kind: str, raw: str) -> Any:
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def args_summary(argv: list[str]) -> dict[str, Any]:
    """The engine-describing flags of a ``vllm serve`` argv (``--flag value`` and ``--flag=value``)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        spec = _FLAGS.get(flag if flag.startswith("-") else "")
        i += 1
        if spec is None:
            continue
        key, kind = spec
        if kind in ("bool", "false"):
            out[key] = kind == "bool" and (not eq or inline.lower() not in ("false", "0"))
            continue
        raw = inline if eq else (argv[i] if i < len(argv) else None)
        if not eq:
            i += 1
        if raw is None:
            continue
        try:
            out[key] = _read(kind, raw)
        except ValueError:
            out[key] = raw
    spec = out.get("speculative_config")
    if isinstance(spec, dict):
        out["speculative_method"] = spec.get("method")
        out["speculative_tokens"] = spec.get("num_speculative_tokens")
    return out


def cache_config_labels(metrics_text: str | None) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (block_size, num_gpu_blocks, enable_prefix_caching …)."""
    if not metrics_text:
        return {}
    try:
        for family in text_string_to_metric_families(metrics_text):
            if family.name.replace(":", "_").endswith("cache_config_info") or family.name.endswith("cache_config"):
                for sample in family.samples:
                    return dict(sample.labels)
    except (ValueError, TypeError):
        return {}
    return {}


def kv_tokens_from_log(text: str) -> dict[str, Any] | None:
    """The last "KV cache size: N tokens" line of a start-up log (a restart appends a new one)."""
    matches = list(_KV_LINE.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    found: dict[str, Any] = {"kv_tokens": int(re.sub(r"[,_]", "", m.group(2))), "device": (m.group(1) or "").upper() or None}
    conc = list(_MAX_CONCURRENCY.finditer(text))
    if conc:
        found["max_concurrency"] = {"tokens_per_request": int(conc[-1].group(1).replace(",", "")), "x": float(conc[-1].group(2))}
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    found["line"] = text[line_start : line_end if line_end >= 0 else len(text)].strip()[-300:]
    return found


def version_details(version: str | None) -> dict[str, Any]:
    """``0.1.1.dev5+ge77daef89`` -> commit ``e77daef89`` (a source build names its commit)."""
    if not version:
        return {}
    m = _COMMIT.search(version)
    return {"commit": m.group(1)} if m else {}


def quantization_label(summary: dict[str, Any]) -> str | None:
    """How the weights are held, as the reference report writes it: ``BF16``, ``FP8``, ``AWQ`` …"""
    q = summary.get("quantization")
    if q:
        return str(q).upper()
    dtype = str(summary.get("dtype") or "").lower()
    names = {"bfloat16": "BF16", "bf16": "BF16", "float16": "FP16", "half": "FP16", "fp16": "FP16", "float32": "FP32", "float": "FP32"}
    return names.get(dtype)
