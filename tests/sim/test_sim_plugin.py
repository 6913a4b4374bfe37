"""The ``sim`` engine kind: config, launch command, a real start and stop with no orphan, attach mode."""

import asyncio
import json
import sys

import httpx
import psutil
import pluggy
import pytest

from infermatrix.core import hookspecs
from infermatrix.core.config import ConfigError
from infermatrix.core.registry import engine_config_classes, validate_config
from infermatrix.core.registry import build_engine
from infermatrix.plugins.sim import plugin as sim_plugin
from infermatrix.plugins.sim.plugin import SimEngine, SimEngineConfig
from infermatrix.plugins.sim.profile import load_profile


def plugin_manager():
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(sim_plugin, name="sim")
    return pm


def test_config_registers_and_validates_profile():
    pm = plugin_manager()
    assert engine_config_classes(pm)["sim"] is SimEngineConfig
    cfg = validate_config(pm, {"engine": {"kind": "sim", "profile": {"base": "tiny", "spec_tokens": 2}}})
    assert cfg.engine.profile == {"base": "tiny", "spec_tokens": 2}
    with pytest.raises(ConfigError, match="unknown sim profile"):
        validate_config(pm, {"engine": {"kind": "sim", "profile": "nosuch"}})


def test_launch_hook_and_command(tmp_path):
    pm = plugin_manager()
    engine = build_engine(pm, SimEngineConfig(profile="tiny"), tmp_path)
    assert isinstance(engine, SimEngine) and engine.kind == "sim"
    argv = engine.command()
    assert argv[:3] == [sys.executable, "-m", "infermatrix.plugins.sim.server"]  # the server module: no CLI imports
    assert argv[3:] == ["--profile", str(tmp_path / "sim-profile.json"), "--host", "127.0.0.1", "--port", str(engine.port)]
    assert load_profile(str(tmp_path / "sim-profile.json")) == load_profile("tiny")
    assert engine.base_url == f"http://127.0.0.1:{engine.port}"
    renamed = SimEngine(SimEngineConfig(profile="tiny", model="qwen"), tmp_path)
    renamed.command()
    assert json.loads((tmp_path / "sim-profile.json").read_text())["model"] == "qwen"


def _descendants():
    return {p.pid for p in psutil.Process().children(recursive=True)}


class CliSimEngine(SimEngine):
    """The same server, started through the command line (`infermatrix sim serve`) rather than its module."""

    def command(self):
        argv = super().command()
        return [sys.executable, "-m", "infermatrix", "sim", "serve", *argv[3:]]


def _lifecycle(engine_cls, tmp_path):
    async def go():
        before = _descendants()
        engine = engine_cls(SimEngineConfig(profile="tiny"), tmp_path)
        await engine.start()
        pid = engine.child.pid
        try:
            async with httpx.AsyncClient() as client:
                await engine.wait_ready(client, 30)
                info = await engine.describe(client)
        finally:
            await engine.stop()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert _descendants() <= before
        return engine, info

    engine, info = asyncio.run(go())
    assert info.engine == "sim" and info.model == "sim-tiny" and info.max_model_len == 4096
    assert info.version.startswith("infermatrix-sim")
    assert info.hardware == {"type": "simulated", "profile": "tiny"}
    assert info.extra["profile"]["kv_tokens"] == 20000
    # Every launched engine: launch-to-ready seconds and launched, not attached (core LaunchedEngine).
    assert info.extra["attached"] is False and 0 <= info.extra["startup_s"] <= 30 and engine.startup_s == info.extra["startup_s"]
    assert "sim-profile.json" in engine.launch_command
    return engine


@pytest.mark.slow  # starts a process
def test_start_stop_no_orphan_via_server_module(tmp_path):
    _lifecycle(SimEngine, tmp_path)


@pytest.mark.slow  # starts a process
def test_start_stop_no_orphan_via_cli(tmp_path):
    pytest.importorskip("infermatrix.cli")
    engine = _lifecycle(CliSimEngine, tmp_path)
    assert "sim serve" in engine.log_path.read_text()


def test_attach_mode_describes_the_running_server(tiny, tmp_path):
    async def go():
        engine = SimEngine(SimEngineConfig(base_url=tiny.url + "/v1", profile="demo"), tmp_path)
        await engine.start()  # nothing to start
        assert engine.child is None and engine.launch_command is None
        async with httpx.AsyncClient() as client:
            await engine.wait_ready(client, 10)
            return await engine.describe(client)

    info = asyncio.run(go())
    assert info.extra["attached"] is True and info.extra["startup_s"] is None  # nothing launched: no start-up time
    # the config said demo, but the server runs tiny: describe reports the server's own profile
    assert info.hardware == {"type": "simulated", "profile": "tiny"} and info.model == "sim-tiny"


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_ends_open_streams_and_exits_cleanly(tmp_path, sig):
    import os
    import signal

    from simhelpers import Server

    server = Server.start("tiny", tmp_path / "server.log")
    try:
        body = {"prompt": "x", "max_tokens": 4000, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            os.kill(server.proc.pid, getattr(signal, sig))
            rest = list(lines)  # the response ends properly (no error), but without [DONE]
        assert "data: [DONE]" not in rest
        assert server.proc.wait(10) == 0
        assert "Traceback" not in (tmp_path / "server.log").read_text()
    finally:
        server.stop()
