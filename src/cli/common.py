"""Shared pieces of the command line: one-line errors, exit codes, opening the store."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console

from infermatrix.core.config import ConfigError

__all__ = [
    "fail", "open_store", "list_option", "number_option", "OneLineErrors",
    "DEFAULT_DB", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_SEARCH_STOPPED",
]

DEFAULT_DB = "infermatrix.duckdb"
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
# The run ended, but the SLO search it was asked for stopped without an answer (run status `stopped`).
EXIT_SEARCH_STOPPED = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


class OneLineErrors(click.Command):
    """A command whose usage mistakes (unknown option, bad value) are one ``error:`` line, exit 2,
    like every other bad input — not click's usage block."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            fail(f"{exc.format_message()} (see infermatrix {ctx.info_name} --help)")
            raise  # unreachable: fail() exits


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


def number_option(kind: type, text: str | None, flag: str) -> Any:
    """``--duration 5`` -> 5.0; ``--duration abc`` -> a ConfigError naming the flag."""
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{flag}: {text!r} is not {what}") from None
    if value <= 0:
        raise ConfigError(f"{flag}: must be greater than 0 (got {text})")
    return value
