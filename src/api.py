"""infermatrix from Python (docs/api.md): run a benchmark, read its results, compare two runs.

Every function calls the code the CLI calls — the run's config is prepared by ``core/run/prepare.py`` and run by
``core/run/runner.execute_run``, reports are the same renderers, a comparison the same ``compare_data`` — so a
script and ``infermatrix run`` / ``report`` / ``compare`` store and say the same. A user's mistake raises
:class:`ConfigError` (a ``ValueError``) or :class:`StoreError` with the CLI's one-line message; nothing here exits
the interpreter.
"""

from __future__ import annotations

import copy
import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import duckdb

from infermatrix.core.config import ConfigError
from infermatrix.core.store import Store, StoreError

__all__ = ["run", "open", "compare", "Run", "Results", "Comparison", "ConfigError", "StoreError", "FORMATS"]

FORMATS = ("text", "markdown", "html", "json")  # what Run.report and Comparison.report render, as `--format` does
Format = Literal["text", "markdown", "html", "json"]
_PLAIN_WIDTH = 100_000  # text reports as the CLI writes them off a terminal: every value whole, a row a line
PathLike = str | os.PathLike[str]


def _format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"format: unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    return fmt


def _json(doc: dict[str, Any]) -> str:
    import orjson

    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()  # as the CLI writes it


def _existing(db: PathLike) -> Path:
    path = Path(db).expanduser()
    if not path.exists():
        raise StoreError(f"no database at {db}")
    return path


@dataclass(frozen=True)
class Run:
    """One stored run: its id, the database it is in, and how it ended (completed, stopped, interrupted, failed)."""

    run_id: str
    db: Path
    status: str
    error: str | None = None  # why a failed or stopped run ended

    def report(self, format: Format = "text") -> str:
        """The run's report, as ``infermatrix report RUN --format FORMAT`` writes it to a file."""
        fmt = _format(format)
        from infermatrix.core import report

        with Store(_existing(self.db), read_only=True) as store:
            if fmt == "text":
                from rich.console import Console

                buf = io.StringIO()
                report.render_text(store, self.run_id, Console(file=buf, width=_PLAIN_WIDTH, color_system=None))
                return buf.getvalue()
            if fmt == "json":
                return _json(report.render_json(store, self.run_id))
            return report.render_markdown(store, self.run_id) if fmt == "markdown" else report.render_html(store, self.run_id)


def run(config: PathLike | Mapping[str, Any], db: PathLike | None = None, **overrides: Any) -> Run:
    """Run a benchmark: ``config`` a TOML file or its tables as a mapping; ``db`` the results database (else the
    config's ``store.db``, else ``infermatrix.duckdb``). ``overrides`` are ``--set`` pairs: a key's dots may be
    written ``__`` (``matrix__duration_s=2``) or passed as ``**{"matrix.duration_s": 2}``; a string value is read as
    ``--set`` reads it, any other is taken as it is. Progress goes to stderr, as the CLI's does."""
    import anyio
    from rich.console import Console

    from infermatrix.core.config import load_config
    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.run.prepare import config_slos, prepare_config
    from infermatrix.core.run.runner import execute_run
    from infermatrix.core.store import DEFAULT_DB
    from infermatrix.core.store.slo_store import save_slos

    pm = get_plugin_manager()
    if isinstance(config, Mapping):
        data, source = copy.deepcopy(dict(config)), "config"
    else:
        data, source = load_config(Path(config)), str(config)
    cfg = prepare_config(pm, data, source, [f"{key.replace('__', '.')}={_toml(value)}" for key, value in overrides.items()])
    store = Store(db or cfg.store.db or DEFAULT_DB)
    try:
        outcome = anyio.run(lambda: execute_run(pm, cfg, store, Console(stderr=True)))
    except BaseException:  # before the run existed (an unreachable URL …): a database made for it goes again, as the CLI's
        store.close_unused()
        raise
    try:
        if outcome.run_id is None:
            raise KeyboardInterrupt("interrupted before the run started")
        if config_slos(cfg):
            save_slos(store, outcome.run_id, config_slos(cfg))
        return Run(outcome.run_id, Path(store.path), outcome.status, outcome.error)
    finally:
        store.close()


def _toml(value: Any) -> str:
    """A Python value as ``--set`` text: strings as given (``"1K"``), the rest as TOML literals (JSON's are)."""
    return value if isinstance(value, str) else json.dumps(value)


class Results:
    """A database opened read-only: its runs and views as DuckDB relations. A relation gives ``.fetchall()``, and
    with the optional libraries installed ``.arrow()`` (pyarrow), ``.df()`` (pandas) and ``.pl()`` (polars)."""

    def __init__(self, db: PathLike):
        self._store = Store(_existing(db), read_only=True)
        self.db = Path(self._store.path)
        # The relations' own cursor: a relation runs its query when fetched, and the store's connection may be busy.
        self._con = self._store.con.cursor()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()
        self._store.close()

    @property
    def views(self) -> list[str]:
        """The database's views (the contract views of docs/metrics.md and the feature views)."""
        return [r[0] for r in self._con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]

    def view(self, name: str, run: str | Run | None = None) -> duckdb.DuckDBPyRelation:
        """A view's rows, those of one run (an id, a unique prefix, or a :class:`Run`) when ``run`` is given."""
        if name not in self.views:
            raise ConfigError(f"no view {name!r} (views: {', '.join(self.views)})")
        if run is None:
            return self._con.sql(f'SELECT * FROM "{name}"')
        return self._con.sql(f'SELECT * FROM "{name}" WHERE run_id = ?', params=[self._run_id(run)])

    def sql(self, query: str, params: list[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Any query over the views, as ``infermatrix sql`` runs it."""
        return self._con.sql(query, params=params)

    def run(self, run: str | None = None) -> Run:
        """A stored run by id or unique prefix; the latest without one."""
        rid = self._run_id(run)
        row = self._store.get_run(rid) or {}
        return Run(rid, self.db, row.get("status") or "unknown", row.get("error"))

    def _run_id(self, run: str | Run | None) -> str:
        return self._store.resolve_run(run.run_id if isinstance(run, Run) else run)


def open(db: PathLike) -> Results:  # shadows the builtin here only: the API's verb, infermatrix.api.open(db)
    """The database at ``db``, read-only (StoreError if there is none)."""
    return Results(db)


@dataclass(frozen=True)
class Comparison:
    """Two runs compared as ``infermatrix compare A B`` compares them: ``data`` is its JSON report."""

    db: Path
    run_ids: tuple[str, str]
    data: dict[str, Any]

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        """One row per cell and metric: for a cell valid in both runs the ratio (B / A), its 95 % interval and same /
        faster / slower; for a cell valid in one run only, ``not comparable`` (no ratio) — every cell gets a verdict."""
        from infermatrix.core.report.compare_data import METRICS

        judged = [{"context_label": c["context_label"], "concurrency": c["concurrency"], "metric": metric, **m}
                  for pair in self.data["pairs"] for c in pair["cells"] for metric, m in c["metrics"].items()]  # fmt: skip
        metrics = [m.key for m in METRICS]
        one_sided = [{"context_label": o["context_label"], "concurrency": o["concurrency"], "metric": metric, "value_a": None,
                      "value_b": None, "ratio": None, "ratio_lo": None, "ratio_hi": None, "verdict": "not comparable", "method": None}
                     for pair in self.data["pairs"] for o in pair["one_sided"] for metric in metrics]  # fmt: skip
        return judged + one_sided

    def slower(self, pct: float, metrics: tuple[str, ...] = ("total_tps",)) -> list[str]:
        """The cells where B is slower than A by more than ``pct`` % with confidence: ``compare --fail-if-slower``'s
        failures, one line each (empty: the gate passes)."""
        from infermatrix.core.report.compare_data import GATE_METRICS, gate, load_comparison

        unknown = [m for m in metrics if m not in GATE_METRICS]
        if unknown:
            raise ConfigError(f"metric: unknown {unknown[0]!r} (one of {', '.join(GATE_METRICS)})")
        with Store(_existing(self.db), read_only=True) as store:
            hits = gate(load_comparison(store, list(self.run_ids)), pct, list(metrics))
        return [f"{h.context_label} × {h.concurrency} {h.metric}: ×{h.judged.ratio:.3f}" for h in hits if h.confident]

    def report(self, format: Format = "text") -> str:
        """The comparison's report, as ``infermatrix compare A B --format FORMAT`` writes it."""
        fmt = _format(format)
        from infermatrix.core import report

        with Store(_existing(self.db), read_only=True) as store:
            ids = list(self.run_ids)
            if fmt == "text":
                from rich.console import Console

                buf = io.StringIO()
                report.render_compare_text(store, ids, Console(file=buf, width=_PLAIN_WIDTH, color_system=None))
                return buf.getvalue()
            if fmt == "json":
                return _json(self.data)
            return report.render_compare_markdown(store, ids) if fmt == "markdown" else report.render_compare_html(store, ids)


def compare(a: str | Run, b: str | Run, db: PathLike | None = None) -> Comparison:
    """Run ``b`` against the baseline ``a`` (ids, unique prefixes or :class:`Run` objects; ``db`` defaults to the
    first Run's database)."""
    from infermatrix.core.report.json_report import render_compare_json

    where = db if db is not None else next((r.db for r in (a, b) if isinstance(r, Run)), None)
    if where is None:
        raise ConfigError("compare: give db=, the database that holds both runs")
    with Store(_existing(where), read_only=True) as store:
        ids = [store.resolve_run(r.run_id if isinstance(r, Run) else r) for r in (a, b)]
        if ids[0] == ids[1]:
            raise ConfigError(f"compare: {ids[0]} against itself")
        data = render_compare_json(store, ids)
    return Comparison(Path(where), (ids[0], ids[1]), data)
