"""Prefill probes whose client was held off its cores (run/prefill.py; docs/metrics.md, "Prefill list"), against the
sim's record of the same requests (``/debug/truth``: each probe's ``received`` and ``first_token``).

The whole client process is stopped for ``FREEZE_S`` while the sim prefills a chosen probe (a shell outside the
process stops and resumes it, as a kernel starving the client would), so that probe's first token is read late. The
product must keep such a probe out of the point — with the reason, and another cold probe sent in its place — and
disown the point (``client_bound``) when too many were held. Without the check the point is the held probe's TTFT."""

import os
import re
import statistics
import threading

import httpx

import pytest
from truthlib import median_range, receipt_ttft_ms
from bars import PREFILL_TTFT
from imxtest import Freezer

from infermatrix.testing import run_matrix, sim_server

pytestmark = pytest.mark.slow

PREFILL_BASE_MS = 300.0  # every probe's prefill takes at least this: long enough to stop the client inside it
FREEZE_S = 0.5  # longer than the rest of the prefill, so the first token arrives while the client is stopped
MATRIX = {"contexts": [], "prefill_contexts": [256]}


def _freeze_probes(sim, pid: int, which: set[str], frozen: list[str], done: threading.Event) -> None:
    """Stop ``pid`` for ``FREEZE_S`` once per prefill probe numbered in ``which`` ("r1" …), while the sim prefills it.
    The sim says when (``GET /debug/wait`` with ``prefilling``: an event on its own loop, where polling /debug/truth
    from a starved client can miss a prefill); a shell started beforehand stops and resumes the process on each line."""
    with Freezer(pid, FREEZE_S) as freezer:
        try:
            for name in sorted(which, key=lambda n: int(n[1:])):  # the probes go one at a time, in number order
                found = sim.wait_unfinished(rf"-prefill-.*-{name}$", prefilling=True)
                if found is None or done.is_set():
                    break
                frozen.append(found["request_id"])
                freezer.freeze()
        except httpx.HTTPError:
            pass  # the sim is gone: the run is over


def _run(which: set[str], samples: int) -> tuple[dict, list[dict], dict[str, dict], list[str]]:
    frozen: list[str] = []
    done = threading.Event()
    with sim_server(prefill_base_ms=PREFILL_BASE_MS) as sim:
        watcher = threading.Thread(target=_freeze_probes, args=(sim, os.getpid(), which, frozen, done), daemon=True)
        watcher.start()
        try:
            result = run_matrix({"kind": "openai", "base_url": sim.base_url}, matrix={**MATRIX, "prefill_samples": samples})
        finally:
            done.set()
            watcher.join(5)
        truth = {t["request_id"]: t for t in sim.truth()["requests"] if "-prefill-" in (t["request_id"] or "")}
    assert result.status == "completed", result.error
    (point,) = result.query("SELECT status, reason, ttft_ms, samples FROM prefill WHERE run_id = ?", [result.run_id])
    probes = result.query("SELECT sample_no, request_id, ttft_ms, outcome FROM prefill_samples WHERE run_id = ? AND NOT throwaway "
                          "ORDER BY sample_no", [result.run_id])  # fmt: skip
    return point, probes, truth, frozen


def _excess_ms(probe: dict, truth: dict[str, dict]) -> float:
    """How much longer the client's TTFT of ``probe`` was than the sim's receipt-to-first-token of it."""
    return probe["ttft_ms"] - receipt_ttft_ms(truth[probe["request_id"]])[0]


def _held_and_bound(outcome: str) -> tuple[float, float]:
    m = re.fullmatch(r"held: the client's event loop stalled ([\d.]+) ms at its send or first token \(bound ([\d.]+) ms\)", outcome)
    assert m, outcome
    return float(m.group(1)), float(m.group(2))


def test_a_held_probe_is_kept_out_of_the_point_and_another_sent_in_its_place():
    point, probes, truth, frozen = _run({"r1"}, samples=3)
    assert [f.rsplit("-", 1)[1] for f in frozen] == ["r1"]
    frozen_probe = probes[0]
    assert frozen_probe["sample_no"] == 1 and frozen_probe["request_id"] in frozen
    stall, bound = _held_and_bound(frozen_probe["outcome"])
    assert bound < stall and bound < _excess_ms(frozen_probe, truth)  # the sim's record bears the hold out: read late past the bound
    # Replacements were sent: three unheld probes besides it (a loaded machine may hold another one or two of them
    # too, each kept with its reason and replaced in turn; more than three held disown the point, bars.judged).
    ok = [p for p in probes if p["outcome"] == "ok"]
    assert all(p["outcome"] == "ok" or p["outcome"].startswith("held: ") for p in probes), probes
    assert (len(probes), point["samples"]) == (3 + len(probes) - len(ok), 3) or point["status"] == "client_bound", (point, probes)
    if point["status"] == "client_bound":
        assert point["reason"].startswith("the client's event loop held"), point
        return
    assert point["status"] == "valid" and point["ttft_ms"] == statistics.median(p["ttft_ms"] for p in ok), (point, probes)
    # The server's side as a range that holds the sim's own lateness at each receipt (truthlib.receipt_ttft_ms).
    lo, hi = median_range([receipt_ttft_ms(truth[p["request_id"]]) for p in ok])
    assert lo * (1 - PREFILL_TTFT) < point["ttft_ms"] < hi * (1 + PREFILL_TTFT), (point, lo, hi)


def test_a_point_whose_probes_were_all_held_is_the_clients():
    point, probes, truth, frozen = _run({"r1", "r2", "r3"}, samples=1)
    assert sorted(f.rsplit("-", 1)[1] for f in frozen) == ["r1", "r2", "r3"]
    # prefill_samples = 1: one cold probe and at most REPLACEMENTS (2) more, all held
    assert [p["sample_no"] for p in probes] == [1, 2, 3] and all(p["outcome"].startswith("held: ") for p in probes), probes
    for p in probes:
        stall, bound = _held_and_bound(p["outcome"])
        assert bound < stall and bound < _excess_ms(p, truth), (p, truth[p["request_id"]])
    assert point["status"] == "client_bound", point
    assert point["reason"].startswith("the client's event loop held 3 of 3 cold probes' send or first token past their bound"), point
