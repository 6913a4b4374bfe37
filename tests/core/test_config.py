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


# -- one RunConfig: the per-plugin model is the base with only ``engine`` narrowed (issue 28 item 2) ---------


def _full_config(tmp_path) -> dict:
    """Every table of a run config, each with a field off its default."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n')
    return {
        "name": "everything",
        "engine": {"kind": "sim", "profile": "tiny", "max_seqs": 8},
        "matrix": {"contexts": ["1K"], "concurrency": [1, 2], "duration_s": 2, "workload": "shared-prefix"},
        "loops": {"min_copies": 5},
        "validity": {"max_error_rate": 0.1},
        "store": {"db": str(tmp_path / "x.duckdb")},
        "hardware": {"gpu": "none"},
        "slo": {"ttft_p99_ms": 500},
        "load": [{"rate": 2, "duration_s": 3}, {"kind": "trace", "path": str(trace)}],
        "workload": {"groups": 2},
        "search": {"slo": "ttft_p99_ms=500", "max": 8},
        "client": {"hosts": 2},
        "telemetry": {"engine_interval_s": 0.5, "gpu_interval_s": 0},
    }


def test_the_plugin_model_is_the_base_with_only_engine_narrowed(pm):
    from infermatrix.core.config import RunConfig
    from infermatrix.core.registry import engine_config_classes, run_config_model

    model = run_config_model(pm)
    assert issubclass(model, RunConfig) and model is not RunConfig
    assert list(model.model_fields) == list(RunConfig.model_fields)  # the same fields, in the same order
    for name, base in RunConfig.model_fields.items():
        if name != "engine":
            got = model.model_fields[name]
            assert (got.annotation, got.default, got.default_factory, got.is_required()) == (
                base.annotation, base.default, base.default_factory, base.is_required()), name
    # engine: one arm per registered kind (and auto), still required
    assert model.model_fields["engine"].is_required()
    kinds = {a.model_fields["kind"].default for a in engine_config_classes(pm).values()}
    assert {"sim", "openai", "vllm", "auto"} <= kinds


def test_a_full_config_validates_into_every_table(pm, tmp_path):
    from infermatrix.core.config import LoadConfig, RunConfig, TraceLoadConfig
    from infermatrix.plugins.sim.plugin import SimEngineConfig

    data = _full_config(tmp_path)
    assert set(data) == set(RunConfig.model_fields)  # the fixture covers every field: a new one must be added here
    cfg = validate_config(pm, data)
    assert isinstance(cfg, RunConfig) and isinstance(cfg.engine, SimEngineConfig) and cfg.engine.max_seqs == 8
    assert cfg.name == "everything" and cfg.matrix.contexts == [1024] and cfg.loops.min_copies == 5
    assert cfg.validity.max_error_rate == 0.1 and cfg.store.db.endswith("x.duckdb") and cfg.hardware == {"gpu": "none"}
    assert cfg.slo == {"ttft_p99_ms": 500} and cfg.workload == {"groups": 2} and cfg.client.hosts == 2
    assert [type(p) for p in cfg.load] == [LoadConfig, TraceLoadConfig] and cfg.search is not None and cfg.search.max == 8
    assert (cfg.telemetry.engine_interval_s, cfg.telemetry.gpu_interval_s) == (0.5, 0)
    # The stored config (runs.config) keeps the engine kind's own fields, and reads back to the same config.
    dumped = cfg.model_dump(mode="json")
    assert dumped["engine"]["profile"] == "tiny" and set(dumped) == set(RunConfig.model_fields)
    assert validate_config(pm, dumped).model_dump(mode="json") == dumped


def test_the_base_model_alone_rejects_an_engine_kinds_own_field():
    """The base types ``engine`` as ``EngineConfig``: only the per-plugin model knows a kind's fields."""
    from pydantic import ValidationError

    from infermatrix.core.config import RunConfig

    assert RunConfig.model_validate({"engine": {"kind": "x"}}).engine.kind == "x"
    with pytest.raises(ValidationError):
        RunConfig.model_validate({"engine": {"kind": "sim", "profile": "tiny"}})


@pytest.mark.parametrize("key, value, says", [
    ("telemetry", {"engine_interval_s": -1}, "telemetry.engine_interval_s"),
    ("telemetry", {"gpu_interval_s": -0.5}, "telemetry.gpu_interval_s"),
    ("hardware", {"kwh_usd": -0.1}, "hardware.kwh_usd"),
    ("hardware", {"kwh_usd": "cheap"}, "hardware.kwh_usd"),
])
def test_a_negative_telemetry_interval_or_kwh_price_is_a_config_error(pm, tmp_path, key, value, says):
    from infermatrix.core.config import ConfigError

    data = {"engine": {"kind": "sim", "profile": "tiny"}, key: value}
    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        validate_config(pm, data)
