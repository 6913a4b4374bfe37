#!/usr/bin/env python3
"""Write small sample traces in the three public formats (no download; docs/workloads.md).

    python scripts/make_sample_traces.py OUT_DIR [--requests 40] [--seed 1]

Writes OUT_DIR/mooncake.jsonl, OUT_DIR/azure.csv and OUT_DIR/burstgpt.csv: the same seeded arrivals
(Poisson, 2 requests/s) and lengths in each format. The Mooncake file groups requests into a few
conversations that share leading 512-token blocks (shared system prompts), as the real trace does.
The public traces themselves: Mooncake (kvcache-ai/Mooncake, FAST'25 traces), Azure LLM inference
traces 2023/2024 (Azure/AzurePublicDataset), BurstGPT (HPMLL/BurstGPT).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

BLOCK = 512


def sample(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    t = 0.0
    groups = [list(range(g * 100, g * 100 + rng.randint(1, 4))) for g in range(4)]  # shared prefix blocks
    next_id = 10_000
    rows = []
    for _ in range(n):
        t += rng.expovariate(2.0)
        prefix = rng.choice(groups)
        own_blocks = rng.randint(1, 6)
        blocks = len(prefix) + own_blocks
        input_len = (blocks - 1) * BLOCK + rng.randint(1, BLOCK)
        ids = prefix + list(range(next_id, next_id + own_blocks))
        next_id += own_blocks
        assert len(ids) == math.ceil(input_len / BLOCK)
        out = rng.choice([0, rng.randint(8, 400)]) if rng.random() < 0.1 else rng.randint(8, 400)
        rows.append({"t": t, "input": input_len, "output": out, "hash_ids": ids})
    return rows


def write(out_dir: Path, n: int, seed: int) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = sample(n, seed)
    mooncake = out_dir / "mooncake.jsonl"
    with mooncake.open("w", encoding="utf-8") as f:
        for r in rows:
            # Mooncake logs a failed request too; its output length is what the server produced (≥ 1 here)
            rec = {"timestamp": round(r["t"] * 1000), "input_length": r["input"],
                   "output_length": max(1, r["output"]), "hash_ids": r["hash_ids"]}
            f.write(json.dumps(rec) + "\n")
    azure = out_dir / "azure.csv"
    start = datetime(2023, 11, 16, 18, 15, 0)
    with azure.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for r in rows:
            stamp = (start + timedelta(seconds=r["t"])).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 7 digits
            w.writerow([stamp, r["input"], max(1, r["output"])])
    burst = out_dir / "burstgpt.csv"
    with burst.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
        for r in rows:
            w.writerow([f"{r['t']:.3f}", "ChatGPT", r["input"], r["output"], r["input"] + r["output"], "Conversation log"])
    return [mooncake, azure, burst]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for p in write(args.out_dir, args.requests, args.seed):
        print(p)


if __name__ == "__main__":
    main()
