"""The plugin-manager factory: a fresh manager per call, so each test gets its own."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

import pluggy

from infermatrix._builtin_plugins import BUILTIN_PLUGINS
from infermatrix.core import hookspecs
from infermatrix.core.registry import PluginError, engine_registry

__all__ = ["get_plugin_manager", "BUILTIN_PLUGINS", "PluginError", "plugin_summary"]

_OWN_DIST = "infermatrix"


def _dist_name(ep: metadata.EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) if dist is not None else None


def get_plugin_manager(*, load_entrypoints: bool = True, extra: list[object] | None = None) -> pluggy.PluginManager:
    """Build a plugin manager: built-ins first, then the ``infermatrix`` entry-point group, then ``extra``.

    A third-party entry point named like a built-in, or registering a built-in's engine kind, is a
    :class:`PluginError` that names both (never skipped silently).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name, module in BUILTIN_PLUGINS.items():
        pm.register(importlib.import_module(module), name=name)
    if load_entrypoints:
        for ep in metadata.entry_points(group=hookspecs.PROJECT):
            if _dist_name(ep) == _OWN_DIST:
                continue  # the built-ins' own entry points: loaded above, by module path
            if pm.is_blocked(ep.name):
                continue
            if pm.get_plugin(ep.name) is not None:
                owner = f"built-in plugin {ep.name!r} ({BUILTIN_PLUGINS[ep.name]})" if ep.name in BUILTIN_PLUGINS else f"plugin {ep.name!r}"
                raise PluginError(
                    f"plugin {ep.name!r} ({ep.value}, from {_dist_name(ep) or 'an unknown package'}) clashes with {owner}; "
                    "rename its entry point or uninstall it"
                )
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken third-party package: say which, in one line
                raise PluginError(f"plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}") from None
            pm.register(plugin, name=ep.name)
    for plugin in extra or []:
        pm.register(plugin)
    engine_registry(pm)  # a clashing or malformed engine registration fails here, before anything runs
    return pm


def plugin_summary(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Name, module, implemented hooks and engine kinds of every loaded plugin (for ``infermatrix plugins``)."""
    kinds: dict[str, list[str]] = {}
    for kind, entry in engine_registry(pm).items():
        kinds.setdefault(entry.plugin, []).append(kind)
    rows = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin) or repr(plugin)
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        rows.append({"name": name, "module": getattr(plugin, "__name__", type(plugin).__name__), "hooks": hooks,
                     "engines": kinds.get(name, [])})  # fmt: skip
    return sorted(rows, key=lambda r: str(r["name"]))
