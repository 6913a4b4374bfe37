"""The ``multi-turn`` workload (issue 20; docs/workloads.md): conversations over the chat API whose history
carries the model's REAL replies.

Each conversation is a session: turn 1 sends one user message; every later turn, after ``think_s``, sends
the whole history — each earlier user message and the assistant's reply exactly as it was streamed — plus a
new user message. SGLang's multi-round benchmark fills the history with placeholder text instead; a cache
that must match what the engine itself generated (its reply, re-tokenised inside the template) is only
exercised with the real reply.

Reuse implied: a turn's prompt starts with the previous turn's whole prompt (a chat template that renders
earlier messages unchanged: ChatML, Llama 3 …), so ``shared_tokens`` = the previous turn's prompt tokens as
the server reported them. An engine that also keeps the reply's KV may hit more; a template that rewrites
history (a reasoning model dropping earlier thinking) hits less — the stored engine counters show which.
A failed turn ends its conversation (its history would be a guess).
"""

from __future__ import annotations

import random
import secrets

from pydantic import Field, field_validator

from infermatrix.plugin import (
    ConfigError, MatrixConfig, Prompt, PromptBuilder, Strict, Tokenizer, TokenLengths, WorkloadRequest, check_lengths, draw_length, hookimpl,
    parse_workload_options,
)

__all__ = ["MultiTurnOptions", "MultiTurnWorkload", "make_workload", "check_options", "WORKLOAD_OPT_IN"]

WORKLOAD_OPT_IN = True  # runs only when named: matrix.workload = "multi-turn" (core/workloads.py)


class MultiTurnOptions(Strict):
    """The ``[workload]`` table of ``multi-turn`` (docs/workloads.md)."""

    conversations: int = Field(4, ge=1, description="conversations, each its own session")
    turns: int = Field(4, ge=1, description="user turns per conversation")
    user_tokens: TokenLengths = Field(128, description="each user message's tokens (as a prompt of that message alone): N or [lo, hi]")
    output_tokens: int = Field(64, ge=1, description="max_tokens of every turn")
    think_s: float = Field(0.0, ge=0, description="wait between a reply's end and the next turn")
    concurrency: int | None = Field(None, ge=1, description="conversations in flight at once; default: all")
    block_tokens: int | None = Field(None, ge=1, description="the engine's KV block; default: the engine's own, else 16")

    @field_validator("user_tokens", mode="before")
    @classmethod
    def _lengths(cls, v: object) -> object:
        return check_lengths(v, "user_tokens")


class _Conversation:
    """One conversation: its user messages (built ahead, exact lengths) and the history as it grows."""

    def __init__(self, index: int, user_messages: list[str], max_tokens: int, think_s: float) -> None:
        self.index, self.users, self.max_tokens, self.think_s = index, user_messages, max_tokens, think_s
        self.history: list[dict[str, str]] = []
        self.turn = 0

    async def next(self, reply: str | None, prompt_tokens: int | None) -> WorkloadRequest | None:
        if self.turn >= len(self.users):
            return None
        shared = 0
        if self.turn > 0:
            if reply is None:
                return None  # the previous turn failed: no real reply to carry on with
            self.history.append({"role": "assistant", "content": reply})
            shared = prompt_tokens or 0  # the previous turn's whole prompt opens this one
        self.history.append({"role": "user", "content": self.users[self.turn]})
        self.turn += 1
        return WorkloadRequest(max_tokens=self.max_tokens, messages=list(self.history), shared_tokens=shared,
                               think_s=self.think_s if self.turn > 1 else 0.0,
                               labels={"conversation": self.index, "turn": self.turn})  # fmt: skip


class MultiTurnWorkload:
    """``prompt`` as the built-in workload; ``sessions`` the conversations."""

    name = "multi-turn"

    def __init__(self, config: MatrixConfig, tokenizer: Tokenizer, options: MultiTurnOptions) -> None:
        check_options(config, {})
        self.config, self.tokenizer, self.options = config, tokenizer, options
        self.base = PromptBuilder(config.seed, config.prompt_mode, tokenizer)
        self.nonce = secrets.token_hex(4)  # the conversations are new to the engine, even on a rerun
        self.concurrency = options.concurrency or options.conversations
        self.block_tokens = options.block_tokens

    async def prompt(self, context_tokens: int, key: str, *, distinct: bool | None = None) -> Prompt:
        return await self.base.prompt(context_tokens, key, distinct=distinct)

    def describe(self) -> dict[str, object]:
        return {"workload": self.name, **self.options.model_dump(), "nonce": self.nonce, "api": self.config.api}

    async def sessions(self) -> list[_Conversation]:
        o, rng = self.options, random.Random(f"infermatrix-multi-turn-{self.config.seed}")
        out = []
        for c in range(o.conversations):
            texts = [(await self.base.prompt(draw_length(o.user_tokens, rng), f"conv{c}/t{t}/{self.nonce}", distinct=True)).text
                     for t in range(o.turns)]  # fmt: skip
            out.append(_Conversation(c, texts, o.output_tokens, o.think_s))
        return out


def check_options(config: MatrixConfig, options: dict) -> None:
    """The ``[workload]`` table and the API checked when the config is (core/workloads.py): one line."""
    if config.api != "chat":
        raise ConfigError('workload multi-turn: needs matrix.api = "chat" (a conversation is a list of messages)')
    parse_workload_options(options, MultiTurnOptions, "multi-turn")


@hookimpl
def make_workload(config: MatrixConfig, tokenizer: Tokenizer, options: dict) -> MultiTurnWorkload:
    """The ``make_workload`` hook: conversations with real replies (``[workload]`` parameters)."""
    return MultiTurnWorkload(config, tokenizer, parse_workload_options(options, MultiTurnOptions, "multi-turn"))
