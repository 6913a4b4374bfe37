"""``--slo`` and ``--gpu-hour-price`` for run, report and compare: parsed up front (a bad spec is one
line, exit 2, before anything runs) and attached to stored runs (docs/slo.md).

``run`` and ``sweep`` store the price with the runs they make. ``report`` and ``compare`` price only the report
they print (a session variable the run_gpus view reads; nothing is written) and say so, unless ``--store-price``
asks to replace the stored price, which they then say on stderr with the price it replaced."""

from __future__ import annotations

from typing import Any, Callable

import click


__all__ = ["slo_options", "store_price_option", "parse_slo_flags", "parse_report_flags", "attach_slos", "attach_slos_after_run", "price_report"]


def slo_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--slo`` (repeatable) and ``--gpu-hour-price`` to a command."""
    f = click.option("--gpu-hour-price", "gpu_hour_price", default=None, metavar="USD",
                     help="price of one GPU-hour, for cost per million tokens (else the config's hardware.gpu_hour_usd); "
                     "run and sweep store it with the run, report and compare price only what they print")(f)  # fmt: skip
    return click.option("--slo", "slo_texts", multiple=True, metavar="SPEC",
                        help="judge cells by an SLO: ttft_p99_ms=2000,tpot_p99_ms=50 or a preset such as "
                        "mlperf:llama3.1-8b (repeatable; stored with the run; docs/slo.md)")(f)  # fmt: skip


def store_price_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--store-price`` for report and compare: keep ``--gpu-hour-price`` with the run(s) instead of pricing this report only."""
    return click.option("--store-price", "store_price", is_flag=True,
                        help="store --gpu-hour-price with the run(s), replacing the stored price (else it prices this report only)")(f)  # fmt: skip


def parse_slo_flags(slo_texts: tuple[str, ...], price: str | None) -> tuple[list[Any], float | None]:
    """The SLO specs and the price the flags give (ConfigError for a user mistake)."""
    from infermatrix.cli.common import number_option
    from infermatrix.core.slo import parse_slo

    specs = [parse_slo(t) for t in slo_texts]
    return specs, number_option(float, price, "--gpu-hour-price")


def parse_report_flags(slo_texts: tuple[str, ...], price: str | None, store_price: bool) -> tuple[list[Any], float | None]:
    """:func:`parse_slo_flags` for report and compare, whose ``--store-price`` needs a price to store."""
    from infermatrix.core.config import ConfigError

    specs, usd = parse_slo_flags(slo_texts, price)
    if store_price and usd is None:
        raise ConfigError("--store-price: give the price to store with --gpu-hour-price")
    return specs, usd


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


def price_report(store, run_ids: list[str], price: float | None, store_it: bool) -> None:
    """``report``/``compare --gpu-hour-price``: price this report only (nothing written), or with ``store_it``
    store the price with every run, saying on stderr what each run had before."""
    from infermatrix.core.store.slo_store import price_this_session, save_gpu_hour_price, stored_gpu_hour_price

    if price is None:
        return
    if not store_it:
        price_this_session(store, price)
        return
    for rid in run_ids:
        was, source = stored_gpu_hour_price(store, rid)
        save_gpu_hour_price(store, rid, price)
        before = "none" if was is None else f"${was:,.2f}" + (" from the config's hardware.gpu_hour_usd" if source == "config" else "")
        click.echo(f"run {rid}: GPU-hour price stored: ${price:,.2f}, was {before}", err=True)
