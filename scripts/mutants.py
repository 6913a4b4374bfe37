#!/usr/bin/env python3
"""A small mutation check of the formulas in docs/metrics.md: does some fast test fail when one of them breaks?

    .venv/bin/python scripts/mutants.py                 # every mutant of every target, its fast tests each
    .venv/bin/python scripts/mutants.py --list          # the mutants only, nothing run
    .venv/bin/python scripts/mutants.py --only metrics  # targets whose file or function matches
    .venv/bin/python scripts/mutants.py --json out.json

Each mutant is one operator swapped at one site inside a formula function (``TARGETS``): ``+``/``-``,
``*``/``/``, a comparison's boundary or direction, ``and``/``or``, ``min``/``max``, ``median``/``mean``, a
request's time stamp for another (``opened``/``sent``/``first_token``/``ended``), a numeric constant changed,
a ``not`` dropped. It is written into a temporary copy of the package (``src/`` as ``infermatrix``, first on
PYTHONPATH, so the editable install is shadowed), and the target's fast tests run against it in a fresh
process. A mutant a test fails on is *killed*; one every test passes is a *survivor*: either a gap in the
tests or an equivalent mutant (one that changes nothing observable), which the note beside the run says.
Run on demand (about 3 CPU-minutes; 12 minutes of wall time on two shared cores); nothing here runs in the
test suite (tests/test_mutants_script.py only checks that it still finds its sites).

Last run (issue 22): 135 mutants, 126 killed, 9 survived (6.7 %), every survivor equivalent — the guard
``span <= 0 or tokens <= 0`` in request_rate (4: after the first-arrival grouping a span is never 0, and every
event carries at least one token: chunks.py records only n > 0), ``len(inside) - first < 2`` -> ``+`` (the same
guard returns None then), ``rate_span > 0 and rate_tokens > 0`` in window_stats (3: the two are positive
together), ``r.ended is not None`` -> ``r.sent …`` for a finished request (it always has ``ended``), and
``hi > lo`` -> ``>=`` (adds zero). A first run, while those tests were being written, left 23 (17 %); the tests
as they were before also let avg_active's ``.opened -> .sent`` survive (checked) and reached no prefill formula.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# file (under src/) -> (the functions whose formulas are mutated, the fast tests that judge them)
TARGETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "core/measure/metrics.py": (
        ("request_rate", "ttft_populations", "window_stats"),
        ("tests/core/test_metrics.py",),
    ),
    "core/run/planning.py": (
        ("over_capacity_reason", "prefill_target"),
        ("tests/core/test_planning.py", "tests/core/test_capacity_order.py", "tests/core/test_capacity.py"),
    ),
    "core/run/prefill.py": (("prefill_point",), ("tests/core/test_metrics.py",)),
}

BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult}
CMP_SWAP = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt,), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt,),
            ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,)}  # fmt: skip
NAME_SWAP = {"min": "max", "max": "min"}
ATTR_SWAP = {"median": "mean", "opened": "sent", "sent": "opened", "first_token": "sent", "ended": "sent"}


@dataclass
class Mutant:
    file: str
    function: str
    line: int
    what: str
    index: int  # which site of the file, in ast.walk order
    variant: int  # which replacement at that site
    outcome: str = ""
    seconds: float = 0.0


def _sites(node: ast.AST) -> list[tuple[str, list]]:
    """(description, replacements) for one node; each replacement is applied by :func:`_apply`."""
    if isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAP:
        new = BINOP_SWAP[type(node.op)]
        return [(f"{type(node.op).__name__} -> {new.__name__}", [("op", new)])]
    if isinstance(node, ast.Compare):
        out = []
        for i, op in enumerate(node.ops):
            for new in CMP_SWAP.get(type(op), ()):
                out.append((f"{type(op).__name__} -> {new.__name__}", [("cmp", i, new)]))
        return out
    if isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        return [(f"{type(node.op).__name__} -> {new.__name__}", [("op", new)])]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return [("not dropped", [("unnot",)])]
    if isinstance(node, ast.Name) and node.id in NAME_SWAP:
        return [(f"{node.id} -> {NAME_SWAP[node.id]}", [("name", NAME_SWAP[node.id])])]
    if isinstance(node, ast.Attribute) and node.attr in ATTR_SWAP:
        return [(f".{node.attr} -> .{ATTR_SWAP[node.attr]}", [("attr", ATTR_SWAP[node.attr])])]
    if isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
        v = node.value
        new = (v + 1) if isinstance(v, int) else (v * 2 if v else 1.0)
        return [(f"constant {v!r} -> {new!r}", [("const", new)])]
    return []


def _apply(tree: ast.Module, index: int, change: list) -> ast.Module:
    node = list(ast.walk(tree))[index]
    kind = change[0]
    if kind == "op":
        node.op = change[1]()  # type: ignore[attr-defined]
    elif kind == "cmp":
        node.ops[change[1]] = change[2]()  # type: ignore[attr-defined]
    elif kind == "name":
        node.id = change[1]  # type: ignore[attr-defined]
    elif kind == "attr":
        node.attr = change[1]  # type: ignore[attr-defined]
    elif kind == "const":
        node.value = change[1]  # type: ignore[attr-defined]
    elif kind == "unnot":
        for parent in ast.walk(tree):  # replace the UnaryOp by its operand wherever it hangs
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, node.operand)  # type: ignore[attr-defined]
                elif isinstance(value, list) and any(v is node for v in value):
                    setattr(parent, field, [node.operand if v is node else v for v in value])  # type: ignore[attr-defined]
    return ast.fix_missing_locations(tree)


def _locate(rel: str) -> str:
    """``rel`` under src/, or the one module of that name elsewhere in src/core/ (a module moved between layers)."""
    if (ROOT / "src" / rel).is_file():
        return rel
    found = sorted((ROOT / "src" / "core").rglob(Path(rel).name))
    if len(found) != 1:
        raise SystemExit(f"mutants: {rel} not found under src/ (update TARGETS)")
    return str(found[0].relative_to(ROOT / "src"))


def mutants_of(rel: str, functions: tuple[str, ...]) -> list[Mutant]:
    tree = ast.parse((ROOT / "src" / rel).read_text())
    nodes = list(ast.walk(tree))
    where: dict[int, str] = {}
    for fn in nodes:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in functions:
            for sub in ast.walk(fn):
                where.setdefault(id(sub), fn.name)
            # Defaults and annotations are not formulas; docstrings are not code.
            for skip in (*ast.walk(fn.args), *(ast.walk(fn.returns) if fn.returns else ())):
                where.pop(id(skip), None)
            if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant):
                where.pop(id(fn.body[0].value), None)
    # Constants inside f-strings (messages) and annotations change no number.
    for parent in nodes:
        for part in (parent,) if isinstance(parent, ast.JoinedStr) else (parent.annotation,) if isinstance(parent, ast.AnnAssign) else ():
            for sub in ast.walk(part):
                where.pop(id(sub), None)
    out = []
    for i, node in enumerate(nodes):
        if id(node) not in where:
            continue
        for v, (what, _) in enumerate(_sites(node)):
            out.append(Mutant(rel, where[id(node)], getattr(node, "lineno", 0), what, i, v))
    return out


def run_one(m: Mutant, pkg: Path, tests: tuple[str, ...], timeout: float) -> Mutant:
    src = ROOT / "src" / m.file
    tree = ast.parse(src.read_text())
    node = list(ast.walk(tree))[m.index]
    change = _sites(node)[m.variant][1][0]
    target = pkg / "infermatrix" / m.file
    target.write_text(ast.unparse(_apply(tree, m.index, change)))
    env = {**os.environ, "PYTHONPATH": str(pkg), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-m", "not slow", "-p", "no:cacheprovider", *tests],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        m.outcome = "survived" if proc.returncode == 0 else ("killed" if proc.returncode == 1 else f"killed (exit {proc.returncode})")
    except subprocess.TimeoutExpired:
        m.outcome = "killed (timeout)"
    finally:
        shutil.copyfile(src, target)
    m.seconds = round(time.monotonic() - t0, 2)
    return m


def _check_shadowing(pkg: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(pkg), "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import infermatrix; print(infermatrix.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if not where.startswith(str(pkg)):
        raise SystemExit(f"mutants: the copy does not shadow the installed package (imported {where})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--only", default="", help="targets whose file or function contains this")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's tests (a hang counts as killed)")
    ap.add_argument("--json", type=Path, help="write every mutant and its outcome here")
    args = ap.parse_args()
    plan = [
        (m, tests)
        for rel, (functions, tests) in TARGETS.items()
        for m in mutants_of(_locate(rel), functions)
        if not args.only or args.only in rel or args.only in m.function
    ]
    plan.sort(key=lambda mt: (mt[0].file, mt[0].line, mt[0].index, mt[0].variant))
    if args.list:
        for m, _ in plan:
            print(f"{m.file}:{m.line} {m.function}: {m.what}")
        print(f"{len(plan)} mutants")
        return 0
    with tempfile.TemporaryDirectory(prefix="imx-mutants-") as tmp:
        pkg = Path(tmp)
        shutil.copytree(ROOT / "src", pkg / "infermatrix", ignore=shutil.ignore_patterns("__pycache__"))
        _check_shadowing(pkg)
        # The unmutated code must pass its tests, or every mutant would look killed.
        for tests in {t for _, t in plan}:
            base = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "not slow", "-p", "no:cacheprovider", *tests], cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(pkg), "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True)  # fmt: skip
            if base.returncode != 0:
                raise SystemExit(f"mutants: the unmutated code fails {tests}:\n{base.stdout[-2000:]}")
        done = []
        for k, (m, tests) in enumerate(plan, 1):
            run_one(m, pkg, tests, args.timeout)
            done.append(m)
            print(f"[{k}/{len(plan)}] {m.outcome:<18} {m.file}:{m.line} {m.function}: {m.what}  ({m.seconds:.1f} s)", flush=True)
    survivors = [m for m in done if m.outcome == "survived"]
    killed = len(done) - len(survivors)
    print(f"\n{killed} of {len(done)} mutants killed, {len(survivors)} survived ({100 * len(survivors) / max(1, len(done)):.1f} %)")
    for m in survivors:
        print(f"  survived: {m.file}:{m.line} {m.function}: {m.what}")
    if args.json:
        args.json.write_text(json.dumps([asdict(m) for m in done], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
