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


def test_engine_plugins_import_only_the_public_api():
    """What a third-party plugin can do, these do: infermatrix.plugin and their own package, nothing else."""
    import ast
    from pathlib import Path

    src = Path(__file__).parents[2] / "src" / "plugins"
    files = [src / "openai_engine.py", *(p for name in ("vllm", "sglang", "trtllm", "lmdeploy") for p in (src / name).glob("*.py"))]
    bad = []
    for path in files:
        own = f"infermatrix.plugins.{path.parent.name}" if path.parent != src else None
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for mod in mods:
                if mod.startswith("infermatrix") and mod != "infermatrix.plugin" and not (own and (mod == own or mod.startswith(own + "."))):
                    bad.append(f"{path.relative_to(src)}: {mod}")
    assert len(files) > 10 and not bad, bad
