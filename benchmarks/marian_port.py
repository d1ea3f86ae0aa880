"""Lesson 10's port at the real model's size: opus-mt-en-de's configuration with random weights, no download.

Builds a ``MarianMTModel`` with Helsinki-NLP/opus-mt-en-de's sizes and quirks (58,101 tokens, d_model 512,
6 + 6 layers, 8 heads, d_ff 2048, SiLU, pad id 58100 as decoder start), random weights, and ports it into the
course's Transformer with lesson 10's ``from_marian`` (the solution notebooks' code, loaded with
``load_exercises``, lessons 01 to 07 included). Prints one JSON line per figure:

* ``max_logit_difference``: the largest difference between the port's logits and Marian's on a padded batch;
* ``port_seconds``: from_marian's wall time;
* ``greedy_seconds`` and ``beam4_seconds``: lesson 06's greedy_decode and lesson 07's beam_search (beam 4) on
  ``--sentences`` random sentences, each decoded to ``--tokens`` tokens (random weights never end a sentence,
  so every step runs: an upper bound for real sentences of that length).

    python benchmarks/marian_port.py --device cpu --threads 4 --sentences 20 --tokens 25
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_utils.notebook import load_exercises  # noqa: E402

LOADS = (("01_attention", ["scaled_dot_product_attention"]),
         ("02_masks", ["make_padding_mask", "make_causal_mask", "make_target_mask"]),
         ("03_positional_encoding", ["sinusoidal_positional_encoding", "PositionalEncoding"]),
         ("04_multi_head_attention", ["MultiHeadAttention"]),
         ("05_transformer", ["FeedForward", "EncoderLayer", "DecoderLayer", "Transformer"]),
         ("06_training", ["greedy_decode"]), ("07_inference", ["gnmt_length_penalty", "beam_search"]),
         ("10_real_translator", ["from_marian"]))


def emit(name: str, value, unit: str = "") -> None:
    print(json.dumps({"name": name, "value": value, "unit": unit}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=25)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import MarianConfig, MarianMTModel

    code: dict = {}
    for lesson, names in LOADS:
        load_exercises(str(ROOT / "solutions" / f"{lesson}.ipynb"), names, namespace=code)
    pad = 58100
    config = MarianConfig(
        vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        max_position_embeddings=512, activation_function="swish", scale_embedding=True, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=None)
    torch.manual_seed(0)
    marian = MarianMTModel(config).eval()
    with torch.no_grad():  # weights of a trained model's scale, and a random bias on the logits
        for name, p in marian.named_parameters():
            if p.dim() == 2 and "embed_positions" not in name:
                p.normal_(0.0, p.size(1) ** -0.5)
        marian.final_logits_bias.normal_()
    marian = marian.to(args.device)
    emit("parameters", sum(p.numel() for p in marian.parameters()))
    started = time.perf_counter()
    model = code["from_marian"](marian)
    emit("port_seconds", round(time.perf_counter() - started, 2), "s")

    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, pad, (args.sentences, 20), generator=g)  # (B, L_src): words, eos, padding
    src[:, -1] = 0
    src[: args.sentences // 2, 14] = 0
    src[: args.sentences // 2, 15:] = pad
    tgt = torch.randint(1, pad, (args.sentences, 16), generator=g)
    tgt[:, 0] = pad
    src, tgt = src.to(args.device), tgt.to(args.device)
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = marian(input_ids=src, attention_mask=src.ne(pad), decoder_input_ids=tgt).logits
        emit("max_logit_difference", float((ours - theirs).abs().max()))
        model.generator.bias[pad] = float("-inf")
    for name, run in (("greedy_seconds", lambda: code["greedy_decode"](model, src, args.tokens + 1, pad, 0, pad)),
                      ("beam4_seconds", lambda: code["beam_search"](model, src, 4, args.tokens + 1, pad, 0, pad))):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        out = run()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        emit(name, round(time.perf_counter() - started, 2), f"s for {args.sentences} sentences of "
             f"{out.size(1) - 1} tokens")


if __name__ == "__main__":
    main()
