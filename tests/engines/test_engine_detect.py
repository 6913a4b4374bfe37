"""``engine.kind = "auto"``: each engine recognises its own server, asked over real HTTP on loopback
against the recorded SGLang, TensorRT-LLM and LMDeploy answers (fixtures/), a plain OpenAI server, one
that never answers, and servers that look like two engines at once (the documented order decides).
The engine the runner then builds from the detected kind reads its capacity from the same server."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Literal

import anyio
import httpx
import pytest
from enginehelp import run_with_client
from fixture_server import FixtureServer, load_fixture

from infermatrix.core.config import ConfigError
from infermatrix.core.registry import validate_config
from infermatrix.core.engine.detect import FALLBACK_KIND, Detection, ServerProbe, _recognisers, detect_engine, resolve_auto
from infermatrix.core.plugins import PluginError, get_plugin_manager
from infermatrix.core.registry import build_engine
from infermatrix.plugin import AttachEngine, EngineConfig, Recognition, hookimpl
from infermatrix.plugins.lmdeploy.info import engine_info

SERVER = pytest.mark.slow  # starts a loopback HTTP server

PLAIN = {"source": "made up: a server with the OpenAI API and nothing else", "routes": {
    "GET /health": {"text": ""},
    "GET /v1/models": {"json": {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "someone"}]}},
}}  # fmt: skip


def _detect(url: str, pm=None):
    pm = pm or get_plugin_manager(load_entrypoints=False)
    return run_with_client(lambda client: detect_engine(pm, client, url))


def _attach(tmp_path, url: str, pm=None):
    """What the runner does with ``kind = "auto"``: detect, replace the config, build the engine."""
    pm = pm or get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, {"engine": {"kind": "auto", "base_url": url}}, "test")

    async def go(client: httpx.AsyncClient) -> tuple[Any, Any, Any]:
        found = await detect_engine(pm, client, url)
        resolve_auto(pm, cfg, found)
        engine = build_engine(pm, cfg.engine, tmp_path)
        assert engine is not None
        await engine.describe(client)
        return found, engine, await engine.read_capacity(client)

    return run_with_client(go)


@SERVER
def test_sglang_recognised_by_its_server_info_and_read(tmp_path):
    fx = load_fixture("sglang_dp1_get_server_info.json")["routes"]["GET /get_server_info"]["json"]
    with FixtureServer("sglang_dp1_get_server_info.json") as srv:
        found, engine, cap = _attach(tmp_path, srv.base_url)
    assert (found.kind, found.evidence) == ("sglang", "/get_server_info")
    assert engine.kind == "sglang" and engine.attach
    assert cap is not None and cap.kv_tokens == fx["max_total_num_tokens"]  # the server's own number, read through the detected engine


@SERVER
def test_sglang_newer_path_recognised(tmp_path):
    with FixtureServer("sglang_dp2_server_info.json") as srv:
        found = _detect(srv.base_url)
    assert (found.kind, found.evidence) == ("sglang", "/server_info")


@SERVER
def test_trtllm_recognised_without_touching_its_consumable_metrics(tmp_path):
    fx = load_fixture("trtllm_iteration_stats.json")["routes"]["GET /metrics"]["json"][-1]["kvCacheStats"]
    with FixtureServer("trtllm_iteration_stats.json") as srv:
        found = _detect(srv.base_url)
        detected_gets = [p for m, p, _ in srv.requests]
        _, engine, cap = _attach(tmp_path, srv.base_url)
    assert (found.kind, found.evidence) == ("trtllm", "/v1/models owned_by tensorrt_llm + trtllm_ metrics")
    # trtllm-serve hands out its iteration stats once: recognising it must not read /metrics, or the
    # capacity read after it would find them gone.
    assert "/metrics" not in detected_gets and set(detected_gets) == set(found.asked)
    assert engine.kind == "trtllm"
    assert cap is not None and cap.kv_tokens == fx["maxNumBlocks"] * fx["tokensPerBlock"]


@SERVER
def test_lmdeploy_recognised_by_engine_info_and_read(tmp_path):
    fx = engine_info(load_fixture("lmdeploy_engine_info.json")["routes"]["GET /distserve/engine_info"]["json"])
    with FixtureServer("lmdeploy_engine_info.json") as srv:
        found, engine, cap = _attach(tmp_path, srv.base_url)
    assert (found.kind, found.evidence) == ("lmdeploy", "/distserve/engine_info")
    assert cap is not None and cap.kv_tokens == fx["num_gpu_blocks"] * fx["block_size"]


@SERVER
def test_plain_openai_server_is_nobody_and_probed_with_gets_only(tmp_path):
    with FixtureServer(PLAIN) as srv:
        found, engine, cap = _attach(tmp_path, srv.base_url)
        methods = {m for m, _, _ in srv.requests}
    assert found.kind == FALLBACK_KIND and not found.recognised and found.evidence is None
    assert "no known engine recognised at " + srv.base_url in found.note() and "plain OpenAI" in found.note()
    assert engine.kind == "openai" and engine.traits.metrics is None and cap is None
    assert methods == {"GET"}  # recognising a server changes nothing on it
    assert len(found.asked) == len(set(found.asked))  # each path asked once, shared between recognisers


@SERVER
def test_order_decides_between_look_alikes():
    # Answers both llama.cpp's /props and vLLM's metric names: llama.cpp (50) is asked before vLLM (60).
    both = {"source": "made up: /props of llama-server plus a vllm: gauge", "routes": {
        "GET /props": {"json": {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4, "build_info": "b1"}},
        "GET /metrics": {"text": "vllm:num_requests_running 0.0\n"},
        "GET /version": {"json": {"version": "0.1"}},
    }}  # fmt: skip
    with FixtureServer(both) as srv:
        found = _detect(srv.base_url)
    assert (found.kind, found.evidence) == ("llamacpp", "/props")
    only_vllm = {"source": "made up: vLLM metric names without /version", "routes": {"GET /metrics": {"text": "# HELP x\nvllm:num_requests_running 0.0\n"}}}
    with FixtureServer(only_vllm) as srv:
        found = _detect(srv.base_url)
    assert (found.kind, found.evidence) == ("vllm", "vllm: metrics")


class ToyConfig(EngineConfig):
    kind: Literal["toy"] = "toy"


class ToyEngine(AttachEngine):
    recognise_order = 55  # before vLLM: a vLLM fork that serves vllm: names too

    @classmethod
    async def recognise(cls, probe):
        return Recognition("/toy") if await probe.json("/toy") is not None else None


class ToyPlugin:
    @hookimpl
    def register_engines(self, register):
        register(ToyConfig, ToyEngine)


@SERVER
def test_third_party_recogniser_takes_its_place_in_the_order():
    fork = {"source": "made up: a vLLM fork with an endpoint of its own", "routes": {
        "GET /toy": {"json": {}}, "GET /metrics": {"text": "vllm:num_requests_running 0.0\n"},
    }}  # fmt: skip
    pm = get_plugin_manager(load_entrypoints=False, extra=[ToyPlugin()])
    with FixtureServer(fork) as srv:
        assert _detect(srv.base_url, pm).kind == "toy"
        assert _detect(srv.base_url).kind == "vllm"  # without the plugin


class BrokenEngine(AttachEngine):
    @classmethod
    async def recognise(cls, probe):
        raise KeyError("oops")


class BrokenPlugin:
    @hookimpl
    def register_engines(self, register):
        register(ToyConfig, BrokenEngine)


@SERVER
def test_a_failing_recogniser_is_one_line_naming_it():
    pm = get_plugin_manager(load_entrypoints=False, extra=[BrokenPlugin()])
    with FixtureServer(PLAIN) as srv:
        with pytest.raises(ConfigError, match="the toy engine's recogniser failed .KeyError"):
            _detect(srv.base_url, pm)


@SERVER
def test_a_server_that_never_answers_is_bounded():
    """Accepts connections and says nothing: every GET times out, and the probe's deadline ends it."""
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(64)
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            lsock.settimeout(0.1)
            while not stop.is_set():
                try:
                    held.append(lsock.accept()[0])
                except OSError:
                    continue

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        pm = get_plugin_manager(load_entrypoints=False)
        url = f"http://127.0.0.1:{lsock.getsockname()[1]}"

        async def go(client):
            probe = ServerProbe(client, url, get_timeout_s=0.2, deadline_s=0.7)
            t0 = time.monotonic()
            for _, _, cls in _recognisers(pm):
                assert await cls.recognise(probe) is None
            return time.monotonic() - t0, probe

        took, probe = run_with_client(go)
        stop.set()
        t.join(2)
        for s in held:
            s.close()
    # Each GET ended at its own timeout until the deadline; after it no path is asked at all.
    assert took < 0.7 + 0.2 + 0.5, took
    assert all(a is None for a in probe.answers.values())


def test_auto_is_a_config_kind_that_needs_a_url():
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, {"engine": {"kind": "auto", "base_url": "http://127.0.0.1:1"}}, "t")
    assert cfg.engine.kind == "auto"
    with pytest.raises(ConfigError, match="engine.base_url"):
        validate_config(pm, {"engine": {"kind": "auto"}}, "t")


def test_auto_is_reserved():
    class AutoConfig(EngineConfig):
        kind: Literal["auto"] = "auto"

    class Squatter:
        @hookimpl
        def register_engines(self, register):
            register(AutoConfig, ToyEngine)

    with pytest.raises(PluginError, match="'auto' is reserved"):
        get_plugin_manager(load_entrypoints=False, extra=[Squatter()])


def test_resolve_keeps_the_common_fields():
    pm = get_plugin_manager(load_entrypoints=False)
    cfg = validate_config(pm, {"engine": {"kind": "auto", "base_url": "http://h:1/v1", "model": "m", "kv_tokens": 4096}}, "t")
    resolve_auto(pm, cfg, Detection("vllm", "vllm: metrics", "http://h:1", 1.0, ["/metrics"]))
    assert (cfg.engine.kind, cfg.engine.base_url, cfg.engine.model, cfg.engine.kv_tokens) == ("vllm", "http://h:1/v1", "m", 4096)


def test_probe_is_anyio_friendly():
    # The probe never raises on a refused connection: a path that did not answer is None.
    async def go():
        async with httpx.AsyncClient() as client:
            probe = ServerProbe(client, "http://127.0.0.1:9")
            return await probe.get("/x"), await probe.json("/x"), await probe.has_metrics("vllm:")

    assert anyio.run(go) == (None, None, False)
