"""The sim tokenizer: every character in exactly one token, generated words one token each."""

import random

from infermatrix.plugins.sim import tokenizer as tok
from infermatrix.plugins.sim.textgen import WORDS, TextStream


def test_tokens_concatenate_back_and_count_matches_ids():
    texts = ["Hello, world!  It's 2024.\n\n\tTabs\tand   spaces ", "", "x", "supercalifragilistic", "ünïcode ✓ 漢字"]
    for text in texts:
        assert "".join(tok.split(text)) == text
        assert tok.count_tokens(text) == len(tok.tokenize(text)) == len(tok.split(text))


def test_long_words_split_and_digits_are_single_tokens():
    assert tok.split("abcdefghij") == ["abcdef", "ghij"]
    assert tok.split(" 123") == [" 1", "2", "3"]
    assert tok.split("a  b") == ["a", " ", " b"]


def test_ids_are_stable_and_in_range():
    ids = tok.tokenize("a the same words, the same ids")
    assert ids == tok.tokenize("a the same words, the same ids")
    assert ids[1] == ids[5] and ids[2] == ids[6]  # " the", " same" twice: same piece, same id
    assert all(0 <= i < tok.VOCAB_SIZE for i in ids)


def test_every_vocabulary_word_is_one_token_with_its_space():
    for w in WORDS:
        assert tok.split(" " + w) == [" " + w]
    assert len(WORDS) > 300


def test_generated_text_token_count_is_exact():
    for seed in range(5):
        stream = TextStream(random.Random(seed), loop_after=50 if seed % 2 else None, period=7)
        sizes = [random.Random(seed + 100).randint(1, 4) for _ in range(200)]
        text = "".join(stream.take(n) for n in sizes)
        assert tok.count_tokens(text) == sum(sizes)


def test_looping_stream_repeats_its_cycle_and_free_text_does_not():
    words = TextStream(random.Random(1), loop_after=20, period=9).take(200).split()
    assert all(words[i] == words[i + 9] for i in range(20, 191))
    free = TextStream(random.Random(1)).take(400).split()
    for period in range(1, 60):
        assert not all(free[i] == free[i + period] for i in range(300, 400 - period))


def test_chat_template_overhead():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi there"}]}]
    pieces = tok.chat_tokens(msgs)
    assert len(pieces) == tok.count_tokens("be brief") + tok.count_tokens("hi there") + 2 * tok.MESSAGE_OVERHEAD + tok.PRIMING_OVERHEAD
