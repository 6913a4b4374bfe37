#!/usr/bin/env python3
"""Record a real llama-server's answers into tests/llamacpp/data/ (the fast tests read them).

    python scripts/record_llamacpp_responses.py LLAMA_SERVER TINY.gguf [OUT_DIR]

Starts llama-server twice with the tiny GGUF — unified KV cache (-c 6144 -np 8 --kv-unified, as
configs/llamacpp-cpu-tiny.toml) and split (-c 4096 -np 4) — and saves /props, /slots, /v1/models,
one streamed completion (8 tokens, timings_per_token) and /metrics after it. Each server is
stopped before the script exits.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

OUT = Path(__file__).parents[1] / "tests" / "llamacpp" / "data"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(server: str, gguf: str, flags: list[str]) -> tuple[subprocess.Popen, str]:
    port = _port()
    argv = [server, "-m", gguf, "--alias", "tiny", "--port", str(port), "--metrics", "-ngl", "0", *flags]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited with {proc.returncode}: {' '.join(argv)}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("llama-server not ready in 60 s")


def _save(out: Path, name: str, url: str) -> None:
    data = httpx.get(url, timeout=10).json()
    (out / name).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    server, gguf = argv[0], argv[1]
    out = Path(argv[2]) if len(argv) > 2 else OUT
    out.mkdir(parents=True, exist_ok=True)
    proc, url = _serve(server, gguf, ["-c", "6144", "-np", "8", "--kv-unified"])
    try:
        body = {"model": "tiny", "prompt": "The river ran past the old mill", "max_tokens": 8, "stream": True, "temperature": 0.0,
                "stream_options": {"include_usage": True}, "timings_per_token": True, "ignore_eos": True}  # fmt: skip
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
            (out / "stream_completions.txt").write_bytes(r.read())
        for name, path in (("unified_props.json", "/props"), ("unified_slots.json", "/slots"), ("unified_models.json", "/v1/models")):
            _save(out, name, url + path)
        (out / "unified_metrics.txt").write_text(httpx.get(f"{url}/metrics", timeout=10).text)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    proc, url = _serve(server, gguf, ["-c", "4096", "-np", "4"])
    try:
        _save(out, "split_props.json", url + "/props")
        _save(out, "split_slots.json", url + "/slots")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"recorded into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
