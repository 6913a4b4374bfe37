"""Every command and config shown in docs/sim.md and docs/plugins.md is run or loaded as shown.

* ``infermatrix sim serve …``: started for real (on a free port instead of the one shown), then asked
  whether each flag took effect (``/debug/profile``, ``/metrics``, ``/tokenize``), then stopped.
* ``python scripts/rehearse_reference.py …``: run with ``--no-run`` against an empty store, which checks
  every argument against the reference matrix (exit 2 on a bad one) without the minutes-long rehearsal
  itself (tests/fidelity/test_fidelity_reference.py runs a subset of it for real).
* TOML: an ``[engine]`` config is validated; a sim profile is loaded and served; the entry-point snippet
  names the plugin group infermatrix reads.
* Python: the "Testing a plugin" example is run as written, with a small ``my_plugin`` engine module.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
import tomllib
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from imxtest import ROOT, free_port

from infermatrix.core.hookspecs import PROJECT
from infermatrix.core.registry import validate_config
from infermatrix.plugins.sim.profile import load_profile
from infermatrix.testing import plugin_manager, sim_server

DOCS = ROOT / "docs"
BLOCK = re.compile(r"```(?P<lang>\w*)\n(?P<code>.*?)```", re.DOTALL)


def blocks(doc: str, lang: str) -> list[str]:
    return [m["code"] for m in BLOCK.finditer((DOCS / doc).read_text()) if m["lang"] == lang]


def commands(sh: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped."""
    return [argv for line in sh.replace("\\\n", " ").splitlines() if (argv := shlex.split(line, comments=True))]


def _sim_commands() -> list[list[str]]:
    return [c for sh in blocks("sim.md", "sh") for c in commands(sh) if c[:3] == ["infermatrix", "sim", "serve"]]


def _rehearse_commands() -> list[list[str]]:
    return [c for sh in blocks("sim.md", "sh") for c in commands(sh) if c[:2] == ["python", "scripts/rehearse_reference.py"]]


def test_every_shell_command_is_one_this_file_runs():
    known = len(_sim_commands()) + len(_rehearse_commands())
    every = [c for doc in ("sim.md", "plugins.md") for sh in blocks(doc, "sh") for c in commands(sh)]
    assert len(every) == known >= 5, [" ".join(c) for c in every]


def _options(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    i = 3
    while i < len(argv):
        flag = argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.setdefault(flag, []).append(argv[i + 1])
            i += 2
        else:
            out.setdefault(flag, []).append("")
            i += 1
    return out


def _serve(argv: list[str], tmp: Path) -> tuple[dict[str, Any], str, int]:
    """Start the command (on a free port), return its profile, its /metrics page and /tokenize's status."""
    port = free_port()
    args = [a if argv[i - 1] != "--port" else str(port) for i, a in enumerate(argv)]
    assert "--port" in args
    log = tmp / f"sim-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "infermatrix", *args[1:]], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)  # polling for start-up, not timing anything
        profile = httpx.get(f"{base}/debug/profile", timeout=10).json()
        page = httpx.get(f"{base}/metrics", timeout=10).text
        status = httpx.post(f"{base}/tokenize", json={"prompt": "hello"}, timeout=10).status_code
        return profile, page, status
    finally:
        proc.terminate()
        proc.wait(15)


def _families(page: str) -> dict[str, float]:
    return {ln.split("{")[0].split(" ")[0]: float(ln.rsplit(" ", 1)[1]) for ln in page.splitlines() if ln and not ln.startswith("#")}


@pytest.mark.slow
@pytest.mark.parametrize("argv", _sim_commands(), ids=lambda a: " ".join(a[3:]))
def test_sim_serve_commands(argv, tmp_path):
    opts = _options(argv)
    profile, page, tokenize_status = _serve(argv, tmp_path)
    fams = _families(page)
    assert profile["name"] == load_profile(opts["--profile"][0]).name
    if "--max-num-seqs" in opts:
        assert profile["max_num_seqs"] == int(opts["--max-num-seqs"][0])
    if "--metric-prefix" in opts:
        prefix = opts["--metric-prefix"][0]
        assert f"{prefix}num_requests_waiting" in fams and not any(f.startswith("vllm:") for f in fams)
    for item in opts.get("--metric-name", []):
        assert item.split("=", 1)[1] in fams
    for item in opts.get("--capacity-gauge", []):
        role, name = item.split("=", 1)
        assert fams[name] == profile["kv_tokens" if role == "kv_tokens" else "max_num_seqs"]
    assert tokenize_status == (404 if "--no-tokenize" in opts else 200)


@pytest.mark.slow
@pytest.mark.parametrize("argv", _rehearse_commands(), ids=lambda a: " ".join(a[2:]) or "(all)")
def test_rehearse_commands_accept_their_arguments(argv, tmp_path):
    from infermatrix.core.store import open_store

    db = tmp_path / "empty.duckdb"
    open_store(str(db)).close()
    proc = subprocess.run([sys.executable, *argv[1:], "--no-run", "--db", str(db)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 2 and "reference:" in proc.stdout, proc.stderr[-2000:]
    bad = subprocess.run([sys.executable, argv[1], "--cells", "9K:1", "--no-run", "--db", str(db)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2  # the check can fail


def test_sim_md_toml_blocks():
    found = {"engine": 0, "profile": 0}
    for code in blocks("sim.md", "toml"):
        data = tomllib.loads(code)
        if "engine" in data:
            cfg = validate_config(plugin_manager(), data, "docs/sim.md")
            assert cfg.engine.kind == "sim"
            found["engine"] += 1
        else:
            prof = load_profile(data)
            assert prof.capacity_gauges and prof.metric_names  # the block shows those keys
            found["profile"] += 1
    assert found == {"engine": 2, "profile": 1}  # the config block and "Engine args"


@pytest.mark.slow
def test_sim_md_profile_block_is_served_as_said():
    """The profile block is "the same server as the first command": served, it gives the same page names."""
    (code,) = [c for c in blocks("sim.md", "toml") if "engine" not in tomllib.loads(c)]
    data = tomllib.loads(code)
    with sim_server(data.pop("base"), **data) as sim:
        fams = _families(sim.metrics())
    assert fams["toy:running"] >= 0 and fams["toy:kv_cache_tokens"] == 20_000 and fams["toy:max_seqs"] == 2
    assert "toy:num_requests_waiting" in fams


def test_plugins_md_entry_point_block():
    (code,) = blocks("plugins.md", "toml")
    group = tomllib.loads(code)["project"]["entry-points"]
    assert list(group) == [PROJECT] and all(isinstance(v, str) for v in group[PROJECT].values())


def _my_plugin() -> types.ModuleType:
    """The engine the plugins.md example tests: an attach-only kind ``my`` with its own gauge names."""
    from typing import Literal

    from infermatrix.plugin import AttachEngine, EngineConfig, EngineTraits, MetricNames, TokenizeAPI, hookimpl

    mod = types.ModuleType("my_plugin")

    class MyConfig(EngineConfig):
        kind: Literal["my"] = "my"

    class MyEngine(AttachEngine):
        traits = EngineTraits(metrics=MetricNames(running="my:running", waiting="my:waiting"), tokenize=TokenizeAPI())

    mod.register_engines = hookimpl(lambda register: register(MyConfig, MyEngine))
    return mod


@pytest.mark.slow
def test_plugins_md_python_example_runs(monkeypatch):
    (code,) = [c for c in blocks("plugins.md", "python") if "infermatrix.testing" in c]
    monkeypatch.setitem(sys.modules, "my_plugin", _my_plugin())
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/plugins.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()  # raises on a failed assert


def test_plugins_md_lists_exactly_the_public_api():
    import infermatrix.plugin as api

    text = (DOCS / "plugins.md").read_text()
    start = text.index("**Import only `infermatrix.plugin`.**")
    section = text[start : text.index("\n\n", text.index("* helpers:", start))]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section)) - {"__all__"}
    assert listed == set(api.__all__), f"only in docs: {sorted(listed - set(api.__all__))}; only in the API: {sorted(set(api.__all__) - listed)}"
    for phrase in ("`name` and `name_total`", "max_seqs` that is reported makes every cell with a\nlarger N over capacity"):
        assert phrase in text


@pytest.mark.slow
def test_plugins_md_recogniser_example_recognises():
    """The recogniser shown in plugins.md, run as written: yes for a server with toy: metrics, no for vLLM names."""
    import anyio

    import infermatrix.plugin as api

    (code,) = [c for c in blocks("plugins.md", "python") if "async def recognise" in c]
    namespace: dict[str, Any] = dict(vars(api))
    exec(compile(code, "docs/plugins.md", "exec"), namespace)
    toy = namespace["ToyEngine"]

    async def ask(url: str) -> Any:
        async with httpx.AsyncClient() as client:
            return await toy.recognise(api.ServerProbe(client, url, None))

    with sim_server(metric_prefix="toy:") as sim:
        yes = anyio.run(ask, sim.base_url)
    with sim_server() as sim:
        no = anyio.run(ask, sim.base_url)
    assert isinstance(yes, api.Recognition) and no is None
