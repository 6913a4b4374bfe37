"""The ``shared-prefix`` workload (issue 20; docs/workloads.md): groups of prompts that share a system prompt
token for token, each prompt = the group's system prompt + a question of its own, exact token lengths.

Its traffic is its own pass (``sessions``): one session per group sends the group's prompts one after the
other (each after the previous one ended), groups side by side. The first prompt of a group is cold; each
later one finds the system prompt in the engine's prefix cache. Matrix cells, prefill probes and load points
of the same run get the built-in workload's prompts (``prompt``), as without this workload.

The shared part of a prompt is counted as the server counts it: ``count(system + question) −
count(question)`` (both through the run's tokenizer, so a chat template's tokens and a BOS cancel out), and
never more than ``count(system)`` alone (a tokenizer that glues the break to the next word). The
system prompt ends in a paragraph break and the question starts with a word, so the boundary falls between
tokens in common tokenizers; a template's head tokens before the system text are shared too but not
counted (an undercount of a few tokens, documented).
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from pydantic import Field, field_validator

from infermatrix.plugin import (
    PROSE_WORDS, MatrixConfig, Prompt, PromptBuilder, Strict, Tokenizer, TokenLengths, WorkloadRequest, check_lengths, draw_length, hookimpl,
    parse_workload_options,
)

__all__ = ["SharedPrefixOptions", "SharedPrefixWorkload", "make_workload", "check_options", "WORKLOAD_OPT_IN"]

WORKLOAD_OPT_IN = True  # runs only when named: matrix.workload = "shared-prefix" (core/workloads.py)

class SharedPrefixOptions(Strict):
    """The ``[workload]`` table of ``shared-prefix`` (docs/workloads.md)."""

    groups: int = Field(4, ge=1, description="groups, each with a system prompt of its own")
    prompts_per_group: int = Field(8, ge=1, description="prompts per group (each its own question)")
    system_tokens: TokenLengths = Field(1024, description="system-prompt tokens: N, or [lo, hi] drawn per group")
    question_tokens: TokenLengths = Field(128, description="question tokens: N, or [lo, hi] drawn per prompt")
    output_tokens: int = Field(64, ge=1, description="max_tokens of every request")
    concurrency: int | None = Field(None, ge=1, description="groups in flight at once; default: all")
    block_tokens: int | None = Field(None, ge=1, description="the engine's KV block; default: the engine's own, else 16")

    @field_validator("system_tokens", "question_tokens", mode="before")
    @classmethod
    def _lengths(cls, v: object, info: object) -> object:
        return check_lengths(v, getattr(info, "field_name", "length"))


class _QuestionBuilder(PromptBuilder):
    """Prompts that start with a fixed text (a group's system prompt) and then a question of its own."""

    def __init__(self, seed: int, tokenizer: Tokenizer, prefix: str) -> None:
        super().__init__(seed, "distinct", tokenizer)
        self.prefix = prefix

    def head(self, context_tokens: int, key: str, distinct: bool | None = None) -> str:
        # A word of its own first: two questions of a group part at their first token. The key-less head
        # (distinct=False) is the length's reference fit, which every member's search starts from.
        if distinct is False or not key:
            return self.prefix + "Question: "
        member = int(key)
        return self.prefix + f"{PROSE_WORDS[(member * 7) % len(PROSE_WORDS)].capitalize()} question {member}: "


@dataclass
class _Group:
    index: int
    prompts: list[tuple[str, int, int]]  # (text, tokens, shared tokens)


class _GroupSession:
    """One group's prompts, in order: the first cold, every later one sharing the system prompt."""

    def __init__(self, group: _Group, api: str, max_tokens: int) -> None:
        self.group, self.api, self.max_tokens, self.member = group, api, max_tokens, 0

    async def next(self, reply: str | None, prompt_tokens: int | None) -> WorkloadRequest | None:
        if self.member >= len(self.group.prompts):
            return None
        text, _tokens, shared = self.group.prompts[self.member]
        m, self.member = self.member, self.member + 1
        req = WorkloadRequest(max_tokens=self.max_tokens, shared_tokens=0 if m == 0 else shared,
                              labels={"group": self.group.index, "member": m})  # fmt: skip
        if self.api == "chat":
            req.messages = [{"role": "user", "content": text}]
        else:
            req.prompt = text
        return req


class SharedPrefixWorkload:
    """``prompt`` as the built-in workload; ``sessions`` the groups (built on first use, by seed)."""

    name = "shared-prefix"

    def __init__(self, config: MatrixConfig, tokenizer: Tokenizer, options: SharedPrefixOptions) -> None:
        self.config, self.tokenizer, self.options = config, tokenizer, options
        self.base = PromptBuilder(config.seed, config.prompt_mode, tokenizer)
        self.nonce = secrets.token_hex(4)  # the pass's system prompts are new to the engine, even on a rerun
        self.concurrency = options.concurrency or options.groups
        self.block_tokens = options.block_tokens

    async def prompt(self, context_tokens: int, key: str, *, distinct: bool | None = None) -> Prompt:
        return await self.base.prompt(context_tokens, key, distinct=distinct)

    def describe(self) -> dict[str, object]:
        """The parameters as run (stored with the pass)."""
        return {"workload": self.name, **self.options.model_dump(), "nonce": self.nonce, "api": self.config.api}

    async def sessions(self) -> list[_GroupSession]:
        o, rng = self.options, random.Random(f"infermatrix-shared-prefix-{self.config.seed}")
        groups = []
        for g in range(o.groups):
            system_len = draw_length(o.system_tokens, rng)
            questions = [draw_length(o.question_tokens, rng) for _ in range(o.prompts_per_group)]
            groups.append(await self._group(g, system_len, questions))
        return [_GroupSession(grp, self.config.api, o.output_tokens) for grp in groups]

    async def _group(self, g: int, system_len: int, questions: list[int]) -> _Group:
        system = await self.base.prompt(system_len, f"system/g{g}/{self.nonce}", distinct=True)
        prefix = system.text + "\n\n"  # a paragraph break: the question starts a token of its own
        builder = _QuestionBuilder(self.config.seed, self.tokenizer, prefix)
        # The system prompt with its break, counted alone: the shared part can't be longer (a tokenizer that
        # glues the break to the question's first word shares one token less than the difference below says).
        alone = await self.tokenizer.count(prefix)
        prompts = []
        for m, q in enumerate(questions):
            p = await builder.prompt(system.tokens + q, str(m))
            question = p.text[len(prefix):]
            shared = min(alone, p.tokens - await self.tokenizer.count(question))
            prompts.append((p.text, p.tokens, max(0, shared)))
        return _Group(g, prompts)


def check_options(config: MatrixConfig, options: dict) -> None:
    """The ``[workload]`` table checked when the config is (core/workloads.py): one line naming the field."""
    parse_workload_options(options, SharedPrefixOptions, "shared-prefix")


@hookimpl
def make_workload(config: MatrixConfig, tokenizer: Tokenizer, options: dict) -> SharedPrefixWorkload:
    """The ``make_workload`` hook: groups of prompts sharing a system prompt (``[workload]`` parameters)."""
    return SharedPrefixWorkload(config, tokenizer, parse_workload_options(options, SharedPrefixOptions, "shared-prefix"))
