"""The llamacpp engine config: the command line llama-server is started with, config mistakes as
one-line errors, secrets kept out of what is stored, and the tiny config mirroring vllm-cpu-tiny."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from infermatrix.core.config import ConfigError, load_config
from infermatrix.core.registry import validate_config
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.registry import build_engine
from infermatrix.plugins.llamacpp.plugin import LLAMACPP_TRAITS, LlamaCppEngine

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "llamacpp-cpu-tiny.toml"
VLLM_TINY = ROOT / "configs" / "vllm-cpu-tiny.toml"
KEY = "sk-llama-test-0123456789abcdef"


def _engine(tmp_path: Path, monkeypatch, engine: dict, path: Path = TINY):
    monkeypatch.setenv("LLAMA_TEST_KEY", KEY)
    pm = get_plugin_manager(load_entrypoints=False)
    data = load_config(path)
    data["engine"].update(engine)
    cfg = validate_config(pm, data, str(path))
    return cfg, build_engine(pm, cfg.engine, tmp_path)


def test_tiny_config_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    cfg, engine = _engine(tmp_path, monkeypatch, {"port": 8123})
    assert isinstance(engine, LlamaCppEngine) and engine.kind == "llamacpp"
    assert engine.command() == [
        "/home/u/.cache/infermatrix/llama-cpp/bin/llama-server", "-m", "/home/u/.cache/infermatrix/tiny-qwen2.gguf",
        "--alias", "tiny", "--host", "127.0.0.1", "--port", "8123", "--metrics", "--slot-save-path", str(tmp_path / "slots"),
        "-c", "6144", "-np", "8", "--kv-unified", "-ngl", "0", "-t", "1",
    ]  # fmt: skip
    assert engine.base_url == "http://127.0.0.1:8123"


def test_every_typed_flag_in_order_then_extra_args(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    args = {
        "ctx_size": 32768, "parallel": 4, "kv_unified": False, "flash_attn": "on", "n_gpu_layers": "all", "threads": 16,
        "batch_size": 2048, "ubatch_size": 512, "cache_type_k": "q8_0", "cache_type_v": "q8_0", "cache_reuse": 256,
        "model_draft": "~/m/draft.gguf", "spec_type": "draft", "spec_draft_n_max": 8, "spec_draft_n_min": 2,
        "n_gpu_layers_draft": 99, "seed": 7, "slot_save_path": "~/slots", "extra_args": ["--mlock", "--rope-scaling", "yarn"],
    }  # fmt: skip
    _, engine = _engine(tmp_path, monkeypatch, {"args": args, "host": "0.0.0.0", "port": 9000, "api_key_env": "LLAMA_TEST_KEY"})
    argv = engine.command()
    assert argv[argv.index("--port") - 2 :] == [
        "--host", "0.0.0.0", "--port", "9000", "--api-key", KEY, "--metrics",
        "-c", "32768", "-np", "4", "--no-kv-unified", "-fa", "on", "-ngl", "all", "-t", "16", "-b", "2048", "-ub", "512",
        "-ctk", "q8_0", "-ctv", "q8_0", "--cache-reuse", "256", "-md", "/home/u/m/draft.gguf", "--spec-type", "draft",
        "--spec-draft-n-max", "8", "--spec-draft-n-min", "2", "-ngld", "99", "--seed", "7", "--slot-save-path", "/home/u/slots", "--mlock", "--rope-scaling", "yarn",
    ]  # fmt: skip
    assert engine.base_url == "http://127.0.0.1:9000"  # a wildcard bind is reached on loopback


def test_the_key_reaches_the_server_but_not_the_stored_command(tmp_path, monkeypatch):
    _, engine = _engine(tmp_path, monkeypatch, {"api_key_env": "LLAMA_TEST_KEY"})
    assert KEY in engine.command()
    shown = engine.launch_command
    assert KEY not in shown and "--api-key <redacted>" in shown
    assert shlex.split(shown)[0].endswith("llama-server")


def test_attach_launches_nothing(tmp_path, monkeypatch):
    _, engine = _engine(tmp_path, monkeypatch, {"base_url": "http://gpu-box:8080/v1", "model_source": None})
    assert engine.attach and engine.base_url == "http://gpu-box:8080" and engine.launch_command is None


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({"model_source": None}, "model_source (a GGUF file) is required"),
        ({"args": {"flash_attn": "yes"}}, "flash_attn"),
        ({"args": {"parallel": 0}}, "parallel"),
        ({"args": {"ctx_sise": 4096}}, "ctx_sise"),
    ],
)
def test_config_mistakes_are_one_line_errors(tmp_path, monkeypatch, engine, message):
    with pytest.raises(ConfigError) as err:
        _engine(tmp_path, monkeypatch, engine)
    assert message in str(err.value)


def test_unified_kv_follows_llama_server_rule(tmp_path, monkeypatch):
    cases = [({}, True), ({"parallel": 4}, False), ({"parallel": 4, "kv_unified": True}, True), ({"kv_unified": False}, False)]
    for args, unified in cases:
        cfg, _ = _engine(tmp_path, monkeypatch, {"args": args})
        assert cfg.engine.args.unified_kv() is unified, args


def test_tiny_config_mirrors_vllm_tiny():
    """Same matrix, same prompts and the same KV budget: compare lines the two up like for like."""
    llama, vllm = load_config(TINY), load_config(VLLM_TINY)
    assert llama["matrix"] == vllm["matrix"] and llama["loops"] == vllm["loops"]
    blocks = vllm["engine"]["args"]["num_gpu_blocks_override"] * 128
    assert llama["engine"]["args"]["ctx_size"] == blocks and llama["engine"]["args"]["kv_unified"] is True
    assert llama["engine"]["args"]["parallel"] == vllm["engine"]["args"]["max_num_seqs"]
    assert llama["engine"]["model"] == vllm["engine"]["model"]


def test_traits_name_llama_server_metrics_and_endpoints():
    t = LLAMACPP_TRAITS
    assert t.metrics is not None and t.metrics.names() == {
        "running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred",
        "generated_tokens": "llamacpp:tokens_predicted_total", "prompt_tokens": "llamacpp:prompt_tokens_total",
        "spec_draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "spec_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
    }  # fmt: skip
    assert t.metrics.kv_usage is None  # llama-server has no KV-usage gauge
    assert t.tokenize is not None and t.tokenize.path == "/tokenize"
    assert t.tokenize.text_body("tiny", "hi") == {"content": "hi", "add_special": True}
    assert t.tokenize.text_body("tiny", "hi", special_tokens=False) == {"content": "hi", "add_special": False}
    assert t.tokenize.read_count({"tokens": [1, 2, 3]}) == 3 and not t.tokenize.chat
    assert t.prefix_cache_reset is not None and t.prefix_cache_reset.path.format(slot_id=3) == "/slots/3?action=erase"
