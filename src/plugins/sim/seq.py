"""One sequence in the simulated engine: its timestamps, its output channel to the HTTP handler, and its
record in the truth (``/debug/truth``). The scheduler (``scheduler.py``) moves it through its states."""

from __future__ import annotations

import asyncio
import random
from array import array
from typing import Any

from infermatrix.plugins.sim.textgen import TextStream

__all__ = ["Seq"]


class Seq:
    """One request inside the engine, and its ground-truth record."""

    __slots__ = (
        "id", "request_id", "api", "prompt_tokens", "blocks", "tail", "max_tokens", "ignore_eos", "seed",
        "loop_marker", "reasoning", "state", "arrived", "received", "accepted", "admitted", "prefill_start", "prefill_end", "joined",
        "first_token", "finished", "finish_reason", "aborted", "cached_tokens", "generated", "limit",
        "limit_reason", "looped", "loop_after", "rng", "text", "emissions", "out", "waiter", "kv_own", "task",
        "prefill_done",
    )  # fmt: skip

    def __init__(self, id: str, api: str, prompt_tokens: int, blocks: tuple[int, ...], max_tokens: int, *,
                 request_id: str | None = None, ignore_eos: bool = False, seed: int | None = None,
                 loop_marker: bool = False, reasoning: int = 0):  # fmt: skip
        self.id = id
        self.request_id = request_id
        self.api = api
        self.prompt_tokens = prompt_tokens
        self.blocks = blocks  # chain hashes of the prompt's full blocks
        self.tail = 0
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.seed = seed
        self.loop_marker = loop_marker
        self.reasoning = reasoning
        self.state = "new"
        # Timestamps (time.monotonic()) of the sequence's life; None until it gets there.
        self.arrived: float | None = None
        self.received: float | None = None  # the request's body fully read (HTTP server only)
        self.accepted: float | None = None
        self.admitted: float | None = None
        self.prefill_start: float | None = None
        self.prefill_end: float | None = None
        self.joined: float | None = None
        self.first_token: float | None = None
        self.finished: float | None = None
        self.finish_reason: str | None = None
        self.aborted = False
        self.cached_tokens = 0
        self.prefill_done = 0  # chunked prefill: new tokens computed so far (sim/chunked.py)
        self.generated = 0
        self.limit = max_tokens
        self.limit_reason = "length"
        self.looped = False
        self.loop_after: int | None = None
        self.rng: random.Random | None = None
        self.text: TextStream | None = None
        self.emissions = array("d")  # flat (t, n) pairs: compact, since a long run keeps many
        self.out: list[Any] = []  # channel to the HTTP handler: (n_reasoning, r_text, n_content, c_text, finish)
        self.waiter: asyncio.Future[None] | None = None
        self.kv_own = 0
        self.task: dict[str, Any] | None = None  # a built-in task prompt: {"task_answer": …} at arrival, the rest at admission (sim/tasks.py)

    def push(self, item: Any) -> None:
        self.out.append(item)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def items(self) -> list[Any]:
        """Everything emitted since the last call (waits for at least one item)."""
        while not self.out:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        out, self.out = self.out, []
        return out

    def truth(self, blocks: bool = False) -> dict[str, Any]:
        em = self.emissions
        out: dict[str, Any] = {
            "id": self.id, "request_id": self.request_id, "api": self.api, "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens, "max_tokens": self.max_tokens, "arrived": self.arrived, "received": self.received,
            "accepted": self.accepted, "admitted": self.admitted, "prefill_start": self.prefill_start, "prefill_end": self.prefill_end, "joined": self.joined,
            "first_token": self.first_token, "emissions": [[em[i], int(em[i + 1])] for i in range(0, len(em), 2)],
            "output_tokens": self.generated, "finished": self.finished, "finish_reason": self.finish_reason,
            "aborted": self.aborted, "looped": self.looped, "loop_after": self.loop_after, "state": self.state,
        }  # fmt: skip
        if self.task is not None:  # what the sim answered a task, and whether that was right
            out.update(self.task)
        if blocks:  # the prompt's chain hashes, one per full KV block: equal leading hashes = the same leading tokens
            out["blocks"] = list(self.blocks)
        return out
