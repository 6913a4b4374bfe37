"""``infermatrix run --mixed 8@1K+8K,32@1K+32K``: interference points from the command line (docs/load.md,
"Interference"). Each STREAMS[@DECODE_CTX]+PREFILL_CTX becomes one ``[[load]] kind = "mixed"`` point after the matrix:
STREAMS decode streams of DECODE_CTX prompt tokens (default: the first matrix context), prompts of PREFILL_CTX tokens
sent into them; like ``--rate`` and ``--burst``, the flags replace the config's ``[[load]]`` points."""

from __future__ import annotations

from typing import Any, Callable

import click

from infermatrix.core.config import ConfigError
from infermatrix.core.contexts import parse_context

__all__ = ["MIXED_FLAGS", "mixed_options", "parse_mixed", "apply_mixed_flags"]

MIXED_FLAGS = ("--mixed",)
_FORM = "STREAMS[@DECODE_CTX]+PREFILL_CTX, e.g. --mixed 8@1K+8K,32@1K+32K"


def mixed_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--mixed`` (parameter ``mixed``) to a command."""
    return click.option("--mixed", "mixed", default=None, metavar="STREAMS[@DECODE_CTX]+PREFILL_CTX,...",
                        help="interference points after the matrix: STREAMS decodes of DECODE_CTX tokens running, prompts "
                        "of PREFILL_CTX tokens sent into them; their token gaps with and without a prefill (replaces the "
                        "config's [[load]]; docs/load.md)")(f)  # fmt: skip


def _context(text: str, item: str, what: str) -> int:
    try:
        return parse_context(text)
    except ValueError:
        raise ConfigError(f"--mixed: {item!r}: {what} {text!r} is not a context length ({_FORM})") from None


def parse_mixed(text: str) -> list[tuple[int, int | None, int]]:
    """``"8@1K+8K,4+2K"`` -> ``[(8, 1024, 8192), (4, None, 2048)]``; one ConfigError line for anything else."""
    out: list[tuple[int, int | None, int]] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        head, plus, prefill = item.partition("+")
        streams, at, decode = head.partition("@")
        if not plus or not prefill.strip():
            raise ConfigError(f"--mixed: {item!r}: no +PREFILL_CTX ({_FORM})")
        try:
            n = int(streams.strip())
        except ValueError:
            raise ConfigError(f"--mixed: {item!r}: streams {streams.strip()!r} is not a whole number ({_FORM})") from None
        if n <= 0:
            raise ConfigError(f"--mixed: {item!r}: streams must be at least 1 ({_FORM})")
        out.append((n, _context(decode.strip(), item, "decode context") if at else None, _context(prefill.strip(), item, "prefill context")))
    if not out:
        raise ConfigError(f"--mixed: empty ({_FORM})")
    return out


def apply_mixed_flags(mixed: str | None) -> list[dict[str, Any]]:
    """The interference points ``--mixed`` asks for (none without it); the caller puts them in ``data["load"]``."""
    if mixed is None:
        return []
    return [{"kind": "mixed", "decode_streams": n, **({"decode_context": d} if d else {}), "prefill_context": p} for n, d, p in parse_mixed(mixed)]
