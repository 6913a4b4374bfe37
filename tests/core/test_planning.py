from infermatrix.core.run.planning import over_capacity_reason, prefill_target
from infermatrix.core.types import Capacity


def test_distinct_prompts_need_n_times_context():
    cap = Capacity(kv_tokens=8 * (4096 + 256), source="test")
    assert over_capacity_reason(4096, 8, 256, cap, 16384, "distinct") is None
    assert "KV tokens" in over_capacity_reason(4096, 9, 256, cap, 16384, "distinct")


def test_shared_prompt_counts_context_once():
    cap = Capacity(kv_tokens=4096 + 16 * 256, source="test")
    assert over_capacity_reason(4096, 16, 256, cap, None, "shared") is None
    assert over_capacity_reason(4096, 17, 256, cap, None, "shared") is not None


def test_max_model_len_and_max_seqs():
    unlimited = Capacity(kv_tokens=None)
    assert "max_model_len" in over_capacity_reason(257_024, 1, 8192, unlimited, 262_144, "distinct")
    assert over_capacity_reason(257_024, 1, 4096, unlimited, 262_144, "distinct") is None
    assert "max sequences" in over_capacity_reason(1024, 64, 16, Capacity(kv_tokens=None, max_seqs=32), None, "distinct")


def test_the_limits_themselves_fit():
    """Each limit is a most, not a less-than (DESIGN §2.2: over capacity when it *exceeds*): a cell exactly at
    max_model_len, at max sequences, or at the KV budget runs."""
    unlimited = Capacity(kv_tokens=None, max_seqs=None, source="test")
    assert over_capacity_reason(3840, 1, 256, unlimited, 4096, "distinct") is None  # 3,840 + 256 = 4,096
    assert over_capacity_reason(3841, 1, 256, unlimited, 4096, "distinct") is not None
    seqs = Capacity(kv_tokens=None, max_seqs=32, source="test")
    assert over_capacity_reason(1024, 32, 16, seqs, None, "distinct") is None
    assert over_capacity_reason(1024, 33, 16, seqs, None, "distinct") is not None
    # A prefill probe of max_model_len - 1 tokens plus its one output token fits as it is.
    assert prefill_target(4095, 4096) == (4095, None)
    assert prefill_target(4096, 4096)[0] == 4095


def test_prefill_target_caps_at_model_length():
    assert prefill_target(262_144, 262_144)[0] == 262_143
    assert prefill_target(8192, 262_144) == (8192, None)


def test_cell_detail_of_a_valid_cell_with_unknown_numbers():
    """A valid cell may lack a per-request rate (no request spanned long enough): the line still prints."""
    from infermatrix.core.run.accounting import cell_detail
    from infermatrix.core.types import CellResult

    r = CellResult(context_tokens=1024, concurrency=1, status="valid", total_tps=480.25, per_request_tps=None, ttft_ms=7.2, tbt_ms=None)
    assert cell_detail(r) == "480.2 tok/s total, —/req, TTFT 7 ms, TBT — ms"


def test_capacity_planned_before_launch_from_the_config():
    from infermatrix.core.config import EngineConfig
    from infermatrix.core.run.planning import over_capacity_cells
    from infermatrix.plugins.sim.plugin import SimEngineConfig

    assert EngineConfig(kind="x").known_capacity() is None  # only the engine can tell
    assert EngineConfig(kind="x", kv_tokens=1000).known_capacity() == (1000, None, "config")
    # The sim knows its profile's KV budget before launch (demo: 49,152 tokens, 128 sequences) ...
    kv, seqs, source = SimEngineConfig(profile="demo").known_capacity()
    assert (kv, seqs, source) == (49_152, 128, "sim profile")
    cells = [(c, n) for c in (1024, 4096, 8192) for n in (1, 2, 4, 8, 16)]
    over = over_capacity_cells(cells, 256, Capacity(kv_tokens=kv, max_seqs=seqs), 16384, "distinct")
    assert over == [(4096, 16), (8192, 8), (8192, 16)]  # what the demo run finds once the engine is up
    # ... but not an attached server's (only it can tell), unless the config says.
    assert SimEngineConfig(profile="demo", base_url="http://127.0.0.1:1").known_capacity() is None
    assert SimEngineConfig(profile="demo", kv_tokens=4096).known_capacity() == (4096, 128, "sim profile")
