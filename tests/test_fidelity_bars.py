"""Every tolerance of tests/fidelity/ lives in tests/fidelity/bars.py, named in docs/metrics.md (issue 22).

A float literal in a fidelity test is a bar in disguise unless it is an input of the experiment: a sim profile
field (``write_profile(…)``, ``SimProfile(…)``), a config (``MatrixConfig(…)``), zero, or the ms-per-s unit.
Integers are counts, which the tests compare exactly. And no bar reads what the product reports about itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
FIDELITY = ROOT / "tests" / "fidelity"
INPUT_CALLS = {"write_profile", "SimProfile", "MatrixConfig", "sleep"}  # profile, config; a poll's interval
UNITS = {0.0, 1000.0}
# Module-level names that hold a test's inputs (profile fields kept apart because an assert uses them too).
INPUT_NAMES = {"SCENARIOS", "PREFILL_BASE_MS", "PREFILL_TPS", "SCALE", "STEP_MS", "PROFILE", "POINT", "FREEZE_S"}


def literal_floats(source: str) -> list[tuple[int, float]]:
    tree = ast.parse(source)
    inputs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in INPUT_CALLS:
                inputs.update(id(sub) for sub in ast.walk(node))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in INPUT_NAMES for t in node.targets):
            inputs.update(id(sub) for sub in ast.walk(node))
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and type(node.value) is float and id(node) not in inputs and node.value not in UNITS
    )


def test_no_float_literal_in_fidelity_tests_outside_bars():
    found = {
        f.name: hits
        for f in sorted(FIDELITY.glob("*.py"))
        if f.name != "bars.py" and (hits := literal_floats(f.read_text()))
    }
    assert not found, f"tolerances belong in tests/fidelity/bars.py (named in docs/metrics.md): {found}"


def test_the_checker_finds_a_bar_in_disguise():
    assert literal_floats("assert rel_err(a, b) < 0.02\n") == [(1, 0.02)]
    assert literal_floats("write_profile(p, step_base_ms=4.0)\nx = 1000.0 * y\n") == []


def test_every_bar_is_named_in_the_docs_expected_error_table():
    names = re.findall(r"^([A-Z][A-Z_]+) = ", (FIDELITY / "bars.py").read_text(), re.M)
    docs = (ROOT / "docs" / "metrics.md").read_text()
    table = docs[docs.index("## Expected error"):]
    assert names and not [n for n in names if f"`{n}`" not in table], [n for n in names if f"`{n}`" not in table]


def test_no_bar_reads_what_the_product_says_about_itself():
    """The doubtful marks' stated bounds, stamp-lag bounds and the run's client_overhead_ms widen no bar."""
    for f in sorted(FIDELITY.glob("*.py")):
        text = f.read_text()
        for word in ("_doubtful_bar", "ttft_lag_bound_ms", "stamp_lag_bound_ms", "within ±"):
            assert word not in text, (f.name, word)
        assert not re.search(r"\+\s*overhead\b", text), f.name
