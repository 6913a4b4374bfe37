"""Sim profiles for the fidelity tests, written next to the test's database."""

from __future__ import annotations

from pathlib import Path


def write_profile(path: Path, **fields) -> Path:
    """A TOML profile based on the built-in ``tiny`` one, with ``fields`` overriding it."""
    lines = ['base = "tiny"']
    tables = {k: v for k, v in fields.items() if isinstance(v, dict)}
    for key, value in fields.items():
        if key not in tables:
            lines.append(f"{key} = {_toml(value)}")
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {_toml(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)
