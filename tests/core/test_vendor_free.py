"""The core knows no engine vendor: engine names, metric prefixes and plugin imports live in plugins."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).parents[2] / "src" / "core"
VENDORS = re.compile(r"vllm|sglang|llamacpp|llama.cpp|trtllm|lmdeploy", re.IGNORECASE)


def _files():
    files = [p for p in CORE.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) > 20  # the walk found the core
    return files


def test_no_vendor_name_anywhere_in_core():
    hits = []
    for path in _files():
        for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if VENDORS.search(line):
                hits.append(f"{path.relative_to(CORE.parent)}:{no}: {line.strip()}")
    assert not hits, "engine vendor named in src/core:\n" + "\n".join(hits)


def test_core_imports_no_plugin():
    bad = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            bad += [f"{path.relative_to(CORE.parent)}: {n}" for n in names if n == "infermatrix.plugins" or n.startswith("infermatrix.plugins.")]
        if re.search(r"infermatrix\.plugins\b", path.read_text()):  # dynamic imports by module path, too
            bad.append(f"{path.relative_to(CORE.parent)}: names infermatrix.plugins")
    assert not bad, "src/core imports plugins:\n" + "\n".join(bad)


def test_the_checks_can_fail(tmp_path):
    assert VENDORS.search('_WANTED = ("vLLM:num_requests_running",)')
    assert VENDORS.search("SGLang") and VENDORS.search("llama.cpp") and VENDORS.search("TRTLLM")
