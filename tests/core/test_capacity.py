from infermatrix.core.engine.prometheus import info_labels, metric_value
from infermatrix.plugins.vllm.plugin import capacity_from_metrics

METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="37",prefix_caching_hash_algo="sha256"} 1.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
vllm:generation_tokens_total{engine="1",model_name="m"} 6.0
"""


def test_budget_is_blocks_times_block_size():
    cap = capacity_from_metrics(METRICS)
    assert cap.kv_tokens == 37 * 128
    assert "cache_config_info" in cap.source


def test_missing_metric_gives_none():
    assert capacity_from_metrics("# nothing here\n") is None
    assert capacity_from_metrics('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n') is None


def test_counter_summed_over_labels():
    assert metric_value(METRICS, "vllm:generation_tokens_total") == 1240.0


def test_info_labels_of_a_family():
    assert info_labels(METRICS, "vllm:cache_config_info")["num_gpu_blocks"] == "37"
    assert info_labels(METRICS, "other:cache_config_info") == {}
    assert info_labels(None, "x") == {} and info_labels("not { prometheus", "x") == {}
