"""Command lines from typed flag models: one rule for every launched engine's ``[engine.args]``.

An engine plugin declares its server's common flags as fields of a ``Strict`` model (so a typo is a
config error, not a server that dies at start-up) and turns them into argv here.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Mapping

from pydantic import BaseModel

__all__ = ["model_flags", "expand_path"]


def model_flags(
    args: BaseModel, *, sep: str = "-", skip: Iterable[str] = ("extra_args",), names: Mapping[str, str] | None = None
) -> list[str]:
    """``--flag value`` for every field of ``args`` that is set, in declaration order.

    The flag is ``--`` + the field name with ``_`` replaced by ``sep`` (``names`` maps a field to
    another flag). ``None`` and ``False`` are left out (the server's default stays), ``True`` is the
    bare flag, a table is compact JSON, a list is one flag followed by its values.
    """
    skipped, renamed = set(skip), dict(names or {})
    out: list[str] = []
    for name in type(args).model_fields:
        value = getattr(args, name)
        if name in skipped or value is None or value is False:
            continue
        flag = renamed.get(name) or "--" + name.replace("_", sep)
        if value is True:
            out.append(flag)
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def expand_path(value: str) -> str:
    """``~`` and ``$VARS`` expanded, as a shell would (``"$HOME/env/bin/server"``)."""
    return os.path.expanduser(os.path.expandvars(value))
