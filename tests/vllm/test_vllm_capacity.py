"""vLLM capacity: ``cache_config_info`` first, the start-up log's KV line second, ``--max-num-seqs`` for
sequences — and the vllm hook answers only for vllm (the generic reader keeps every other kind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infermatrix.core.registry import validate_config
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.run.planning import resolve_capacity
from infermatrix.core.types import Capacity, EngineInfo
from infermatrix.plugins.vllm.plugin import vllm_capacity
from infermatrix.plugins.vllm.describe import cache_config_labels, kv_tokens_from_log

# Lines as vLLM 0.32 writes them (CPU: recorded on this project's CI machine; GPU: same format string).
CPU_LOG = """\
(EngineCore pid=31229) INFO 12-02 14:15:30 [kv_cache_utils.py:2619] Overriding num_gpu_blocks=8192 with num_gpu_blocks_override=40
(EngineCore pid=31229) INFO 12-02 14:15:30 [kv_cache_utils.py:2327] CPU KV cache size: 5,120 tokens, Maximum concurrency for 2,048 tokens per request: 2.50x
"""
GPU_LOG = """\
(EngineCore_DP0 pid=2231) INFO 11-28 09:12:44 [gpu_worker.py:298] Available KV cache memory: 61.84 GiB
(EngineCore_DP0 pid=2231) INFO 11-28 09:12:44 [kv_cache_utils.py:2327] GPU KV cache size: 1,350,912 tokens, Maximum concurrency for 262,144 tokens per request: 5.15x
"""
METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",kv_cache_size_tokens="6144",num_gpu_blocks="48",num_gpu_blocks_override="48"} 1.0
"""


def test_log_lines_cpu_and_gpu():
    cpu = kv_tokens_from_log(CPU_LOG)
    assert cpu["kv_tokens"] == 5120 and cpu["device"] == "CPU"
    assert cpu["max_concurrency"] == {"tokens_per_request": 2048, "x": 2.5}
    gpu = kv_tokens_from_log(GPU_LOG)
    assert gpu["kv_tokens"] == 1_350_912 and gpu["device"] == "GPU"
    assert kv_tokens_from_log("INFO nothing here\n") is None
    # a restart appends to the log: the last line is the live server's
    assert kv_tokens_from_log(CPU_LOG + GPU_LOG)["kv_tokens"] == 1_350_912


def test_cache_config_labels():
    labels = cache_config_labels(METRICS)
    assert labels["num_gpu_blocks"] == "48" and labels["enable_prefix_caching"] == "True"
    assert cache_config_labels("") == {} and cache_config_labels("not { prometheus") == {}


def _resolve(engine: dict, extra: dict, metrics: str | None):
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, {"engine": engine}, "t")
    info = EngineInfo(engine=cfg.engine.kind, model="m", extra=extra)
    return vllm_capacity(metrics, info, cfg.engine)


VLLM = {"kind": "vllm", "model_source": "m", "args": {"max_num_seqs": 8}}


def test_metrics_first_with_max_num_seqs():
    cap = _resolve(VLLM, {"max_num_seqs": 8, "kv_cache_log": kv_tokens_from_log(CPU_LOG)}, METRICS)
    assert (cap.kv_tokens, cap.max_seqs) == (48 * 128, 8)
    assert "cache_config_info" in cap.source and "--max-num-seqs" in cap.source


def test_log_when_metrics_say_nothing():
    cap = _resolve(VLLM, {"max_num_seqs": 8, "kv_cache_log": kv_tokens_from_log(GPU_LOG)}, None)
    assert (cap.kv_tokens, cap.max_seqs) == (1_350_912, 8)
    assert cap.source.startswith("engine log: GPU KV cache size 1,350,912 tokens")
    assert "GPU KV cache size" in cap.detail["log_line"]


def test_only_max_seqs_known():
    cap = _resolve(VLLM, {"max_num_seqs": 8}, "# no cache config here\n")
    assert (cap.kv_tokens, cap.max_seqs) == (None, 8)


@pytest.mark.parametrize("kind", ["sim", "openai"])
def test_no_hook_reads_vllm_names_for_other_kinds(kind):
    """Capacity is each engine's own answer: no plugin guesses it from vLLM's names for another kind."""
    pm = get_plugin_manager(load_entrypoints=False)
    engine = {"kind": kind, "base_url": "http://127.0.0.1:1"} if kind == "openai" else {"kind": kind}
    cfg = validate_config(pm, {"engine": engine}, "t")
    info = EngineInfo(engine=kind, model="m", extra={"kv_cache_log": kv_tokens_from_log(GPU_LOG)})
    assert pm.hook.estimate_capacity(config=cfg.engine, info=info, metrics_text=METRICS) is None
    assert resolve_capacity(pm, cfg, info, METRICS).source.startswith("unknown")
    own = resolve_capacity(pm, cfg, info, METRICS, own=Capacity(kv_tokens=99, source="engine"))
    assert (own.kv_tokens, own.source) == (99, "engine")


def test_recorded_vllm_metrics_page():
    """A whole /metrics page as vLLM 0.32 (CPU) served it for configs/vllm-cpu-tiny.toml."""
    text = (Path(__file__).parent / "recorded_vllm_0.32_cpu_metrics.txt").read_text()
    cap = _resolve(VLLM, {"max_num_seqs": 8}, text)
    assert (cap.kv_tokens, cap.max_seqs) == (48 * 128, 8)
    labels = cache_config_labels(text)
    assert labels["kv_cache_size_tokens"] == "6144" and labels["enable_prefix_caching"] == "True"


DP2_METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="1",num_gpu_blocks="900"} 1.0
"""


def test_data_parallel_capacity_sums_every_rank():
    """Each data-parallel rank reports its own cache_config_info sample and holds its own KV cache; the first
    sample alone was one rank's budget. --max-num-seqs is per rank too."""
    cap = _resolve(VLLM, {}, DP2_METRICS)
    assert cap is not None and cap.kv_tokens == 16 * (1000 + 900)
    assert cap.detail["ranks"] == 2 and "2 data-parallel ranks" in cap.source
    assert cap.max_seqs == 16
