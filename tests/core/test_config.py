import pytest

from infermatrix.core.config import ConfigError, apply_overrides, load_config
from infermatrix.core.registry import validate_config
from infermatrix.core.plugins import get_plugin_manager


@pytest.fixture
def pm():
    return get_plugin_manager(load_entrypoints=False)


def test_demo_config_validates(pm):
    cfg = validate_config(pm, load_config("configs/demo-sim.toml"))
    assert cfg.engine.kind == "sim"
    assert cfg.matrix.contexts == [1024, 4096, 8192]


def test_overrides_apply_typed_values(pm):
    data = apply_overrides(load_config("configs/demo-sim.toml"), ["matrix.duration_s=2.5", "matrix.concurrency=[1,2]", "engine.model=x"])
    cfg = validate_config(pm, data)
    assert cfg.matrix.duration_s == 2.5 and cfg.matrix.concurrency == [1, 2] and cfg.engine.model == "x"


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"engine": {"kind": "nope"}}, "unknown engine kind 'nope'"),
        ({"engine": {"kind": "openai"}}, "engine.base_url"),
        ({"engine": {"kind": "sim", "colour": 1}}, "engine.colour: unknown field"),
        ({"engine": {"kind": "sim"}, "matrix": {"duration_s": "fast"}}, "matrix.duration_s"),
        ({"engine": {"kind": "sim"}, "matrix": {"contexts": ["8Q"]}}, "matrix.contexts"),
        ({"engine": {"kind": "sim"}, "matrix": {"concurrency": [0]}}, "positive"),
    ],
)
def test_errors_are_one_line_naming_the_field(pm, data, needle):
    with pytest.raises(ConfigError) as err:
        validate_config(pm, data, "x.toml")
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and msg.startswith("x.toml:")


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")


def test_override_syntax_error():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides({}, ["novalue"])


def test_api_key_from_env_missing_is_config_error(pm, monkeypatch):
    monkeypatch.delenv("IM_TEST_KEY", raising=False)
    cfg = validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://x", "api_key_env": "IM_TEST_KEY"}})
    with pytest.raises(ConfigError, match="IM_TEST_KEY"):
        cfg.engine.api_key()
    monkeypatch.setenv("IM_TEST_KEY", "sk-1234")
    assert cfg.engine.api_key() == "sk-1234"
