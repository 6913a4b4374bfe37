"""``infermatrix run --base-url URL`` with no ``--engine``: the real command line recognises the engine
behind the URL, names it in the run header, the stored run and the report, and reads what that engine
offers — against a real sim server (vLLM's metric names, then names of its own), and against a plain
OpenAI server (the sim behind a proxy that passes the OpenAI API and nothing else), where it says it
found none and goes on as ``openai``."""

from __future__ import annotations

import json
import socket
import threading
import time

import anyio
import duckdb
import httpx
import pytest
import uvicorn
from imxtest import run_cli
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from infermatrix.core.engine.detect import ServerProbe
from infermatrix.plugins.vllm.plugin import VllmEngine

pytestmark = pytest.mark.slow  # starts sim servers and the CLI

MEASURED = {"valid", "client_bound"}
CELL = ("--contexts", "1K", "--concurrency", "2", "--duration", "2", "--max-output", "64")


def _run_row(db) -> dict:
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute("SELECT * FROM runs")
        row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
        row["cells"] = con.execute("SELECT status FROM cells").fetchall()
    for key in ("engine_extra", "engine_metrics", "config"):
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    return row


def _vllm_says(url: str):
    async def go():
        async with httpx.AsyncClient() as client:
            return await VllmEngine.recognise(ServerProbe(client, url))

    return anyio.run(go)


def test_sim_under_vllm_names_is_recognised_and_read(sim_factory, tmp_path):
    sim = sim_factory("tiny")
    profile = httpx.get(f"{sim.base_url}/debug/profile", timeout=10).json()
    assert profile["metric_prefix"] == "vllm:" and profile["metrics"]
    db = tmp_path / "r.duckdb"
    proc = run_cli("run", "--base-url", sim.base_url + "/v1", *CELL, "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "detected: sim (by /debug/profile: profile tiny, metrics named vllm:)" in proc.stderr
    assert "Detected" in proc.stdout and "sim (by /debug/profile" in proc.stdout  # the report's Engine section
    run = _run_row(db)
    assert run["engine"] == "sim" and run["config"]["engine"]["kind"] == "sim"  # resume uses the kind found
    assert run["engine_extra"]["detected"].startswith("sim (by /debug/profile")
    detection = run["engine_extra"]["detection"]
    assert detection["recognised"] and detection["asked"] == ["/debug/profile"] and detection["ms"] > 0
    assert run["kv_tokens"] == profile["kv_tokens"]  # capacity read from the server's cache-config metric
    assert run["engine_metrics"]["found"] is True
    assert run["cells"] and all(s in MEASURED for (s,) in run["cells"]), run["cells"]
    # The sim is a faithful imitation: vLLM's own recogniser says yes to it too (the sim's is asked first).
    said = _vllm_says(sim.base_url)
    assert said is not None and said.evidence == "/version + vllm: metrics"
    # Resumed (one more cell), the stored config's kind is used as it is, and what was found stays on record.
    proc = run_cli("resume", run["run_id"], "--db", str(db), "--set", "matrix.concurrency=[2, 1]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "detected:" not in proc.stderr  # nothing probed again
    again = _run_row(db)
    assert len(again["cells"]) == 2 and again["engine_extra"]["detection"] == detection


def test_sim_with_names_of_its_own_is_followed(sim_factory, tmp_path):
    (tmp_path / "toy.toml").write_text('base = "tiny"\nmetric_prefix = "toy:"\n')
    sim = sim_factory(str(tmp_path / "toy.toml"))
    db = tmp_path / "r.duckdb"
    proc = run_cli("run", "--base-url", sim.base_url, *CELL, "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "detected: sim (by /debug/profile: profile " in proc.stderr and "metrics named toy:)" in proc.stderr, proc.stderr
    run = _run_row(db)
    assert run["engine_metrics"]["found"] is True and run["engine_metrics"]["metrics"]["running"].startswith("toy:")
    assert run["kv_tokens"] == httpx.get(f"{sim.base_url}/debug/profile", timeout=10).json()["kv_tokens"]
    assert _vllm_says(sim.base_url) is None  # no vllm: names: not vLLM


class PlainOpenAI:
    """A proxy in front of a server that passes only the OpenAI API (health, models, completions, chat)."""

    PATHS = ("/health", "/v1/models", "/v1/completions", "/v1/chat/completions")

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.asked: list[str] = []
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            self.thread.join(0.02)
            assert self.thread.is_alive() and time.monotonic() < deadline, "proxy did not start"

    async def _forward(self, request: Request) -> Response:
        path = request.url.path
        self.asked.append(path)
        if path not in self.PATHS:
            return PlainTextResponse("Not Found", status_code=404)
        client = httpx.AsyncClient(timeout=httpx.Timeout(60, read=120))
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        upstream = await client.send(client.build_request(request.method, self.upstream + path, content=await request.body(), headers=headers), stream=True)

        async def body():
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()
                await client.aclose()

        return StreamingResponse(body(), status_code=upstream.status_code, media_type=upstream.headers.get("content-type"))

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def test_plain_openai_server_is_nobody_and_the_run_goes_on(sim_factory, tmp_path):
    sim = sim_factory("tiny")
    proxy = PlainOpenAI(sim.base_url)
    try:
        db = tmp_path / "r.duckdb"
        proc = run_cli("run", "--base-url", proxy.base_url, *CELL, "--db", str(db))
    finally:
        proxy.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = f"no known engine recognised at {proxy.base_url}; using plain OpenAI (no capacity, no engine metrics)"
    assert said in " ".join(proc.stderr.split()), proc.stderr
    run = _run_row(db)
    assert run["engine"] == "openai" and run["kv_tokens"] is None
    assert run["engine_extra"]["detection"]["recognised"] is False
    assert run["engine_metrics"]["found"] is False
    assert run["cells"] and all(s in MEASURED for (s,) in run["cells"]), run["cells"]
    # The sim's own record: the run's requests reached it through the proxy.
    assert any(r["max_tokens"] == 64 for r in sim.truth()["requests"])
    assert "/debug/profile" in proxy.asked and "/metrics" in proxy.asked  # asked, answered 404


def test_explicit_openai_asks_nothing_of_the_engine(sim_factory, tmp_path):
    sim = sim_factory("tiny")
    db = tmp_path / "r.duckdb"
    proc = run_cli("run", "--engine", "openai", "--base-url", sim.base_url, *CELL, "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "detected" not in proc.stderr.lower() and "no known engine" not in proc.stderr
    run = _run_row(db)
    assert run["engine"] == "openai" and "detection" not in (run["engine_extra"] or {})
