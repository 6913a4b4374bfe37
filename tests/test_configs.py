"""Every config shipped in configs/ parses and validates with the installed plugins (keys are not read)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infermatrix.core.config import load_config
from infermatrix.core.registry import validate_config
from infermatrix.core.plugins import get_plugin_manager

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.toml"))


def test_there_are_configs():
    assert len(CONFIGS) >= 7


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_parses(path):
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, load_config(path), str(path))  # raises ConfigError on any mistake
    assert cfg.engine.kind and cfg.matrix.concurrency
