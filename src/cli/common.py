"""Shared pieces of the command line: one-line errors, exit codes, opening the store."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console

from infermatrix.core.config import ConfigError

__all__ = [
    "fail", "open_store", "list_option", "number_option", "OneLineErrors", "OneLineGroup", "usage_mistake", "out_console",
    "DEFAULT_DB", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_SEARCH_STOPPED",
]

DEFAULT_DB = "infermatrix.duckdb"
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
# Off a terminal rich lays everything out for 80 columns: values cut to "…", headers and intervals folded over
# lines. A pipe or a file gets this many instead, so every value and every table row prints whole, on one line
# (tables are as wide as their content, never padded to the console's width).
UNBOUNDED_WIDTH = 100_000

# The run ended, but the SLO search it was asked for stopped without an answer (run status `stopped`).
EXIT_SEARCH_STOPPED = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def usage_mistake(exc: click.UsageError, ctx: click.Context) -> None:
    """A usage mistake (unknown option or command, a value not among a ``click.Choice``'s) as one ``error:`` line,
    exit 2, like every other bad input — not click's usage block. ``ctx``: the command it was made on."""
    names = []
    node: click.Context | None = ctx
    while node is not None:  # the command's path below the program: "report", "sim serve"
        if node.parent is not None or not isinstance(node.command, click.Group):  # the program's group is "infermatrix"
            names.append(node.info_name or "")
        node = node.parent
    fail(f"{exc.format_message()} (see {' '.join(['infermatrix', *reversed(names)])} --help)")


class OneLineErrors(click.Command):
    """A command whose usage mistakes are one line (``usage_mistake``), also when it is invoked on its own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            usage_mistake(exc, ctx)
            raise  # unreachable: fail() exits


class OneLineGroup(click.Group):
    """The top-level group: a usage mistake in any of its commands — built-in or a plugin's, nested groups too
    (``sim serve``) — is one line (``usage_mistake``). Asking a group for nothing still shows its help."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            usage_mistake(exc, exc.ctx or ctx)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            usage_mistake(exc, exc.ctx or ctx)
            raise


def out_console(file: Any = None, **kwargs: Any) -> Console:
    """The console results are printed on: the terminal's width on a terminal; on a pipe, or into ``file``
    (``-o FILE``, plain text), wide enough that nothing is cut or wrapped. ``kwargs`` go to rich's Console."""
    if file is None and sys.stdout.isatty():
        return Console(**kwargs)
    if file is None:
        return Console(width=UNBOUNDED_WIDTH, **kwargs)
    return Console(file=file, width=UNBOUNDED_WIDTH, color_system=None, **kwargs)


def err_console(**kwargs: Any) -> Console:
    """The console progress and notes go to (stderr): the terminal's width on a terminal; off one (a pipe, a log file,
    a test reading it) unbounded, so a line with a long path is never folded into two."""
    if sys.stderr.isatty():
        return Console(stderr=True, **kwargs)
    return Console(stderr=True, width=UNBOUNDED_WIDTH, **kwargs)


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
