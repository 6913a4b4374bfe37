"""A run's config made ready to run, the same for the CLI (`infermatrix run`, `resume`) and the Python API
(`infermatrix.api.run`): overrides applied, validated against the plugins' engine kinds, and every user mistake
that can be found before anything starts raised as one :class:`ConfigError`."""

from __future__ import annotations

from typing import Any

import pluggy

from infermatrix.core.config import ConfigError, RunConfig, apply_overrides
from infermatrix.core.registry import validate_config

__all__ = ["prepare_config", "preflight", "config_slos", "ConfigError"]


def preflight(cfg: RunConfig) -> None:
    """Every user mistake that can be found before anything starts (the CLI's one line, exit 2)."""
    from infermatrix.core.load.search import check_search
    from infermatrix.core.load.trace_point import check_traces
    from infermatrix.core.run.planning import check_matrix
    from infermatrix.core.slo import slo_from_table

    if cfg.slo is not None:
        slo_from_table(cfg.slo)
    check_search(cfg)  # [search]: its SLO and resolution
    check_traces(cfg)  # every trace file read (config.py reads none)
    cfg.engine.api_key()  # a missing key is a user mistake: say so before anything starts
    check_matrix(cfg)


def prepare_config(pm: pluggy.PluginManager, data: dict[str, Any], source: str, overrides: list[str]) -> RunConfig:
    """``data`` (a config's TOML tables) with the ``KEY=VALUE`` overrides (``--set``) applied, validated and checked."""
    if "sweep" in data:  # a grid of runs is not one run (docs/tuning.md)
        raise ConfigError(f"{source}: [sweep] makes a grid of runs: run it with `infermatrix sweep {source}`")
    cfg = validate_config(pm, apply_overrides(data, list(overrides)), source)
    preflight(cfg)
    return cfg


def config_slos(cfg: RunConfig, extra: list[Any] | None = None) -> list[Any]:
    """The SLOs stored with a run: the config's ``[slo]`` table, then ``extra`` (the CLI's ``--slo``)."""
    from infermatrix.core.slo import slo_from_table

    return ([slo_from_table(cfg.slo)] if cfg.slo is not None else []) + list(extra or [])
