#!/usr/bin/env python3
"""Write the tiny model of scripts/make_tiny_model.py as a GGUF file llama.cpp can serve, locally.

    python scripts/make_tiny_gguf.py [MODEL_DIR] [OUT.gguf]
    # defaults: ~/.cache/infermatrix/tiny-qwen2  ~/.cache/infermatrix/tiny-qwen2.gguf

Architecture ``llama`` with the model directory's dimensions (``config.json``: layers, hidden size,
heads, KV heads, FFN size, vocabulary, RoPE base) and random weights (seeded: the same file every
time). The tokenizer is the directory's own byte-level BPE (``tokenizer.json``: vocabulary, merges,
special tokens), stored as a ``gpt2``-type vocabulary with the GPT-2 pre-tokenizer, so llama.cpp
and vLLM split the same text into the same tokens and both engines are given the same prompts.
No BOS is added (as in the model directory's ``tokenizer_config.json``); EOS is ``<|im_end|>``.
Needs the ``gguf`` (0.19.x) and ``numpy`` packages: scripts/setup-engine.sh llama-cpp installs them
in a venv of their own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CACHE = Path("~/.cache/infermatrix").expanduser()


def read_tokenizer(model_dir: Path) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """tokens by id, their GGUF types, merges as "a b", and the special tokens' ids."""
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    model = tok["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"make_tiny_gguf: {model_dir}/tokenizer.json is not a BPE tokenizer")
    vocab: dict[str, int] = dict(model["vocab"])
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    vocab.update(special)
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise SystemExit("make_tiny_gguf: token ids are not contiguous")
    tokens = [t for t, _ in by_id]
    control, normal = 3, 1  # gguf.TokenType.CONTROL / NORMAL
    types = [control if t in special else normal for t in tokens]
    # tokenizers writes merges as "a b" strings (older) or ["a", "b"] pairs (newer)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges, special


def tensors(cfg: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """Random llama-architecture weights, shaped as GGUF expects them (numpy rows = output features)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    d, ff, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or d // heads
    vocab = cfg["vocab_size"]

    def w(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    out = {"token_embd.weight": w(vocab, d), "output_norm.weight": np.ones(d, dtype=np.float32)}
    for i in range(layers):  # no output.weight: tied to token_embd, as in the model directory
        out |= {
            f"blk.{i}.attn_norm.weight": np.ones(d, dtype=np.float32),
            f"blk.{i}.attn_q.weight": w(heads * head_dim, d),
            f"blk.{i}.attn_k.weight": w(kv_heads * head_dim, d),
            f"blk.{i}.attn_v.weight": w(kv_heads * head_dim, d),
            f"blk.{i}.attn_output.weight": w(d, heads * head_dim),
            f"blk.{i}.ffn_norm.weight": np.ones(d, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": w(ff, d),
            f"blk.{i}.ffn_up.weight": w(ff, d),
            f"blk.{i}.ffn_down.weight": w(d, ff),
        }
    return out


def write_gguf(model_dir: Path, out: Path) -> str:
    import gguf

    cfg = json.loads((model_dir / "config.json").read_text())
    tcfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    tokens, types, merges, special = read_tokenizer(model_dir)
    if len(tokens) != cfg["vocab_size"]:
        raise SystemExit(f"make_tiny_gguf: tokenizer has {len(tokens)} tokens, config.json says {cfg['vocab_size']}")
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(model_dir.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")  # byte-level BPE
    w.add_tokenizer_pre("gpt-2")  # the regex of tokenizers' ByteLevel pre-tokenizer
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = special[tcfg["eos_token"]]
    pad = special[tcfg.get("pad_token") or "<|endoftext|>"]
    w.add_bos_token_id(cfg.get("bos_token_id", pad))
    w.add_eos_token_id(eos)
    w.add_pad_token_id(pad)
    w.add_add_bos_token(bool(tcfg.get("add_bos_token", False)))
    w.add_add_eos_token(False)
    if tcfg.get("chat_template"):
        w.add_chat_template(tcfg["chat_template"])

    for name, data in tensors(cfg).items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return f"{cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab {len(tokens)}, {len(merges)} merges"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir", nargs="?", type=Path, default=CACHE / "tiny-qwen2", help="scripts/make_tiny_model.py's output")
    p.add_argument("out", nargs="?", type=Path, default=CACHE / "tiny-qwen2.gguf", help="the GGUF file to write")
    args = p.parse_args(argv)
    model_dir, out = args.model_dir.expanduser(), args.out.expanduser()
    if not (model_dir / "tokenizer.json").is_file():
        print(f"make_tiny_gguf: no tokenizer.json in {model_dir} (run scripts/make_tiny_model.py first)", file=sys.stderr)
        return 2
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("make_tiny_gguf: needs the `gguf` package (scripts/setup-engine.sh llama-cpp installs it)", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    what = write_gguf(model_dir, tmp)
    tmp.replace(out)  # never a half-written model under the real name
    print(f"tiny GGUF in {out} ({what}, random weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
