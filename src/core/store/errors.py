"""The one exception the store raises; its message is a single line meant for the user."""

from __future__ import annotations

__all__ = ["StoreError"]


class StoreError(RuntimeError):
    """The database can't be opened, read or written; ``str(exc)`` is one line saying why."""
