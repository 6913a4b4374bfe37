"""Parsing SLO specs: limit keys, percentiles, MLPerf presets, the [slo] table, and one-line errors."""

from __future__ import annotations

import pytest

from infermatrix.core.config import ConfigError
from infermatrix.core.slo import MLPERF_PRESETS, Limit, parse_slo, slo_from_table


def test_keys_percentiles_and_a_canonical_name():
    spec = parse_slo(" tpot_p99_ms=50, ttft_p99_ms = 2000 ,e2e_ms=9000,tps_p90_min=20,attainment=0.9")
    assert spec.limits == (Limit("ttft", 99.0, 2000.0), Limit("tpot", 99.0, 50.0), Limit("e2e", None, 9000.0), Limit("tps", 90.0, 20.0))
    assert spec.attainment == 0.9
    assert spec.name == "ttft_p99_ms=2000,tpot_p99_ms=50,e2e_ms=9000,tps_p90_min=20,attainment=0.9"
    assert parse_slo(spec.name) == spec  # the name parses back to the same SLO
    assert parse_slo("ttft_p99.9_ms=300").limits == (Limit("ttft", 99.9, 300.0),)


@pytest.mark.parametrize(("name", "ttft", "tpot"), [
    ("mlperf:llama3.1-8b", 2000, 100), ("mlperf:llama3.1-8b:interactive", 500, 30), ("mlperf:llama3.1-8b-interactive", 500, 30),
    ("mlperf:llama2-70b", 2000, 200), ("mlperf:llama2-70b:interactive", 450, 40), ("mlperf:llama3.1-405b", 6000, 175),
    ("mlperf:deepseek-r1", 2000, 80), ("mlperf:gpt-oss-120b", 3000, 80),
])  # fmt: skip
def test_mlperf_presets(name, ttft, tpot):
    spec = parse_slo(name)
    assert spec.limits == (Limit("ttft", 99.0, ttft), Limit("tpot", 99.0, tpot))
    assert spec.name.startswith("mlperf:") and spec.name.removeprefix("mlperf:") in MLPERF_PRESETS


def test_the_config_table():
    assert slo_from_table({"ttft_p99_ms": 2000, "tpot_p99_ms": 50}).name == "ttft_p99_ms=2000,tpot_p99_ms=50"
    named = slo_from_table({"name": "chat", "preset": "mlperf:llama3.1-8b"})
    assert named.name == "chat" and named.limits == parse_slo("mlperf:llama3.1-8b").limits and named.source == "config"


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"), ("ttft", "KEY=VALUE"), ("ttft_p99=5", "unknown limit"), ("latency_ms=5", "unknown limit"),
    ("ttft_p99_ms=abc", "must be a number"), ("ttft_p0_ms=5", "percentile"), ("ttft_p101_ms=5", "percentile"),
    ("ttft_ms=-1", "positive"), ("attainment=1.5", "share"), ("attainment=0.9", "no limits"), ("mlperf:llama9", "unknown preset"),
    ("tps_ms=5", "unknown limit"),
])  # fmt: skip
def test_mistakes_are_one_line(text, says):
    with pytest.raises(ConfigError) as exc:
        parse_slo(text)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_table_mistakes():
    with pytest.raises(ConfigError, match="takes no other limits"):
        slo_from_table({"preset": "mlperf:llama3.1-8b", "ttft_ms": 5})
    with pytest.raises(ConfigError, match="unknown limit"):
        slo_from_table({"ttft": 5})
