import pytest

from infermatrix.core.contexts import format_context, parse_context, parse_context_list, parse_int_list


@pytest.mark.parametrize("label,tokens", [("8K", 8192), ("251K", 257_024), ("256k", 262_144), ("1024", 1024), (300, 300), ("1.5K", 1536)])
def test_parse_context(label, tokens):
    assert parse_context(label) == tokens


@pytest.mark.parametrize("bad", ["", "K", "8Q", "-1K", "0", "1.3", True, 0])
def test_parse_context_rejects(bad):
    with pytest.raises(ValueError):
        parse_context(bad)


@pytest.mark.parametrize("tokens", [1024, 8192, 257_024, 262_144, 1000, 1])
def test_format_round_trips(tokens):
    assert parse_context(format_context(tokens)) == tokens


def test_lists():
    assert parse_context_list("1K, 2K,") == [1024, 2048]
    assert parse_int_list("1,4,8") == [1, 4, 8]
    with pytest.raises(ValueError):
        parse_int_list("1,x")
    with pytest.raises(ValueError):
        parse_int_list("0")
