"""SGLang, TensorRT-LLM and LMDeploy read against their endpoints' recorded answers, served over real
HTTP on loopback: capacity (summed over data-parallel ranks), gauges through each engine's traits,
version, tokenize, and what is kept of the server's self-description (never its API key)."""

from __future__ import annotations

import json

import pytest
from enginehelp import engine_for, run_with_client
from fixture_server import FixtureServer, load_fixture

from infermatrix.core.measure.steady import EngineGauges, parse_gauges
from infermatrix.core.measure.tokenizer import pick_tokenizer
from infermatrix.plugins.lmdeploy.info import engine_info, lmdeploy_capacity
from infermatrix.plugins.sglang.info import sglang_capacity
from infermatrix.plugins.trtllm.info import trtllm_capacity

SERVER = pytest.mark.slow  # starts a loopback HTTP server


def _describe_and_capacity(engine):
    async def go(client):
        info = await engine.describe(client)
        return info, await engine.read_capacity(client), await engine.metrics_page(client)

    return run_with_client(go)


@SERVER
def test_sglang_two_dp_ranks_summed_via_server_info(tmp_path):
    with FixtureServer("sglang_dp2_server_info.json") as srv:
        engine = engine_for(tmp_path, kind="sglang", base_url=srv.base_url, model="qwen")
        info, cap, page = _describe_and_capacity(engine)
        # /get_server_info is gone in this build: the engine asked it first, then /server_info.
        asked = [p for m, p, _ in srv.requests if p.endswith("server_info")]
        assert asked[:2] == ["/get_server_info", "/server_info"]
    assert cap.kv_tokens == 1_048_576 + 1_040_384  # both ranks' pools, not rank 0's max_total_num_tokens
    assert cap.max_seqs == 128 + 128
    assert cap.detail["token_capacity_per_rank"] == [1_048_576, 1_040_384]
    assert cap.detail["avg_spec_accept_length_per_rank"] == [1.91, 1.87]
    assert cap.source.startswith("/get_server_info: internal_states token_capacity 1,048,576 + 1,040,384")
    assert info.engine == "sglang" and info.version == "0.5.9" and info.max_model_len == 262144
    assert info.extra["dp_size"] == 2 and info.extra["tp_size"] == 4 and info.extra["speculative_algorithm"] == "NEXTN"
    assert "sk-from-server-info" not in json.dumps(info.extra)  # the server's own answer carries its api_key
    g = parse_gauges(page, engine.traits.metrics)
    # dp_rank 0 is reported by two TP ranks with the same value: counted once per DP rank.
    assert (g.running, g.waiting) == (30 + 34, 2)
    assert g.kv_usage == pytest.approx((0.4 + 0.5) / 2)  # a ratio: averaged over ranks, not summed
    assert (g.generated_tokens, g.prompt_tokens) == (7_557_572, 8_128_902)


@SERVER
def test_sglang_one_rank_docs_answer(tmp_path):
    with FixtureServer("sglang_dp1_get_server_info.json") as srv:
        engine = engine_for(tmp_path, kind="sglang", base_url=srv.base_url)
        info, cap, page = _describe_and_capacity(engine)
        assert [p for _, p, _ in srv.requests if p.endswith("server_info")] == ["/get_server_info", "/get_server_info"]
    assert (cap.kv_tokens, cap.max_seqs) == (20480, 128)
    assert info.version == "0.0.0.dev1+gf97c09dac" and info.model == "qwen/qwen2.5-0.5b-instruct"
    assert page is None  # launched without --enable-metrics: no /metrics page


def test_sglang_capacity_without_internal_states_scales_rank_zero():
    cap = sglang_capacity({"max_total_num_tokens": 1000, "dp_size": 2, "max_running_requests": 64})
    assert (cap.kv_tokens, cap.max_seqs) == (2000, 64) and "× dp_size 2" in cap.source
    assert sglang_capacity({"version": "x"}) is None


@SERVER
def test_sglang_tokenize_and_flush(tmp_path):
    with FixtureServer("sglang_dp2_server_info.json") as srv:
        engine = engine_for(tmp_path, kind="sglang", base_url=srv.base_url, model="qwen")

        async def go(client):
            tok = await pick_tokenizer(client, engine.base_url, "qwen", "completions", engine.headers, engine.traits.tokenize)
            n = await tok.count("Hello, world!")
            reset = engine.traits.prefix_cache_reset
            r = await client.request(reset.method, f"{engine.base_url}{reset.path}")
            return n, r.status_code

        n, flush_status = run_with_client(go)
        body = [b for _, p, b in srv.requests if p == "/v1/tokenize"][-1]  # after pick_tokenizer's own probe
    assert n == 4 and body["prompt"] == "Hello, world!" and body["model"] == "qwen"
    assert flush_status == 400  # SGLang refuses while requests run; the recorded answer says so


@SERVER
def test_trtllm_iteration_stats_and_prometheus(tmp_path):
    with FixtureServer("trtllm_iteration_stats.json") as srv:
        engine = engine_for(tmp_path, kind="trtllm", base_url=srv.base_url, model="qwen")
        info, cap, page = _describe_and_capacity(engine)
    assert (cap.kv_tokens, cap.max_seqs) == (101256 * 32, 256)
    assert cap.source.startswith("/metrics iteration stats: maxNumBlocks 101,256 × tokensPerBlock 32")
    assert info.version == "1.2.0rc5"
    g = parse_gauges(page, engine.traits.metrics)
    assert (g.running, g.waiting, g.kv_usage) == (12, 3, 0.25)
    assert (g.generated_tokens, g.prompt_tokens) == (98304, 52480)
    assert (g.spec_draft_tokens, g.spec_accepted_tokens) == (40960, 33000)


def test_trtllm_capacity_falls_back_to_prometheus_then_batch_size():
    prom = load_fixture("trtllm_iteration_stats.json")["routes"]["GET /prometheus/metrics"]["text"]
    # /metrics entries are consumed when read: an empty list falls back to the Prometheus gauges.
    cap = trtllm_capacity([], prom, max_batch_size=64)
    assert (cap.kv_tokens, cap.max_seqs) == (101256 * 32, 256) and cap.source.startswith("/prometheus/metrics")
    only_batch = trtllm_capacity([], "", max_batch_size=64)
    assert (only_batch.kv_tokens, only_batch.max_seqs) == (None, 64)
    assert trtllm_capacity(None, None) is None


@SERVER
def test_lmdeploy_engine_info_is_a_json_string(tmp_path):
    with FixtureServer("lmdeploy_engine_info.json") as srv:
        engine = engine_for(tmp_path, kind="lmdeploy", base_url=srv.base_url, model="qwen", args={"max_batch_size": 128})
        info, cap, page = _describe_and_capacity(engine)

        async def count(client):
            tok = await pick_tokenizer(client, engine.base_url, "qwen", "completions", engine.headers, engine.traits.tokenize)
            return await tok.count("Hello, world!"), await tok.count_output("Hello")

        n, _ = run_with_client(count)
        bodies = [b for _, p, b in srv.requests if p == "/v1/encode"]
    assert (cap.kv_tokens, cap.max_seqs) == (16384 * 64, 128)
    assert "num_gpu_blocks 16,384 × block_size 64" in cap.source and "--max-batch-size" in cap.source
    assert info.extra["engine_info"]["tp_size"] == 4
    g = parse_gauges(page, engine.traits.metrics)
    assert (g.running, g.waiting, g.kv_usage, g.generated_tokens, g.prompt_tokens) == (7, 1, 0.125, 2048, 4096)
    assert n == 5
    assert bodies[-2] == {"input": "Hello, world!"}  # no model field: /v1/encode takes none
    assert bodies[-1] == {"input": "Hello", "add_bos": False}  # generated text: no BOS


def test_lmdeploy_capacity_reading():
    assert engine_info('{"num_gpu_blocks": 2, "block_size": 64}') == {"num_gpu_blocks": 2, "block_size": 64}
    assert engine_info({"num_gpu_blocks": 2}) == {"num_gpu_blocks": 2} and engine_info("not json") is None
    assert lmdeploy_capacity(None) is None
    assert lmdeploy_capacity({}, max_batch_size=8).max_seqs == 8


@SERVER
@pytest.mark.parametrize("fixture,kind", [("sglang_dp2_server_info.json", "sglang"), ("trtllm_iteration_stats.json", "trtllm"), ("lmdeploy_engine_info.json", "lmdeploy")])
def test_gauges_found_through_traits(tmp_path, fixture, kind):
    """The runner's gauge reader, pointed at each engine's metrics path, finds its names."""
    with FixtureServer(fixture) as srv:
        engine = engine_for(tmp_path, kind=kind, base_url=srv.base_url, model="qwen")

        async def go(client):
            gauges = EngineGauges(client, engine.base_url, engine.headers, engine.traits.metrics)
            return await gauges.probe(), await gauges.read()

        state, g = run_with_client(go)
    assert state == "found" and g.running is not None and g.waiting is not None and g.generated_tokens is not None
