"""``infermatrix search``: the highest load that meets an SLO (docs/load.md, "Search").

A run like ``infermatrix run``'s, with the same engine options (a config, or ``--base-url`` to attach), whose
only work is the ``[search]`` this command writes: the config's matrix cells, prefill probes and ``[[load]]``
points are not run (its engine, matrix settings — duration, max_output, api, workload — are). The run is
stored, resumable (``infermatrix resume``) and reported like any other.
"""

from __future__ import annotations

import click

from infermatrix.cli.attach_flags import attach_config, attach_options
from infermatrix.cli.common import DEFAULT_DB, OneLineErrors, fail, number_option, open_store
from infermatrix.core.config import ConfigError
from infermatrix.core.contexts import parse_context
from infermatrix.core.plugins import get_plugin_manager

__all__ = ["search", "COMMANDS"]


def _context(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_context(text)
    except ValueError as exc:
        raise ConfigError(f"--context: {exc}") from None


def _search_table(slo: str, over: str, context: int | None, start: str | None, resolution: str | None, max_load: str | None,
                  arrival: str | None, probe_duration: str | None, max_in_flight: str | None) -> dict:
    """The ``[search]`` table the flags give (numbers checked here so a mistake names its flag)."""
    table: dict = {"slo": slo, "over": over}
    for key, value in (
        ("context", context), ("start", number_option(float, start, "--start")), ("resolution", resolution),
        ("max", number_option(float, max_load, "--max")), ("arrival", arrival),
        ("duration_s", number_option(float, probe_duration, "--load-duration")),
        ("max_in_flight", number_option(int, max_in_flight, "--max-in-flight")),
    ):  # fmt: skip
        if value is not None:
            table[key] = value
    if over == "concurrency":
        for flag, value in (("--arrival", arrival), ("--load-duration", probe_duration), ("--max-in-flight", max_in_flight)):
            if value is not None:
                raise ConfigError(f"{flag}: only for --over rate (a concurrency probe is a closed-loop decode cell)")
    return table


@click.command(cls=OneLineErrors)
@click.argument("config_file", required=False, type=click.Path(dir_okay=False))
@click.option("--slo", "slo_text", required=True, metavar="SPEC",
              help="the SLO every probe must meet: ttft_p99_ms=2000,tpot_p99_ms=50 or a preset such as mlperf:llama3.1-8b (docs/slo.md)")
@click.option("--over", type=click.Choice(["rate", "concurrency"]), default="rate", show_default=True,
              help="rate: open-loop points (requests/s); concurrency: closed-loop decode cells")
@click.option("--context", default=None, help="prompt tokens of every probe, e.g. 1K (default: the config's first matrix context)")
@click.option("--start", default=None, metavar="X", help="the first load probed (default: concurrency 1; rate: what one stream achieves, measured)")
@click.option("--resolution", default=None, metavar="R", help="stop when highest pass and lowest fail are within R: 10% (relative) or 0.5 (absolute); "
              "default 10% for rate, 1 for concurrency")
@click.option("--max", "max_load", default=None, metavar="X", help="the highest load probed")
@click.option("--arrival", default=None, help="rate probes: poisson (default), constant or gamma:K")
@click.option("--load-duration", "probe_duration", default=None, metavar="SECONDS", help="rate probes: seconds of arrivals per probe (default: matrix.duration_s)")
@click.option("--max-in-flight", default=None, metavar="N", help="rate probes: cap on requests in flight")
@click.option("--db", default=None, help=f"results database (default ./{DEFAULT_DB}, or the config's store.db)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="override a config field, e.g. matrix.max_output=128")
@attach_options  # --engine, --base-url, --model, --duration (concurrency probes and the rate start), --max-output, --api, --api-key-*
def search(config_file, slo_text, over, context, start, resolution, max_load, arrival, probe_duration, max_in_flight, db, overrides,
           engine_kind, base_url, model, duration, max_output, api, api_key_env, api_key_file) -> None:
    """Find the highest load (request rate or concurrency) that meets an SLO: double, then bisect."""
    from infermatrix.cli.run_cmd import _execute
    from infermatrix.core.run.prepare import prepare_config
    from infermatrix.core.slo import parse_slo

    pm = get_plugin_manager()
    try:
        spec = parse_slo(slo_text)
        data, source = attach_config(config_file, engine_kind=engine_kind, base_url=base_url, model=model, duration=duration,
                                     max_output=max_output, api=api, api_key_env=api_key_env, api_key_file=api_key_file)  # fmt: skip
        matrix = data["matrix"]
        ctx = _context(context)
        contexts = matrix.get("contexts")
        if ctx is None and isinstance(contexts, list) and contexts:
            ctx = parse_context(contexts[0]) if isinstance(contexts[0], str) else contexts[0]
        # Only the search runs: the matrix keeps one row (its context) and no cells, no prefill probes, no points.
        matrix.update(contexts=[ctx] if ctx is not None else matrix.get("contexts", [8192])[:1], concurrency=[], prefill_contexts=[])
        data["load"] = []
        data["search"] = _search_table(slo_text, over, ctx, start, resolution, max_load, arrival, probe_duration, max_in_flight)
        cfg = prepare_config(pm, data, source, list(overrides))
    except ConfigError as exc:
        fail(str(exc))
    store = open_store(db or cfg.store.db or DEFAULT_DB)
    _execute(pm, cfg, store, None, False, ([spec], None))


COMMANDS = [search]
