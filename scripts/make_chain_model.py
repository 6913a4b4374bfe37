#!/usr/bin/env python3
"""Build a tiny Qwen2 model with real weights that "reasons" on a fixed chain of tokens, whatever the prompt.

    python scripts/make_chain_model.py OUT_DIR [--reasoning-tokens K] [--answer-tokens M] [--check]

Decoding follows one chain, greedy or sampled at temperature 1 alike:

    any other token -> <think> -> r1 -> ... -> rK -> </think> -> c1 -> ... -> cM -> c1 -> ...

K reasoning words, the end of reasoning, then M answer words that repeat (the matrix runs ignore EOS). A reasoning
parser that splits at ``</think>`` (vLLM's ``deepseek_r1``) so streams exactly K reasoning tokens, then the answer:
the truth the TTFO test (tests/vllm/test_vllm_reasoning.py) checks infermatrix against. The model emits its own
``<think>`` (as DeepSeek-R1 did) so vLLM's usage counts the K tokens between the markers as reasoning.

How the weights do it: every attention ``o_proj``, every MLP ``down_proj`` and every bias is zero, so each layer adds
nothing and the residual stream is the current token's embedding; RMSNorm weights are 1. Each chain token has its own
one-hot embedding direction, every other token one shared direction; the (untied) ``lm_head`` row of token succ(t) is
t's direction times SCALE, so after the final norm (a one-hot of value sqrt(hidden)) succ(t) leads every other logit
by SCALE x sqrt(hidden) = 64: the chain is followed with probability ~1 even when sampling.

The tokenizer is scripts/make_tiny_model.py's (same corpus, same vocabulary) plus ``<think>`` and ``</think>``; the
chain's words are vocabulary words (" the", " of", ...). Needs torch, safetensors and tokenizers (vLLM's environment
has them). Deterministic: the same files every time. ``--check`` then loads it with transformers and decodes a few
chat prompts greedily: exit 1 unless each output is exactly the chain.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_model as tiny  # noqa: E402 (the shared tokenizer and config of the tiny model)

THINK, END_THINK = "<think>", "</think>"
HIDDEN = 256  # one direction per chain token plus one shared: K + M + 3 <= HIDDEN
SCALE = 4.0  # the logit lead is SCALE x sqrt(HIDDEN) = 64 (the final RMSNorm makes a one-hot sqrt(HIDDEN) long)
# Layers that add nothing still cost their kernels: on a CPU each is a fraction of a millisecond of vLLM's decode step.
# 32 make a step of ~10+ ms, so the K + 1 tokens between the first reasoning chunk and the first answer chunk span far
# more than the client's scheduling stalls on a shared 2-core machine (with 1 layer, ~2 ms a step, whole streams
# arrived in one read there and TTFO could not be told from TTFT).
LAYERS = 32
INTERMEDIATE = 64


def chain_words(vocab: dict[str, int], n: int) -> list[str]:
    """``n`` distinct vocabulary tokens that are whole words with a leading space (" the"), in make_tiny_model's word order."""
    words = [w for w in dict.fromkeys(tiny._WORDS) if w.isalpha() and "\u0120" + w in vocab]
    if len(words) < n:
        raise ValueError(f"the tiny vocabulary has {len(words)} single-token words; the chain needs {n}")
    return ["\u0120" + w for w in words[:n]]


def build_tokenizer(out: Path) -> dict[str, int]:
    """make_tiny_model's tokenizer plus the reasoning markers (not special: their text stays in the output, as Qwen3's)."""
    from tokenizers import AddedToken, Tokenizer

    tiny.build_tokenizer(out)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.add_tokens([AddedToken(THINK, special=False, normalized=False), AddedToken(END_THINK, special=False, normalized=False)])
    tok.save(str(out / "tokenizer.json"))
    return tok.get_vocab()


def chain(vocab: dict[str, int], k: int, m: int) -> list[int]:
    """The token ids of <think>, r1..rK, </think>, c1..cM: the order decoding follows (cM then loops to c1)."""
    words = [vocab[w] for w in chain_words(vocab, k + m)]
    return [vocab[THINK], *words[:k], vocab[END_THINK], *words[k:]]


def weights(vocab_size: int, ids: list[int], m: int, layers: int) -> dict:
    """The state dict: embeddings and lm_head that encode the chain, every other weight the identity of its layer."""
    import torch

    emb = torch.zeros(vocab_size, HIDDEN)
    emb[:, 0] = 1.0  # direction 0: every token off the chain
    direction = {t: i + 1 for i, t in enumerate(ids)}
    for t, d in direction.items():
        emb[t] = 0.0
        emb[t, d] = 1.0
    head = torch.zeros(vocab_size, HIDDEN)
    head[ids[0], 0] = SCALE  # off the chain -> <think>
    for t, nxt in zip(ids, ids[1:] + [ids[-m]]):  # ... cM -> c1
        head[nxt, direction[t]] = SCALE
    heads, kv_heads, head_dim = 4, 2, HIDDEN // 4
    sd = {"model.embed_tokens.weight": emb, "lm_head.weight": head, "model.norm.weight": torch.ones(HIDDEN)}
    for i in range(layers):
        p = f"model.layers.{i}."
        sd |= {p + "input_layernorm.weight": torch.ones(HIDDEN), p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
               p + "self_attn.q_proj.weight": torch.zeros(heads * head_dim, HIDDEN), p + "self_attn.q_proj.bias": torch.zeros(heads * head_dim),
               p + "self_attn.k_proj.weight": torch.zeros(kv_heads * head_dim, HIDDEN), p + "self_attn.k_proj.bias": torch.zeros(kv_heads * head_dim),
               p + "self_attn.v_proj.weight": torch.zeros(kv_heads * head_dim, HIDDEN), p + "self_attn.v_proj.bias": torch.zeros(kv_heads * head_dim),
               p + "self_attn.o_proj.weight": torch.zeros(HIDDEN, heads * head_dim),  # attention adds nothing
               p + "mlp.gate_proj.weight": torch.zeros(INTERMEDIATE, HIDDEN), p + "mlp.up_proj.weight": torch.zeros(INTERMEDIATE, HIDDEN),
               p + "mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE)}  # the MLP adds nothing  # fmt: skip
    return {name: w.to(torch.bfloat16).contiguous() for name, w in sd.items()}


def build(out: Path, k: int, m: int, layers: int = LAYERS) -> list[int]:
    """Write the model directory; returns the chain's token ids."""
    from safetensors.torch import save_file

    vocab = build_tokenizer(out)
    tiny.build_config(out, len(vocab))
    config = json.loads((out / "config.json").read_text())
    config |= {"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": layers, "max_window_layers": layers,
               "tie_word_embeddings": False}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    ids = chain(vocab, k, m)
    save_file(weights(len(vocab), ids, m, layers), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "chain.json").write_text(json.dumps({"reasoning_tokens": k, "answer_tokens": m, "chain_ids": ids}, indent=2) + "\n")
    return ids


def check(out: Path, ids: list[int], m: int) -> list[str]:
    """Greedy decoding of a few chat prompts with transformers; the prompts whose output is not the chain."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(str(out)), AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    want, wrong = ids + ids[-m:], []  # the chain, then the answer once more
    for prompt in ("Hello there, how are you?", "the of and to", f"{END_THINK} 42 {THINK}"):
        enc = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
        got = model.generate(**enc, max_new_tokens=len(want), do_sample=False)[0, enc["input_ids"].shape[1]:].tolist()
        if got != want:
            wrong.append(f"{prompt!r}: {tok.decode(got)!r}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="output directory")
    p.add_argument("--reasoning-tokens", type=int, default=16, metavar="K", help="reasoning words before </think> (default 16)")
    p.add_argument("--answer-tokens", type=int, default=8, metavar="M", help="answer words after it, repeated (default 8)")
    p.add_argument("--layers", type=int, default=LAYERS, metavar="N", help=f"layers, each adding nothing but time (default {LAYERS})")
    p.add_argument("--check", action="store_true", help="then decode a few prompts with transformers: exit 1 unless each is the chain")
    args = p.parse_args(argv)
    k, m = args.reasoning_tokens, args.answer_tokens
    if k < 1 or m < 1 or k + m + 3 > HIDDEN or args.layers < 1:
        print(f"make_chain_model: need K >= 1, M >= 1, K + M <= {HIDDEN - 3} and N >= 1 (got K={k}, M={m}, N={args.layers})", file=sys.stderr)
        return 2
    out = args.out.expanduser()
    out.mkdir(parents=True, exist_ok=True)
    try:
        ids = build(out, k, m, args.layers)
    except ImportError as exc:
        print(f"make_chain_model: needs torch, safetensors and tokenizers (run it with vLLM's Python): {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"make_chain_model: {exc}", file=sys.stderr)
        return 2
    wrong = check(out, ids, m) if args.check else []
    for w in wrong:
        print(f"make_chain_model: not the chain: {w}", file=sys.stderr)
    if wrong:
        return 1
    print(f"chain model in {out}: K={k} reasoning tokens, then {END_THINK}, then M={m} answer tokens (real weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
