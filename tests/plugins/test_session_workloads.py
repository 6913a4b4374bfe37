"""The shared-prefix and multi-turn workloads' own logic, without a server: exact lengths, the shared part
counted, the sessions' order, the history carrying the reply (the sim tests: tests/core/test_workload_pass.py)."""

from __future__ import annotations

import os

import pytest
from test_workload import PieceTokenizer, WordTokenizer

from infermatrix.plugin import ConfigError, MatrixConfig, parse_workload_options
from infermatrix.plugins.multi_turn import MultiTurnOptions, MultiTurnWorkload
from infermatrix.plugins.shared_prefix import SharedPrefixOptions, SharedPrefixWorkload


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _all(session) -> list:
    out, req = [], await session.next(None, None)
    while req is not None:
        out.append(req)
        req = await session.next("reply words here", 100)
    return out


@pytest.mark.anyio
@pytest.mark.parametrize("tok_cls", [WordTokenizer, PieceTokenizer])
async def test_shared_prefix_prompts_share_the_system_prompt_exactly(tok_cls) -> None:
    tok = tok_cls()
    opts = SharedPrefixOptions(groups=2, prompts_per_group=3, system_tokens=300, question_tokens=(20, 60))
    wl = SharedPrefixWorkload(MatrixConfig(seed=3), tok, opts)
    sessions = await wl.sessions()
    assert len(sessions) == 2
    groups = [await _all(s) for s in sessions]
    for g, reqs in enumerate(groups):
        assert [r.labels for r in reqs] == [{"group": g, "member": m} for m in range(3)]
        assert reqs[0].shared_tokens == 0 and all(r.shared_tokens > 0 for r in reqs[1:])
        texts = [r.prompt for r in reqs]
        common = os.path.commonprefix(texts)
        assert common.endswith("\n\n")  # the questions part right after the system prompt's paragraph break
        assert await tok.count(common) == reqs[1].shared_tokens  # the shared part, as the tokenizer counts it
        for r in reqs:
            assert 300 + 20 <= await tok.count(r.prompt) <= 300 + 60
    # Two groups share nothing: their system prompts differ from the first tag on.
    assert os.path.commonprefix([groups[0][0].prompt, groups[1][0].prompt]) == "[ctx 300 stream system/g"


@pytest.mark.anyio
async def test_shared_prefix_under_chat_sends_one_user_message() -> None:
    wl = SharedPrefixWorkload(MatrixConfig(api="chat"), WordTokenizer(), SharedPrefixOptions(groups=1, prompts_per_group=2,
                                                                                            system_tokens=100, question_tokens=30))  # fmt: skip
    (s,) = await wl.sessions()
    reqs = await _all(s)
    assert all(r.prompt is None and len(r.messages) == 1 and r.messages[0]["role"] == "user" for r in reqs)


@pytest.mark.anyio
async def test_multi_turn_history_carries_each_reply() -> None:
    wl = MultiTurnWorkload(MatrixConfig(api="chat"), WordTokenizer(), MultiTurnOptions(conversations=2, turns=3, user_tokens=40, think_s=0.5))
    sessions = await wl.sessions()
    s = sessions[0]
    first = await s.next(None, None)
    assert first.messages == [first.messages[0]] and first.shared_tokens == 0 and first.think_s == 0
    second = await s.next("the first real reply", 57)
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1]["content"] == "the first real reply"
    assert second.shared_tokens == 57 and second.think_s == 0.5 and second.labels == {"conversation": 0, "turn": 2}
    third = await s.next("another", 120)
    assert third.messages[:3] == second.messages and third.messages[3]["content"] == "another"
    assert await s.next("last", 200) is None
    # A failed turn (no reply) ends the conversation.
    other = sessions[1]
    await other.next(None, None)
    assert await other.next(None, None) is None


def test_options_are_checked_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^workload\.question_tokens: .*\(shared-prefix\)$"):
        parse_workload_options({"question_tokens": [5]}, SharedPrefixOptions, "shared-prefix")
    with pytest.raises(ConfigError, match=r"^workload\.turns: "):
        parse_workload_options({"turns": 0}, MultiTurnOptions, "multi-turn")
    with pytest.raises(ConfigError, match="needs matrix.api"):
        MultiTurnWorkload(MatrixConfig(), WordTokenizer(), MultiTurnOptions())
