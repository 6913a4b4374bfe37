"""The vllm engine config: the H200 Qwen config rebuilds the reference launch command flag for flag,
secrets stay redacted, and what the command line says is what the run records."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from infermatrix.core.config import ConfigError, load_config
from infermatrix.core.registry import validate_config
from infermatrix.core.contexts import parse_context
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.registry import build_engine
from infermatrix.core.redact import REDACTED
from infermatrix.plugins.vllm.config import VllmArgs
from infermatrix.plugins.vllm.describe import args_summary
from infermatrix.plugins.vllm.plugin import describe_vllm

ROOT = Path(__file__).parents[2]
H200 = ROOT / "configs" / "vllm-h200x4-qwen3.8-flash-next.toml"
TINY = ROOT / "configs" / "vllm-cpu-tiny.toml"
_NAME = "vllm-h200x4-qwen3.8-flash-next.txt"
# shared/ beside the checkout, else the copy the importer tests keep (checked against shared/ when both exist)
REFERENCE = next(
    (p for p in (ROOT.parent / "shared" / "reference" / _NAME, ROOT / "tests" / "importer" / "data" / _NAME) if p.exists()),
    ROOT.parent / "shared" / "reference" / _NAME,
)
KEY = "sk-h200-test-0123456789abcdef"


def _reference_argv() -> list[str]:
    if not REFERENCE.exists():
        pytest.skip(f"reference report not present at {REFERENCE}")
    lines = REFERENCE.read_text().splitlines()
    line = lines[lines.index("Launch command") + 1]
    line = line[: line.index("Prefill")] if "Prefill" in line else line  # the report runs on into the next heading
    return shlex.split(line)


def _engine(path: Path, tmp_path: Path, monkeypatch, overrides: dict | None = None):
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    pm = get_plugin_manager(load_entrypoints=False)
    data = load_config(path)
    data["engine"].update(overrides or {})
    cfg = validate_config(pm, data, str(path))
    return cfg, build_engine(pm, cfg.engine, tmp_path)


def test_h200_command_is_the_reference_launch_command(tmp_path, monkeypatch):
    ref = _reference_argv()
    cfg, engine = _engine(H200, tmp_path, monkeypatch)
    argv = engine.command()
    assert KEY in argv  # the server gets the real key ...
    shown = shlex.split(engine.launch_command)
    assert KEY not in engine.launch_command  # ... what is stored and printed never does
    assert shown[1:] == ref[1:], "flags differ from the reference launch command"
    assert Path(shown[0]).name == Path(ref[0]).name == "vllm"
    assert shown[0].endswith("/env_h200-qwen-flash-next-vllm/bin/vllm") and "$HOME" not in shown[0]
    assert "--api-key <redacted>" in engine.launch_command
    assert engine.base_url == "http://127.0.0.1:8000"  # bound on 0.0.0.0, reached on loopback


def test_h200_matrix_is_the_reference_matrix(tmp_path, monkeypatch):
    cfg, _ = _engine(H200, tmp_path, monkeypatch)
    m = cfg.matrix
    assert m.prefill_contexts == [parse_context(c) for c in "8K 16K 32K 64K 128K 251K 256K".split()]
    assert m.contexts == [parse_context(c) for c in "8K 16K 32K 64K 128K 251K".split()]
    assert m.contexts[-1] == 257_024 and m.prefill_contexts[-1] == 262_144
    assert m.concurrency == [1, 2, 4, 8, 16, 32, 64, 128]
    assert (m.duration_s, m.max_output) == (30, 4096)
    assert cfg.hardware["gpu"] == "H200 SXM"


def test_h200_engine_description_from_its_command_line(tmp_path, monkeypatch):
    cfg, engine = _engine(H200, tmp_path, monkeypatch)
    argv = shlex.split(engine.launch_command)
    extra = describe_vllm(argv, {}, "", "0.1.1.dev5+ge77daef89", cfg.engine)
    assert extra["tensor_parallel_size"] == 4
    assert extra["expert_parallel"] is True
    assert (extra["speculative_method"], extra["speculative_tokens"]) == ("mtp", 1)
    assert extra["dtype"] == "bfloat16" and extra["quantization"] == "BF16"
    assert extra["commit"] == "e77daef89"
    assert extra["gpu_memory_utilization"] == 0.84
    assert extra["engine_args"]["max_model_len"] == 262144
    assert REDACTED not in str(extra) and KEY not in str(extra)


def test_missing_key_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, load_config(H200), "h200")
    with pytest.raises(ConfigError, match="VLLM_API_KEY is not set"):
        build_engine(pm, cfg.engine, tmp_path)


def test_tiny_cpu_config_runs_the_module_not_the_script(tmp_path, monkeypatch):
    _, engine = _engine(TINY, tmp_path, monkeypatch)
    argv = engine.command()
    assert argv[1:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert argv[0].endswith("/.cache/infermatrix/vllm-cpu-venv/bin/python") and "~" not in argv[0]
    assert "--load-format" in argv and argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--num-gpu-blocks-override") + 1] == "48"
    assert engine.env() == {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert engine.log_path.parent == tmp_path


@pytest.mark.parametrize(
    "engine, message",
    [
        ({"kind": "vllm", "model_source": "m", "python": "p", "executable": "e"}, "either engine.python or engine.executable"),
        ({"kind": "vllm"}, "model_source is required"),
        ({"kind": "vllm", "model_source": "m", "args": {"tensor_paralel_size": 2}}, "engine.args.tensor_paralel_size: unknown field"),
        ({"kind": "vllm", "model_source": "m", "args": {"gpu_memory_utilization": 1.5}}, "gpu_memory_utilization"),
    ],
)
def test_config_mistakes_name_the_field(engine, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(get_plugin_manager(load_entrypoints=False), {"engine": engine}, "t.toml")


def test_attach_mode_launches_nothing(tmp_path):
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, {"engine": {"kind": "vllm", "base_url": "http://10.0.0.7:8000/v1"}}, "t")
    engine = build_engine(pm, cfg.engine, tmp_path)
    assert engine.attach and engine.base_url == "http://10.0.0.7:8000" and engine.launch_command is None


def test_flags_booleans_json_and_extra_args_in_order():
    args = VllmArgs(
        tensor_parallel_size=2, enable_prefix_caching=False, enforce_eager=False, enable_expert_parallel=True,
        speculative_config={"method": "eagle3", "num_speculative_tokens": 3}, extra_args=["--foo", "bar"],
    )
    assert args.flags("before_host") == ["--tensor-parallel-size", "2"]
    assert args.flags("after_host") == [
        "--enable-expert-parallel", "--no-enable-prefix-caching",
        "--speculative-config", '{"method":"eagle3","num_speculative_tokens":3}', "--foo", "bar",
    ]  # fmt: skip


def test_args_summary_reads_both_flag_spellings():
    s = args_summary(["vllm", "serve", "m", "-tp=8", "--dtype", "float16", "--no-enable-prefix-caching",
                      "--max-num-seqs=64", "--speculative-config", '{"method":"ngram","num_speculative_tokens":5}'])  # fmt: skip
    assert s["tensor_parallel_size"] == 8 and s["dtype"] == "float16" and s["prefix_caching"] is False
    assert s["max_num_seqs"] == 64 and (s["speculative_method"], s["speculative_tokens"]) == ("ngram", 5)
