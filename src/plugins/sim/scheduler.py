"""The engine model: continuous batching on one asyncio step clock, and the record of what it did.

Life of a sequence: ``intake`` (the API server in front of the engine, when the profile has one:
processor sharing, slower the more requests the server holds) -> ``waiting`` (FIFO, until its KV
fits and a sequence slot is free) ->
``prefill_queued`` -> ``prefilling`` (serial, one at a time, at ``prefill_tps`` for the part the
prefix cache doesn't hold) -> ``joining`` (joins the batch at the next step boundary) -> ``running``
(every step emits 1 + accepted draft tokens) -> ``done``. Prefill runs beside decoding and never slows a step;
the first token comes out of the first decode step after prefill. With ``max_num_batched_tokens`` set, prefill
runs inside the steps instead, in chunks of the step's token budget (sim/chunked.py): a prompt goes
``prefill_queued`` -> ``prefilling`` (a chunk per step) -> ``running``, its first token at its last chunk's step end.

Steps run on an absolute clock (``deadline += duration``) so sleep overshoot doesn't accumulate;
the truth record keeps the actual times, and how late each step ended (``lag_s``), so a test can see
whether the server kept up with its own model.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import OrderedDict, deque
from typing import Any

from infermatrix.plugins.sim.chunked import finish_chunks, plan_chunks
from infermatrix.plugins.sim.loopwatch import LoopWatch
from infermatrix.plugins.sim.profile import SimProfile
from infermatrix.plugins.sim.seq import Seq
from infermatrix.plugins.sim.tasks import natural_limit, plan_answer
from infermatrix.plugins.sim.textgen import TextStream

__all__ = ["Scheduler", "SHUTDOWN"]

SHUTDOWN = None  # pushed to a sequence's channel when the server stops under it
RESYNC_S = 0.25  # a step clock this far behind restarts from now instead of bursting to catch up


class Scheduler:
    def __init__(self, profile: SimProfile):
        self.p = profile
        self.bs = profile.block_size
        self.cache_blocks = profile.prefix_cache_tokens // profile.block_size
        self.intake: dict[Seq, float] = {}  # in the API server: the fraction of its intake work still to do
        self._intake_t = 0.0  # when intake progress was last brought up to date
        self._intake_wake = asyncio.Event()
        self.waiting: deque[Seq] = deque()
        self.prefill_q: deque[Seq] = deque()
        self.prefilling: Seq | None = None
        self.joining: list[Seq] = []
        self.running: list[Seq] = []
        self.n_admitted = 0  # sequences holding KV (prefill queue, prefill, joining, running)
        self.reserved = 0  # KV tokens promised to admitted sequences (prompt + max_tokens, shared blocks once)
        self.used_own = 0  # KV tokens actually filled beyond shared blocks (prompt tails + generated)
        self.active_blocks: dict[int, int] = {}  # prompt block hash -> admitted sequences using it
        self.lru: OrderedDict[int, None] = OrderedDict()  # the prefix cache
        self.records: deque[Seq] = deque(maxlen=profile.truth_max_requests)
        self.live: dict[Seq, None] = {}  # not done yet, in arrival order (records may have dropped them)
        # (start, duration, planned, batch, tokens emitted, lag, prefill tokens computed in it: chunked prefill only)
        self.steps: deque[tuple[float, float, float, int, int, float, int]] = deque(maxlen=profile.truth_max_steps)
        self.chunked = profile.max_num_batched_tokens is not None  # prefill inside the steps (sim/chunked.py)
        self.counters = dict.fromkeys(
            ("prompt_tokens", "generation_tokens", "cache_queries", "cache_hits", "requests", "finished_stop",
             "finished_length", "aborted", "steps", "resyncs", "preemptions", "spec_drafts", "spec_draft_tokens",
             "spec_accepted_tokens", "cache_resets", "abort_calls"), 0)  # fmt: skip
        self.spec_accepted_per_pos = [0] * profile.spec_tokens  # vLLM's per-position counter
        self._accept_c = profile.acceptance_per_step()
        # step_jitter: ln-factor ~ N(-s²/2, s²) with s² = ln(1 + jitter²) has mean 1 and relative sd jitter exactly.
        self._jitter_rng = random.Random(profile.seed)
        self._jitter_s = math.sqrt(math.log1p(profile.step_jitter**2))
        self.max_lag_s = 0.0
        self._n = 0
        self._decode_wake = asyncio.Event()
        self._prefill_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.loop_watch = LoopWatch()  # the sim's own lateness, for the truth record (loopwatch.py)

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._decode_loop()), asyncio.create_task(self.loop_watch.run())]
        if not self.chunked:  # chunked: the step loop runs the prefills
            self._tasks.append(asyncio.create_task(self._prefill_loop()))
        if self.p.has_frontend:
            self._tasks.append(asyncio.create_task(self._intake_loop()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for seq in list(self.live):
            seq.push(SHUTDOWN)

    def end_all(self) -> None:
        """The server is stopping: abort every sequence and end its response now (no ``[DONE]``)."""
        self._end(list(self.live))

    def _end(self, seqs: list[Seq]) -> int:
        """Abort ``seqs`` and end their responses now (a stream closes without ``[DONE]``); how many."""
        for seq in seqs:
            self.abort(seq)
            seq.push(SHUTDOWN)
        return len(seqs)

    def new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:08d}"

    # --- requests --------------------------------------------------------------------------------
    def submit(self, seq: Seq, arrived: float | None = None) -> None:
        now = time.monotonic()
        seq.arrived = now if arrived is None else arrived
        if not self.cache_blocks:  # without prefix caching nothing is shared: every token is the sequence's own
            seq.blocks = ()
        seq.tail = seq.prompt_tokens - len(seq.blocks) * self.bs
        self.counters["requests"] += 1
        self.records.append(seq)
        if self.p.has_frontend:
            self._intake_progress(now)  # at the old load, before this request changes it
            self.live[seq] = None
            seq.state = "intake"
            self.intake[seq] = 1.0
            self._intake_wake.set()
            return
        self.live[seq] = None
        seq.accepted = now
        seq.state = "waiting"
        self.waiting.append(seq)
        self._admit()

    def abort(self, seq: Seq) -> None:
        """The client went away: stop the sequence now and give its KV back."""
        state = seq.state
        if state in ("done", "new"):
            return
        if state == "intake":
            self._intake_progress(time.monotonic())
            del self.intake[seq]
        elif state == "waiting":
            self.waiting.remove(seq)
        elif state == "prefill_queued" or state == "prefilling" and self.chunked:
            self.prefill_q.remove(seq)
        elif state == "joining":
            self.joining.remove(seq)
        elif state == "running":
            self.running.remove(seq)
        # "prefilling": the prefill task sees the flag when its sleep ends and drops the sequence
        seq.aborted = True
        self.counters["aborted"] += 1
        self._done(seq, time.monotonic(), "abort", release=state not in ("waiting", "intake"))

    def reset_prefix_cache(self) -> None:
        """``POST /reset_prefix_cache``: the prefix cache emptied (KV of admitted sequences stays)."""
        self.lru.clear()
        self.counters["cache_resets"] += 1

    def abort_all(self) -> int:
        """``POST /abort_request`` with ``abort_all``: every sequence not done yet is aborted and its response ended
        now (a stream closes without ``[DONE]``, as the server's own end does); how many."""
        self.counters["abort_calls"] += 1
        return self._end([s for s in self.live if s.state not in ("done", "new")])

    def _need(self, seq: Seq) -> int:
        shared = 0
        for h in seq.blocks:  # chain hashes: the first miss ends the shared prefix
            if h not in self.active_blocks:
                break
            shared += 1
        return (len(seq.blocks) - shared) * self.bs + seq.tail + seq.max_tokens

    def _admit(self) -> None:
        p = self.p
        while self.waiting and self.n_admitted < p.max_num_seqs:
            seq = self.waiting[0]
            need = self._need(seq)
            if self.reserved + need > p.kv_tokens:
                break  # FIFO: the head waits, and so does everyone behind it (as vLLM's scheduler does)
            self.waiting.popleft()
            active = self.active_blocks
            for h in seq.blocks:
                active[h] = active.get(h, 0) + 1
            seq.kv_own = seq.tail + seq.max_tokens
            self.reserved += need
            self.used_own += seq.tail + seq.generated  # a preempted sequence comes back with its output so far
            self.n_admitted += 1
            seq.admitted = time.monotonic()
            if seq.rng is None:  # planned once: a preempted sequence resumes its own text
                self._plan(seq)
            seq.state = "prefill_queued"
            self.prefill_q.append(seq)
            self._prefill_wake.set()
            if self.chunked:
                self._decode_wake.set()

    def _plan(self, seq: Seq) -> None:
        """Decide, at admission, how the sequence will end and whether it loops (all from its seed)."""
        p = self.p
        seed = seq.seed if seq.seed is not None else f"{p.seed}:{seq.id}"
        rng = seq.rng = random.Random(seed)
        if not seq.ignore_eos and p.eos_probability > 0:
            u = rng.random()
            eos_at = 1 if p.eos_probability >= 1 else max(1, math.ceil(math.log1p(-u) / math.log1p(-p.eos_probability)))
            if eos_at < seq.max_tokens:
                seq.limit, seq.limit_reason = eos_at, "stop"
        natural = None if seq.ignore_eos else natural_limit(p, rng)  # drawn only when the profile sets it
        if natural is not None and natural < seq.limit:
            seq.limit, seq.limit_reason = natural, "stop"
        lp = p.loop
        auto = lp.min_context is not None and seq.prompt_tokens >= lp.min_context and self.n_admitted >= lp.min_running
        if seq.loop_marker or auto:
            seq.looped = True
            seq.loop_after = lp.after_tokens
            seq.text = TextStream(rng, lp.after_tokens, lp.period_tokens)
        else:
            seq.text = TextStream(rng)
        if seq.task is not None:  # a built-in task: its last tokens are the answer (sim/tasks.py)
            stream, truth = plan_answer(p, seq.task["task_answer"], seq.limit, rng, seq.text)
            seq.text = stream  # type: ignore[assignment]
            seq.task.update(truth)

    def _release(self, seq: Seq) -> None:
        active = self.active_blocks
        for h in seq.blocks:
            c = active[h] - 1
            if c:
                active[h] = c
            else:
                del active[h]
                self.reserved -= self.bs
        self.reserved -= seq.kv_own
        self.used_own -= seq.tail + seq.generated
        self.n_admitted -= 1

    def _done(self, seq: Seq, t: float, reason: str, release: bool = True) -> None:
        if release:
            self._release(seq)
        seq.state = "done"
        if self.intake:
            self._intake_progress(time.monotonic())  # the load drops: progress so far was at the old one
            self._intake_wake.set()
        self.live.pop(seq, None)
        seq.finished = t
        seq.finish_reason = reason
        if not self.p.record_prompt_blocks:
            seq.blocks = ()  # drop what a long truth record doesn't need
        seq.rng = seq.text = None
        self._admit()

    # --- intake ----------------------------------------------------------------------------------
    def _intake_progress(self, now: float) -> None:
        """Bring every intake job's remaining work up to ``now`` at the load that held since the last update."""
        dt = now - self._intake_t
        self._intake_t = now
        if dt <= 0 or not self.intake:
            return
        n = len(self.live)
        fe = self.p.frontend_ms
        for seq, left in self.intake.items():
            ms = fe(seq.prompt_tokens, n)
            self.intake[seq] = left - dt * 1000.0 / ms if ms > 0 else 0.0

    async def _intake_loop(self) -> None:
        """Processor-sharing intake: a request leaves when its work is done, at rates set by the load."""
        fe = self.p.frontend_ms
        while True:
            if not self.intake:
                self._intake_wake.clear()
                await self._intake_wake.wait()
                continue
            now = time.monotonic()
            self._intake_progress(now)
            n = len(self.live)
            done = []
            nxt = math.inf
            for seq, left in self.intake.items():
                ms = fe(seq.prompt_tokens, n)
                if left <= 1e-9 or ms <= 0:
                    # It finished a moment ago, at the current load: that is when it left (the model's clock).
                    done.append((seq, now + left * ms / 1000.0))
                else:
                    nxt = min(nxt, left * ms / 1000.0)
            for seq, t in done:
                del self.intake[seq]
                seq.accepted = t
                seq.state = "waiting"
                self.waiting.append(seq)
            if done:
                self._admit()
                continue
            self._intake_wake.clear()
            try:
                await asyncio.wait_for(self._intake_wake.wait(), timeout=nxt)
            except TimeoutError:
                pass

    # --- prefill ---------------------------------------------------------------------------------
    def _cached_prefix(self, seq: Seq) -> int:
        if not self.cache_blocks:
            return 0
        lru = self.lru
        hit = 0
        for h in seq.blocks:
            if h not in lru:
                break
            lru.move_to_end(h)
            hit += 1
        # The last prompt token is always computed (its logits give the first output token).
        return min(hit * self.bs, (seq.prompt_tokens - 1) // self.bs * self.bs)

    def _cache_insert(self, seq: Seq) -> None:
        if not self.cache_blocks:
            return
        lru = self.lru
        for h in seq.blocks:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        while len(lru) > self.cache_blocks:
            lru.popitem(last=False)

    async def _prefill_loop(self) -> None:
        p = self.p
        clock = 0.0  # when the previous prefill ended, on the model's clock
        while True:
            while not self.prefill_q:
                self._prefill_wake.clear()
                await self._prefill_wake.wait()
            seq = self.prefill_q.popleft()
            seq.state = "prefilling"
            self.prefilling = seq
            assert seq.admitted is not None  # set when it was queued for prefill
            start = max(clock, seq.admitted)
            cached = self._cached_prefix(seq)
            seq.cached_tokens = cached
            seq.prefill_start = start
            end = start + p.prefill_ms(seq.prompt_tokens + seq.generated, cached) / 1000.0  # a preempted one recomputes its output
            delay = end - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            clock = end
            self.prefilling = None
            if seq.aborted:
                continue
            seq.prefill_end = end  # the model's clock, as prefill_start: back-to-back prefills abut exactly
            seq.joined = time.monotonic()  # when the step loop could take it (a little after, if we woke late)
            self.counters["prompt_tokens"] += seq.prompt_tokens
            self.counters["cache_queries"] += seq.prompt_tokens
            self.counters["cache_hits"] += cached
            self._cache_insert(seq)
            seq.state = "joining"
            self.joining.append(seq)
            self._decode_wake.set()

    # --- decode ----------------------------------------------------------------------------------
    async def _decode_loop(self) -> None:
        p = self.p
        deadline: float | None = None
        last_end = 0.0
        while True:
            if self.joining:
                for seq in self.joining:
                    seq.state = "running"
                self.running.extend(self.joining)
                self.joining.clear()
            if not self.running and not (self.chunked and self.prefill_q):
                self._decode_wake.clear()
                await self._decode_wake.wait()
                deadline = None  # idle: the next step starts when work arrives
                continue
            now = time.monotonic()
            if deadline is None or now - deadline > RESYNC_S:
                if deadline is not None:
                    self.counters["resyncs"] += 1
                deadline = last_end = now
            batch = len(self.running)
            context = sum(s.prompt_tokens + s.generated for s in self.running)
            chunks = plan_chunks(self, last_end) if self.chunked else []
            planned = (p.step_ms(batch, context) if batch else 0.0) + sum(ms for _, _, ms in chunks)
            planned /= 1000.0
            if self._jitter_s:
                planned *= math.exp(self._jitter_rng.gauss(-self._jitter_s**2 / 2, self._jitter_s))
            # Back-to-back steps tile the timeline: this one began when the last one ended (its emission
            # work included), so durations sum to the wall time the batch really took.
            t_start = last_end
            deadline += planned
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            t_end = last_end = time.monotonic()
            prefilled = finish_chunks(self, chunks, t_end) if chunks else 0
            tokens = self._emit(t_end)
            self._preempt_under_pressure()
            lag = t_end - deadline
            if lag > self.max_lag_s:
                self.max_lag_s = lag
            self.counters["steps"] += 1
            self.steps.append((t_start, t_end - t_start, planned, batch, tokens, lag, prefilled))

    def _emit(self, t: float) -> int:
        """End of a step: every running sequence gets 1 + its accepted drafts (its first step: 1)."""
        k, acc = self.p.spec_tokens, self._accept_c
        counters, per_pos = self.counters, self.spec_accepted_per_pos
        keep: list[Seq] = []
        total = 0
        finished: list[Seq] = []
        for s in self.running:  # aborted sequences were removed from this list already
            rng, text = s.rng, s.text
            assert rng is not None and text is not None  # set at admission, dropped only when it finishes
            n = 1
            if s.generated and k:
                counters["spec_drafts"] += 1
                counters["spec_draft_tokens"] += k
                for i in range(k):
                    if rng.random() >= acc:
                        break
                    per_pos[i] += 1
                    n += 1
                counters["spec_accepted_tokens"] += n - 1  # as verified, before max_tokens cuts the emission
            n = min(n, s.limit - s.generated)
            before = s.generated
            s.generated = before + n
            total += n
            r = min(max(s.reasoning - before, 0), n)
            finish = s.limit_reason if s.generated >= s.limit else None
            s.push((r, text.take(r) if r else "", n - r, text.take(n - r) if n > r else "", finish))
            if not before:
                s.first_token = t
            s.emissions.append(t)
            s.emissions.append(n)
            if finish is None:
                keep.append(s)
            else:
                finished.append(s)
        self.running = keep
        self.used_own += total
        self.counters["generation_tokens"] += total
        for s in finished:
            self.counters["finished_" + s.limit_reason] += 1
            self._done(s, t, s.limit_reason)
        return total

    def _preempt_under_pressure(self) -> None:
        """``preempt_kv_usage``: evict the youngest running sequences while KV usage is above it (never the last)."""
        limit = self.p.preempt_kv_usage
        while limit is not None and len(self.running) > 1 and self.kv_usage() > limit:
            seq = self.running.pop()
            self._release(seq)
            seq.state = "waiting"
            self.waiting.appendleft(seq)  # first in line again, as vLLM requeues a preempted request
            self.counters["preemptions"] += 1

    # --- observation -----------------------------------------------------------------------------
    def kv_usage(self) -> float:
        used = len(self.active_blocks) * self.bs + self.used_own
        return min(1.0, used / self.p.kv_tokens)

    def truth(self, since: float | None = None, blocks: bool = False) -> dict[str, Any]:
        """Requests active at or after ``since`` (all when None), steps that started at or after it; with
        ``blocks``, each request's prompt block hashes too (``GET /debug/truth?blocks=1``)."""
        reqs = [
            {**s.truth(blocks), "received_held_s": self.loop_watch.held_s(s.received)}
            for s in self.records if since is None or s.finished is None or s.finished >= since
        ]  # fmt: skip
        steps = [
            {"t_start": a, "duration_s": d, "planned_s": pl, "batch_size": b, "tokens": n, "lag_s": lag, "prefill_tokens": pf}
            for a, d, pl, b, n, lag, pf in self.steps
            if since is None or a >= since
        ]
        return {
            "now": time.monotonic(),
            "requests": reqs,
            "steps": steps,
            "counters": {**self.counters, "max_lag_s": self.max_lag_s, "spec_accepted_per_pos": list(self.spec_accepted_per_pos)},
            "state": {
                "intake": len(self.intake), "waiting": len(self.waiting), "running": self.n_admitted, "decoding": len(self.running),
                "reserved_kv_tokens": self.reserved, "kv_usage": self.kv_usage(), "prefix_cache_blocks": len(self.lru),
            },  # fmt: skip
            "profile": self.p.model_dump(mode="json"),
        }

    def reset(self, cache: bool = False) -> None:
        """Forget the records (and the prefix cache when asked); sequences in flight keep running.

        Counters stay: /metrics exposes them as Prometheus counters, which never go down."""
        self.records.clear()
        self.records.extend(self.live)
        self.steps.clear()
        self.max_lag_s = 0.0
        self.loop_watch.clear()
        if cache:
            self.lru.clear()
