"""The plugin-manager factory: a fresh manager per call, so each test gets its own."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

import pluggy

from infermatrix.core import hookspecs

__all__ = ["get_plugin_manager", "BUILTIN_PLUGINS", "plugin_summary"]

# Built-in plugins, loaded by module path exactly as the entry points in pyproject.toml name them.
BUILTIN_PLUGINS = {
    "sim": "infermatrix.plugins.sim.plugin",
    "openai": "infermatrix.plugins.openai_engine",
    "workload": "infermatrix.plugins.workload",
    "loops": "infermatrix.plugins.loops",
    "capacity": "infermatrix.plugins.capacity",
    "vllm": "infermatrix.plugins.vllm.plugin",
}


def get_plugin_manager(*, load_entrypoints: bool = True, extra: list[object] | None = None) -> pluggy.PluginManager:
    """Build a plugin manager: built-ins first, then the ``infermatrix`` entry-point group, then ``extra``."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name, module in BUILTIN_PLUGINS.items():
        pm.register(importlib.import_module(module), name=name)
    if load_entrypoints:
        for ep in metadata.entry_points(group=hookspecs.PROJECT):
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue  # a built-in, already registered under the same name
            pm.register(ep.load(), name=ep.name)
    for plugin in extra or []:
        pm.register(plugin)
    return pm


def plugin_summary(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Name, module and implemented hooks of every loaded plugin (for ``infermatrix plugins``)."""
    rows = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin) or repr(plugin)
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        rows.append({"name": name, "module": getattr(plugin, "__name__", type(plugin).__name__), "hooks": hooks})
    return sorted(rows, key=lambda r: str(r["name"]))
