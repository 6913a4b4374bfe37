"""``[engine] kind = "auto"``'s config, apart from the recognition itself (core/engine/detect.py): the
registry lists it among the engine configs, and detect uses the registry, so neither imports the other."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infermatrix.core.config import EngineConfig

__all__ = ["AUTO_KIND", "AutoEngineConfig"]

AUTO_KIND = "auto"


class AutoEngineConfig(EngineConfig):
    """``[engine] kind = "auto"``: attach to ``base_url`` as whatever engine is recognised there."""

    kind: Literal["auto"] = "auto"
    base_url: str = Field(..., description="the server's address; the engine behind it is recognised (docs/engines.md)")
