"""Trace readers (docs/workloads.md) on the sample files the repo's script writes, and on broken files."""

import json

import pytest

from infermatrix.core.load.traces import TraceError, read_trace


@pytest.fixture(scope="module")
def samples(sample_traces):
    return sample_traces(30)


def test_the_three_formats_read_as_the_same_requests(samples):
    moon = read_trace(samples / "mooncake.jsonl")
    azure = read_trace(samples / "azure.csv")
    burst = read_trace(samples / "burstgpt.csv")
    assert len(moon) == len(azure) == len(burst) == 30
    assert moon[0].at_s == azure[0].at_s == burst[0].at_s == 0.0
    for m, a, b in zip(moon, azure, burst):
        assert m.input_tokens == a.input_tokens == b.input_tokens
        # Mooncake stamps whole milliseconds, BurstGPT 1 ms decimals: both within 1 ms of Azure's µs.
        assert m.at_s == pytest.approx(a.at_s, abs=0.0011) and b.at_s == pytest.approx(a.at_s, abs=0.0011)
        assert b.failed == (b.output_tokens == 0)
    assert any(b.failed for b in burst), "the sample should hold a failed BurstGPT request"
    assert [r.at_s for r in moon] == sorted(r.at_s for r in moon)


def test_mooncake_blocks_cover_the_input_and_prefixes_are_shared(samples):
    moon = read_trace(samples / "mooncake.jsonl")
    for r in moon:
        assert (len(r.hash_ids) - 1) * 512 < r.input_tokens <= len(r.hash_ids) * 512
    firsts = [r.hash_ids[0] for r in moon]
    assert len(set(firsts)) < len(firsts), "requests of one group share their leading block"


def test_a_self_contradicting_mooncake_row_is_one_line_naming_it(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(TraceError, match=r"t.jsonl line 2: 3 hash_ids for input_length 600") as e:
        read_trace(p)
    assert "\n" not in str(e.value)
    # The same file read with a block size that fits it is fine for line 1 and still wrong for line 2.
    with pytest.raises(TraceError, match="line 1"):
        read_trace(p, block_tokens=200)


@pytest.mark.parametrize(
    "name, body, message",
    [
        ("a.csv", "TIMESTAMP,ContextTokens\n2023-01-01 00:00:00,5\n", "missing column.*GeneratedTokens"),
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,3\n", "line 2: TIMESTAMP 'yesterday'"),
        ("b.csv", "Timestamp,Request tokens,Response tokens\n1.0,-4,3\n", "line 2: Request tokens -4 is negative"),
        ("c.csv", "when,what\n1,2\n", "not a known trace format"),
        ("d.jsonl", '{"timestamp": 1}\n', "line 1: not a Mooncake record"),
        ("e.jsonl", "\n", "no requests"),
    ],
)
def test_broken_files_are_one_line_errors(tmp_path, name, body, message):
    p = tmp_path / name
    p.write_text(body)
    with pytest.raises(TraceError, match=message):
        read_trace(p)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        read_trace(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a\n")
    with pytest.raises(TraceError, match="expected one of mooncake, azure, burstgpt"):
        read_trace(tmp_path / "x.csv", fmt="sharegpt")
