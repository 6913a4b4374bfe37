"""Realistic results for store/report tests, without a server.

Numbers for the reference cells come from shared/reference (vLLM, 4xH200); per-request records are
synthesised from them with a seeded RNG, and histograms are built from those records, so every
expectation in the tests can be computed from the objects made here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from infermatrix.core.intervals import Interval
from infermatrix.core.measure.histograms import histogram_of
from infermatrix.core.types import CellResult, LoopFinding, PrefillResult, RequestRecord

K = 1024

# (context, concurrency) -> (total_tps, per_request_tps, ttft_ms, tbt_ms, avg_active, completed, output_tokens, measured_s)
REFERENCE_VALID = {
    (8 * K, 1): (224.2, 225.7, 154, 4.4, 1.0, 1, 6726, 30.0),
    (8 * K, 2): (404.6, 202.0, 173, 5.0, 2.0, 2, 12136, 30.0),
    (8 * K, 8): (1145.1, 143.1, 307, 7.0, 8.0, 8, 34354, 30.0),
    (8 * K, 128): (7950.5, 60.0, 2198, 16.7, 128.0, 0, 238487, 30.0),
    (32 * K, 1): (222.5, 225.1, 208, 4.4, 1.0, 1, 6675, 30.0),
    (32 * K, 2): (400.9, 202.1, 234, 4.9, 2.0, 2, 12025, 30.0),
    (32 * K, 8): (1139.9, 143.4, 356, 7.0, 7.9, 8, 34187, 30.0),
    (251 * K, 1): (225.2, 232.9, 923, 4.3, 1.0, 1, 6756, 30.0),
    (251 * K, 2): (401.4, 205.9, 1010, 4.9, 2.0, 2, 12041, 30.0),
}
# Cells that are not valid in the reference-like run, with the numbers a runner might still have.
REFERENCE_OTHER = {
    (32 * K, 128): ("looped", "2 of 128 requests repeated a 7-token cycle"),
    (251 * K, 8): ("over_capacity", "8 x (257024 + 4096) tokens > 1,200,000 KV tokens"),
    (251 * K, 128): ("over_capacity", "128 x (257024 + 4096) tokens > 1,200,000 KV tokens"),
    (8 * K, 32): ("error", "3 requests failed: http_error 503"),
    (251 * K, 32): ("client_bound", "client CPU at 100 %"),
}
REFERENCE_PREFILL = {  # context -> (prompt_tps, ttft_ms)
    8 * K: (28100.0, 292.0),
    32 * K: (33200.0, 970.0),
    251 * K: (32400.0, 7743.0),
    256 * K: (31800.0, 8059.0),
}


@dataclass
class Latencies:
    """The raw latencies (seconds) a cell's histograms were built from."""

    ttft: list[float]
    tbt: list[float]
    e2e: list[float]


def make_requests(context: int, n: int, rng: random.Random, ttft_ms: float, tbt_ms: float, loop: bool = False):
    """Two requests per stream: one that finished inside the window, one cut off at its end."""
    out = []
    t0 = 1000.0
    for s in range(n):
        t = t0 + rng.uniform(0, 0.05)
        for seq in range(2):
            ttft = max(0.0005, rng.gauss(ttft_ms, ttft_ms * 0.1) / 1000.0)
            first = t + ttft
            events, now = [], first
            tokens = rng.randint(40, 80)
            events.append((now, 1))
            got = 1  # a running total: summing the events each time made big cells quadratic (slow fixtures)
            while got < tokens:
                now += max(0.0001, rng.gauss(tbt_ms, tbt_ms * 0.2) / 1000.0)
                k = rng.choice((1, 1, 2))  # some multi-token chunks (spec. decoding)
                events.append((now, k))
                got += k
            finished = seq == 0
            r = RequestRecord(
                stream_index=s,
                seq=seq,
                sent=t,
                prompt_tokens=context,
                first_token=first,
                events=events,
                ended=now,
                finish_reason="length" if finished else None,
                outcome="ok" if finished else "cancelled",
                text="word " * 20,
            )
            if loop and s == 0 and seq == 0:
                r.text = "start " + "the same again " * 600  # > 4 KB, so evidence gets truncated
                r.loop = LoopFinding("suffix", period_tokens=4, copies=600.0, span_tokens=2400, cycle_hash="abc123")
            out.append(r)
            t = now
    return out


def latencies_of(requests: list[RequestRecord]) -> Latencies:
    ttft, tbt, e2e = [], [], []
    for r in requests:
        if r.first_token is not None:
            ttft.append(r.first_token - r.sent)
        toks = r.output_tokens
        if toks > 1 and r.events:
            tbt.append((r.events[-1][0] - r.events[0][0]) / (toks - 1))
        if r.ended is not None:
            e2e.append(r.ended - r.sent)
    return Latencies(ttft, tbt, e2e)


def make_cell(context: int, concurrency: int, status: str = "valid", reason: str | None = None, seed: int = 0,
              values: tuple | None = None, scale: float = 1.0,
              intervals: dict[str, tuple[float | None, float | None]] | None = None) -> tuple[CellResult, Latencies]:
    """A cell like the runner produces. ``scale`` multiplies throughputs (a second, faster engine); ``intervals``,
    metric -> (lo, hi), gives the cell's numbers 95 % intervals (saved to cell_interval_rows like a measured cell's)."""
    rng = random.Random(f"{seed}-{context}-{concurrency}")
    if values is None:
        values = REFERENCE_VALID.get((context, concurrency), (100.0, 90.0, 200.0, 10.0, float(concurrency), 1, 3000, 30.0))
    total, per_req, ttft, tbt, active, completed, out_tok, measured = values
    total, per_req, ttft, tbt = total * scale, per_req * scale, ttft / scale, tbt / scale
    requests = [] if status == "over_capacity" else make_requests(context, concurrency, rng, ttft, tbt, loop=status == "looped")
    lat = latencies_of(requests)
    c = CellResult(
        context_tokens=context,
        concurrency=concurrency,
        status=status,
        reason=reason,
        token_source="usage",
        prompt_tokens=context,
        flags={"warm": True, "ramp_s": 1.5},
        requests=requests,
    )
    if status != "over_capacity":
        # Non-valid cells still carry what was measured (evidence); views must hide it.
        c.total_tps, c.per_request_tps, c.ttft_ms, c.tbt_ms = total, per_req, ttft, tbt
        c.avg_active, c.completed, c.output_tokens, c.measured_s = active, completed, out_tok, measured
        c.window_start, c.window_end = 1001.0, 1001.0 + measured
        c.started_at, c.finished_at = 1_700_000_000.0, 1_700_000_000.0 + measured + 3
        c.histograms = {"ttft": histogram_of(lat.ttft), "tbt": histogram_of(lat.tbt), "e2e": histogram_of(lat.e2e)}
        c.intervals = {m: Interval(getattr(c, m), lo, hi, "test factory", 20) for m, (lo, hi) in (intervals or {}).items()}
    return c, lat


def make_prefill(context: int, status: str = "valid", scale: float = 1.0) -> PrefillResult:
    tps, ttft = REFERENCE_PREFILL.get(context, (30000.0, context / 30.0))
    if status != "valid":
        return PrefillResult(context, None, None, None, status=status, reason="probe failed: http_error 500")
    return PrefillResult(context, context, ttft / scale, tps * scale, status="valid")


RUN_INFO = {
    "engine": "vllm",
    "engine_version": "0.1.1.dev5+ge77daef89",
    "model": "qwen",
    "hardware": {"gpu": "H200 SXM", "gpu_count": 4, "vram_gb": 141},
    "launch_command": "vllm serve Qwen/Qwen3.8-Flash-Next --tensor-parallel-size 4 --api-key <redacted>",
    "config": {"matrix": {"duration_s": 30.0, "max_output": 4096, "warmup": True}},
    "tool_version": "infermatrix 0.1.0",
    "host": "h200-box",
    "api": "completions",
    "prompt_mode": "distinct",
    "token_source": "usage",
    "duration_s": 30.0,
    "max_output": 4096,
    "max_model_len": 262144,
    "kv_tokens": 1_200_000,
    "max_seqs": 256,
    "capacity_source": "vllm:cache_config_info",
}


def fill_run(store, info: dict | None = None, scale: float = 1.0, seed: int = 0, other: bool = True):
    """Create a run with the reference-like cells; returns (run_id, {cell key: (CellResult, Latencies)}, [prefill])."""
    run_id = store.create_run(dict(RUN_INFO, **(info or {})))
    prefill = [make_prefill(ctx, scale=scale) for ctx in REFERENCE_PREFILL]
    for p in prefill:
        store.save_prefill(run_id, p)
    cells = {}
    for key in REFERENCE_VALID:
        cells[key] = make_cell(*key, seed=seed, scale=scale)
    if other:
        for key, (status, reason) in REFERENCE_OTHER.items():
            cells[key] = make_cell(*key, status=status, reason=reason, seed=seed, scale=scale)
    for c, _ in cells.values():
        store.save_cell(run_id, c)
    store.finish_run(run_id, "completed")
    return run_id, cells, prefill
