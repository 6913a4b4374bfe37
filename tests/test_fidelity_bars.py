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


# The one reader of a stated bound allowed: a check that the server's measure stays within it (it can fail a cell,
# never pass one). tests/fidelity/truthlib.py, docs/metrics.md "Doubtful columns are held to the same bar".
BOUND_CHECKS = {("truthlib.py", "check_mark_covers")}


def fails_only(fn: ast.FunctionDef) -> bool:
    """A function that can only raise: its statements are a docstring, assignments and asserts; it returns nothing."""
    doc = fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant)
    body = fn.body[1:] if doc else fn.body
    returns_none = fn.returns is None or (isinstance(fn.returns, ast.Constant) and fn.returns.value is None)
    return all(isinstance(st, (ast.Assign, ast.Assert)) for st in body) and returns_none


def bound_readers(source: str) -> tuple[set[str], bool]:
    """The functions of a module whose code names a stated bound, and whether it is named outside any function."""
    tree = ast.parse(source)
    lines = source.splitlines()
    inside: set[int] = set()
    named: set[str] = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        end = fn.end_lineno or fn.lineno
        inside.update(range(fn.lineno, end + 1))
        if "ttft_lag_bound_ms" in "\n".join(lines[fn.lineno - 1 : end]):
            named.add(fn.name)
    outside = any("ttft_lag_bound_ms" in line for i, line in enumerate(lines, 1) if i not in inside)
    return named, outside


def test_no_bar_reads_what_the_product_says_about_itself():
    """The doubtful marks' stated bounds, stamp-lag bounds and the run's client_overhead_ms widen no bar: a stated TTFT
    bound is read only by the check that the server's measure stays within it (BOUND_CHECKS), which can only fail."""
    for f in sorted(FIDELITY.glob("*.py")):
        text = f.read_text()
        for word in ("_doubtful_bar", "stamp_lag_bound_ms", "within ±"):
            assert word not in text, (f.name, word)
        assert not re.search(r"\+\s*overhead\b", text), f.name
        named, outside = bound_readers(text)
        assert not outside and {(f.name, fn) for fn in named} <= BOUND_CHECKS, (f.name, named, outside)
    tree = ast.parse((FIDELITY / "truthlib.py").read_text())
    checks = [fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and ("truthlib.py", fn.name) in BOUND_CHECKS]
    assert len(checks) == len(BOUND_CHECKS) and all(fails_only(fn) for fn in checks)


WIDEN = "def f(c) -> float:\n    b = c['ttft_lag_bound_ms']\n    return b\n"
CHECK = "def f(c) -> None:\n    'doc'\n    b = c['ttft_lag_bound_ms']\n    assert x <= b\n"


def test_the_bound_rule_finds_a_widening():
    """A bound read in a test's body, or by a helper that returns something (a widened bar), is caught; a check that
    can only fail is not."""
    assert bound_readers("x = c['ttft_lag_bound_ms']\n") == (set(), True)
    assert bound_readers("def bar(c):\n    return hi + c['ttft_lag_bound_ms']\n") == ({"bar"}, False)
    widen, check = ast.parse(WIDEN).body[0], ast.parse(CHECK).body[0]
    assert isinstance(widen, ast.FunctionDef) and isinstance(check, ast.FunctionDef)
    assert not fails_only(widen) and fails_only(check)
