"""Trace-replay points without an engine: the config (``[[load]] kind = "trace"``), what of a trace is replayed,
the prompts' exact lengths and shared blocks, and the CLI's one-line refusal of a trace that contradicts itself."""

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from infermatrix.core.config import ConfigError, LoadConfig, TraceLoadConfig
from infermatrix.core.load.trace_prompts import BLOCK_WORDS, TracePromptBuilder, expected_shared_prefix
from infermatrix.core.load.traces import TraceRequest, read_trace
from infermatrix.core.registry import validate_config
from infermatrix.core.load.trace_point import check_traces, plan_trace
from infermatrix.testing import plugin_manager

ENGINE = {"kind": "openai", "base_url": "http://127.0.0.1:9"}


@pytest.fixture(scope="module")
def samples(sample_traces):
    return sample_traces(40)


def _bad_mooncake(tmp_path) -> Path:
    path = tmp_path / "bad.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}]  # 3 blocks for 600 tokens
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_trace_point_is_its_own_kind_and_a_rate_point_is_unchanged(samples):
    pm = plugin_manager()
    cfg = validate_config(pm, {"engine": ENGINE, "load": [
        {"rate": 2}, {"kind": "trace", "path": str(samples / "mooncake.jsonl"), "time_scale": 0.5},
        {"arrival": "trace", "path": str(samples / "azure.csv")},
    ]})  # fmt: skip
    rate, moon, azure = cfg.load
    assert isinstance(rate, LoadConfig) and rate.arrival == "poisson"
    assert isinstance(moon, TraceLoadConfig) and moon.time_scale == 0.5 and moon.block_tokens == 512
    assert isinstance(azure, TraceLoadConfig)
    again = validate_config(pm, cfg.model_dump(mode="json"))  # a stored config resumes as the same points
    assert [type(p) for p in again.load] == [LoadConfig, TraceLoadConfig, TraceLoadConfig]
    with pytest.raises(ConfigError, match=r"load\.0\.rate: unknown field"):
        validate_config(pm, {"engine": ENGINE, "load": [{"kind": "trace", "path": str(samples / "azure.csv"), "rate": 2}]})
    with pytest.raises(ConfigError, match=r"^load\.1: trace file .*none\.jsonl does not exist$"):
        check_traces(validate_config(pm, {"engine": ENGINE, "load": [{"rate": 2}, {"kind": "trace", "path": str(samples / "none.jsonl")}]}))


def test_the_config_reads_no_trace_file_and_the_preflight_does(tmp_path, monkeypatch):
    """config.py reads no file (a pydantic validator that opens files runs on every model_validate, resume and
    report included): a missing or contradictory trace passes validate_config; check_traces (the CLI's
    preflight, before anything starts) refuses it in one line naming the point."""
    import infermatrix.core.load.traces as traces

    opened: list[str] = []
    monkeypatch.setattr(traces, "read_trace", lambda *a, **k: opened.append(str(a[0])))  # a read here would be seen
    pm = plugin_manager()
    missing = validate_config(pm, {"engine": ENGINE, "load": [{"kind": "trace", "path": str(tmp_path / "none.jsonl")}]})
    bad = validate_config(pm, {"engine": ENGINE, "load": [{"kind": "trace", "path": str(_bad_mooncake(tmp_path))}]})
    assert opened == [] and missing.load[0].path.endswith("none.jsonl")
    monkeypatch.undo()
    with pytest.raises(ConfigError) as err:
        check_traces(bad)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("load.0: ") and "bad.jsonl line 2: 3 hash_ids for input_length 600" in msg


@pytest.mark.slow  # starts the CLI
def test_the_cli_refuses_a_contradictory_trace_before_anything_starts(tmp_path):
    bad = _bad_mooncake(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "infermatrix", "run", "--base-url", "http://127.0.0.1:9", "--model", "m",
                           "--db", str(tmp_path / "x.duckdb"), "--trace", str(bad), "--time-scale", "0.5"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad.jsonl line 2: 3 hash_ids for input_length 600" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.duckdb").exists()  # refused before the store was opened
    flag = subprocess.run([sys.executable, "-m", "infermatrix", "run", "--base-url", "http://127.0.0.1:9", "--time-scale", "2"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert flag.returncode == 2 and "--time-scale: give --trace FILE too" in flag.stderr


def test_plan_skips_failed_and_empty_rows_and_applies_the_limits(samples):
    path = samples / "burstgpt.csv"
    trace = read_trace(path)
    failed = sum(r.failed for r in trace)
    plan = plan_trace(TraceLoadConfig(path=str(path), time_scale=0.5))
    assert failed > 0 and plan.skipped_failed == failed and len(plan.requests) == len(trace) - failed
    first = next(r for r in trace if not r.failed)
    assert plan.offsets[0] == 0 and plan.offsets[-1] == pytest.approx((plan.requests[-1].at_s - first.at_s) * 0.5)
    assert all(not r.failed for r in plan.requests) and plan.indexes == [i for i, r in enumerate(trace) if not r.failed]
    cut = plan_trace(TraceLoadConfig(path=str(path), max_requests=5))
    assert len(cut.requests) == 5 and cut.cut == len(trace) - failed - 5
    short = plan_trace(TraceLoadConfig(path=str(path), max_duration_s=3.0, time_scale=2.0))
    assert short.offsets and max(short.offsets) < 3.0 and short.cut > 0
    too_long = plan_trace(TraceLoadConfig(path=str(samples / "mooncake.jsonl")), max_model_len=2048)
    assert too_long.skipped_too_long == sum(r.input_tokens + r.output_tokens > 2048 for r in read_trace(samples / "mooncake.jsonl")) > 0


def test_expected_shared_prefix_follows_leading_hash_ids():
    reqs = [TraceRequest(0, 1200, 1, (1, 2, 3)), TraceRequest(1, 1300, 1, (1, 2, 9)), TraceRequest(2, 300, 1, (1,)),
            TraceRequest(3, 1200, 1, (7, 2, 3)), TraceRequest(4, 900, 1, (1, 2))]  # fmt: skip
    words = [r.input_tokens for r in reqs]
    assert expected_shared_prefix(reqs, words, 512) == [0, 1024, 300, 0, 900]


class WordCounter:
    """A tokenizer like a chat API's: each block word is one token, plus a fixed template of 7."""

    def __init__(self) -> None:
        self.calls = 0

    async def count(self, text: str) -> int:
        self.calls += 1
        return len(text.split(" ")) - 1 + 7


def test_prompts_are_exact_and_share_blocks_word_for_word():
    reqs = [TraceRequest(0, 1100, 1, (5, 6, 7)), TraceRequest(1, 700, 1, (5, 8)), TraceRequest(2, 700, 1, ()), TraceRequest(3, 3, 1)]
    builder = TracePromptBuilder(WordCounter(), seed=3, block_tokens=512)
    prompts = anyio.run(builder.build, reqs)
    assert builder.overhead == 7
    assert [p.tokens for p in prompts[:3]] == [1100, 700, 700] and builder.inexact == 1  # 3 tokens < the template's 7
    a, b, c = (p.text.split(" ")[1:] for p in prompts[:3])
    assert all(" " + w in BLOCK_WORDS for w in a)
    assert a[:512] == b[:512] and a[512] != b[512] or a[512:600] != b[512:600]  # one shared block, then different ones
    assert a[:16] != c[:16]  # no ids: shares nothing
    assert [p.shared_prefix_tokens for p in prompts] == [0, 512, 0, 0]
    again = anyio.run(TracePromptBuilder(WordCounter(), seed=3, block_tokens=512).build, reqs)
    assert [p.text for p in again] == [p.text for p in prompts]  # deterministic by seed
