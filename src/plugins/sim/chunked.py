"""Chunked prefill (profile ``max_num_batched_tokens``; docs/sim.md, "Chunked prefill"): prefills run inside the
decode steps, as vLLM V1 schedules them, instead of serially beside decoding.

Each step has a budget of ``max_num_batched_tokens`` tokens. The running decoders take theirs first (1 + the draft
tokens each); what is left goes to the prefill queue in arrival order — the head's next chunk, then the next
prompt's, until the budget or the queue runs out. The step then takes ``step_ms`` of its decoders (none when no
decoder runs) plus each chunk's ``prefill_chunk_ms``, so every decoder's token gap in it is that long: the stall a
long prompt causes, bounded by the budget. A prompt whose last chunk ran emits its first token at that step's end
and decodes from the next step on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infermatrix.plugins.sim.scheduler import Scheduler
    from infermatrix.plugins.sim.seq import Seq

__all__ = ["Chunk", "plan_chunks", "finish_chunks"]

Chunk = tuple["Seq", int, float]  # (sequence, new tokens computed in this step, their ms)


def plan_chunks(sched: Scheduler, t_start: float) -> list[Chunk]:
    """This step's prefill chunks from what the running decoders leave of the budget (none when they take it all)."""
    p = sched.p
    assert p.max_num_batched_tokens is not None
    left = p.max_num_batched_tokens - len(sched.running) * (1 + p.spec_tokens)
    chunks: list[Chunk] = []
    for seq in sched.prefill_q:
        if left <= 0:
            break
        if seq.state == "prefill_queued":  # its first chunk: the prefix cache is looked up now, as serial prefill does
            seq.state = "prefilling"
            seq.cached_tokens = sched._cached_prefix(seq)
            seq.prefill_start = t_start
            seq.prefill_done = 0
        need = seq.prompt_tokens + seq.generated - seq.cached_tokens - seq.prefill_done  # a preempted one recomputes its output
        n = min(need, left)
        chunks.append((seq, n, p.prefill_chunk_ms(seq.prefill_done, n, seq.cached_tokens)))
        left -= n
    return chunks


def finish_chunks(sched: Scheduler, chunks: list[Chunk], t_end: float) -> int:
    """The step ended: count each chunk's tokens; prompts now complete join the batch to emit their first token at this
    step's end (``_emit``). Returns the prefill tokens computed in the step."""
    total = 0
    for seq, n, _ms in chunks:
        total += n
        if seq.aborted:  # aborted during the step: abort() took it out of the queue already
            continue
        seq.prefill_done += n
        if seq.prompt_tokens + seq.generated - seq.cached_tokens > seq.prefill_done:
            continue
        sched.prefill_q.remove(seq)
        seq.prefill_end = seq.joined = t_end
        c = sched.counters
        c["prompt_tokens"] += seq.prompt_tokens
        c["cache_queries"] += seq.prompt_tokens
        c["cache_hits"] += seq.cached_tokens
        sched._cache_insert(seq)
        seq.state = "running"
        sched.running.append(seq)
    return total
