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
from typing import Annotated, Any, Union, cast

import pluggy
from pydantic import BaseModel, Field, ValidationError, create_model

from infermatrix.core.config import (
    AUTO_KIND, AnyLoadConfig, AutoEngineConfig, ClientConfig, ConfigError, EngineConfig, LOAD_TAGS, LoopConfig, MatrixConfig, RunConfig,
    SearchConfig, StoreConfig, Strict,
    ValidityConfig,
)
from infermatrix.core.engine.contract import Engine

__all__ = [
    "PluginError", "EngineEntry", "engine_registry", "build_engine", "engine_config_classes", "run_config_model", "validate_config",
    "workload_plugins", "choose_workload", "make_workload", "workload_name", "check_workload_options",
]


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


def run_config_model(pm: pluggy.PluginManager) -> type[BaseModel]:
    """The ``RunConfig`` model for the engines this plugin manager knows."""
    arms = tuple(engine_config_classes(pm).values())
    # Any: a type built at run time from the plugins' config classes, which no checker can see.
    engine_type: Any = Annotated[Union[arms], Field(discriminator="kind")] if len(arms) > 1 else arms[0]
    return create_model(
        "RunConfig",
        __base__=Strict,
        name=(str | None, None),
        engine=(engine_type, ...),
        matrix=(MatrixConfig, Field(default_factory=MatrixConfig)),
        loops=(LoopConfig, Field(default_factory=LoopConfig)),
        validity=(ValidityConfig, Field(default_factory=ValidityConfig)),
        store=(StoreConfig, Field(default_factory=StoreConfig)),
        hardware=(dict[str, Any], Field(default_factory=dict)),
        # [slo]: limits the run is judged by (infermatrix.core.slo.slo_from_table; docs/slo.md)
        slo=(dict[str, Any] | None, None),
        load=(list[AnyLoadConfig], Field(default_factory=list)),
        # [workload]: the chosen workload's parameters (each workload plugin validates its own; docs/workloads.md)
        workload=(dict[str, Any], Field(default_factory=dict)),
        # [search]: the highest load that meets an SLO (infermatrix search; docs/load.md)
        search=(SearchConfig | None, None),
        # [client]: where the streams run, this host or Ray actors (docs/distributed.md)
        client=(ClientConfig, Field(default_factory=ClientConfig)),
    )


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
        cfg = cast(RunConfig, model.model_validate(data))
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


def workload_plugins(pm: pluggy.PluginManager) -> list[str]:
    """The names of the plugins that implement ``make_workload``, in registration order."""
    return [impl.plugin_name for impl in reversed(pm.hook.make_workload.get_hookimpls())]


def workload_name(matrix: MatrixConfig, options: dict[str, Any] | None) -> str | None:
    """The workload a config names: ``matrix.workload``, else ``[workload] name``; both and different is an error."""
    table = (options or {}).get("name")
    if table is not None and not isinstance(table, str):
        raise ConfigError("workload.name: must be a workload plugin's name")
    if matrix.workload is not None and table is not None and table != matrix.workload:
        raise ConfigError(f"matrix.workload = {matrix.workload!r} and workload.name = {table!r} disagree; name one")
    return matrix.workload or table


def _opt_in(pm: pluggy.PluginManager, name: str) -> bool:
    """A workload plugin module with ``WORKLOAD_OPT_IN = True`` runs only when named (shared-prefix, multi-turn)."""
    return bool(getattr(pm.get_plugin(name), "WORKLOAD_OPT_IN", False))


def choose_workload(pm: pluggy.PluginManager, name: str | None) -> str:
    """The workload plugin a run uses: ``matrix.workload``, else the only one registered that is not opt-in. Two
    or more without a choice is an error naming them (a third-party workload never replaces the built-in silently)."""
    every = workload_plugins(pm)
    if name is not None:
        if name not in every:
            raise ConfigError(f"matrix.workload: no workload plugin {name!r} (registered: {', '.join(every) or 'none'})")
        return name
    names = [n for n in every if not _opt_in(pm, n)]
    if not names:
        raise ConfigError("no plugin implements make_workload: the run has no prompt builder")
    if len(names) > 1:
        listed = " and ".join(repr(n) for n in names)
        raise ConfigError(f"workloads {listed} are both registered; choose one with matrix.workload = NAME")
    return names[0]


def check_workload_options(pm: pluggy.PluginManager, name: str, matrix: MatrixConfig, options: dict[str, Any] | None) -> None:
    """The ``[workload]`` table checked before the run exists: by the plugin module's ``check_options(matrix,
    options)`` when it has one; parameters for a workload whose hook takes none are an error."""
    params = {k: v for k, v in (options or {}).items() if k != "name"}
    check = getattr(pm.get_plugin(name), "check_options", None)
    if callable(check):
        check(matrix, params)
        return
    impl = next(i for i in pm.hook.make_workload.get_hookimpls() if i.plugin_name == name)
    if params and "options" not in impl.argnames:
        raise ConfigError(f"workload.{next(iter(params))}: the workload {name!r} takes no [workload] parameters")


def make_workload(pm: pluggy.PluginManager, config: MatrixConfig, tokenizer: Any, options: dict[str, Any] | None = None) -> Any:
    """The prompt builder of the chosen workload plugin (``choose_workload``); ``options`` is the ``[workload]`` table."""
    name = choose_workload(pm, workload_name(config, options))
    impl = next(i for i in pm.hook.make_workload.get_hookimpls() if i.plugin_name == name)
    params = {k: v for k, v in (options or {}).items() if k != "name"}
    kwargs: dict[str, Any] = {"config": config, "tokenizer": tokenizer}
    if "options" in impl.argnames:  # the hook's third argument is newer than some plugins
        kwargs["options"] = params
    workload = impl.function(**kwargs)
    if workload is None:
        raise ConfigError(f"matrix.workload: plugin {name!r} built no workload for this matrix")
    return workload
