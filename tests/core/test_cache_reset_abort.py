"""The core empties the prefix cache before every prefill probe and aborts what is left at a decode cell's end,
where the engine declares how (``EngineTraits.prefix_cache_reset`` / ``abort``): checked on the sim's own record."""

from __future__ import annotations

import types

import httpx
import pytest

from infermatrix.plugin import hookimpl
from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow

MATRIX = {"prefill_contexts": [512], "prefill_samples": 2, "contexts": [512], "concurrency": [2], "max_output": 32, "workload": "same_prompt"}


def _same_prompt_workload() -> types.ModuleType:
    """Every prompt of a length is the same text, probes included: a repeated prompt, as a careless workload sends."""
    from infermatrix.plugin import PromptBuilder

    class Same(PromptBuilder):
        async def prompt(self, context_tokens, key, *, distinct=None):
            return await super().prompt(context_tokens, "same", distinct=False)

    mod = types.ModuleType("same_prompt")
    mod.make_workload = hookimpl(lambda config, tokenizer: Same(config.seed, "shared", tokenizer))
    return mod


def _probes(truth: dict) -> list[dict]:
    return [r for r in truth["requests"] if r["max_tokens"] == 1 and r["prompt_tokens"] >= 500]


def test_probes_are_cold_and_cells_end_with_an_abort_where_declared():
    with sim_server() as sim:
        result = run_matrix({"kind": "sim", "base_url": sim.base_url}, plugins=[_same_prompt_workload()], matrix=MATRIX)
        truth = sim.truth()
    assert result.status == "completed", result.error
    # Every probe the run stored (the throwaway, the samples, and any a held client loop made it replace) was sent
    # after one reset, and the sim saw each one cold; the probes come before any decode warm-up.
    (sent,) = result.query("SELECT count(*) AS n FROM prefill_samples")
    assert sent["n"] >= 3
    probes = _probes(truth)[: sent["n"]]
    assert len(probes) == sent["n"] and all(r["cached_tokens"] == 0 for r in probes), [r["cached_tokens"] for r in probes]
    assert truth["counters"]["cache_resets"] == sent["n"]  # one before each probe request
    (cell,) = result.cells()
    assert cell["flags"]["abort"] == "ok" and truth["counters"]["abort_calls"] == 1


def test_without_a_declared_reset_a_repeated_probe_prompt_hits_the_cache():
    """The control: the same server and workload through the generic engine, which declares neither."""
    with sim_server() as sim:
        result = run_matrix({"kind": "openai", "base_url": sim.base_url}, plugins=[_same_prompt_workload()], matrix=MATRIX)
        truth = sim.truth()
    assert result.status == "completed", result.error
    probes = _probes(truth)[:3]
    assert probes[0]["cached_tokens"] == 0 and all(r["cached_tokens"] > 0 for r in probes[1:])
    assert truth["counters"]["cache_resets"] == 0 and truth["counters"]["abort_calls"] == 0
    assert "abort" not in result.cells()[0]["flags"]


def test_sim_endpoints():
    with sim_server() as sim:
        assert httpx.post(f"{sim.base_url}/reset_prefix_cache").json() == {"ok": True}
        assert httpx.post(f"{sim.base_url}/abort_request", json={"abort_all": True}).json() == {"ok": True, "aborted": 0}
        assert httpx.post(f"{sim.base_url}/abort_request", json={"rid": "x"}).status_code == 400
        counters = sim.truth()["counters"]
    assert counters["cache_resets"] == 1 and counters["abort_calls"] == 1


def test_sim_abort_all_ends_a_running_stream():
    """Server-side truth: a stream still generating is aborted by the call, and its stream ends."""
    import threading

    with sim_server(step_base_ms=20.0) as sim:
        got: list[str] = []

        def stream() -> None:
            body = {"prompt": "hello there", "max_tokens": 4000, "stream": True, "ignore_eos": True}
            try:
                with httpx.stream("POST", f"{sim.base_url}/v1/completions", json=body, timeout=60) as r:
                    for line in r.iter_lines():
                        got.append(line)
            except httpx.RemoteProtocolError:  # a stream cut mid-chunk also counts as ended
                got.append("closed")

        t = threading.Thread(target=stream)
        t.start()
        while not any(line.startswith("data: {") for line in got):  # the request is running (its first chunk came)
            t.join(0.05)
        answer = httpx.post(f"{sim.base_url}/abort_request", json={"abort_all": True}).json()
        t.join(30)  # an upper bound, not a wait: the stream ends as the abort is answered
        ended = not t.is_alive()  # asked while the sim still runs: its own shutdown would end the stream too
        (rec,) = sim.truth()["requests"]
    assert answer["aborted"] == 1 and ended and "data: [DONE]" not in got  # ended, not finished
    assert rec["finish_reason"] == "abort" and rec["output_tokens"] < 4000
