"""Shared pieces of the command line: one-line errors, exit codes, opening the store."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

from infermatrix.core.config import ConfigError

__all__ = ["fail", "open_store", "list_option", "DEFAULT_DB", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERRUPTED"]

DEFAULT_DB = "infermatrix.duckdb"
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)


def open_store(db: str, read_only: bool = False):
    from infermatrix.core.store import Store, StoreError

    try:
        return Store(db, read_only=read_only)
    except StoreError as exc:
        fail(str(exc))


def list_option(parse, text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


