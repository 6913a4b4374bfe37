"""The sim takes vLLM's flag names as ``engine.args`` (issue 29 item 2; docs/sim.md "Engine args"): each replaces its
profile's value, reaches the server as vLLM's flag on its command line, and the server refuses a combination it
cannot run (as vLLM does) instead of the config model, so a sweep stores it as a failed run."""

from __future__ import annotations

import pytest

from infermatrix.core.config import ConfigError
from infermatrix.plugins.sim import server
from infermatrix.plugins.sim.plugin import SimEngine, SimEngineConfig
from infermatrix.plugins.sim.profile import SimArgs, load_profile, with_engine_args


def test_each_arg_replaces_its_profile_value():
    demo = load_profile("demo")
    got = with_engine_args(demo, SimArgs(max_num_seqs=2, num_gpu_blocks_override=2048, speculative_config={"num_speculative_tokens": 3}))
    assert (got.max_num_seqs, got.kv_tokens, got.block_size, got.spec_tokens) == (2, 2048 * 16, 16, 3)
    assert got.acceptance == demo.acceptance and got.step_table == demo.step_table  # nothing else moves
    bigger = with_engine_args(demo, SimArgs(block_size=32))  # the same memory in fewer, larger blocks
    assert (bigger.kv_tokens, bigger.block_size, bigger.num_gpu_blocks) == (demo.kv_tokens, 32, demo.kv_tokens // 32)
    assert with_engine_args(demo, SimArgs()) is demo


def test_a_cache_too_small_for_one_request_is_refused_by_the_server_not_the_config(tmp_path, capsys):
    cfg = SimEngineConfig(profile="demo", args=SimArgs(num_gpu_blocks_override=100))  # the config model takes it
    assert cfg.known_capacity()[0] == 1600  # planning sees the KV the server will be asked to run
    engine = SimEngine(cfg, tmp_path)
    argv = engine.command()
    assert argv[-2:] == ["--num-gpu-blocks-override", "100"]  # vLLM's flag, on the server's command line
    assert server.main(argv[3:]) == 2  # refuses before it serves, with its reason
    err = capsys.readouterr().err
    assert "kv_tokens must hold at least one max_model_len request" in err and "KV cache 1600 tokens, max_model_len 16384" in err
    with pytest.raises(ConfigError):
        with_engine_args(load_profile("demo"), SimArgs(num_gpu_blocks_override=100))


def test_args_the_sim_does_not_model_are_config_errors():
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):  # a typo or an unmodelled flag: the config model says so
        SimArgs(enable_chunked_prefill=False)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="num_speculative_tokens = K"):
        SimArgs(speculative_config={"model": "draft", "num_speculative_tokens": 2})
    with pytest.raises(ValueError, match="only for a sim infermatrix launches"):
        SimEngineConfig(profile="demo", base_url="http://127.0.0.1:1", args=SimArgs(max_num_seqs=2))


def test_an_attached_config_round_trips_through_storage():
    """A stored config dumps every field, ``args`` included at its defaults; ``resume`` validates it again. The check is
    on args that differ from the defaults, not on fields present (the full suite found resume refusing its own run)."""
    attached = SimEngineConfig(profile="demo", base_url="http://127.0.0.1:1")
    again = SimEngineConfig.model_validate(attached.model_dump())
    assert again.base_url == attached.base_url and again.args == SimArgs()


def test_the_chunked_prefill_budget_is_an_arg_and_refused_below_max_num_seqs_as_vllm_does(tmp_path):
    demo = load_profile("demo")
    assert demo.max_num_batched_tokens is None  # unset: serial prefill beside decoding, as before
    got = with_engine_args(demo, SimArgs(max_num_batched_tokens=2048))
    assert got.max_num_batched_tokens == 2048 and got.max_num_seqs == demo.max_num_seqs
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(8\) must be at least max_num_seqs \(16\)"):
        with_engine_args(demo, SimArgs(max_num_seqs=16, max_num_batched_tokens=8))
    argv = SimEngine(SimEngineConfig(profile="demo", args=SimArgs(max_num_batched_tokens=512)), tmp_path).command()
    assert argv[-2:] == ["--max-num-batched-tokens", "512"]


def test_a_chunk_costs_the_marginal_prefill_time_plus_the_base():
    p = load_profile({"base": "tiny", "prefill_attn_ms": 2.0, "prefix_cache_tokens": 0})
    whole = p.prefill_ms(3000, 0)
    parts = [p.prefill_chunk_ms(done, n, 0) for done, n in ((0, 1000), (1000, 1000), (2000, 1000))]
    assert sum(parts) == pytest.approx(whole + 2 * p.prefill_base_ms)  # k chunks: the whole plus (k - 1) bases
    assert parts[0] < parts[1] < parts[2]  # attention: later chunks see more tokens before them
    assert p.prefill_chunk_ms(0, 3000, 0) == pytest.approx(whole)
