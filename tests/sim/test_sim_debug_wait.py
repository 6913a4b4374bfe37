"""``GET /debug/wait`` (docs/sim.md): the sim answers once a request matching the id part is received and unfinished,
an event a test acts on mid-request; its answer is held against the sim's own record of that request."""

import threading

from simhelpers import new_id, sse


def test_wait_answers_while_the_request_is_unfinished_on_the_sims_own_record(tiny):
    rid = f"wait-{new_id()}"
    body = {"model": "sim-tiny", "prompt": "Count slowly.", "max_tokens": 64, "ignore_eos": True}
    streamer = threading.Thread(target=sse, args=(tiny, "/v1/completions", body, rid))
    streamer.start()
    found = tiny.wait_unfinished(rid, timeout=30)
    streamer.join(60)
    assert found is not None and found["request_id"] == rid
    record = tiny.request_truth(rid)
    assert record["received"] == found["received"] and record["finished"] is not None
    assert record["received"] <= found["t"] < record["finished"]  # answered between its receipt and its end
    # Finished now: a wait for it times out (408), as for an id never sent.
    assert tiny.wait_unfinished(rid, timeout=0.05) is None
    assert tiny.wait_unfinished(f"never-{new_id()}", timeout=0.05) is None


def test_wait_for_a_prefilling_request_answers_before_its_first_token(sim_server):
    slow = sim_server({"base": "tiny", "prefill_base_ms": 200.0})
    rid = f"prefilling-{new_id()}-r1"
    body = {"model": "sim-tiny", "prompt": "Count slowly.", "max_tokens": 4}
    streamer = threading.Thread(target=sse, args=(slow, "/v1/completions", body, rid))
    streamer.start()
    found = slow.wait_unfinished(r"^prefilling-.*-r1$", timeout=30, prefilling=True)  # a regular expression, searched
    streamer.join(60)
    assert found is not None and found["request_id"] == rid
    record = slow.request_truth(rid)
    assert record["received"] <= found["t"] < record["first_token"]  # answered inside its prefill


def test_wait_refuses_bad_input_in_one_line(tiny):
    r = tiny.get("/debug/wait")
    assert r.status_code == 400 and r.json()["error"]["param"] == "unfinished"
    r = tiny.get("/debug/wait", params={"unfinished": "r1("})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("not a regular expression")
    r = tiny.get("/debug/wait", params={"unfinished": "x", "timeout": "soon"})
    assert r.status_code == 400 and "timeout must be a number" in r.json()["error"]["message"]
