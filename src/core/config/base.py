"""What every config table is built from: the strict model base, the one-line user error, and the field types that
``[[load]]`` points and ``[search]`` share (an arrival process's text, a context in tokens or as an "8K" label)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from infermatrix.core.arrival_spec import parse_arrival
from infermatrix.core.contexts import parse_context

__all__ = ["ConfigError", "Strict", "ArrivalText", "ContextTokens"]


class ConfigError(ValueError):
    """A user mistake in a config or a flag: shown as one line, exit code 2."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _arrival_text(v: str) -> str:
    return str(parse_arrival(v))


def _context_tokens(v: Any) -> Any:
    return None if v is None else parse_context(v)


# Fields that [[load]] points and [search] share: an arrival process ("gamma:0.5") and a context ("8K" or tokens).
ArrivalText = Annotated[str, AfterValidator(_arrival_text)]
ContextTokens = Annotated[int | None, BeforeValidator(_context_tokens)]
