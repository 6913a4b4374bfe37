"""The import graph of src/ holds its layers (docs/plugins.md, "Layers"), read from the source with ``ast``.

Every import counts, at module level or inside a function (a lazy import is still a dependency), except
those under ``if TYPE_CHECKING:``: they are never executed, so they add no run-time edge or cycle (they are
exempt on purpose; a type-only reference to a higher layer is still visible in the code review).

Rules (docs/architecture.md, "The packages and their layers"), bottom up: engine < stream < distributed < measure
< load < run, each importing only what is below it (stream: the client; distributed: worker processes and Ray
actors, opened by measure's cell; load: open-loop points, traces and the SLO search, which run calls). store and
report import neither load nor run; core/config/ imports no layer at all (it sits below them); nothing under core/
imports a plugin; built-in plugins import only ``infermatrix.plugin`` (never ``infermatrix.core``) and their own package, never
another built-in plugin's module (what built-ins share is offered through ``infermatrix.plugin``, as a third
party gets it); and no import cycle anywhere in src/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "infermatrix"


def _module_name(path: Path, root: Path = SRC) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [PKG, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, modules: set[str] | None = None) -> set[str]:
    """Every module ``tree`` imports (absolute names), skipping ``if TYPE_CHECKING:`` bodies.

    ``from pkg import sub``, where ``pkg.sub`` is one of ``modules``, is an edge to ``pkg.sub`` only: the
    package ``pkg`` itself runs before any of its submodules anyway, so an edge to it would make every
    package ``__init__`` that re-exports its submodules look like a cycle."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{a.name}" for a in node.names}
            known = subs & modules if modules is not None else subs
            found.update(known)
            if modules is None or len(known) < len(subs):
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module -> the src/ modules it imports (names outside src/ dropped)."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        raw = _imports(ast.parse(path.read_text(), str(path)), mod, path.name == "__init__.py", set(files))
        graph[mod] = {m for m in raw if m in files and m != mod}
    return graph


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    if parts[:2] == [PKG, "core"] and len(parts) > 2 and parts[2] in LAYERED:
        return parts[2]
    if parts[:2] == [PKG, "core"]:
        return "core"
    if parts[:2] == [PKG, "plugins"]:
        return "plugins"
    return None


def _plugin(mod: str) -> str | None:
    """The built-in plugin a module belongs to: its module or package under plugins/ (``sim`` for
    ``infermatrix.plugins.sim.textgen``); ``None`` outside them (the ``infermatrix.plugins`` package itself)."""
    parts = mod.split(".")
    return parts[2] if parts[:2] == [PKG, "plugins"] and len(parts) > 2 else None


# The stack, bottom up: each imports only what is below it (never what is above).
STACK = ("engine", "telemetry", "stream", "distributed", "measure", "load", "run")
LAYERED = {*STACK, "store", "report", "intervals"}
# (importer layer, imported layer) pairs that are forbidden.
FORBIDDEN = {(low, high) for i, low in enumerate(STACK) for high in STACK[i + 1:]} | {
    ("load", "distributed"),  # points send from the run's own process
    ("store", "load"),
    ("store", "run"),
    ("report", "load"),
    ("report", "run"),
    ("telemetry", "store"),  # the run saves what telemetry reads
    ("telemetry", "report"),
} | {("intervals", other) for other in (*STACK, "store", "report")}  # pure statistics: imported, imports no layer
CORE_LAYERS = {"core", *LAYERED}
CONFIG = f"{PKG}.core.config"  # below every layer: it parses and checks, imports none of them, reads no file


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        a = _layer(mod)
        for dep in sorted(deps):
            b = _layer(dep)
            if a in CORE_LAYERS and b == "plugins":
                bad.append(f"{mod} -> {dep} (core imports a plugin)")
            elif (a, b) in FORBIDDEN:
                bad.append(f"{mod} -> {dep} ({a} imports {b})")
            elif (mod == CONFIG or mod.startswith(f"{CONFIG}.")) and b in LAYERED:
                bad.append(f"{mod} -> {dep} (config imports a layer)")
            elif a == "plugins" and dep.startswith(f"{PKG}.core"):
                bad.append(f"{mod} -> {dep} (a built-in plugin imports the core; use infermatrix.plugin)")
            elif a == "plugins" and b == "plugins" and _plugin(dep) not in (None, _plugin(mod)):
                bad.append(f"{mod} -> {dep} (a built-in plugin imports another built-in plugin; share it through infermatrix.plugin)")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


# ``infermatrix.plugin`` re-exports the core; the package ``__init__`` files are re-export hubs, so an edge
# pkg.sub -> pkg (``from infermatrix.core.measure import histograms``) goes through them: a cycle that only
# passes through a package __init__ that merely re-exports is an artefact. None is exempted today.
def test_layers_hold() -> None:
    assert layer_violations(import_graph()) == []


def test_no_import_cycle_in_src() -> None:
    assert cycles(import_graph()) == []


def test_the_graph_sees_what_it_should() -> None:
    """The rules can fail: known edges are in the graph, lazy imports included, TYPE_CHECKING ones not."""
    g = import_graph()
    assert "infermatrix.core.measure.cell" in g["infermatrix.core.run.matrix"]
    assert "infermatrix.core.run.runner" in g["infermatrix.cli.run_cmd"]  # imported inside a function there
    assert "infermatrix.core.distributed.workers" in g["infermatrix.core.measure.cell"]  # why distributed sits below measure
    assert "infermatrix.core.load.points" in g["infermatrix.core.run.runner"]  # why load sits below run
    assert not any(d.startswith("infermatrix.core.run") for d in g["infermatrix.core.load.points"])  # RunContext: type-only
    assert not any(d.startswith("infermatrix.core.run") for d in g["infermatrix.core.load.context"])  # what a point gets of the run
    code = "def f():\n    from infermatrix.core.run import runner\nif TYPE_CHECKING:\n    import infermatrix.core.run.steps\n"
    found = _imports(ast.parse(code), "infermatrix.core.measure.x", False)
    assert "infermatrix.core.run.runner" in found and "infermatrix.core.run.steps" not in found


@pytest.mark.parametrize(
    "edge, why",
    [
        (("infermatrix.core.measure.cell", "infermatrix.core.run.runner"), "measure imports run"),
        (("infermatrix.core.report.layout", "infermatrix.core.run.runner"), "report imports run"),
        (("infermatrix.core.store.store", "infermatrix.core.run.runner"), "store imports run"),
        (("infermatrix.core.engine.contract", "infermatrix.core.measure.cell"), "engine imports measure"),
        (("infermatrix.core.engine.traits", "infermatrix.core.stream.client"), "engine imports stream"),
        (("infermatrix.core.stream.client", "infermatrix.core.measure.metrics"), "stream imports measure"),
        (("infermatrix.core.telemetry.recorder", "infermatrix.core.measure.steady"), "telemetry imports measure"),
        (("infermatrix.core.telemetry.recorder", "infermatrix.core.store.telemetry"), "telemetry imports store"),
        (("infermatrix.core.engine.telemetry", "infermatrix.core.telemetry.nvml"), "engine imports telemetry"),
        (("infermatrix.core.stream.transport", "infermatrix.core.distributed.workers"), "stream imports distributed"),
        (("infermatrix.core.distributed.workers", "infermatrix.core.measure.selfcheck"), "distributed imports measure"),
        (("infermatrix.core.distributed.ray_pool", "infermatrix.core.run.runner"), "distributed imports run"),
        (("infermatrix.core.measure.cell", "infermatrix.core.load.openloop"), "measure imports load"),
        (("infermatrix.core.load.points", "infermatrix.core.run.matrix"), "load imports run"),
        (("infermatrix.core.load.point_send", "infermatrix.core.distributed.workers"), "load imports distributed"),
        (("infermatrix.core.report.layout", "infermatrix.core.load.points"), "report imports load"),
        (("infermatrix.core.store.points", "infermatrix.core.load.points"), "store imports load"),
        (("infermatrix.core.config", "infermatrix.core.load.traces"), "config imports a layer"),
        (("infermatrix.core.config.load_points", "infermatrix.core.load.traces"), "config imports a layer"),
        (("infermatrix.core.config", "infermatrix.plugins.vllm.plugin"), "core imports a plugin"),
        (("infermatrix.plugins.workload", "infermatrix.core.types"), "plugin imports the core"),
        (("infermatrix.plugins.shared_prefix", "infermatrix.plugins.workload"), "plugin imports another plugin's module"),
        (("infermatrix.plugins.vllm.plugin", "infermatrix.plugins.sim.textgen"), "plugin imports another plugin's package"),
    ],
)
def test_each_rule_fires(edge: tuple[str, str], why: str) -> None:
    g = {k: set(v) for k, v in import_graph().items()}
    g[edge[0]].add(edge[1])
    assert any(line.startswith(f"{edge[0]} -> {edge[1]}") for line in layer_violations(g)), why


def test_a_plugin_may_import_its_own_package() -> None:
    """The rule is about other plugins: the sim's modules import each other, and that stays allowed."""
    g = import_graph()
    assert "infermatrix.plugins.sim.profile" in g["infermatrix.plugins.sim.plugin"]
    assert not [line for line in layer_violations(g) if line.startswith("infermatrix.plugins.sim.")]


def test_a_cycle_is_found() -> None:
    g = {k: set(v) for k, v in import_graph().items()}
    g["infermatrix.core.types"].add("infermatrix.core.config")
    g["infermatrix.core.config"].add("infermatrix.core.types")
    assert ["infermatrix.core.config", "infermatrix.core.types"] in [c for c in cycles(g) if len(c) == 2] or any(
        {"infermatrix.core.config", "infermatrix.core.types"} <= set(c) for c in cycles(g)
    )


def test_no_builtin_plugin_names_the_core() -> None:
    """Not even in a string (an ``importlib`` call, a lazy import the AST walk would also see): built-in
    plugins are the examples plugin authors copy, so they use the public API ``infermatrix.plugin`` only."""
    plugins = SRC / "plugins"
    files = list(plugins.rglob("*.py"))
    assert len(files) > 20  # the walk found the plugins
    hits = [f"{p.relative_to(SRC)}:{no}" for p in files for no, line in enumerate(p.read_text().splitlines(), 1) if "infermatrix.core" in line or "infermatrix import core" in line]
    assert hits == []
