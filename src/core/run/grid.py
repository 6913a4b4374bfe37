"""Settings grids of a sweep (docs/tuning.md): ``--grid KEY=V1,V2,…`` and a config's ``[sweep]`` table, expanded into
the combinations a sweep runs, one run (one engine launch) each.

Pure: no file, no engine. A key is any key ``--set`` takes (``engine.args.max_num_seqs``, ``engine.env.SOME_VAR``,
``hardware.gpus``); values are read as ``--set`` reads one (TOML: numbers, booleans, strings, inline tables).
Cartesian by default; keys that are *zipped* are paired element by element (their lists must be of one length) and
that pairing is one axis of the product.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.config import ConfigError, parse_value

__all__ = ["Grid", "MAX_RUNS_WITHOUT_YES", "parse_grid_flag", "grid_from_flags", "grid_from_table", "merge_grids", "combinations",
           "setting_text", "value_text"]

# A grid of more combinations than this needs --yes: each is an engine launch (minutes on a real engine).
MAX_RUNS_WITHOUT_YES = 16


@dataclass
class Grid:
    """The axes of a sweep: key -> its values (in the order given), and which keys are paired (``zip``)."""

    axes: dict[str, list[Any]] = field(default_factory=dict)
    zipped: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.axes)


def _values(key: str, raw: str, label: str) -> list[Any]:
    raw = raw.strip()
    if not raw:
        raise ConfigError(f"{label}: empty list of values (give KEY=V1,V2,…)")
    try:  # one TOML array: numbers, quoted strings, inline tables with commas inside them
        values = tomllib.loads(f"v = [{raw}]")["v"]
    except tomllib.TOMLDecodeError:
        parts = [p.strip() for p in raw.split(",")]
        if any(not p for p in parts):
            raise ConfigError(f"{label}: an empty value in the list") from None
        values = [parse_value(p) for p in parts]
    if not values:
        raise ConfigError(f"{label}: empty list of values (give KEY=V1,V2,…)")
    return list(values)


def parse_grid_flag(text: str) -> tuple[str, list[Any]]:
    """``engine.args.max_num_seqs=64,128`` -> ``("engine.args.max_num_seqs", [64, 128])``."""
    key, sep, raw = text.partition("=")
    label = f"--grid {text!r}"
    if not sep or not key.strip():
        raise ConfigError(f"{label}: expected KEY=V1,V2,…, e.g. engine.args.max_num_seqs=64,128")
    return key.strip(), _values(key, raw, label)


def _add(grid: Grid, key: str, values: list[Any], label: str) -> None:
    if key in grid.axes:
        raise ConfigError(f"{label}: {key} is in the grid twice")
    if len({value_text(v) for v in values}) != len(values):
        raise ConfigError(f"{label}: a value of {key} is given twice")
    grid.axes[key] = values


def grid_from_flags(flags: list[str], zip_all: bool) -> Grid:
    """The grid of ``--grid`` flags; ``--zip`` pairs all of them."""
    grid = Grid()
    for text in flags:
        key, values = parse_grid_flag(text)
        _add(grid, key, values, f"--grid {text!r}")
    if zip_all:
        if not grid:
            raise ConfigError("--zip: give the lists to pair with --grid")
        grid.zipped = list(grid.axes)
    return grid


def grid_from_table(table: Any, source: str) -> Grid:
    """A config's ``[sweep]`` table: ``grid = { "engine.args.max_num_seqs" = [64, 128] }``, ``zip = ["k1", "k2"]``
    (grid keys paired element by element)."""
    label = f"{source}: [sweep]"
    if not isinstance(table, dict):
        raise ConfigError(f"{label} must be a table")
    unknown = sorted(set(table) - {"grid", "zip", "name"})
    if unknown:
        raise ConfigError(f"{label}: unknown field {unknown[0]!r} (fields: grid, zip, name)")
    raw = table.get("grid", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{label}.grid must be a table of KEY = [values]")
    grid = Grid()
    for key, values in raw.items():
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise ConfigError(f"{label}.grid: {key}: empty list of values")
        _add(grid, key, values, f"{label}.grid")
    zipped = table.get("zip", [])
    if not isinstance(zipped, list) or any(k not in grid.axes for k in zipped):
        missing = next((k for k in zipped if k not in grid.axes), None) if isinstance(zipped, list) else None
        raise ConfigError(f"{label}.zip: names keys of [sweep].grid" + (f" ({missing!r} is not one)" if missing else ""))
    grid.zipped = list(zipped)
    return grid


def merge_grids(table: Grid, flags: Grid) -> Grid:
    """A config's own grid and the command line's together (a key in both is a mistake: which would win?)."""
    both = next((k for k in flags.axes if k in table.axes), None)
    if both:
        raise ConfigError(f"--grid {both}: the config's [sweep] grid has it already")
    return Grid({**table.axes, **flags.axes}, table.zipped + flags.zipped)


def combinations(grid: Grid) -> list[dict[str, Any]]:
    """Every setting of the grid (key -> value), Cartesian with the first key varying slowest; zipped keys paired."""
    if not grid:
        return [{}]
    zipped = [k for k in grid.axes if k in grid.zipped]
    if zipped:
        lengths = {k: len(grid.axes[k]) for k in zipped}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise ConfigError(f"--zip: the paired lists differ in length ({shown})")
    axes: list[list[dict[str, Any]]] = []
    for key in grid.axes:
        if key in zipped:
            if key == zipped[0]:
                axes.append([{k: grid.axes[k][i] for k in zipped} for i in range(len(grid.axes[key]))])
        else:
            axes.append([{key: v} for v in grid.axes[key]])
    return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]


def value_text(value: Any) -> str:
    """A value as a person reads it: ``64``, ``true``, ``fp8``, ``{"num_speculative_tokens":2}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def setting_text(setting: dict[str, Any]) -> str:
    """``engine.args.max_num_seqs=64, hardware.gpus=2`` (keys in the grid's order); ``(as configured)`` for none."""
    return ", ".join(f"{k}={value_text(v)}" for k, v in setting.items()) or "(as configured)"
