#!/usr/bin/env python3
"""Build a tiny Qwen2-style model directory, entirely locally, for serving with ``--load-format dummy``.

    python scripts/make_tiny_model.py [OUT_DIR]      # default ~/.cache/infermatrix/tiny-qwen2

Writes ``config.json`` (Qwen2ForCausalLM: 2 layers, hidden 256, 4 heads of 64, 2 KV heads),
``generation_config.json``, and a byte-level BPE tokenizer trained here and now with the
``tokenizers`` library (``tokenizer.json`` + ``tokenizer_config.json`` with a ChatML chat template).
No weights: vLLM's ``--load-format dummy`` fills them with random values, so nothing is downloaded.
Needs ``tokenizers`` (vLLM's environment has it). Deterministic: the same files every time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

DEFAULT_OUT = Path("~/.cache/infermatrix/tiny-qwen2").expanduser()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2048
MAX_POSITIONS = 8192

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A corpus of ordinary prose words and digits, so common English words become single tokens.
_WORDS = """
the of and to in a is that for it as was with be by on not he this are or his from at which but have an
they you were her she there been one all we their has would when if so no will more can out said what up
its about into than them only other time new some could these two may first then do any like my now over
such our man me even most made after also did many before must through back years where much your way
well down should because each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another know while last might us
great old year off come since against go came right used take three small house place found part water
light hand high every land across city left name keep morning river along table window story garden paper
music number answer village winter summer letter market bridge forest mountain island ocean station road
field stone evening school family friend mother father doctor teacher farmer baker student captain engineer
bright quiet heavy early simple careful gentle narrow ancient modern warm cold green silver golden wooden
open broken hidden distant sudden strange common clear certain whole easy usual walked turned looked carried
opened closed watched followed noticed wrote painted built counted measured listened waited remembered
explained promised decided seemed began wanted learned slowly quickly rarely often almost perhaps already
together outside beneath beyond toward during run seed ctx stream shared decode prefill boy let put say use
""".split()


def corpus(lines: int = 4000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = rng.choices(_WORDS, k=rng.randint(6, 20))
        words[0] = words[0].capitalize()
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 2030)))
        out.append(("[" if rng.random() < 0.1 else "") + " ".join(words) + rng.choice(".,?!:;]") + "\n")
    return out


def build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2) + "\n")
    return tok.get_vocab_size()


def build_config(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos = tok.token_to_id("<|im_end|>")
    pad = tok.token_to_id("<|endoftext|>")
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "max_window_layers": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab,
        "bos_token_id": pad,
        "eos_token_id": eos,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": pad, "eos_token_id": eos, "do_sample": False}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    out = args.out.expanduser()
    out.mkdir(parents=True, exist_ok=True)
    try:
        vocab = build_tokenizer(out)
    except ImportError:
        print("make_tiny_model: needs the `tokenizers` package (run it with vLLM's Python)", file=sys.stderr)
        return 2
    build_config(out, vocab)
    print(f"tiny Qwen2-style model in {out} (vocab {vocab}; serve with --load-format dummy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
