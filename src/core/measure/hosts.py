"""Per-host numbers of a cell run on several client hosts, the cell's histograms merged from them, and the
per-host verdict (docs/distributed.md). Pure: the records are already on the coordinator's clock.

A host is judged on its own: its event loop's lag over the window (the same bound as one host's, selfcheck.py),
its stamps' lag over its requests' spans, and how well its clock is known. One host that fails any makes the
cell ``client_bound``, naming the host.
"""

from __future__ import annotations

from typing import Any

from infermatrix.core.measure import histograms
from infermatrix.core.measure.metrics import window_stats
from infermatrix.core.measure.selfcheck import BEHIND_SHARE, SPAN_LAG_SHARE, span_stamp_lag_share
from infermatrix.core.stream.loop_lag import ClientLoad
from infermatrix.core.types import CellResult, RequestRecord

__all__ = ["CLOCK_EDGE_SHARE", "HISTOGRAMS", "host_numbers", "merged_histograms", "host_reasons", "settle_hosts"]

# A window edge known to ±u on a host moves which of its tokens count by u at each edge: at most 2u/window of
# its total. Above this share of the window, total_tps can be off by more than the 1 % the client answers for.
CLOCK_EDGE_SHARE = BEHIND_SHARE
HISTOGRAMS = ("ttft", "tbt", "e2e", "itl", "ttfo")


def _host_stats(records: list[RequestRecord], ws: float, we: float) -> tuple[Any, dict[str, bytes]]:
    stats = window_stats(records, ws, we)
    values = {"ttft": stats.ttft_values_s, "tbt": stats.tbt_values_s, "e2e": stats.e2e_values_s, "itl": stats.itl_values_s,
              "ttfo": stats.ttfo_values_s}
    return stats, {k: histograms.histogram_of(v) for k, v in values.items()}


def host_numbers(
    hosts: list[dict[str, Any]], k: int, records: list[RequestRecord], window: tuple[float, float],
    loads: dict[int, ClientLoad], ticks: dict[int, list[tuple[float, float]]],
) -> list[dict[str, Any]]:
    """Each host's flags (from RayPool.host_flags) with its own counts over the window: requests, tokens, its
    tok/s, its loop lag, and its histograms (encoded, for the exact merge)."""
    ws, we = window
    out = []
    for h in hosts:
        mine = [r for r in records if r.stream_index % k == h["actor"]]
        stats, hists = _host_stats(mine, ws, we)
        load = loads.get(h["actor"])
        share = span_stamp_lag_share(mine, ws, we, ticks.get(h["actor"], [])) if ticks.get(h["actor"]) else None
        out.append({**h, "requests": len(mine), "completed": stats.completed, "output_tokens": stats.output_tokens,
                    "total_tps": stats.total_tps, "lag_p99_ms": load.lag_p99_ms if load else None,
                    "lag_max_ms": load.lag_max_ms if load else None, "cpu_pct": load.cpu_pct if load else None,
                    "span_lag_share": share, "histograms": {n: v.decode("ascii") for n, v in hists.items()}})  # fmt: skip
    return out


def merged_histograms(hosts: list[dict[str, Any]]) -> dict[str, bytes]:
    """The cell's histograms: every host's, added bucket by bucket."""
    return {name: histograms.merge(h["histograms"][name] for h in hosts) for name in HISTOGRAMS}


def host_reasons(hosts: list[dict[str, Any]], window: tuple[float, float]) -> list[str]:
    """Why the cell is client_bound because of one host (empty: every host kept up and was timed well enough)."""
    ws, we = window
    span = we - ws
    why = []
    for h in hosts:
        lag = h.get("lag_p99_ms")
        if lag is not None and span > 0 and 2 * lag / 1000 > BEHIND_SHARE * span:
            why.append(f"client host {h['host']} stamps up to {2 * lag:.0f} ms late ({100 * 2 * lag / 1000 / span:.1f} % of the window)")
        share = h.get("span_lag_share")
        if share is not None and share > SPAN_LAG_SHARE:
            why.append(f"client host {h['host']} stamps held by stalls at its requests' first or last in-window chunks ({100 * share:.1f} % of their spans)")
        u = h.get("uncertainty_ms")
        if u is not None and span > 0 and 2 * u / 1000 > CLOCK_EDGE_SHARE * span:
            why.append(f"client host {h['host']} clock offset known only to ±{u:.1f} ms: its window edges may move "
                       f"{100 * 2 * u / 1000 / span:.2f} % of the window (bound {100 * CLOCK_EDGE_SHARE:g} %)")  # fmt: skip
    return why


def settle_hosts(result: CellResult, hosts: list[dict[str, Any]], failures: list[str], window: tuple[float, float], judged: bool) -> None:
    """The hosts written into the cell: their flags, the histograms merged from theirs, a failed actor making a valid
    cell ``error``, and — where the cell is judged (``judged``: its ramp completed) — one slow or badly timed host
    making it ``client_bound`` naming the host, or adding to a ``client_bound`` cell's reason."""
    result.histograms = merged_histograms(hosts)
    result.flags["hosts"] = hosts
    result.flags["client_backend"] = "ray"
    if failures and result.status == "valid":
        result.status, result.reason = "error", "; ".join(failures)
    why = host_reasons(hosts, window) if judged else []
    if not why:
        return
    result.flags.setdefault("client", {})["hosts_why"] = why
    if result.status == "valid":
        result.status, result.reason = "client_bound", "; ".join(why)
    elif result.status == "client_bound":
        result.reason = "; ".join(x for x in (result.reason, *why) if x)
