"""What an SGLang server says about itself: ``/get_server_info`` (``/server_info`` in newer builds) and
its ``/metrics`` page. Pure functions, so each can be tested on recorded answers.

``/get_server_info`` is the server's arguments, the first scheduler's numbers (``max_total_num_tokens``,
``max_req_input_len``) and ``internal_states``: one entry per data-parallel rank, each with its own KV
pool (``memory_usage.token_capacity``) and request limit (``effective_max_running_requests_per_dp``).
With ``--dp N`` the server's capacity is the sum over the ranks, not rank 0's numbers.
"""

from __future__ import annotations

from typing import Any

from infermatrix.plugin import Capacity, Gauges, metric_samples, metric_value

__all__ = ["sglang_capacity", "sglang_gauges", "describe_server_info", "RUNNING", "WAITING", "TOKEN_USAGE", "GENERATED", "PROMPT"]

RUNNING = "sglang:num_running_reqs"
WAITING = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"
GENERATED = "sglang:generation_tokens_total"
PROMPT = "sglang:prompt_tokens_total"
CACHED = "sglang:cached_tokens_total"  # prompt tokens served from the radix (prefix) cache: hit rate = Δ cached / Δ prompt

# Server arguments worth keeping with the run (never the whole answer: it carries api_key).
_DESCRIBED = (
    "tp_size", "dp_size", "ep_size", "pp_size", "enable_dp_attention", "context_length", "max_running_requests",
    "max_total_tokens", "mem_fraction_static", "chunked_prefill_size", "page_size", "dtype", "kv_cache_dtype",
    "quantization", "attention_backend", "disable_radix_cache", "speculative_algorithm", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "reasoning_parser", "tool_call_parser",
)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _ranks(info: dict[str, Any]) -> list[dict[str, Any]]:
    states = info.get("internal_states")
    return [s for s in states if isinstance(s, dict)] if isinstance(states, list) else []


def sglang_capacity(info: dict[str, Any]) -> Capacity | None:
    """KV tokens and most sequences at once, summed over the data-parallel ranks' internal states.

    Without internal states (an old build), rank 0's ``max_total_num_tokens`` times ``dp_size``."""
    ranks = _ranks(info)
    tokens = [t for t in (_int((s.get("memory_usage") or {}).get("token_capacity")) for s in ranks) if t]
    seqs = [n for n in (_int(s.get("effective_max_running_requests_per_dp")) for s in ranks) if n]
    dp = _int(info.get("dp_size")) or 1
    detail: dict[str, Any] = {"dp_ranks": len(ranks) or dp, "max_req_input_len": _int(info.get("max_req_input_len"))}
    if tokens:
        kv: int | None = sum(tokens)
        detail["token_capacity_per_rank"] = tokens
        where = f"internal_states token_capacity {' + '.join(f'{t:,}' for t in tokens)}"
    elif _int(info.get("max_total_num_tokens")):
        kv = _int(info.get("max_total_num_tokens"))
        where = f"max_total_num_tokens {kv:,}" + (f" × dp_size {dp}" if dp > 1 else "")
        kv = kv * dp if kv else None
    else:
        kv, where = None, "KV budget not reported"
    if seqs:
        max_seqs: int | None = sum(seqs)
        detail["max_running_requests_per_rank"] = seqs
        where += f"; effective_max_running_requests_per_dp {' + '.join(str(n) for n in seqs)}"
    else:
        max_seqs = _int(info.get("max_running_requests"))
        if max_seqs:
            where += f"; max_running_requests {max_seqs}"
    accept = [float(s["avg_spec_accept_length"]) for s in ranks if isinstance(s.get("avg_spec_accept_length"), (int, float))]
    if accept:
        detail["avg_spec_accept_length_per_rank"] = accept
    if kv is None and max_seqs is None:
        return None
    return Capacity(kv_tokens=kv, max_seqs=max_seqs, source=f"/get_server_info: {where}", detail=detail)


def _per_rank(page: str, name: str) -> list[float]:
    """One value per data-parallel rank: the scheduler of each rank reports its own gauge (labelled
    ``dp_rank``); the tensor-parallel ranks of one DP rank report the same value, so one is kept."""
    ranks: dict[str, float] = {}
    for labels, value in metric_samples(page, name):
        ranks.setdefault(labels.get("dp_rank", ""), value)
    return list(ranks.values())


def sglang_gauges(page: str) -> Gauges:
    """Running and queued requests summed over DP ranks, KV usage averaged over them (a ratio), and
    the token counters summed over their label sets."""
    running, waiting, usage = _per_rank(page, RUNNING), _per_rank(page, WAITING), _per_rank(page, TOKEN_USAGE)
    return Gauges(
        running=sum(running) if running else None,
        waiting=sum(waiting) if waiting else None,
        kv_usage=sum(usage) / len(usage) if usage else None,
        generated_tokens=metric_value(page, GENERATED),
        prompt_tokens=metric_value(page, PROMPT),
        prefix_cache_queries=metric_value(page, PROMPT),
        prefix_cache_hits=metric_value(page, CACHED),
    )


def describe_server_info(info: dict[str, Any]) -> dict[str, Any]:
    """The engine-describing server arguments (``EngineInfo.extra``); secrets are not among them."""
    extra = {key: info[key] for key in _DESCRIBED if key in info}
    extra["served_model_name"] = info.get("served_model_name")
    extra["model_path"] = info.get("model_path")
    extra["max_total_num_tokens"] = _int(info.get("max_total_num_tokens"))
    extra["max_req_input_len"] = _int(info.get("max_req_input_len"))
    extra["dp_ranks_reported"] = len(_ranks(info))
    return extra
