"""The launch command each engine builds from its config: flags in order, the API key given to the
server but never shown, and the H200 Qwen configs serving what the vLLM reference config serves."""

from __future__ import annotations

import json
import os
import shlex

import anyio
import pytest
from enginehelp import engine_for

from infermatrix.core.config import ConfigError, load_config
from infermatrix.core.registry import validate_config
from infermatrix.core.engine.contract import EngineError
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.redact import REDACTED
from imxtest import ROOT

KEY = "sk-engine-test-0123456789abcdef"


def test_sglang_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SG_KEY", KEY)
    engine = engine_for(
        tmp_path, kind="sglang", model_source="~/models/qwen", model="qwen", port=30001, api_key_env="SG_KEY",
        args={"tp": 4, "dp": 2, "context_length": 8192, "max_running_requests": 64, "mem_fraction_static": 0.8,
              "max_total_tokens": 100000, "speculative_algorithm": "EAGLE", "enable_dp_attention": True, "disable_radix_cache": False,
              "extra_args": ["--log-level", "warning"]},
    )  # fmt: skip
    argv = engine.command()
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", os.path.expanduser("~/models/qwen")]
    assert argv[5:13] == ["--served-model-name", "qwen", "--host", "127.0.0.1", "--port", "30001", "--api-key", KEY]
    assert argv[13:] == [
        "--tp", "4", "--dp", "2", "--enable-dp-attention", "--context-length", "8192", "--max-running-requests", "64",
        "--max-total-tokens", "100000", "--mem-fraction-static", "0.8", "--speculative-algorithm", "EAGLE",
        "--enable-metrics", "--log-level", "warning",
    ]  # fmt: skip
    shown = engine.launch_command
    assert KEY not in shown and f"--api-key {REDACTED}" in shown
    assert engine.base_url == "http://127.0.0.1:30001"


def test_sglang_serve_script_and_no_metrics(tmp_path):
    engine = engine_for(tmp_path, kind="sglang", model_source="m", executable="/opt/sg/bin/sglang", enable_metrics=False)
    argv = engine.command()
    assert argv[:4] == ["/opt/sg/bin/sglang", "serve", "--model-path", "m"] and "--enable-metrics" not in argv


@pytest.mark.slow  # start() tries Popen for real (the program is missing): the fast loop starts no process
def test_trtllm_command_and_options_file(tmp_path):
    engine = engine_for(
        tmp_path, kind="trtllm", model_source="Qwen/Q", port=8001,
        args={"backend": "pytorch", "tp_size": 2, "max_batch_size": 32, "max_seq_len": 4096, "kv_cache_free_gpu_memory_fraction": 0.9},
        llm_api_options={"kv_cache_config": {"enable_block_reuse": False}, "return_perf_metrics": True},
    )  # fmt: skip
    argv = engine.command()
    options = str(tmp_path / "trtllm-config.yaml")
    assert argv == [
        "trtllm-serve", "Qwen/Q", "--host", "127.0.0.1", "--port", "8001", "--backend", "pytorch", "--tp_size", "2",
        "--max_batch_size", "32", "--max_seq_len", "4096", "--kv_cache_free_gpu_memory_fraction", "0.9", "--config", options,
    ]  # fmt: skip
    # start() writes the options file before launching (here the program is not there: a one-line EngineError).
    missing = engine_for(tmp_path, kind="trtllm", model_source="Qwen/Q", executable=str(tmp_path / "no" / "trtllm-serve"),
                         llm_api_options={"kv_cache_config": {"enable_block_reuse": False}, "return_perf_metrics": True})
    with pytest.raises(EngineError, match="cannot start trtllm: .*trtllm-serve' does not exist"):
        anyio.run(missing.start)
    written = json.loads((tmp_path / "trtllm-config.yaml").read_text())
    assert written == {"enable_iter_perf_stats": True, "return_perf_metrics": True, "kv_cache_config": {"enable_block_reuse": False}}


def test_trtllm_refuses_a_key_it_cannot_pass(tmp_path):
    pm = get_plugin_manager(load_entrypoints=False)
    with pytest.raises(ConfigError, match="no API-key option"):
        validate_config(pm, {"engine": {"kind": "trtllm", "model_source": "m", "api_key_env": "X"}}, "t")
    validate_config(pm, {"engine": {"kind": "trtllm", "base_url": "http://h:1", "api_key_env": "X"}}, "t")  # attaching: fine


def test_lmdeploy_command(tmp_path, monkeypatch):
    monkeypatch.setenv("LM_KEY", KEY)
    engine = engine_for(
        tmp_path, kind="lmdeploy", model_source="internlm/x", model="x", host="0.0.0.0", port=23333, api_key_env="LM_KEY",
        args={"backend": "turbomind", "tp": 2, "session_len": 8192, "max_batch_size": 128, "cache_max_entry_count": 0.5, "enable_prefix_caching": True},
    )  # fmt: skip
    argv = engine.command()
    assert argv == [
        "lmdeploy", "serve", "api_server", "internlm/x", "--server-name", "0.0.0.0", "--server-port", "23333",
        "--model-name", "x", "--api-keys", KEY, "--backend", "turbomind", "--tp", "2", "--session-len", "8192",
        "--max-batch-size", "128", "--cache-max-entry-count", "0.5", "--enable-prefix-caching", "--enable-metrics",
    ]  # fmt: skip
    assert KEY not in engine.launch_command and f"--api-keys {REDACTED}" in engine.launch_command
    assert engine.base_url == "http://127.0.0.1:23333"  # bound on every interface, reached on loopback


@pytest.mark.parametrize("kind", ["sglang", "trtllm", "lmdeploy"])
def test_typos_and_missing_model_are_config_errors(kind):
    pm = get_plugin_manager(load_entrypoints=False)
    with pytest.raises(ConfigError, match="model_source"):
        validate_config(pm, {"engine": {"kind": kind}}, "t")
    with pytest.raises(ConfigError):
        validate_config(pm, {"engine": {"kind": kind, "model_source": "m", "args": {"no_such_flag": 1}}}, "t")


def _h200(kind: str, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/bench")
    for var in ("VLLM_API_KEY", "SGLANG_API_KEY", "LMDEPLOY_API_KEY"):
        monkeypatch.setenv(var, KEY)
    pm = get_plugin_manager(load_entrypoints=False)
    path = ROOT / "configs" / f"{kind}-h200x4-qwen3.8-flash-next.toml"
    cfg = validate_config(pm, load_config(path), str(path))
    from infermatrix.core.registry import build_engine

    return cfg, build_engine(pm, cfg.engine, tmp_path)


@pytest.mark.parametrize("kind", ["sglang", "trtllm", "lmdeploy"])
def test_h200_configs_line_up_with_vllm(kind, tmp_path, monkeypatch):
    ref, _ = _h200("vllm", tmp_path, monkeypatch)
    cfg, engine = _h200(kind, tmp_path, monkeypatch)
    assert cfg.matrix == ref.matrix and cfg.hardware == ref.hardware  # `compare` lines the cells up
    assert cfg.engine.model == ref.engine.model == "qwen"
    shown = shlex.split(engine.launch_command)
    assert KEY not in engine.launch_command and "$HOME" not in engine.launch_command
    assert "Qwen/Qwen3.8-Flash-Next" in shown and engine.base_url == "http://127.0.0.1:8000"
    tp_flag = {"sglang": "--tp", "trtllm": "--tp_size", "lmdeploy": "--tp"}[kind]
    assert shown[shown.index(tp_flag) + 1] == "4"
    assert cfg.engine.known_max_model_len() == 262144
