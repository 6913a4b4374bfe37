"""The fast gauge scan reads the same values as a full Prometheus parse of a recorded real vLLM page."""

from pathlib import Path

from infermatrix.core.steady import parse_gauges
from infermatrix.plugins.capacity import metric_value

RECORDED = Path(__file__).parents[1] / "vllm" / "recorded_vllm_0.32_cpu_metrics.txt"


def test_scan_matches_full_parse():
    page = RECORDED.read_text()
    g = parse_gauges(page)
    assert g.running == metric_value(page, "vllm:num_requests_running")
    assert g.waiting == metric_value(page, "vllm:num_requests_waiting")
    assert g.generation_tokens == metric_value(page, "vllm:generation_tokens_total")
    assert g.running is not None and g.generation_tokens is not None


def test_sums_label_sets_and_ignores_lookalikes():
    page = "\n".join([
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0"} 3.0',
        'vllm:num_requests_running{engine="1"} 2.0',
        'vllm:num_requests_waiting{engine="0"} 1.0',
        'vllm:generation_tokens_total{engine="0"} 100.0',
        'vllm:generation_tokens_created{engine="0"} 1.7e9',
    ])
    g = parse_gauges(page)
    assert (g.running, g.waiting, g.generation_tokens) == (5.0, 1.0, 100.0)
    assert parse_gauges("").running is None
