"""A sweep's combinations, read and checked before any engine starts (docs/tuning.md): every config file with its
``[sweep]`` table and the command line's ``--grid``/``--zip``, ``--set`` applied, each combination's config validated
and preflighted. Every mistake — an unknown key, an empty list, unequal lists under ``--zip``, a value the config model
refuses, more than ``MAX_RUNS_WITHOUT_YES`` runs without ``--yes`` — is one :class:`ConfigError`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy

from infermatrix.core.config import ConfigError, RunConfig, apply_overrides, load_config, set_path
from infermatrix.core.registry import validate_config
from infermatrix.core.run.grid import MAX_RUNS_WITHOUT_YES, Grid, combinations, grid_from_flags, grid_from_table, merge_grids, setting_text, value_text
from infermatrix.core.run.prepare import preflight

__all__ = ["Combination", "SweepRequest", "plan_sweep", "combination_config"]


@dataclass
class Combination:
    """One run of a sweep: its config file, its validated config, and its setting (key -> value as written)."""

    source: str
    cfg: RunConfig
    setting: dict[str, str]


@dataclass
class SweepRequest:
    """What the sweep command was given."""

    config_files: list[str]
    overrides: list[str] = field(default_factory=list)
    grid: list[str] = field(default_factory=list)  # --grid KEY=V1,V2,…
    zip_all: bool = False
    yes: bool = False  # more than MAX_RUNS_WITHOUT_YES runs are fine


def _read(path: str, flags: Grid) -> tuple[dict[str, Any], Grid, str | None]:
    data = load_config(path)
    table = data.pop("sweep", None)  # the sweep's, not the run's: each run's config is without it
    if table is None:
        return data, flags, None
    own = grid_from_table(table, path)
    return data, merge_grids(own, flags), table.get("name") if isinstance(table, dict) else None


def combination_config(pm: pluggy.PluginManager, path: str, data: dict[str, Any], overrides: list[str], setting: dict[str, Any],
                       flag: str = "--grid") -> RunConfig:
    """The config of one combination: ``data`` with ``--set`` and the setting applied, validated and preflighted;
    a mistake is a ConfigError named by the combination (``flag`` names the option that gave its keys)."""
    d = apply_overrides(copy.deepcopy(data), overrides)
    label = setting_text(setting)
    for key, value in setting.items():
        set_path(d, key, value, f"{flag} {key}")
    try:
        cfg = validate_config(pm, d, path)
        preflight(cfg)
    except ConfigError as exc:  # named by its combination: the same config is fine with another value
        text = str(exc).removeprefix(f"{path}: ")
        raise ConfigError(f"{path}: {label}: {text}" if setting else f"{path}: {text}") from None
    return cfg


def plan_sweep(pm: pluggy.PluginManager, req: SweepRequest) -> tuple[list[Combination], str | None]:
    """Every combination of every config, checked; and the name a config's ``[sweep]`` table gave the sweep."""
    files = req.config_files
    if len(set(files)) != len(files):
        dup = next(c for c in files if files.count(c) > 1)
        raise ConfigError(f"{dup}: given twice (each config is a run of the sweep, or a grid of them)")
    flags = grid_from_flags(req.grid, req.zip_all)
    read = [(path, *_read(path, flags)) for path in files]
    planned = [(path, data, setting) for path, data, grid, _ in read for setting in combinations(grid)]
    if len(planned) > MAX_RUNS_WITHOUT_YES and not req.yes:
        raise ConfigError(f"the sweep is {len(planned)} runs, each an engine launch (more than {MAX_RUNS_WITHOUT_YES}): "
                          "add --yes to run them all")  # fmt: skip
    out = []
    for path, data, setting in planned:
        cfg = combination_config(pm, path, data, req.overrides, setting)
        shown = {"config": Path(path).name} if len(files) > 1 else {}
        out.append(Combination(path, cfg, {**shown, **{k: value_text(v) for k, v in setting.items()}}))
    name = next((n for _, _, _, n in read if n), None)
    return out, name
