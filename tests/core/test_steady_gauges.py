"""The fast gauge scan reads the same values as a full Prometheus parse of a recorded real vLLM page."""

from pathlib import Path

from infermatrix.core.measure.steady import parse_gauges
from infermatrix.core.engine.prometheus import metric_value
from infermatrix.core.engine.traits import MetricNames
from infermatrix.plugins.vllm.plugin import VLLM_TRAITS

NAMES = VLLM_TRAITS.metrics

RECORDED = Path(__file__).parents[1] / "vllm" / "recorded_vllm_0.32_cpu_metrics.txt"


def test_scan_matches_full_parse():
    page = RECORDED.read_text()
    g = parse_gauges(page, NAMES)
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
    g = parse_gauges(page, NAMES)
    assert (g.running, g.waiting, g.generation_tokens) == (5.0, 1.0, 100.0)
    assert parse_gauges("", NAMES).running is None


def test_names_are_the_engines_own():
    """Whatever the engine calls its gauges is read; another engine's names on the page are not."""
    page = "toy:running 3\ntoy:waiting 1\ntoy:generated_tokens_total 40\nvllm:num_requests_running 9\n"
    g = parse_gauges(page, MetricNames(running="toy:running", waiting="toy:waiting", generated_tokens="toy:generated_tokens"))
    assert (g.running, g.waiting, g.generated_tokens, g.kv_usage) == (3.0, 1.0, 40.0, None)
    assert parse_gauges(page, MetricNames(running="other:running")).empty()


def test_a_custom_parser_replaces_the_prometheus_scan():
    from infermatrix.core.engine.traits import Gauges

    names = MetricNames(parse=lambda page: Gauges(running=float(page.split()[1])))
    assert parse_gauges("running 5", names).running == 5.0
