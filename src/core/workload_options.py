"""What a workload's ``[workload]`` table is checked with: a pydantic model of the workload's own parameters,
validated into one line naming the field (``parse_workload_options``), and token lengths given as ``N`` or
``[lo, hi]`` (``TokenLengths``: checked by ``check_lengths``, drawn by ``draw_length``).

Public through ``infermatrix.plugin``: the built-in ``shared-prefix`` and ``multi-turn`` use them exactly as a
third-party workload can (docs/plugins.md, ``make_workload``).
"""

from __future__ import annotations

import random
from typing import Any, TypeVar

from pydantic import ValidationError

from infermatrix.core.config import ConfigError, Strict

__all__ = ["TokenLengths", "check_lengths", "draw_length", "parse_workload_options"]

TokenLengths = int | tuple[int, int]  # a fixed length in tokens, or a range [lo, hi] drawn uniformly
_Options = TypeVar("_Options", bound=Strict)


def draw_length(spec: TokenLengths, rng: random.Random) -> int:
    """A fixed length, or one drawn uniformly from ``[lo, hi]`` (whole tokens)."""
    return spec if isinstance(spec, int) else rng.randint(spec[0], spec[1])


def check_lengths(v: object, what: str) -> object:
    """``N`` or ``[lo, hi]`` with 1 <= lo <= hi (a ``mode="before"`` field validator's body)."""
    if isinstance(v, list):
        v = tuple(v)
    if isinstance(v, tuple):
        if len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v) or not 1 <= v[0] <= v[1]:
            raise ValueError(f"{what}: a token count or [lo, hi] with 1 <= lo <= hi")
    elif not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{what}: a positive token count or [lo, hi]")
    return v


def parse_workload_options(options: dict[str, Any] | None, cls: type[_Options], name: str) -> _Options:
    """The ``[workload]`` table validated into ``cls``, or a ``ConfigError`` of one line naming the field."""
    try:
        return cls.model_validate(options or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "workload"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"workload.{loc}: {msg} ({name})") from None
