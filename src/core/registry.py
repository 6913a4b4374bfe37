"""Engine kinds, as plugins register them: ``register(ConfigClass, EngineClass)`` in ``register_engines``.

The config class's ``kind`` (a ``Literal`` default) names the kind; the engine class is what the runner
builds for it, so no plugin checks ``config.kind`` itself. Two plugins registering one kind is an
error that names both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from infermatrix.core.config import ConfigError, EngineConfig

if TYPE_CHECKING:
    from infermatrix.core.engine.contract import Engine

__all__ = ["PluginError", "EngineEntry", "engine_registry", "build_engine"]


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
    from infermatrix.core.engine.contract import Engine

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
