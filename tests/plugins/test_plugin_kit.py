"""The plugin author's kit (``infermatrix.testing``), a local tokenizer (``engine.tokenizer``) against a server
without ``/tokenize``, and the choice of workload (``matrix.workload``). Real sim processes, real DuckDB files."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import httpx
import pytest
from imxtest import ROOT, processes_mentioning

from infermatrix.core.config import ConfigError
from infermatrix.core.measure.stagger import first_max_tokens
from infermatrix.core.registry import validate_config
from infermatrix.core.workloads import make_workload
from infermatrix.plugin import hookimpl
from infermatrix.testing import plugin_manager, run_matrix, sim_server

tokenizers = pytest.importorskip("tokenizers")  # in the test extra: present wherever the suite runs


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny model's tokenizer.json, built here by the project's own script (its function, in this process)."""
    spec = importlib.util.spec_from_file_location("make_tiny_model", ROOT / "scripts" / "make_tiny_model.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path_factory.mktemp("tiny-model")
    script.build_tokenizer(out)
    assert (out / "tokenizer.json").is_file()
    return out


# -- the kit ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sim_server_plays_the_engine_asked_for_and_is_gone_after(tmp_path):
    names = {"running": "toy:running", "waiting": "toy:waiting"}
    with sim_server(metric_names=names, capacity_gauges={"kv_tokens": "toy:kv_cache_tokens", "max_seqs": "toy:max_seqs"},
                    max_num_seqs=3, tokenize=False, workdir=tmp_path) as sim:  # fmt: skip
        page = sim.metrics()
        assert httpx.post(f"{sim.base_url}/tokenize", json={"prompt": "hello"}).status_code == 404
        pid = sim.proc.pid
    samples = {ln.split("{")[0]: float(ln.rsplit(" ", 1)[1]) for ln in page.splitlines() if ln and not ln.startswith("#")}
    # The tiny profile's KV (20,000 tokens) and the max_num_seqs asked for, as plain gauges; toy's names served.
    assert samples["toy:kv_cache_tokens"] == 20_000 and samples["toy:max_seqs"] == 3
    assert "toy:running" in samples and "vllm:num_requests_running" not in samples
    assert sim.proc.poll() is not None and not processes_mentioning(str(tmp_path / "sim-profile.json")), f"sim {pid} left running"


@pytest.mark.slow
def test_run_matrix_stores_a_small_run():
    with sim_server() as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix={"concurrency": [1, 2]})
        truth = sim.truth()
    assert result.status == "completed", result.error
    cells = result.cells()
    why = [(c["concurrency"], c["status"], c["reason"], c["flags"].get("outcomes"), c["flags"].get("failed_phase")) for c in cells]
    assert [(c["context_tokens"], c["concurrency"], c["status"]) for c in cells] == [(1024, 1, "valid"), (1024, 2, "valid")], why
    assert result.run()["engine"] == "openai" and result.db.exists()
    assert any(r["max_tokens"] == 64 for r in truth["requests"])  # the kit's small matrix reached the server


def test_plugin_manager_is_fresh_and_has_yours():
    mine = types.ModuleType("mine")
    mine.make_workload = hookimpl(lambda config, tokenizer: None)
    a, b = plugin_manager(mine), plugin_manager()
    assert a.get_plugin("mine") is mine and b.get_plugin("mine") is None


# -- a local tokenizer, no /tokenize ----------------------------------------------------------------


def test_file_tokenizer_counts_as_the_tokenizer_json_does(tiny_model):
    import anyio

    from infermatrix.core.measure.tokenizer import FileTokenizer
    from infermatrix.plugins.sim import tokenizer as simtok

    text = "The quiet river turned toward the ancient village, 2031 windows and seven stones."
    tok = FileTokenizer(str(tiny_model))  # a directory: its tokenizer.json
    n = anyio.run(tok.count, text)
    assert n == len(tokenizers.Tokenizer.from_file(str(tiny_model / "tokenizer.json")).encode(text).ids)
    # The sim's own tokenizer counts differently: the end-to-end check below can tell which one sized a prompt.
    assert n != simtok.count_tokens(text)
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        FileTokenizer(str(tiny_model / "nope"))


def test_engine_tokenizer_is_checked_before_the_run(tiny_model):
    pm = plugin_manager()
    cfg = validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://h:1", "tokenizer": str(tiny_model)}}, "t")
    assert cfg.engine.tokenizer == str(tiny_model)
    with pytest.raises(ConfigError, match=r"engine\.tokenizer: no tokenizer.json at /nonexistent"):
        validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://h:1", "tokenizer": "/nonexistent"}}, "t")


@pytest.mark.slow
def test_local_tokenizer_sizes_prompts_without_tokenize(tiny_model):
    """The sim counts with the tiny model's tokenizer.json and has no /tokenize; the run is given the same
    tokenizer.json. Every prompt the server received is the size asked for, within max(16, 0.5 %)."""
    contexts = [512, 3000]
    with sim_server(tokenize=False, tokenizer_file=str(tiny_model)) as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url, "tokenizer": str(tiny_model)},
                            matrix={"contexts": contexts, "prefill_contexts": [2048], "concurrency": [1, 2], "max_output": 32})  # fmt: skip
        truth = sim.truth()
    assert result.status == "completed", result.error
    assert result.run()["tokenizer"].startswith("local ") and result.run()["tokenizer"].endswith("tokenizer.json")
    decode = [r for r in truth["requests"] if r["max_tokens"] == 32]
    assert len(decode) >= 4
    sizes = sorted({r["prompt_tokens"] for r in decode})
    for size in sizes:
        target = min(contexts, key=lambda c: abs(c - size))
        assert abs(size - target) <= max(16, 0.005 * target), (size, target, sizes)
    assert {min(contexts, key=lambda c: abs(c - s)) for s in sizes} == set(contexts)  # both rows were sent
    # The prefill probes (their X-Request-Id says so) as the server received them, whatever the point's status: beside a CPU burner
    # every probe of the 2K point was once held by the client's loop and the point stored client_bound, its sizes right.
    probes = [r["prompt_tokens"] for r in truth["requests"] if f"{result.run_id}-prefill-" in (r["request_id"] or "")]
    assert probes and all(abs(n - 2048) <= 16 for n in probes), probes
    assert [abs(p["prompt_tokens"] - 2048) <= 16 for p in result.prefill()] == [True]  # and stored as sent
    # No usage calibration either: besides warm-ups and probes (max_tokens 1) the server saw only decode requests:
    # max_output, or a stream's staggered (shortened) first request (docs/metrics.md, "Staggered phases").
    decode_lengths = {first_max_tokens(i, n, 32) for n in (1, 2) for i in range(n)}
    assert decode_lengths == {24, 32}  # stagger is on by default: the 2-stream cells' first requests differ
    assert {r["max_tokens"] for r in truth["requests"]} <= {1} | decode_lengths


# -- matrix.workload ----------------------------------------------------------------------------------


def _second_workload(calls: list[str]) -> types.ModuleType:
    from infermatrix.plugin import PromptBuilder

    mod = types.ModuleType("keyed")

    class Counting(PromptBuilder):
        async def prompt(self, context_tokens, key, *, distinct=None):
            calls.append(key)
            return await super().prompt(context_tokens, key, distinct=distinct)

    mod.make_workload = hookimpl(lambda config, tokenizer: Counting(config.seed, config.prompt_mode, tokenizer))
    return mod


def test_two_workloads_without_a_choice_is_one_line_naming_both():
    pm = plugin_manager(_second_workload([]))
    with pytest.raises(ConfigError) as err:
        validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://h:1"}}, "t.toml")
    msg = str(err.value)
    assert "\n" not in msg and "'workload'" in msg and "'keyed'" in msg and "matrix.workload" in msg
    with pytest.raises(ConfigError, match="no workload plugin 'nope'"):
        validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://h:1"}, "matrix": {"workload": "nope"}}, "t")


def test_the_chosen_workload_builds_the_prompts():
    calls: list[str] = []
    pm = plugin_manager(_second_workload(calls))
    for name, expect in (("keyed", "Counting"), ("workload", "PromptBuilder")):
        cfg = validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://h:1"}, "matrix": {"workload": name}}, "t")
        assert type(make_workload(pm, cfg.matrix, tokenizer=None)).__name__ == expect
    only = validate_config(plugin_manager(), {"engine": {"kind": "openai", "base_url": "http://h:1"}}, "t")
    assert type(make_workload(plugin_manager(), only.matrix, tokenizer=None)).__name__ == "PromptBuilder"  # default: the built-in


@pytest.mark.slow
def test_a_run_uses_the_chosen_workload():
    calls: list[str] = []
    with sim_server() as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, plugins=[_second_workload(calls)], matrix={"workload": "keyed"})
    assert result.status == "completed", result.error
    assert any("decode" in k for k in calls)  # the run's prompts came from the chosen plugin


# -- a third party's session workload, built from infermatrix.plugin alone (issue 28 item 6) ------------------


def _session_workload(*, without: str | None = None) -> types.ModuleType:
    """An opt-in workload ``echo``: 3 sessions of 2 requests each, 2 sessions at a time; ``without`` leaves a
    SessionWorkload member out of the class."""
    from infermatrix.plugin import PromptBuilder, WorkloadRequest

    class Turns:
        def __init__(self, index: int, texts: list[str]) -> None:
            self.index, self.texts = index, texts

        async def next(self, reply, prompt_tokens):
            if not self.texts:
                return None
            turn = 2 - len(self.texts)
            return WorkloadRequest(max_tokens=8, prompt=self.texts.pop(0), labels={"conversation": self.index, "turn": turn})

    members = {
        "name": "echo",
        "concurrency": 2,
        "block_tokens": None,
        "sessions": lambda self: _sessions(self),
        "describe": lambda self: {"sessions": 3, "seed": self.seed},
    }

    async def _sessions(builder):
        return [Turns(i, [(await builder.prompt(64, f"echo/{i}/{t}", distinct=True)).text for t in range(2)]) for i in range(3)]

    if without:
        del members[without]
    echo_cls = type("Echo", (PromptBuilder,), members)
    mod = types.ModuleType("echo")
    mod.WORKLOAD_OPT_IN = True
    mod.make_workload = hookimpl(lambda config, tokenizer: echo_cls(config.seed, config.prompt_mode, tokenizer))
    return mod


def test_the_built_in_session_workloads_are_session_workloads():
    from infermatrix.plugin import MatrixConfig, PromptBuilder, SessionWorkload, Workload

    pm = plugin_manager()
    for name in ("shared-prefix", "multi-turn"):
        built = make_workload(pm, MatrixConfig(workload=name, api="chat"), tokenizer=None)
        assert isinstance(built, SessionWorkload) and isinstance(built, Workload), name
    assert isinstance(PromptBuilder(0, "distinct", None), Workload) and not isinstance(PromptBuilder(0, "distinct", None), SessionWorkload)
    assert isinstance(make_workload(plugin_manager(_session_workload()), MatrixConfig(workload="echo"), tokenizer=None), SessionWorkload)


@pytest.mark.parametrize("member", ["name", "concurrency", "block_tokens", "describe"])
def test_a_session_workload_missing_a_member_is_one_line(member):
    """Before, a missing member was read with a default (getattr); now the contract is declared and said."""
    from infermatrix.plugin import MatrixConfig

    with pytest.raises(ConfigError) as err:
        make_workload(plugin_manager(_session_workload(without=member)), MatrixConfig(workload="echo"), tokenizer=None)
    msg = str(err.value)
    assert "\n" not in msg and f"has sessions() but not {member}" in msg and "'echo'" in msg


@pytest.mark.slow
def test_a_third_party_session_workload_runs_its_pass():
    with sim_server() as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, plugins=[_session_workload()], matrix={"contexts": [], "workload": "echo"})
        sent = [r for r in sim.truth()["requests"] if "-wl-" in (r.get("request_id") or "")]
    assert result.status == "completed", result.error
    (row,) = result.query("SELECT workload, params, sessions, concurrency, requests, failed, status FROM workload_passes")
    assert (row["workload"], row["sessions"], row["concurrency"], row["requests"], row["failed"], row["status"]) == ("echo", 3, 2, 6, 0, "valid")
    assert json.loads(row["params"]) == {"sessions": 3, "seed": 0}
    assert len(sent) == 6  # the server received every request of the pass
