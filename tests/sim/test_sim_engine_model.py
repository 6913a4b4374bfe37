"""The engine model, checked against its own ground truth: what the client got is what the server did."""

import threading

import httpx
from prometheus_client.parser import text_string_to_metric_families
from simhelpers import STREAM_USAGE, new_id, sse, wait_for

from infermatrix.plugins.sim.tokenizer import count_tokens


def metric(server, name):
    for fam in text_string_to_metric_families(server.get("/metrics").text):
        for s in fam.samples:
            if s.name == name:
                return s
    raise KeyError(name)


def metrics(server):
    return {s.name: s.value for fam in text_string_to_metric_families(server.get("/metrics").text) for s in fam.samples}


def run_streams(server, bodies):
    """Stream every (request_id, path, body) at once; returns request_id -> events."""
    out = {}

    def one(rid, path, body):
        out[rid] = sse(server, path, body, rid)

    threads = [threading.Thread(target=one, args=b) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_truth_matches_what_clients_received(sim_server):
    server = sim_server({"base": "tiny", "name": "truth", "spec_tokens": 2, "acceptance": 0.6})
    bodies = []
    for i in range(8):
        rid = f"truth-{i}"
        if i % 2:
            bodies.append((rid, "/v1/chat/completions", {"messages": [{"role": "user", "content": f"q{i}"}],
                                                          "max_tokens": 60 + i, "stream_options": STREAM_USAGE}))  # fmt: skip
        else:
            bodies.append((rid, "/v1/completions", {"prompt": f"p{i} " * 50, "max_tokens": 60 + i, "stream_options": STREAM_USAGE}))
    got = run_streams(server, bodies)
    truth = server.truth()
    recs = {r["request_id"]: r for r in truth["requests"]}
    emitted_at = {}
    for rid, events in got.items():
        rec = recs[rid]
        content = [(t, e) for t, e in events if e != "[DONE]" and e["choices"] and e["usage"]["completion_tokens"] > 0]
        cum = [e["usage"]["completion_tokens"] for _, e in content]
        deltas = [b - a for a, b in zip([0, *cum], cum)]
        assert [n for _, n in rec["emissions"]] == deltas
        assert rec["output_tokens"] == cum[-1] == events[-2][1]["usage"]["completion_tokens"]
        assert rec["prompt_tokens"] == events[-2][1]["usage"]["prompt_tokens"]
        assert rec["finish_reason"] == "length" and not rec["aborted"]
        for (t_emit, _), (t_recv, _) in zip(rec["emissions"], content):
            assert t_emit <= t_recv  # one monotonic clock: the server emitted before the client got it
        assert rec["first_token"] == rec["emissions"][0][0] >= rec["joined"] >= rec["prefill_end"] >= rec["prefill_start"] >= rec["admitted"]
        for t, n in rec["emissions"]:
            emitted_at[t] = emitted_at.get(t, 0) + n
    # every step's tokens are exactly the emissions stamped with its end
    steps = [s for s in truth["steps"] if s["t_start"] + s["duration_s"] in emitted_at]
    assert sum(s["tokens"] for s in steps) == sum(emitted_at.values())
    for s in steps:
        assert emitted_at[s["t_start"] + s["duration_s"]] == s["tokens"]
    # serial prefill: no two prefills overlap
    spans = sorted((r["prefill_start"], r["prefill_end"]) for r in recs.values() if r["request_id"].startswith("truth-"))
    assert all(a_end <= b_start + 1e-9 for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_metrics_parse_and_count(sim_server):
    server = sim_server({"base": "tiny", "name": "metrics"})
    families = {f.name: f for f in text_string_to_metric_families(server.get("/metrics").text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:generation_tokens", "vllm:prompt_tokens", "vllm:cache_config_info"):  # fmt: skip
        assert name in families
    info = families["vllm:cache_config_info"].samples[0]
    assert int(info.labels["num_gpu_blocks"]) * int(info.labels["block_size"]) == 20000
    assert all(s.labels.get("model_name") == "sim-tiny" for s in families["vllm:generation_tokens"].samples)
    gen0 = metric(server, "vllm:generation_tokens_total").value
    prompt0 = metric(server, "vllm:prompt_tokens_total").value
    server.post("/v1/completions", {"prompt": "count me please", "max_tokens": 33})
    assert metric(server, "vllm:generation_tokens_total").value - gen0 == 33
    assert metric(server, "vllm:prompt_tokens_total").value - prompt0 == count_tokens("count me please")
    assert sim_server({"base": "tiny", "metrics": False}).get("/metrics").status_code == 404


KV_PROFILE = {"base": "tiny", "name": "kv", "kv_tokens": 8192, "step_base_ms": 4.0, "step_per_seq_ms": 0.0}


def distinct_prompt(i, tokens=1700):
    text = f"stream{i} " + "hello world " * 2000
    words = text.split(" ")
    # grow word by word until the prompt is exactly `tokens` long
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(" ".join(words[:mid])) < tokens:
            lo = mid + 1
        else:
            hi = mid
    prompt = " ".join(words[:lo])
    assert count_tokens(prompt) in (tokens, tokens + 1)
    return prompt


def test_kv_budget_queues_requests(sim_server):
    server = sim_server(KV_PROFILE)
    tag = new_id()
    # each needs ~1400 + 600 tokens of KV: four fit in 8192, the other two wait
    bodies = [(f"{tag}-{i}", "/v1/completions", {"prompt": distinct_prompt(i, 1400), "max_tokens": 600, "ignore_eos": True})
              for i in range(6)]  # fmt: skip
    done = {}
    worker = threading.Thread(target=lambda: done.update(run_streams(server, bodies)))
    worker.start()
    try:
        def queued():
            m = metrics(server)  # one scrape, so the three gauges describe one moment
            return m["vllm:num_requests_waiting"] == 2 and m["vllm:num_requests_running"] == 4 and m["vllm:kv_cache_usage_perc"] > 0.5

        wait_for(queued, what="four running, two waiting")
    finally:
        worker.join(60)
    assert len(done) == 6
    recs = [r for r in server.truth()["requests"] if (r["request_id"] or "").startswith(tag)]
    # sweep admissions and finishes: never more KV promised than the budget, never more than 4 at once
    events = sorted([(r["admitted"], 1, r) for r in recs] + [(r["finished"], -1, r) for r in recs], key=lambda e: (e[0], e[1]))
    held = peak = 0
    for _, sign, r in events:
        held += sign * (r["prompt_tokens"] + r["max_tokens"])
        assert held <= 8192
        peak = max(peak, held)
    first_finish = min(r["finished"] for r in recs)
    late = [r for r in recs if r["admitted"] >= first_finish]
    assert len(late) == 2  # the two that waited were let in only as others finished
    assert metric(server, "vllm:num_requests_waiting").value == 0


def test_disconnect_aborts_and_frees_kv(sim_server):
    # slow steps: the four running streams (100 + 1900 tokens of KV each) would take many seconds
    server = sim_server({**KV_PROFILE, "name": "abort", "step_base_ms": 10.0})
    long = [f"abort-run-{new_id()}" for _ in range(4)]
    with httpx.Client(timeout=30) as client:
        streams = []
        for i, rid in enumerate(long):
            body = {"prompt": distinct_prompt(100 + i, 100), "max_tokens": 1900, "stream": True, "ignore_eos": True}
            streams.append(client.stream("POST", server.url + "/v1/completions", json=body, headers={"X-Request-Id": rid}))
        queued_id = f"abort-wait-{new_id()}"
        queued = client.stream("POST", server.url + "/v1/completions", headers={"X-Request-Id": queued_id},
                               json={"prompt": distinct_prompt(200, 100), "max_tokens": 1900, "stream": True})  # fmt: skip
        responses = [s.__enter__() for s in streams]
        lines = [r.iter_lines() for r in responses]  # kept: dropping a line iterator closes its response
        for it in lines:  # every running stream has produced output
            next(it)
        queued.__enter__()
        wait_for(lambda: metric(server, "vllm:num_requests_waiting").value == 1, what="the fifth request queued")
        queued.__exit__(None, None, None)  # leave while still queued
        wait_for(lambda: server.request_truth(queued_id)["aborted"], what="queued request aborted")
        assert server.request_truth(queued_id)["admitted"] is None
        assert metric(server, "vllm:num_requests_waiting").value == 0
        for s in streams:
            s.__exit__(None, None, None)
    wait_for(lambda: all(server.request_truth(rid)["aborted"] for rid in long), what="running requests aborted")
    for rid in long:
        rec = server.request_truth(rid)
        assert rec["finish_reason"] == "abort" and 0 < rec["output_tokens"] < 1900
    wait_for(lambda: metric(server, "vllm:num_requests_running").value == 0, what="nothing running")
    assert metric(server, "vllm:kv_cache_usage_perc").value == 0
    assert server.truth()["state"]["reserved_kv_tokens"] == 0


def test_non_streaming_client_leaving_aborts(sim_server):
    server = sim_server({**KV_PROFILE, "name": "abort-whole", "step_base_ms": 10.0})
    rid = new_id()
    with httpx.Client(timeout=httpx.Timeout(30, read=0.3)) as client:
        try:
            client.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 3000, "ignore_eos": True},
                        headers={"X-Request-Id": rid})  # fmt: skip
            raise AssertionError("3000 tokens at 10 ms steps cannot finish inside the read timeout")
        except httpx.ReadTimeout:
            pass  # the client gives up and closes the connection
    wait_for(lambda: server.request_truth(rid)["aborted"], what="abort after the client left")
    assert server.request_truth(rid)["output_tokens"] < 3000
    wait_for(lambda: metric(server, "vllm:num_requests_running").value == 0, what="nothing running")


def test_loop_marker_makes_periodic_output(tiny):
    text = tiny.post("/v1/completions", {"prompt": "please [[loop]] now", "max_tokens": 200}).json()["choices"][0]["text"]
    words = text.split()
    assert len(words) == 200
    after, period = 64, 16  # LoopProfile defaults, which tiny keeps
    assert all(words[i] == words[i + period] for i in range(after, 200 - period))
    assert not all(words[i] == words[i + period] for i in range(0, after - period))


def test_profile_loop_needs_context_and_running(sim_server):
    server = sim_server({"base": "tiny", "name": "loopy", "loop": {"min_context": 40, "min_running": 1, "after_tokens": 10, "period_tokens": 5}})
    long_id, short_id = new_id(), new_id()
    server.post("/v1/completions", {"prompt": "word " * 60, "max_tokens": 50}, headers={"X-Request-Id": long_id})
    server.post("/v1/completions", {"prompt": "short", "max_tokens": 50}, headers={"X-Request-Id": short_id})
    assert server.request_truth(long_id)["looped"] and server.request_truth(long_id)["loop_after"] == 10
    assert not server.request_truth(short_id)["looped"]
    busy = sim_server({"base": "tiny", "name": "loopy-busy", "loop": {"min_context": 40, "min_running": 3}})
    lone = new_id()
    busy.post("/v1/completions", {"prompt": "word " * 60, "max_tokens": 20}, headers={"X-Request-Id": lone})
    assert not busy.request_truth(lone)["looped"]  # alone, below min_running


def test_prefix_cache_skips_prefill_of_repeated_prompt(sim_server):
    server = sim_server({"base": "tiny", "name": "cache", "prefill_tps": 20000.0, "prefill_base_ms": 1.0})
    prompt = distinct_prompt(7, 3000)
    ids = [new_id() for _ in range(3)]
    body = {"prompt": prompt, "max_tokens": 1}
    server.post("/v1/completions", body, headers={"X-Request-Id": ids[0]})
    server.post("/v1/completions", body, headers={"X-Request-Id": ids[1]})
    cold, warm = server.request_truth(ids[0]), server.request_truth(ids[1])
    n = cold["prompt_tokens"]
    assert cold["cached_tokens"] == 0
    assert warm["cached_tokens"] == (n - 1) // 16 * 16  # all full blocks but the last token's
    cold_prefill = cold["prefill_end"] - cold["prefill_start"]
    warm_prefill = warm["prefill_end"] - warm["prefill_start"]
    assert cold_prefill >= n / 20000.0
    assert warm_prefill < cold_prefill / 5
    assert (warm["first_token"] - warm["arrived"]) < (cold["first_token"] - cold["arrived"])
    server.post("/debug/reset?cache=1")
    server.post("/v1/completions", body, headers={"X-Request-Id": ids[2]})
    assert server.request_truth(ids[2])["cached_tokens"] == 0
    assert server.request_truth(ids[2])["prefill_end"] - server.request_truth(ids[2])["prefill_start"] >= n / 20000.0


def test_truth_since_filter_and_reset(sim_server):
    server = sim_server({"base": "tiny", "name": "since"})
    server.post("/v1/completions", {"prompt": "before", "max_tokens": 5})
    mark = server.truth()["now"]
    rid = new_id()
    server.post("/v1/completions", {"prompt": "after", "max_tokens": 5}, headers={"X-Request-Id": rid})
    recent = server.truth(since=mark)
    assert [r["request_id"] for r in recent["requests"]] == [rid]
    assert all(s["t_start"] >= mark for s in recent["steps"]) and recent["steps"]
    server.post("/debug/reset")
    assert server.truth()["requests"] == [] and server.truth()["steps"] == []


def test_preemption_under_kv_pressure_is_counted_and_resumed(sim_server):
    """preempt_kv_usage: above it, the youngest running sequence is evicted (KV freed, back at the head of the
    queue) and later recomputed; every request still gets all its tokens, and the counter says how often."""
    server = sim_server({**KV_PROFILE, "name": "preempt", "preempt_kv_usage": 0.5})
    tag = new_id()
    # 3 × (1000 + 500) fits the 8,192-token reservation; 3 × 1000 prompt tokens is ~37 % of the KV, so the
    # output pushes it past 50 %
    bodies = [(f"{tag}-{i}", "/v1/completions", {"prompt": distinct_prompt(300 + i, 1000), "max_tokens": 500, "ignore_eos": True})
              for i in range(3)]  # fmt: skip
    got = run_streams(server, bodies)
    truth = server.truth()
    recs = {r["request_id"]: r for r in truth["requests"] if (r["request_id"] or "").startswith(tag)}
    assert truth["counters"]["preemptions"] > 0
    assert metric(server, "vllm:num_preemptions_total").value == truth["counters"]["preemptions"]
    for rid, r in recs.items():
        assert r["output_tokens"] == 500 and r["finish_reason"] == "length"
        assert got[rid][-1][1] == "[DONE]"
    state = truth["state"]
    assert state["reserved_kv_tokens"] == 0 and state["running"] == 0  # everything given back
