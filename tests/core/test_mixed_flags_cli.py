"""`infermatrix run --mixed STREAMS[@DECODE_CTX]+PREFILL_CTX,…` and ``[[load]] kind = "mixed"`` (docs/load.md,
"Interference"): the flag becomes interference points, and every mistake — a malformed flag, a bad field, a point whose
streams the configured KV cache cannot hold — is one line (exit 2) before anything starts."""

from __future__ import annotations

import pytest
from imxtest import run_cli

from infermatrix.cli.mixed_flags import apply_mixed_flags
from infermatrix.core.config import ConfigError
from infermatrix.core.load.mixed_point import client_stall, interference_stats
from infermatrix.core.types import RequestRecord

SMALL = ("--engine", "sim", "--set", "engine.profile=tiny", "--contexts", "1K", "--concurrency", "1",
         "--duration", "1", "--max-output", "16")  # fmt: skip


def test_the_flag_becomes_interference_points():
    assert apply_mixed_flags("8@1K+2K, 4+512") == [
        {"kind": "mixed", "decode_streams": 8, "decode_context": 1024, "prefill_context": 2048},
        {"kind": "mixed", "decode_streams": 4, "prefill_context": 512},
    ]
    assert apply_mixed_flags(None) == []
    with pytest.raises(ConfigError, match="no \\+PREFILL_CTX"):
        apply_mixed_flags("8@1K")


def _stream(times: list[float]) -> RequestRecord:
    return RequestRecord(stream_index=0, seq=0, sent=0.0, events=[(t, 1) for t in times])


def test_gaps_are_split_into_the_alone_window_and_those_overlapping_a_prefill():
    # gaps: 1-2, 2-3 (alone window [1, 3]); 3-4 outside both; 4-7 and 7-8 overlap the prefill (5, 7.5); 8-9 after it
    stats = interference_stats([_stream([1, 2, 3, 4, 7, 8, 9])], [(5.0, 7.5)], (1.0, 3.0))
    assert (stats["alone_gaps"], stats["tbt_alone_ms"]) == (2, 1000.0)
    assert (stats["during_gaps"], stats["stall_max_ms"], stats["tbt_p99_during_ms"]) == (2, 3000.0, 3000.0)
    assert stats["tbt_during_ms"] == 1000.0  # nearest-rank median of [1000, 3000]


def test_chunks_read_together_are_one_arrival_whose_gap_their_tokens_share():
    # a busy client read 2-3 together (one stamp): one arrival of 2 tokens 2 s after 1, not gaps of 1000 and 0 ms; the
    # 2-token chunk at 6 s shares its 2 s gap (two gaps of 1000 ms per token); the stall is the whole 2 s with nothing
    rec = RequestRecord(stream_index=0, seq=0, sent=0.0, events=[(1.0, 1), (3.0, 1), (3.0, 1), (4.0, 1), (6.0, 2)])
    stats = interference_stats([rec], [(5.0, 5.5)], (1.0, 4.0))
    assert (stats["alone_gaps"], stats["tbt_alone_ms"], stats["tbt_alone_p99_ms"]) == (3, 1000.0, 1000.0)
    assert (stats["during_gaps"], stats["tbt_during_ms"], stats["stall_max_ms"]) == (2, 1000.0, 2000.0)


def test_a_client_loop_stall_while_a_prompt_is_in_the_engine_makes_the_point_the_clients():
    alone = RequestRecord(stream_index=-1, seq=0, sent=1.0, first_token=1.2)  # TTFT 200 ms: bound max(25, 20) = 25 ms
    p0 = RequestRecord(stream_index=0, seq=0, sent=3.0, first_token=4.5)  # 1,500 ms: bound 150 ms
    quiet = [(t / 100, 0.002) for t in range(100, 500)]  # 2 ms oversleeps all along
    assert client_stall(quiet, [alone, p0]) is None
    # 100 ms stalled inside p0's 1.5 s: under its bound; 1.2 s: over it; the same 100 ms inside the alone prompt: over 25
    assert client_stall([*quiet, (4.0, 0.1)], [alone, p0]) is None
    assert "stalled 1200 ms while prompt 0 was in the engine (TTFT 1500 ms; bound 150 ms)" in client_stall([*quiet, (4.4, 1.2)], [alone, p0])
    assert "while the alone prompt" in client_stall([*quiet, (1.15, 0.1)], [alone, p0])
    assert client_stall([*quiet, (2.5, 1.0)], [alone, p0]) is None  # a stall between the prompts times neither


@pytest.mark.slow  # the real command line, as a process
@pytest.mark.parametrize(
    "args, says",
    [
        (("--mixed", "0@1K+2K"), "--mixed: '0@1K+2K': streams must be at least 1"),
        (("--mixed", "4@1K"), "--mixed: '4@1K': no +PREFILL_CTX"),
        (("--mixed", "4@lots+2K"), "--mixed: '4@lots+2K': decode context 'lots' is not a context length"),
        (("--mixed", "x+2K"), "--mixed: 'x+2K': streams 'x' is not a whole number"),
        (("--set", "load=[{kind='mixed', decode_streams=2}]"), "load.0.prefill_context"),
        (("--set", "load=[{kind='mixed', decode_streams=2, prefill_context=512, window_s=0}]"), "load.0.window_s"),
        # tiny: a 20,000-token KV cache and 4,096-token requests, known before launch from the profile
        (("--set", "load=[{kind='mixed', decode_streams=9, decode_context=1024, prefill_context=2048, decode_max_output=1024}]"), "the streams need 20,481 KV tokens, the server holds 20,000"),
        (("--set", "load=[{kind='mixed', decode_streams=2, decode_context=1024, prefill_context=512, decode_max_output=4096}]"),
         "a decode request (1K + 4,096 output tokens) exceeds max_model_len 4,096"),
        (("--mixed", "2@1K+4K"), "a prefill request (4K + 1 output tokens) exceeds max_model_len 4,096"),
        # the default decode length is what max_model_len leaves (4,096 − 1K): 8 × 4K + 2K + 1 do not fit 20,000
        (("--mixed", "8@1K+2K"), "the streams need 34,817 KV tokens, the server holds 20,000"),
    ],
)
def test_bad_mixed_points_are_one_line(tmp_path, args, says):
    proc = run_cli("run", *SMALL, *args, "--db", str(tmp_path / "m.duckdb"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert says in line, line
    assert not (tmp_path / "m.duckdb").exists()  # found before anything started
