"""A sweep's record (sweeps.sql): the sweep, its combinations named before anything starts, each run's setting.

Written before the first engine starts, so a sweep stopped by Ctrl-C, a crash or a lost node still knows every
combination it meant to run; ``infermatrix resume SWEEP_ID`` reads them back (docs/tuning.md).
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import dataclass
from typing import Any

from infermatrix.core.store.errors import StoreError
from infermatrix.core.store.store import Store

__all__ = ["SweepMember", "new_sweep_id", "save_sweep", "add_sweep_member", "sweep_spec", "sweep_members", "resolve_sweep"]


@dataclass
class SweepMember:
    """One combination: its place, run id, config file, the config it runs with, and its setting (key -> text)."""

    k: int
    run_id: str
    source: str
    config: dict[str, Any]
    setting: dict[str, str]


def new_sweep_id() -> str:
    """``s`` and 7 hex characters: told apart from a run id (8 hex) by `resume`, and prefixes resolve."""
    return "s" + secrets.token_hex(4)[:7]


def save_sweep(store: Store, sweep_id: str, name: str, spec: dict[str, Any], members: list[SweepMember]) -> None:
    """The sweep, its combinations and their settings, in one transaction."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    statements: list[tuple[Any, Any]] = [("INSERT INTO sweeps VALUES (?, ?, ?, ?)", [sweep_id, name, now, json.dumps(spec)])]
    for m in members:
        statements += _member_statements(sweep_id, m)
    store._transaction(f"sweep {sweep_id}", statements)


def add_sweep_member(store: Store, sweep_id: str, member: SweepMember) -> None:
    """One more combination of a stored sweep (a tune's next probe: its combinations are chosen as it goes)."""
    store._transaction(f"sweep {sweep_id} run {member.run_id}", _member_statements(sweep_id, member))


def sweep_spec(store: Store, sweep_id: str) -> dict[str, Any]:
    """What the sweep was asked (``sweeps.spec``): a tune's has the key ``tune``."""
    _, rows = store.query("SELECT spec FROM sweeps WHERE sweep_id = ?", [sweep_id])
    raw = rows[0][0] if rows else None
    return (json.loads(raw) if isinstance(raw, str) else raw) or {}


def _member_statements(sweep_id: str, m: SweepMember) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = [("INSERT INTO sweep_members VALUES (?, ?, ?, ?, ?)", [sweep_id, m.run_id, m.k, m.source, json.dumps(m.config)])]
    return out + [("INSERT OR REPLACE INTO run_settings VALUES (?, ?, ?, ?)", [m.run_id, key, value, pos])
                  for pos, (key, value) in enumerate(m.setting.items())]  # fmt: skip


def sweep_members(store: Store, sweep_id: str) -> list[SweepMember]:
    """The sweep's combinations in order, each with its stored config and setting."""
    _, rows = store.query("SELECT k, run_id, source, config FROM sweep_members WHERE sweep_id = ? ORDER BY k", [sweep_id])
    out = []
    for k, run_id, source, config in rows:
        _, settings = store.query("SELECT key, value FROM run_settings WHERE run_id = ? ORDER BY position, key", [run_id])
        out.append(SweepMember(k, run_id, source, json.loads(config) if isinstance(config, str) else config, dict(settings)))
    return out


def resolve_sweep(store: Store, prefix: str) -> tuple[str, str] | None:
    """``(sweep_id, name)`` for an exact id or a unique prefix; None when no sweep matches (it may be a run id)."""
    _, rows = store.query("SELECT sweep_id, name FROM sweeps WHERE starts_with(sweep_id, ?) ORDER BY sweep_id", [prefix])
    exact = [r for r in rows if r[0] == prefix]
    if exact:
        return exact[0]
    if len(rows) > 1:
        raise StoreError(f"sweep id {prefix!r} is ambiguous in {store.path}: {', '.join(r[0] for r in rows[:5])}")
    return rows[0] if rows else None
