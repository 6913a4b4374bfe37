"""``infermatrix run --burst 1000@64,1000@256 [--burst-context 1K,8K]``: burst points from the command line
(docs/load.md, "Bursts"). Each REQUESTS[@CONCURRENCY] × each context becomes one ``[[load]] kind = "burst"``
point after the matrix; like ``--rate``, the flags replace the config's ``[[load]]`` points."""

from __future__ import annotations

from typing import Any, Callable

import click

from infermatrix.cli.common import list_option
from infermatrix.core.config import ConfigError
from infermatrix.core.contexts import parse_context_list

__all__ = ["BURST_FLAGS", "burst_options", "parse_bursts", "apply_burst_flags"]

BURST_FLAGS = ("--burst", "--burst-context")
_FORM = "REQUESTS or REQUESTS@CONCURRENCY, e.g. --burst 1000@64,1000@256"


def burst_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--burst`` and ``--burst-context`` (parameters ``burst``, ``burst_context``) to a command."""
    f = click.option("--burst-context", "burst_context", default=None, metavar="CONTEXTS",
                     help="with --burst: prompt tokens of the bursts' requests, e.g. 1K,8K (one point per context; "
                     "default: the first matrix context)")(f)  # fmt: skip
    return click.option("--burst", "burst", default=None, metavar="REQUESTS[@CONCURRENCY],...",
                        help="burst points after the matrix: REQUESTS sent with at most CONCURRENCY in flight (default: "
                        "all at once), timed to the last one's end (replaces the config's [[load]]; docs/load.md)")(f)  # fmt: skip


def _count(text: str, item: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"--burst: {item!r}: {what} {text!r} is not a whole number ({_FORM})") from None
    if value <= 0:
        raise ConfigError(f"--burst: {item!r}: {what} must be at least 1 ({_FORM})")
    return value


def parse_bursts(text: str) -> list[tuple[int, int | None]]:
    """``"1000@64,200"`` -> ``[(1000, 64), (200, None)]``; one ConfigError line for anything else."""
    out: list[tuple[int, int | None]] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        requests, sep, concurrency = item.partition("@")
        out.append((_count(requests.strip(), item, "requests"), _count(concurrency.strip(), item, "concurrency") if sep else None))
    if not out:
        raise ConfigError(f"--burst: empty ({_FORM})")
    return out


def apply_burst_flags(data: dict[str, Any], burst: str | None, burst_context: str | None) -> list[dict[str, Any]]:
    """The burst points the flags ask for (none without ``--burst``); the caller puts them in ``data["load"]``."""
    if burst is None:
        if burst_context is not None:
            raise ConfigError("--burst-context: give --burst too (e.g. --burst 1000@64 --burst-context 1K,8K)")
        return []
    contexts = list_option(parse_context_list, burst_context, "--burst-context") if burst_context is not None else [None]
    return [{"kind": "burst", "requests": r, **({"concurrency": c} if c else {}), **({"context": ctx} if ctx else {})}
            for r, c in parse_bursts(burst) for ctx in contexts]  # fmt: skip
