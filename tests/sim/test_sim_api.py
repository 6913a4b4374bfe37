"""The OpenAI-API surface of a real sim server process: endpoints, errors, stream shapes."""

from simhelpers import STREAM_USAGE, new_id, sse

from infermatrix import __version__
from infermatrix.plugins.sim.tokenizer import chat_tokens, count_tokens

PROMPT = "Tell me a story about a lighthouse keeper, 42 words long."


def test_health_version_models(tiny):
    assert tiny.get("/health").status_code == 200
    assert tiny.get("/version").json() == {"version": f"infermatrix-sim {__version__}"}
    models = tiny.get("/v1/models").json()
    assert models["object"] == "list"
    (entry,) = models["data"]
    assert entry["id"] == "sim-tiny" and entry["object"] == "model"
    assert entry["owned_by"] == "infermatrix-sim" and entry["max_model_len"] == 4096


def test_tokenize_matches_count_tokens_and_chat_template(tiny):
    r = tiny.post("/tokenize", {"model": "sim-tiny", "prompt": PROMPT}).json()
    assert r["count"] == count_tokens(PROMPT) == len(r["tokens"])
    assert r["max_model_len"] == 4096
    msgs = [{"role": "user", "content": PROMPT}]
    r = tiny.post("/tokenize", {"model": "sim-tiny", "messages": msgs}).json()
    assert r["count"] == len(chat_tokens(msgs))
    # the chat endpoint counts the prompt the same way
    usage = tiny.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 3}).json()["usage"]
    assert usage["prompt_tokens"] == r["count"]


def test_errors_look_like_vllm(tiny):
    r = tiny.post("/v1/completions", {"model": "gpt-4", "prompt": "hi", "max_tokens": 4})
    assert r.status_code == 404
    err = r.json()["error"]
    assert {"message", "type", "code"} <= set(err) and err["code"] == 404 and "gpt-4" in err["message"]
    r = tiny.post("/v1/completions", {"model": "sim-tiny", "prompt": "hi", "max_tokens": 4096})
    assert r.status_code == 400 and "maximum context length is 4096" in r.json()["error"]["message"]
    assert tiny.post("/v1/chat/completions", {"messages": []}).status_code == 400
    assert tiny.post("/tokenize", {"model": "nope", "prompt": "x"}).status_code == 404


def test_unknown_fields_are_ignored_and_non_streaming_has_usage(tiny):
    body = {"model": "sim-tiny", "prompt": PROMPT, "max_tokens": 17, "top_k": 5, "frobnicate": True, "temperature": 0.7}
    r = tiny.post("/v1/completions", body).json()
    assert r["object"] == "text_completion"
    choice = r["choices"][0]
    assert choice["finish_reason"] == "length" and count_tokens(choice["text"]) == 17
    assert r["usage"] == {"prompt_tokens": count_tokens(PROMPT), "completion_tokens": 17, "total_tokens": count_tokens(PROMPT) + 17}
    chat = tiny.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}).json()
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant" and count_tokens(chat["choices"][0]["message"]["content"]) == 5


def test_streaming_completion_shape_and_continuous_usage(tiny):
    events = sse(tiny, "/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "stream_options": STREAM_USAGE})
    assert events[-1][1] == "[DONE]"
    final = events[-2][1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 40
    chunks = [e for _, e in events[:-2]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    cum = [c["usage"]["completion_tokens"] for c in chunks]
    assert cum == sorted(cum) and cum[-1] == 40
    assert all(c["usage"]["prompt_tokens"] == count_tokens(PROMPT) for c in chunks)
    deltas = [b - a for a, b in zip([0, *cum], cum)]
    assert all(count_tokens(c["choices"][0]["text"]) == d for c, d in zip(chunks, deltas))


def test_usage_options(tiny):
    only_final = sse(tiny, "/v1/completions", {"prompt": "x", "max_tokens": 8, "stream_options": {"include_usage": True}})
    assert all("usage" not in e for _, e in only_final[:-2]) and only_final[-2][1]["usage"]["completion_tokens"] == 8
    none = sse(tiny, "/v1/completions", {"prompt": "x", "max_tokens": 8})
    assert none[-1][1] == "[DONE]" and all(e["choices"] and "usage" not in e for _, e in none[:-1])


def test_chat_stream_role_chunk_first(tiny):
    events = sse(tiny, "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12,
                                                "stream_options": STREAM_USAGE})  # fmt: skip
    first = events[0][1]
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["usage"]["completion_tokens"] == 0
    content = [e for _, e in events[1:] if e != "[DONE]" and e["choices"]]
    assert "".join(c["choices"][0]["delta"]["content"] for c in content).count(" ") == 12
    assert content[-1]["choices"][0]["finish_reason"] == "length"


def test_reasoning_then_content(sim_server):
    server = sim_server({"base": "tiny", "reasoning_tokens": 7, "spec_tokens": 3, "acceptance": 0.8})
    events = sse(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "think"}], "max_tokens": 30,
                                                  "stream_options": STREAM_USAGE})  # fmt: skip
    deltas = [e["choices"][0]["delta"] for _, e in events[1:] if e != "[DONE]" and e["choices"]]
    seen_content = False
    for d in deltas:  # all reasoning first; the step that crosses over carries both fields
        assert not (seen_content and "reasoning_content" in d)
        seen_content = seen_content or "content" in d
    assert any("reasoning_content" in d for d in deltas) and seen_content
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert count_tokens(reasoning) == 7 and count_tokens(content) == 23
    # completions never split out reasoning
    events = sse(server, "/v1/completions", {"prompt": "think", "max_tokens": 10})
    assert count_tokens("".join(e["choices"][0]["text"] for _, e in events[:-1])) == 10


def test_server_without_continuous_usage_or_usage(sim_server):
    no_cont = sim_server({"base": "tiny", "continuous_usage_stats": False})
    events = sse(no_cont, "/v1/completions", {"prompt": "x", "max_tokens": 8, "stream_options": STREAM_USAGE})
    assert all("usage" not in e for _, e in events[:-2]) and events[-2][1]["usage"]["completion_tokens"] == 8
    no_usage = sim_server({"base": "tiny", "usage": False})
    events = sse(no_usage, "/v1/completions", {"prompt": "x", "max_tokens": 8, "stream_options": STREAM_USAGE})
    assert all(e == "[DONE]" or ("usage" not in e and e["choices"]) for _, e in events)
    assert "usage" not in no_usage.post("/v1/completions", {"prompt": "x", "max_tokens": 3}).json()


def test_multi_token_chunks_with_speculation(sim_server):
    server = sim_server({"base": "tiny", "spec_tokens": 2, "acceptance": 0.7})
    rid = new_id()
    events = sse(server, "/v1/completions", {"prompt": "go", "max_tokens": 200, "stream_options": STREAM_USAGE}, rid)
    cum = [e["usage"]["completion_tokens"] for _, e in events[:-2]]
    deltas = [b - a for a, b in zip([0, *cum], cum)]
    assert deltas[0] == 1  # the first token comes from prefill alone
    assert max(deltas) == 3 and 2 in deltas and sum(deltas) == 200
    truth = server.request_truth(rid)
    assert [n for _, n in truth["emissions"]] == deltas


def test_seed_makes_text_reproducible(tiny):
    body = {"prompt": "same", "max_tokens": 30, "seed": 1234}
    a = tiny.post("/v1/completions", body).json()["choices"][0]["text"]
    b = tiny.post("/v1/completions", body).json()["choices"][0]["text"]
    c = tiny.post("/v1/completions", {**body, "seed": 99}).json()["choices"][0]["text"]
    assert a == b != c


def test_eos_stops_early_unless_ignored(sim_server):
    server = sim_server({"base": "tiny", "eos_probability": 0.2})
    stopped = server.post("/v1/completions", {"prompt": "x", "max_tokens": 200, "seed": 3}).json()
    assert stopped["choices"][0]["finish_reason"] == "stop" and stopped["usage"]["completion_tokens"] < 200
    events = sse(server, "/v1/completions", {"prompt": "x", "max_tokens": 200, "seed": 3, "ignore_eos": True,
                                             "stream_options": STREAM_USAGE})  # fmt: skip
    assert events[-3][1]["choices"][0]["finish_reason"] == "length" and events[-2][1]["usage"]["completion_tokens"] == 200
