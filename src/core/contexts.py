"""Context labels: ``K`` = 1024 tokens (``8K`` = 8192, ``251K`` = 257,024)."""

from __future__ import annotations

import re

__all__ = ["parse_context", "format_context", "parse_context_list", "parse_int_list"]

_LABEL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_context(value: str | int) -> int:
    """Turn ``"8K"``, ``"8k"``, ``"1.5K"`` or ``8192`` into a token count; raise ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a context length: {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"context length must be positive, got {value}")
        return value
    m = _LABEL.match(str(value))
    if not m:
        raise ValueError(f"not a context length: {value!r} (use e.g. 8K, 1024)")
    number, unit = float(m.group(1)), m.group(2).upper()
    tokens = number * {"": 1, "K": 1024, "M": 1024 * 1024}[unit]
    if tokens != int(tokens) or tokens <= 0:
        raise ValueError(f"not a whole, positive number of tokens: {value!r}")
    return int(tokens)


def format_context(tokens: int) -> str:
    """The label for a token count: ``8192 -> "8K"``; counts that are not whole K stay plain numbers."""
    if tokens % 1024 == 0:
        return f"{tokens // 1024}K"
    return str(tokens)


def parse_context_list(text: str) -> list[int]:
    """``"1K,2K"`` -> ``[1024, 2048]``."""
    items = [t for t in (s.strip() for s in text.split(",")) if t]
    if not items:
        raise ValueError("empty list of context lengths")
    return [parse_context(t) for t in items]


def parse_int_list(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``, each a positive integer."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if not item.isdigit() or int(item) <= 0:
            raise ValueError(f"not a positive integer: {item!r}")
        out.append(int(item))
    if not out:
        raise ValueError("empty list of integers")
    return out
