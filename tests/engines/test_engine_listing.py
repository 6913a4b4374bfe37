"""`infermatrix plugins` lists every engine kind, each from its own plugin, all loaded as entry points."""

from __future__ import annotations

import pytest
from imxtest import run_cli

from infermatrix.core.plugins import get_plugin_manager, plugin_summary

ENGINES = {"sim", "openai", "vllm", "sglang", "trtllm", "lmdeploy"}


def test_summary_lists_each_engine_under_its_plugin():
    rows = {r["name"]: r for r in plugin_summary(get_plugin_manager())}
    for kind in ENGINES:
        assert rows[kind]["engines"] == [kind]


@pytest.mark.slow
def test_plugins_command_lists_every_engine():
    proc = run_cli("plugins")
    assert proc.returncode == 0, proc.stderr
    engines = {ln.split("│")[3].strip() for ln in proc.stdout.splitlines() if ln.count("│") >= 4}
    assert ENGINES <= engines, proc.stdout
