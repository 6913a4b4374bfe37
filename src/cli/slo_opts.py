"""``--slo`` and ``--gpu-hour-price`` for run, report and compare: parsed up front (a bad spec is one
line, exit 2, before anything runs) and attached to stored runs (docs/slo.md)."""

from __future__ import annotations

from typing import Any, Callable

import click


__all__ = ["slo_options", "parse_slo_flags", "attach_slos", "attach_slos_after_run"]


def slo_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--slo`` (repeatable) and ``--gpu-hour-price`` to a command."""
    f = click.option("--gpu-hour-price", "gpu_hour_price", default=None, metavar="USD",
                     help="price of one GPU-hour, for cost per million tokens (else the config's hardware.gpu_hour_usd)")(f)  # fmt: skip
    return click.option("--slo", "slo_texts", multiple=True, metavar="SPEC",
                        help="judge cells by an SLO: ttft_p99_ms=2000,tpot_p99_ms=50 or a preset such as "
                        "mlperf:llama3.1-8b (repeatable; stored with the run; docs/slo.md)")(f)  # fmt: skip


def parse_slo_flags(slo_texts: tuple[str, ...], price: str | None) -> tuple[list[Any], float | None]:
    """The SLO specs and the price the flags give (ConfigError for a user mistake)."""
    from infermatrix.cli.common import number_option
    from infermatrix.core.slo import parse_slo

    specs = [parse_slo(t) for t in slo_texts]
    return specs, number_option(float, price, "--gpu-hour-price")


def attach_slos(store, run_ids: list[str], specs: list[Any], price: float | None) -> None:
    """Store the SLOs (and price) with every run in ``run_ids``."""
    from infermatrix.core.store.slo_store import save_gpu_hour_price, save_slos

    for rid in run_ids:
        save_slos(store, rid, specs)
        if price is not None:
            save_gpu_hour_price(store, rid, price)


def attach_slos_after_run(store, run_ids: list[str], specs: list[Any], price: float | None, err: Any) -> None:
    """:func:`attach_slos` once the runs are measured (run, sweep): a store error there loses only the SLO, so it is
    a warning on ``err`` (a rich Console), and the measurements stay."""
    from infermatrix.core.store import StoreError

    if not run_ids or (not specs and price is None):
        return
    try:
        attach_slos(store, run_ids, specs, price)
    except StoreError as exc:
        err.print(f"warning: SLO not stored: {exc}", highlight=False)
