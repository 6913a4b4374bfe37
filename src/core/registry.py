"""Engine kinds, as plugins register them: ``register(ConfigClass, EngineClass)`` in ``register_engines``;
and the run config validated against them (``validate_config``: the ``[engine]`` table is a union of
the registered config classes).

The config class's ``kind`` (a ``Literal`` default) names the kind; the engine class is what the runner
builds for it, so no plugin checks ``config.kind`` itself. Two plugins registering one kind is an
error that names both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

import pluggy
from pydantic import Field, ValidationError, create_model

from infermatrix.core.config import AUTO_KIND, AutoEngineConfig, ConfigError, EngineConfig, LOAD_TAGS, RunConfig
from infermatrix.core.engine.contract import Engine
from infermatrix.core.workloads import check_workload_options, choose_workload, workload_name, workload_plugins

__all__ = ["PluginError", "EngineEntry", "engine_registry", "build_engine", "engine_config_classes", "run_config_model", "validate_config"]


class PluginError(ConfigError):
    """A plugin that can't be used as installed (a clashing name, a bad registration): one line, exit 2."""


@dataclass(frozen=True)
class EngineEntry:
    kind: str
    config: type[EngineConfig]
    engine: type[Engine] | None  # None: registered config-only (an old-style plugin's launch_engine builds it)
    plugin: str  # the name of the plugin that registered it


def _kind_of(cls: Any, plugin: str) -> str:
    if not (isinstance(cls, type) and issubclass(cls, EngineConfig)):
        raise PluginError(f"plugin {plugin!r}: register() wants an EngineConfig subclass, got {cls!r}")
    kind = cls.model_fields["kind"].default
    if not isinstance(kind, str) or not kind:
        raise PluginError(f"plugin {plugin!r}: {cls.__name__}.kind needs a Literal default naming the engine, e.g. kind: Literal['toy'] = 'toy'")
    return kind


def engine_registry(pm: pluggy.PluginManager) -> dict[str, EngineEntry]:
    """Every engine kind the loaded plugins register, in registration order."""
    entries: dict[str, EngineEntry] = {}
    # Called one implementation at a time so each registration is known by its plugin's name.
    for impl in pm.hook.register_engines.get_hookimpls():
        plugin = impl.plugin_name

        def register(config: type[EngineConfig], engine: type[Engine] | None = None, *, _plugin: str = plugin) -> None:
            kind = _kind_of(config, _plugin)
            if engine is not None and not (isinstance(engine, type) and issubclass(engine, Engine)):
                raise PluginError(f"plugin {_plugin!r}: register({config.__name__}, …) wants an Engine subclass, got {engine!r}")
            if engine is not None and getattr(engine, "__abstractmethods__", None):
                missing = ", ".join(sorted(engine.__abstractmethods__))
                raise PluginError(f"plugin {_plugin!r}: engine class {engine.__name__} does not implement {missing}")
            if kind == "auto":
                raise PluginError(f"plugin {_plugin!r}: engine kind 'auto' is reserved (it recognises the engine at base_url)")
            if kind in entries:
                other = entries[kind].plugin
                raise PluginError(f"engine kind {kind!r} is registered twice: by plugin {other!r} and by plugin {_plugin!r}; uninstall or rename one")
            entries[kind] = EngineEntry(kind=kind, config=config, engine=engine, plugin=_plugin)

        kwargs = {"register": register} if "register" in impl.argnames else {}
        impl.function(**kwargs)
    return entries


def build_engine(pm: pluggy.PluginManager, config: EngineConfig, workdir: Path) -> Engine | None:
    """The (unstarted) engine for ``config``: a ``launch_engine`` hook's answer when one gives it
    (old-style plugins, or an override), else the engine class registered for ``config.kind``."""
    engine = pm.hook.launch_engine(config=config, workdir=workdir)
    if engine is not None:
        return engine
    entry = engine_registry(pm).get(config.kind)
    if entry is None or entry.engine is None:
        return None
    return entry.engine(config, workdir)


def engine_config_classes(pm: pluggy.PluginManager) -> dict[str, type[EngineConfig]]:
    """Every engine config class that plugins registered, by kind, and ``auto``."""
    # "auto" is no engine: the runner replaces it by the kind recognised at base_url (core/engine/detect.py).
    return {**{kind: entry.config for kind, entry in engine_registry(pm).items()}, AUTO_KIND: AutoEngineConfig}


def run_config_model(pm: pluggy.PluginManager) -> type[RunConfig]:
    """``RunConfig`` with its ``engine`` field narrowed to the engine kinds this plugin manager knows (every
    other field is the base model's own, so the two can never drift apart)."""
    arms = tuple(engine_config_classes(pm).values())
    # Any: a type built at run time from the plugins' config classes, which no checker can see.
    engine_type: Any = Annotated[Union[arms], Field(discriminator="kind")] if len(arms) > 1 else arms[0]
    return create_model("RunConfig", __base__=RunConfig, engine=(engine_type, ...))


def _format_error(exc: ValidationError, source: str, kinds: set[str]) -> str:
    err = exc.errors()[0]
    # pydantic puts the union arm's tag in the location (engine.sim.port): drop it, users wrote engine.port.
    loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in kinds))
    msg = err["msg"].removeprefix("Value error, ")  # pydantic's label for a validator's own message
    if err["type"] == "union_tag_invalid":
        msg = f"unknown engine kind {err['input'].get('kind')!r}" if isinstance(err["input"], dict) else msg
        ctx = err.get("ctx") or {}
        if ctx.get("expected_tags"):
            msg += f" (known: {ctx['expected_tags']})"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {loc or 'config'}: {msg}{more}"


def validate_config(pm: pluggy.PluginManager, data: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate a config dict; raise ConfigError with one line naming the field."""
    model = run_config_model(pm)
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source, set(engine_config_classes(pm)) | set(LOAD_TAGS))) from None
    try:
        name = workload_name(cfg.matrix, cfg.workload)
        if workload_plugins(pm) or name is not None:  # none at all is said when a run needs one
            check_workload_options(pm, choose_workload(pm, name), cfg.matrix, cfg.workload)
        m = cfg.matrix
        if not (m.contexts or m.prefill_contexts or cfg.load or cfg.search is not None or name is not None):
            raise ConfigError("nothing to measure: matrix.contexts and matrix.prefill_contexts are empty, and there is no "
                              "[[load]] point (--rate, --trace), [search] or workload pass")  # fmt: skip
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return cfg
