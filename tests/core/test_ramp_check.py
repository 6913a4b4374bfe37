"""Issue 17: a ramp that gave up is the client's failure when the engine generated tokens the client never read
(measure/ramp_check.py; docs/metrics.md, "Client verdict"). The rule on constructed inputs; the cell wiring against
a launched sim in tests/fidelity/test_fidelity_ramp.py."""

from infermatrix.core.engine.traits import Gauges
from infermatrix.core.measure.ramp_check import UNANSWERED, RampCheck, ramp_check, ramp_verdict, streams_started_by
from infermatrix.core.measure.selfcheck import BEHIND_SHARE
from infermatrix.core.measure.steady import GaugeSample
from infermatrix.core.types import RequestRecord


def _records(n: int, read_until: float, every: float = 0.01, first_at: float = 0.5) -> list[RequestRecord]:
    """n streams, each read one token every ``every`` s from its first token up to ``read_until``."""
    out = []
    for i in range(n):
        r = RequestRecord(stream_index=i, seq=0, sent=0.0, first_token=first_at, written=True)
        r.events = [(first_at + every * k, 1) for k in range(int((read_until - first_at) / every) + 1)]
        out.append(r)
    return out


def _at(t: float, tokens: float, took: float = 0.002) -> GaugeSample:
    return GaugeSample(t=t, took_s=took, gauges=Gauges(running=8, waiting=0, generated_tokens=tokens))


def test_tokens_the_client_never_read_make_the_ramp_the_clients():
    recs = _records(8, read_until=10.0)  # the client read 8 x ~951 tokens by t = 10
    read = sum(len(r.events) for r in recs)
    check = ramp_check(8, recs, Gauges(generated_tokens=1000.0), _at(10.0, 1000.0 + 2 * read), started=0.0)
    assert check is not None and check.behind
    assert check.engine_tokens == 2 * read and check.client_tokens == read
    assert "the client fell behind" in check.reason() and "50 % unread" in check.reason()


def test_the_engine_slow_on_its_own_is_not_the_clients():
    """The engine generated what the client read, give or take a chunk a stream and the share: an engine failure."""
    recs = _records(8, read_until=10.0)
    read = sum(len(r.events) for r in recs)
    allowed = BEHIND_SHARE * read + 8  # the share of the engine's count, one chunk a stream
    check = ramp_check(8, recs, Gauges(generated_tokens=0.0), _at(10.0, read + allowed * 0.9), started=0.0)
    assert check is not None and not check.behind
    over = ramp_check(8, recs, Gauges(generated_tokens=0.0), _at(10.0, read + allowed * 1.2 + 20), started=0.0)
    assert over is not None and over.behind  # the same rule, just past the allowance


def test_tokens_read_after_the_engine_read_do_not_count():
    """The client's tokens are counted up to the engine read's stamp: what it read later was late."""
    recs = _records(4, read_until=20.0)
    upto = sum(1 for r in recs for t, _ in r.events if t <= 10.0)
    check = ramp_check(4, recs, Gauges(generated_tokens=0.0), _at(10.0, float(upto)), started=0.0)
    assert check is not None and check.client_tokens == upto and not check.behind


def test_no_counter_no_verdict():
    recs = _records(2, read_until=1.0)
    assert ramp_check(2, recs, None, _at(1.0, 10.0), 0.0) is None
    assert ramp_check(2, recs, Gauges(generated_tokens=0.0), None, 0.0) is None
    assert ramp_check(2, recs, Gauges(), _at(1.0, 10.0), 0.0) is None  # counted at request end: blanked by parse_gauges


def test_the_verdict_moves_only_an_error_and_names_an_engine_that_did_not_answer():
    behind, even = RampCheck(1000.0, 0, 10.0, 2.0), RampCheck(1000.0, 995, 10.0, 2.0)
    assert ramp_verdict("error", "only 0 of 4", behind, unanswered=False)[0] == "client_bound"
    assert ramp_verdict("error", "only 3 of 4", even, unanswered=False) == ("error", "only 3 of 4")
    assert ramp_verdict("error", "only 0 of 4", None, unanswered=True) == ("error", f"only 0 of 4; {UNANSWERED}")
    assert ramp_verdict("error", "only 0 of 4", None, unanswered=False) == ("error", "only 0 of 4")  # no counter: nothing to add
    assert ramp_verdict("looped", "x", behind, unanswered=True) == ("looped", "x")


def test_streams_count_as_started_by_their_first_token_at_the_timeout():
    recs = _records(3, read_until=2.0, first_at=0.5) + _records(1, read_until=9.0, first_at=7.0)
    recs[-1].stream_index = 3
    assert streams_started_by(recs, 4, by=5.0) == 3  # the fourth's first token came after the timeout
    assert streams_started_by(recs, 4, by=None) == 4
