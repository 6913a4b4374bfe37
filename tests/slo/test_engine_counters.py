"""Engine counters for cell statistics: read under the names each plugin declares (a recorded real vLLM page, a
labelled per-position counter, SGLang's cached-token counter), differenced, and NULL with a reason when absent."""

from __future__ import annotations

from pathlib import Path

from infermatrix.core.engine.traits import Gauges, MetricNames
from infermatrix.core.measure.engine_stats import counter_deltas
from infermatrix.core.measure.steady import parse_gauges
from infermatrix.plugins.sglang.info import sglang_gauges
from infermatrix.plugins.vllm.plugin import VLLM_TRAITS

RECORDED = Path(__file__).resolve().parents[1] / "vllm" / "recorded_vllm_0.32_cpu_metrics.txt"

SPEC_PAGE = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 180.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 5.0
"""


def test_real_vllm_page_has_prefix_cache_counters_and_no_spec():
    names = VLLM_TRAITS.metrics
    assert names is not None
    g = parse_gauges(RECORDED.read_text(), names)
    assert (g.prefix_cache_queries, g.prefix_cache_hits) == (5.0, 0.0)  # the recorded page's values
    assert g.spec_draft_tokens is None and g.spec_accepted_per_pos is None
    d = counter_deltas(names, g, g)
    assert d["prefix_cache_queries"] == 0 and d["prefix_cache_note"] == "no prefix-cache queries in this span"
    assert d["spec_note"].startswith("no speculative-decoding counters on the metrics page")


def test_spec_counters_per_position_summed_over_engines_and_differenced():
    names = VLLM_TRAITS.metrics
    assert names is not None
    before = Gauges(spec_drafts=40.0, spec_draft_tokens=120.0, spec_accepted_tokens=60.0, spec_accepted_per_pos={0: 30.0, 1: 20.0, 2: 10.0})
    after = parse_gauges(SPEC_PAGE, names)
    assert after.spec_accepted_per_pos == {0: 85.0, 1: 60.0, 2: 40.0}
    d = counter_deltas(names, before, after)
    assert (d["spec_drafts"], d["spec_draft_tokens"], d["spec_accepted_tokens"]) == (60.0, 180.0, 120.0)
    assert d["spec_accepted_per_pos"] == [55.0, 40.0, 30.0] and "spec_note" not in d


def test_missing_counters_say_why():
    assert counter_deltas(None, None, None) == {"spec_note": "the engine declares no metrics", "prefix_cache_note": "the engine declares no metrics"}
    late = MetricNames(running="r", prefix_cache_queries="q", prefix_cache_hits="h", counted_at_request_end=True)
    assert counter_deltas(late, Gauges(), Gauges())["prefix_cache_note"] == "the engine's counters move only when requests end"
    plain = MetricNames(running="r")
    assert counter_deltas(plain, Gauges(running=1), None)["spec_note"] == "the engine's metrics did not answer before and after"
    d = counter_deltas(plain, Gauges(running=1), Gauges(running=2))
    assert d["spec_note"] == "the engine reports no speculative-decoding counters"
    assert d["prefix_cache_note"] == "the engine reports no prefix-cache counters"
    restarted = counter_deltas(VLLM_TRAITS.metrics, Gauges(prefix_cache_queries=500.0), Gauges(prefix_cache_queries=20.0))
    assert restarted["prefix_cache_queries"] is None  # a counter that went down is no difference


def test_sglang_cached_tokens_are_its_prefix_cache_hits():
    page = ('# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name="m",dp_rank="0"} 1000\n'
            'sglang:prompt_tokens_total{model_name="m",dp_rank="1"} 600\n'
            '# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{model_name="m",dp_rank="0"} 900\n')  # fmt: skip
    g = sglang_gauges(page)
    assert (g.prefix_cache_queries, g.prefix_cache_hits) == (1600.0, 900.0)
