"""The raw SSE splitter and the per-read chunk parser: exact on any split of the bytes, one stamp per read."""

import orjson
import pytest

from infermatrix.core.stream.chunks import ChunkParser
from infermatrix.core.stream.sse import SSESplitter
from infermatrix.core.types import RequestRecord


def _chunk(cum: int, text: str, finish: str | None = None, usage: bool = True) -> bytes:
    obj: dict = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": cum}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


STREAM = b"".join([_chunk(1, " a"), _chunk(3, " b c"), b": a comment\n\n", _chunk(4, " d", "length"),
                   b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}}\n\n', b"data: [DONE]\n\n"])  # fmt: skip


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_any_split_gives_the_same_events(size):
    split = SSESplitter()
    got = []
    for i in range(0, len(STREAM), size):
        got.extend(split.feed(STREAM[i : i + size]))
    assert got[-1] == b"[DONE]" and len(got) == 5 and split.pending == b""
    assert [orjson.loads(p)["usage"]["completion_tokens"] for p in got[:-1]] == [1, 3, 4, 4]


def test_crlf_and_multiline_data():
    split = SSESplitter()
    got = split.feed(b'event: x\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata: [DONE]\r')
    got += split.feed(b"\n\r\n")
    assert got == [b'{"a":\n1}', b"[DONE]"]


def test_one_stamp_per_read_and_usage_deltas():
    rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
    p = ChunkParser(rec)
    split = SSESplitter()
    third = STREAM.index(b"data: {", STREAM.index(b" b c"))  # reads: [a, b c] then the rest
    assert p.feed(split.feed(STREAM[:third]), 1_000_000_000)
    assert p.feed(split.feed(STREAM[third:]), 2_500_000_000)
    p.close()
    # both chunks of the first read carry its stamp: a burst is not smeared by the parsing in between
    assert rec.events == [(1.0, 1), (1.0, 2), (2.5, 1)]
    assert rec.first_token == 1.0 and rec.text == " a b c d" and rec.offsets == [2, 6, 8]
    assert rec.finish_reason == "length" and rec.final_usage_tokens == 4 and rec.prompt_tokens == 7
    assert rec.token_source == "usage" and p.done


def test_without_usage_each_text_chunk_counts_one():
    rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
    p = ChunkParser(rec)
    body = _chunk(0, " a b", usage=False) + _chunk(0, "", usage=False) + _chunk(0, " c", "stop", usage=False) + b"data: [DONE]\n\n"
    p.feed(SSESplitter().feed(body), 5)
    p.close()
    assert [n for _, n in rec.events] == [1, 1] and rec.token_source == "chunks"


def test_after_done_nothing_counts_and_errors_stop_the_stream():
    rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
    p = ChunkParser(rec)
    assert p.feed([b"[DONE]", _chunk(9, " late")[6:-2]], 1)
    p.close()
    assert rec.events == [] and rec.outcome == "ok"
    rec2 = RequestRecord(stream_index=0, seq=0, sent=0.0)
    assert not ChunkParser(rec2).feed([b'{"error": {"message": "boom"}}'], 1)
    assert rec2.outcome == "stream_error" and rec2.error == "boom"
    rec3 = RequestRecord(stream_index=0, seq=0, sent=0.0)
    assert not ChunkParser(rec3).feed([b"{not json"], 1)
    assert rec3.outcome == "stream_error" and "unparseable" in (rec3.error or "")


def test_chat_deltas_and_role_chunk():
    rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
    p = ChunkParser(rec)
    role = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"completion_tokens":0}}'
    think = b'{"choices":[{"index":0,"delta":{"reasoning_content":" hm"}}],"usage":{"completion_tokens":1}}'
    say = b'{"choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":"length"}],"usage":{"completion_tokens":3}}'
    p.feed([role], 1)
    assert rec.first_token is None  # a role-only chunk is no first token
    p.feed([think, say], 2)
    p.close()
    assert rec.events == [(2e-9, 1), (2e-9, 2)] and rec.text == " hm hi" and rec.first_token == 2e-9


def test_a_counted_token_with_no_text_yet_is_the_first_token():
    """A prefill probe's one token may decode to no text (part of a UTF-8 character): the server's count says a
    token came, so that chunk is the first token; a role-only chunk counting nothing still is not."""
    rec = RequestRecord(stream_index=0, seq=0, sent=0.0)
    p = ChunkParser(rec)
    role = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"completion_tokens":0}}'
    p.feed([role], 1)
    assert rec.first_token is None
    p.feed([_chunk(1, "", "length")[6:-2]], 3)
    p.close()
    assert rec.first_token == 3e-9 and rec.events == [(3e-9, 1)] and rec.text == ""
    # Without a server count an empty chunk says nothing: no first token.
    rec2 = RequestRecord(stream_index=0, seq=0, sent=0.0)
    q = ChunkParser(rec2)
    q.feed([_chunk(0, "", usage=False)[6:-2]], 4)
    q.close()
    assert rec2.first_token is None and rec2.events == []
