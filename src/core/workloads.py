"""Which workload a run uses: the plugins that implement ``make_workload``, the one a config names (or the only
default one), its ``[workload]`` parameters checked before the run exists, and the workload built from it
(docs/plugins.md, ``make_workload``; docs/workloads.md).

Kept apart from core/registry.py (engine kinds and the config model): choosing a prompt builder knows nothing
of engines, and validation only calls in here.
"""

from __future__ import annotations

from typing import Any, cast

import pluggy

from infermatrix.core.config import ConfigError, MatrixConfig
from infermatrix.core.types import SessionWorkload, Workload

__all__ = ["workload_plugins", "workload_name", "choose_workload", "check_workload_options", "make_workload"]

_SESSION_MEMBERS = ("prompt", "name", "concurrency", "block_tokens", "describe")  # SessionWorkload's, besides sessions


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


def make_workload(pm: pluggy.PluginManager, config: MatrixConfig, tokenizer: Any, options: dict[str, Any] | None = None) -> Workload:
    """The prompt builder of the chosen workload plugin (``choose_workload``); ``options`` is the ``[workload]`` table."""
    name = choose_workload(pm, workload_name(config, options))
    impl = next(i for i in pm.hook.make_workload.get_hookimpls() if i.plugin_name == name)
    params = {k: v for k, v in (options or {}).items() if k != "name"}
    kwargs: dict[str, Any] = {"config": config, "tokenizer": tokenizer}
    if "options" in impl.argnames:  # the hook's third argument is newer than some plugins
        kwargs["options"] = params
    workload = cast("Workload | None", impl.function(**kwargs))  # what the hook returns is the plugin's, unchecked
    if workload is None:
        raise ConfigError(f"matrix.workload: plugin {name!r} built no workload for this matrix")
    _check_sessions(name, workload)
    return workload


def _check_sessions(name: str, workload: object) -> None:
    """A workload with ``sessions()`` is a ``SessionWorkload`` in full. Said, not skipped: a pass that silently
    never ran would look like a workload without traffic of its own."""
    if hasattr(workload, "sessions") and not isinstance(workload, SessionWorkload):
        missing = ", ".join(m for m in _SESSION_MEMBERS if not hasattr(workload, m))
        raise ConfigError(f"workload {name!r}: {type(workload).__name__} has sessions() but not {missing} (SessionWorkload, docs/plugins.md)")
