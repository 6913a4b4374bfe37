"""scripts/mutants.py (the on-demand mutation check) still finds its formula sites and writes mutants that
compile: the check itself is run by hand, but it must not rot silently (issue 22)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # unparses every mutant: a few CPU seconds
def test_every_target_has_mutants_and_each_compiles_to_different_code():
    mutants = _load()
    for rel, (functions, tests) in mutants.TARGETS.items():
        rel = mutants._locate(rel)
        found = mutants.mutants_of(rel, functions)
        assert {m.function for m in found} == set(functions), rel  # every formula function still exists
        assert all((ROOT / t).is_file() for t in tests), tests
        source = (ROOT / "src" / rel).read_text()
        original = ast.unparse(ast.parse(source))
        for m in found:
            tree = ast.parse(source)
            change = mutants._sites(list(ast.walk(tree))[m.index])[m.variant][1][0]
            mutated = ast.unparse(mutants._apply(tree, m.index, change))
            compile(mutated, rel, "exec")
            assert mutated != original, (m.line, m.what)


def test_the_avg_active_definition_is_a_mutation_site():
    mutants = _load()
    found = mutants.mutants_of("core/measure/metrics.py", ("window_stats",))
    assert any(m.what == ".opened -> .sent" for m in found)
