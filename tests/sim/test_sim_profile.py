"""Profiles: built-ins, files, dicts, ``base`` inheritance, one-line errors."""

import json

import pytest

from infermatrix.core.config import ConfigError
from infermatrix.plugins.sim.profile import SimProfile, builtin_profiles, load_profile


def test_builtins_load_and_demo_budget_matches_its_promise():
    assert {"demo", "tiny"} <= set(builtin_profiles())
    demo = load_profile("demo")
    assert demo.num_gpu_blocks * demo.block_size == demo.kv_tokens
    assert 8 * (4096 + 256) <= demo.kv_tokens < 16 * (4096 + 256)
    tiny = load_profile("tiny")
    assert (tiny.max_model_len, tiny.kv_tokens) == (4096, 20000)


def test_unknown_name_is_one_line_listing_known_names():
    with pytest.raises(ConfigError) as exc:
        load_profile("nosuch")
    msg = str(exc.value)
    assert "\n" not in msg and "demo" in msg and "tiny" in msg


def test_toml_json_and_dict_with_base(tmp_path):
    t = tmp_path / "mine.toml"
    t.write_text('base = "tiny"\nspec_tokens = 3\n[loop]\nmin_context = 100\n')
    p = load_profile(str(t))
    assert p.spec_tokens == 3 and p.loop.min_context == 100 and p.model == "sim-tiny"
    j = tmp_path / "dump.json"
    j.write_text(json.dumps(p.model_dump(mode="json")))
    assert load_profile(str(j)) == p
    assert load_profile({"base": "demo", "acceptance": 0.9}).acceptance == 0.9
    assert load_profile({"model": "m", "kv_tokens": 32768}).name == "custom"


def test_bad_fields_are_rejected():
    with pytest.raises(ConfigError, match="unknown field"):
        load_profile({"base": "tiny", "nope": 1})
    with pytest.raises(ConfigError, match="multiple of block_size"):
        load_profile({"base": "tiny", "kv_tokens": 20001})
    with pytest.raises(ConfigError, match="max_model_len"):
        load_profile({"base": "tiny", "kv_tokens": 1024})


def test_step_time_linear_and_table():
    lin = SimProfile(step_base_ms=5, step_per_seq_ms=0.5, step_per_1k_ctx_ms=1.0)
    assert lin.step_ms(4, 2000) == pytest.approx(5 + 2 + 2)
    tab = SimProfile(step_table=[[8, 12.0], [1, 8.0]])
    assert tab.step_ms(1, 0) == 8.0 and tab.step_ms(8, 0) == 12.0
    assert tab.step_ms(4, 0) == pytest.approx(8 + 4 * 3 / 7)
    assert tab.step_ms(100, 0) == 12.0
