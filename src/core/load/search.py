"""The SLO search on a ready run (``[search]``, ``infermatrix search``; docs/load.md, "Search").

The order of probes is core/slo/search.py's; here each probe is measured as what the run already knows how
to measure — a rate as an open-loop point (core/load/points.py), a concurrency as a decode cell
(the run's decode cell, ``RunContext.decode_cell``) — stored as such, then judged by the SQL views (slo_points, slo_cells) against the
SLO saved with the run. A probe that is not ``valid`` (client_bound, error …) or that the SLO can't judge stops the
search with the reason: it is neither a pass nor a fail. A ``client_bound`` probe is first measured again, up to
``search.client_retries`` times (a client that fell behind once — a stall of its machine — may keep up the next
time; the engine is not at fault either way), its reason keeping what each earlier try said and ``tries`` how many
there were. An ``over_capacity``
concurrency probe is a fail: the engine cannot hold that many streams, so no load from there up meets the SLO.

Resume: a probe already stored at the load the search asks for (and a decode cell already stored) is
judged from the store, not measured again; an interrupted one is measured again.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import anyio

from infermatrix.core.config import ConfigError, LoadConfig, RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.load.points import run_point
from infermatrix.core.slo.search import Bisection, parse_resolution
from infermatrix.core.slo.spec import SloSpec, parse_slo
from infermatrix.core.store import Store
from infermatrix.core.store.slo_search import retried_reason, save_probe, save_search, stored_probes, stored_search
from infermatrix.core.store.slo_store import save_slos

if TYPE_CHECKING:  # the run hands in its context (core/load/context.py); load never imports run at run time
    from infermatrix.core.load.context import RunContext
    from infermatrix.core.run.progress import RunProgress

__all__ = ["check_search", "search_pending", "run_search", "search_context", "search_stopped", "FINAL_SEARCH"]

FINAL_SEARCH = ("found", "max_reached", "none_passed", "too_many_probes", "stopped")


def search_context(cfg: RunConfig) -> int:
    sc = cfg.search
    assert sc is not None
    return sc.context or (cfg.matrix.contexts[0] if cfg.matrix.contexts else 1024)


def check_search(cfg: RunConfig) -> None:
    """A search that can't run, found before anything starts (one line)."""
    sc = getattr(cfg, "search", None)
    if sc is None:
        return
    try:
        parse_slo(sc.slo)
    except ConfigError as exc:
        raise ConfigError(f"search.slo: {exc}") from None
    parse_resolution(sc.resolution, sc.over)
    if sc.max is not None and sc.start is not None and sc.max < sc.start:
        raise ConfigError(f"search: max {sc.max:g} is below start {sc.start:g}")


def search_pending(store: Store, run_id: str, cfg: RunConfig, retry_errors: bool) -> bool:
    """Whether the run's search still has to run (no answer yet, interrupted, or stopped and retrying errors)."""
    if getattr(cfg, "search", None) is None:
        return False
    row = stored_search(store, run_id)
    return row is None or row["status"] not in FINAL_SEARCH or (retry_errors and row["status"] == "stopped")


def search_stopped(store: Store, run_id: str, cfg: RunConfig) -> str | None:
    """Why the run's search stopped without an answer (status ``stopped``), else None. Such a run ends ``stopped``
    (exit code 3, not 0): a script must be able to tell that the search it asked for found nothing."""
    if getattr(cfg, "search", None) is None:
        return None
    row = stored_search(store, run_id)
    if row is None or row["status"] != "stopped":
        return None
    return f"SLO search stopped without an answer: {row['reason'] or 'no reason stored'}"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _one(store: Store, sql: str, params: list[Any]) -> dict[str, Any] | None:
    cols, rows = store.query(sql, params)
    return dict(zip(cols, rows[0])) if rows else None


class _Search:
    """One search on a run: its spec, where it stands, and its stored row."""

    def __init__(self, rc: RunContext, retry_errors: bool):
        sc = rc.cfg.search
        assert sc is not None
        self.rc, self.sc, self.retry = rc, sc, retry_errors
        self.spec: SloSpec = parse_slo(sc.slo)
        self.ctx = search_context(rc.cfg)
        self.base = len(rc.cfg.load or [])  # rate probes are stored after the run's own [[load]] points
        self.row: dict[str, Any] = {
            "slo": self.spec.name, "over": sc.over, "context_tokens": self.ctx, "arrival": sc.arrival if sc.over == "rate" else None,
            "resolution": parse_resolution(sc.resolution, sc.over).text(), "max_load": sc.max, "status": "running",
            "started_at": _now(),
        }  # fmt: skip
        self.stored = stored_probes(rc.store, rc.run_id)
        self.retried = 0  # tries measured again: each is a step of the progress display

    def unit(self, load: float) -> str:
        return f"{load:g}/s" if self.sc.over == "rate" else f"N = {load:g}"

    async def run(self, progress: RunProgress) -> None:
        rc, sc = self.rc, self.sc
        save_slos(rc.store, rc.run_id, [self.spec])  # the views judge every probe by the SLO stored with the run
        start, source = sc.start, "stated"
        if start is None:
            start, source = await self._start(progress)
        self.row.update(start=start, start_source=source)
        save_search(rc.store, rc.run_id, self.row)
        if start is None:
            return self._finish("stopped", source)
        search = Bisection(start=start, resolution=parse_resolution(sc.resolution, sc.over), over=sc.over, max_load=sc.max)
        probe = 0
        while (nxt := search.next_step()) is not None:
            load, step = nxt
            progress.total = probe + 1 + self.retried
            verdict, reason, delivered = await self._probe(progress, probe, load, step)
            if verdict == "stop":
                self.row.update(highest_pass=search.lo, lowest_fail=search.hi)
                return self._finish("stopped", reason)
            search.record(load, verdict == "pass", step, delivered)
            self.row.update(highest_pass=search.lo, lowest_fail=search.hi)
            save_search(rc.store, rc.run_id, self.row)
            probe += 1
        assert search.outcome is not None
        self._finish(search.outcome, _outcome_reason(search, self))

    def _finish(self, status: str, reason: str | None) -> None:
        self.row.update(status=status, reason=reason, finished_at=_now())
        save_search(self.rc.store, self.rc.run_id, self.row)
        lo, hi = self.row.get("highest_pass"), self.row.get("lowest_fail")
        answer = f"highest passing {self.unit(lo) if lo is not None else 'none'}, lowest failing {self.unit(hi) if hi is not None else 'none'}"
        self.rc.console.print(f"  SLO search ({self.spec.name}): {status}: {answer}" + (f" — {reason}" if reason else ""), highlight=False)

    async def _start(self, progress: RunProgress) -> tuple[float | None, str]:
        """Concurrency: 1. Rate: the request rate one closed-loop stream achieves — 1 / the median end-to-end
        latency of a decode cell at N = 1 (measured here, or already stored in the run)."""
        if self.sc.over == "concurrency":
            return 1.0, "concurrency 1"
        cell = await self._cell(progress, 1)
        label = f"decode {format_context(self.ctx)} × 1"
        if cell is None or cell["status"] != "valid":
            why = "not stored" if cell is None else f"{cell['status']}: {cell.get('reason') or ''}"
            return None, f"could not measure a start: {label} is {why}; give --start"
        got = _one(self.rc.store, "SELECT median(e2e_ms) AS e2e FROM request_latencies WHERE run_id = ? AND context_tokens = ? "
                   "AND concurrency = 1 AND outcome = 'ok'", [self.rc.run_id, self.ctx])  # fmt: skip
        if got is None or not got["e2e"]:
            return None, f"could not measure a start: no request of {label} ended in its window; give --start or a longer matrix.duration_s"
        rate = float(f"{1000.0 / got['e2e']:.3g}")
        return rate, f"1 / median e2e {got['e2e']:,.0f} ms of {label}"

    async def _cell(self, progress: RunProgress, n: int, again: bool = False) -> dict[str, Any] | None:
        """The decode cell (search context, n): the stored one when final, else (or ``again``) measured now."""
        rc = self.rc
        sql = "SELECT status, reason FROM cells WHERE run_id = ? AND context_tokens = ? AND concurrency = ?"
        cell = _one(rc.store, sql, [rc.run_id, self.ctx, n])
        if again or cell is None or cell["status"] == "interrupted" or (self.retry and cell["status"] == "error"):
            await rc.decode_cell(progress, self.ctx, n)
            cell = _one(rc.store, sql, [rc.run_id, self.ctx, n])
        return cell

    async def _probe(self, progress: RunProgress, probe: int, load: float, step: str) -> tuple[str, str | None, float | None]:
        """Measure (or reuse) one probe, judge it, store it; returns (verdict, reason, the load it counts at).

        A rate probe counts at the rate it delivered (``achieved``: requests sent over its duration), not the one
        asked for: a draw, or a client, that sent 13/s is evidence about 13/s (docs/load.md, "Search")."""
        old = self.stored.get(probe)
        if old is not None and old["load"] == load and old["verdict"] in ("pass", "fail"):
            return old["verdict"], old["reason"], self._counted(old)
        row: dict[str, Any] = {"probe": probe, "step": step, "load": load, "context_tokens": self.ctx}
        if self.sc.over == "rate":
            row["point"] = self.base + probe
        measured, earlier = await self._measured(progress, probe, row, load)
        row.update(measured)
        if row["status"] == "over_capacity":
            # The engine cannot hold N streams of this context at all, so N and every load above it fail the SLO: a
            # bound of the search (like a fail), not a reason to stop it.
            row["verdict"] = "fail"
            row["reason"] = f"probe {probe} at {self.unit(load)} is over capacity (not run): {row.get('reason') or 'no reason given'}"
        elif row["status"] != "valid":
            row["verdict"] = "stop"
            row["reason"] = f"probe {probe} at {self.unit(load)} is {row['status']}: {row.get('reason') or 'no reason given'}"
        elif row.get("meets") is None:
            row["verdict"] = "stop"
            row["reason"] = f"probe {probe} at {self.unit(load)}: the SLO could not be judged on it (no request to judge, or an empty histogram)"
        else:
            row["verdict"], row["reason"] = ("pass" if row["meets"] else "fail"), None
        row["reason"] = retried_reason(row["reason"], earlier)  # the tries the client could not deliver stay with the probe
        row["tries"] = len(earlier) + 1
        save_probe(self.rc.store, self.rc.run_id, row)
        return row["verdict"], row["reason"], self._counted(row)

    async def _measured(self, progress: RunProgress, probe: int, row: dict[str, Any], load: float) -> tuple[dict[str, Any], list[str]]:
        """The probe measured, and measured again while the client could not deliver it (``client_bound``), up to
        ``search.client_retries`` times; each try replaces the one before in the store. Returns the last try's figures
        and what each earlier try said."""
        earlier: list[str] = []
        while True:
            if self.sc.over == "rate":
                measured = await self._rate_probe(progress, row["point"], load)
            else:
                measured = await self._concurrency_probe(progress, int(load), again=bool(earlier))
            if measured["status"] != "client_bound" or len(earlier) >= self.sc.client_retries:
                return measured, earlier
            earlier.append(measured.get("reason") or "no reason given")
            self.retried += 1
            progress.total += 1
            self.rc.console.print(f"  SLO search: probe {probe} at {self.unit(load)} is client_bound: measuring it again "
                                  f"({len(earlier)} of {self.sc.client_retries})", highlight=False)  # fmt: skip

    def _counted(self, row: dict[str, Any]) -> float | None:
        """The delivered load of a rate probe that ran (None: counted at the load asked, as a concurrency probe)."""
        return row.get("achieved") if self.sc.over == "rate" and row.get("status") == "valid" else None

    async def _rate_probe(self, progress: RunProgress, point: int, rate: float) -> dict[str, Any]:
        rc, sc = self.rc, self.sc
        lc = LoadConfig(rate=rate, arrival=sc.arrival, duration_s=sc.duration_s or rc.cfg.matrix.duration_s, context=self.ctx,
                        max_output=rc.cfg.matrix.max_output, max_in_flight=sc.max_in_flight)  # fmt: skip
        await run_point(rc, progress, point, lc)
        p = _one(rc.store, "SELECT status, reason, achieved_rate FROM points WHERE run_id = ? AND point = ?", [rc.run_id, point]) or {}
        out = {"status": p.get("status", "error"), "reason": p.get("reason"), "achieved": p.get("achieved_rate")}
        j = _one(rc.store, "SELECT * FROM slo_points WHERE run_id = ? AND slo = ? AND point = ?", [rc.run_id, self.spec.name, point])
        if j is not None:
            out.update(meets=j["meets"], attainment=j["attainment"], ttft_p99_ms=j["ttft_p99_ms"], tpot_p99_ms=j["tpot_p99_ms"],
                       output_tps=j["output_tps"])  # fmt: skip
        return out

    async def _concurrency_probe(self, progress: RunProgress, n: int, again: bool = False) -> dict[str, Any]:
        rc = self.rc
        cell = await self._cell(progress, n, again) or {"status": "error", "reason": "the cell was not stored"}
        out = {"status": cell["status"], "reason": cell.get("reason")}
        # The figures stored with the probe are those its verdict was judged on: the cell's judged requests (slo_cells).
        j = _one(rc.store, "SELECT s.meets, s.attainment, s.ttft_p99_ms, s.tpot_p99_ms, d.total_tps, d.avg_active "
                 "FROM slo_cells s JOIN decode_matrix d ON d.run_id = s.run_id AND d.context_tokens = s.context_tokens "
                 "AND d.concurrency = s.concurrency WHERE s.run_id = ? AND s.slo = ? AND s.context_tokens = ? AND s.concurrency = ?",
                 [rc.run_id, self.spec.name, self.ctx, n])  # fmt: skip
        if j is not None:
            out.update(meets=j["meets"], attainment=j["attainment"], ttft_p99_ms=j["ttft_p99_ms"], tpot_p99_ms=j["tpot_p99_ms"],
                       output_tps=j["total_tps"], achieved=j["avg_active"])  # fmt: skip
        return out


def _outcome_reason(search: Bisection, s: _Search) -> str | None:
    if search.note is not None and search.outcome in ("found", "stopped"):
        return search.note
    if search.outcome == "max_reached":
        return f"the stated maximum {s.unit(search.max_load or 0)} meets the SLO"
    if search.outcome == "none_passed":
        return f"no load down to {s.unit(search.hi or 0)} meets the SLO"
    if search.outcome == "too_many_probes":
        return f"stopped after {len(search.probes)} probes without reaching the resolution {search.resolution.text()}"
    return None


async def run_search(rc: RunContext, retry_errors: bool) -> None:
    """The run's search, after its matrix and points; the answer saved (``interrupted`` if stopped mid-way)."""
    if not search_pending(rc.store, rc.run_id, rc.cfg, retry_errors):
        return
    s = _Search(rc, retry_errors)
    with rc.live(1) as progress:
        try:
            await s.run(progress)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                s.row.update(status="interrupted", reason="run interrupted during the search (resume goes on from the stored probes)",
                             finished_at=_now())  # fmt: skip
                save_search(rc.store, rc.run_id, s.row)
            raise
