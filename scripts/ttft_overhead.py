#!/usr/bin/env python3
"""Where a cold TTFT's client overhead goes: probes timed three ways against the sim's own receipt-to-first-token.

    .venv/bin/python scripts/ttft_overhead.py [--contexts 1K,4K,16K] [--probes 5]

It starts a sim server (prefill at 20,000 tok/s), and for each context sends cold probes (never-seen
prompts, max_tokens = 1) timed as:

* ``naive``  — the clock starts before the body is encoded, on a fresh connection (a new client each
  probe): encoding, connecting and the write are inside TTFT (how infermatrix timed probes before);
* ``warm``   — the body encoded beforehand, a keep-alive connection an empty request just used; the clock
  starts when the request is handed to the HTTP client;
* ``written`` — as ``warm``, with the clock started when the request's last byte is written (what
  infermatrix does now: docs/metrics.md).

and prints, per context, each way's median excess over the server's own (first token − request
received), in ms and as a ratio, plus the empty-request round trip (``client_overhead_ms``). What is
left in ``written`` is loopback delivery of the first token and both event loops.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time

import anyio
import httpx
import orjson

from infermatrix.core.contexts import format_context, parse_context
from infermatrix.core.stream.client import stream_request
from infermatrix.core.types import RequestRecord
from infermatrix.plugins.sim.tokenizer import split

# The server's clock starts when it has read the whole request (`received`), as tests/fidelity judges prefill
# TTFT (the handler's start, `arrived`, counts a client stalled between headers and body as server time).
SINCE = "received"


def start_sim(port: int) -> subprocess.Popen[bytes]:
    profile = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ttft-overhead-{port}.toml")
    with open(profile, "w") as fh:
        fh.write('base = "tiny"\nmax_model_len = 20480\nkv_tokens = 65536\nprefill_tps = 20000.0\nprefill_base_ms = 2.0\n')
    proc = subprocess.Popen([sys.executable, "-m", "infermatrix", "sim", "serve", "--profile", profile, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit("the sim did not start")


_WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()


def prompt(tokens: int) -> str:
    """About ``tokens`` tokens as the sim counts them (one per space-led word); a nonce first keeps it cold."""
    head = "".join(secrets.choice("abcdefghijklmnop") for _ in range(12))
    return head + " " + " ".join(_WORDS[i % len(_WORDS)] for i in range(tokens - len(split(head)) - 1))


async def measure(base: str, contexts: list[int], probes: int) -> None:
    url = base + "/v1/completions"
    async with httpx.AsyncClient(timeout=60) as warm_client:
        model = (await warm_client.get(base + "/v1/models")).json()["data"][0]["id"]
        rows: dict[int, dict[str, list[float]]] = {}
        rtts: list[float] = []
        for ctx in contexts:
            got: dict[str, list[float]] = {"naive": [], "warm": [], "written": []}
            ids: list[tuple[str, str, float]] = []
            for i in range(probes):
                for way in ("naive", "warm"):
                    rid = f"ovh-{way}-{ctx}-{i}-{secrets.token_hex(3)}"
                    body = {"model": model, "prompt": prompt(ctx), "max_tokens": 1, "stream": True, "temperature": 0.0}
                    rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
                    if way == "naive":
                        async with httpx.AsyncClient(timeout=60) as fresh:
                            t0 = time.monotonic()
                            await stream_request(fresh, url, body, rec, headers={"X-Request-Id": rid})
                        assert rec.first_token is not None, (rec.outcome, rec.error)
                        ids.append((rid, "naive", rec.first_token - t0))
                    else:
                        encoded = orjson.dumps(body)
                        t = time.monotonic()
                        await warm_client.get(base + "/v1/models")
                        rtts.append((time.monotonic() - t) * 1000)
                        await stream_request(warm_client, url, encoded, rec, headers={"X-Request-Id": rid})
                        assert rec.first_token is not None and rec.opened is not None
                        ids.append((rid, "warm", rec.first_token - rec.opened))
                        ids.append((rid, "written", rec.first_token - rec.sent))
            truth = {r["request_id"]: r for r in (await warm_client.get(base + "/debug/truth")).json()["requests"]}
            for rid, way, ttft in ids:
                r = truth[rid]
                got[way].append((ttft - (r["first_token"] - r[SINCE])) * 1000.0)
            got["server_ms"] = [(truth[rid]["first_token"] - truth[rid][SINCE]) * 1000 for rid, w, _ in ids if w == "warm"]
            rows[ctx] = got
    print(f"{'context':>8} {'server ms':>10} {'naive +ms':>10} {'warm +ms':>9} {'written +ms':>12} {'written/server':>15}")
    for ctx, got in rows.items():
        server = statistics.median(got["server_ms"])
        med = {k: statistics.median(v) for k, v in got.items() if k != "server_ms"}
        print(f"{format_context(ctx):>8} {server:10.1f} {med['naive']:10.2f} {med['warm']:9.2f} {med['written']:12.2f} "
              f"{(server + med['written']) / server:15.4f}")  # fmt: skip
    print(f"empty-request round trip (client_overhead_ms): median {statistics.median(rtts):.2f} ms")
    print(f"excess of 'written' over the server's (first token - {SINCE}), every probe: max {max(w for g in rows.values() for w in g['written']):.2f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="1K,4K,16K")
    ap.add_argument("--probes", type=int, default=5)
    ap.add_argument("--port", type=int, default=18741)
    args = ap.parse_args()
    proc = start_sim(args.port)
    try:
        anyio.run(measure, f"http://127.0.0.1:{args.port}", [parse_context(c) for c in args.contexts.split(",")], args.probes)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
