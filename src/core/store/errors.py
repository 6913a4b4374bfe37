"""The exceptions the store raises; their messages are a single line meant for the user."""

from __future__ import annotations

import duckdb

__all__ = ["StoreError", "QueryError"]


class StoreError(RuntimeError):
    """The database can't be opened, read or written; ``str(exc)`` is one line saying why."""


class QueryError(StoreError, duckdb.Error):
    """Bad SQL given to ``Store.query``. Also a ``duckdb.Error``, so callers that catch DuckDB's
    errors around ad-hoc SQL (``infermatrix sql``) keep working."""
