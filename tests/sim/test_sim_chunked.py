"""Chunked prefill in the sim's scheduler (docs/sim.md, "Chunked prefill"), in process on the real step clock: the
budget the decoders leave is what a prompt gets per step, the step that computes its last chunk emits its first token,
and a prompt aborted half-way stops taking chunks and gives its KV back while the decoders go on."""

from __future__ import annotations

import asyncio

from infermatrix.plugins.sim.profile import load_profile
from infermatrix.plugins.sim.scheduler import Scheduler
from infermatrix.plugins.sim.seq import Seq

PROFILE = {"base": "tiny", "spec_tokens": 0, "max_num_batched_tokens": 100, "prefill_tps": 1_000_000.0, "step_base_ms": 1.0}


async def _until(cond, what: str) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"timed out waiting for {what}")


async def _scenario(abort_half_way: bool) -> tuple[Scheduler, list[Seq], Seq]:
    s = Scheduler(load_profile(PROFILE))
    s.start()
    decoders = [Seq(f"d{i}", "completions", 50, (), 2000, ignore_eos=True) for i in range(3)]
    for d in decoders:
        s.submit(d)
    await _until(lambda: all(d.first_token is not None for d in decoders), "the decoders' first tokens")
    prompt = Seq("p", "completions", 970, (), 1)
    s.submit(prompt)
    if abort_half_way:
        await _until(lambda: prompt.prefill_done >= 300, "a few chunks")
        s.abort(prompt)
        await _until(lambda: sum(d.generated for d in decoders) > 3 * 30, "more decode steps")
    else:
        await _until(lambda: prompt.state == "done", "the prompt")
    await s.stop()
    return s, decoders, prompt


def test_a_prompt_takes_what_the_decoders_leave_of_the_budget_and_its_last_chunk_emits_its_first_token():
    s, decoders, prompt = asyncio.run(_scenario(False))
    steps = [st for st in s.truth()["steps"] if prompt.prefill_start <= st["t_start"] < prompt.prefill_end]
    assert [st["prefill_tokens"] for st in steps] == [97] * 10  # 970 tokens, 100 − 3 decoders per step
    assert all(st["batch_size"] == 3 for st in steps)
    assert prompt.first_token == prompt.prefill_end == steps[-1]["t_start"] + steps[-1]["duration_s"]
    assert prompt.finish_reason == "length" and prompt.generated == 1


def test_a_prompt_aborted_half_way_stops_taking_chunks_and_frees_its_kv():
    s, decoders, prompt = asyncio.run(_scenario(True))
    truth = s.truth()
    assert prompt.aborted and prompt.first_token is None and 300 <= prompt.prefill_done < 970
    after = [st for st in truth["steps"] if st["t_start"] >= prompt.finished]
    assert after and all(st["prefill_tokens"] == 0 and st["batch_size"] == 3 for st in after)
    assert truth["state"]["reserved_kv_tokens"] == sum(d.prompt_tokens + d.max_tokens for d in decoders)
