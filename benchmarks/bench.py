"""Benchmark of the course's from-scratch Transformer on the bundled English-German corpus.

Trains the model written in the solution notebooks (loaded with
``course_utils.notebook.load_exercises``: the notebooks are the single source of
the model, the schedule, the loss, the decoding and the default configuration)
and prints one JSON line per figure, ``{"name": ..., "value": ..., "unit": ...}``:

* ``test_bleu``: sacreBLEU (case-insensitive, detokenized) of greedy translations
  of the held-out test split;
* ``train_seconds``: wall-clock time of the training loop on this machine;
* ``step_time_ratio``: training-step time of our model divided by that of
  ``torch.nn.Transformer`` with the same configuration, wrapped in the same
  embeddings, positional encoding and output projection: the median, over
  interleaved steps after a warm-up, of the two times on the same batch; and
  ``sdpa_step_time_ratio``, the same for our model with lesson 07's
  ``with_fused_attention`` (its attention computed by
  ``F.scaled_dot_product_attention``, dropout on the weights kept), all three
  models timed in one run;
* ``beam4_bleu`` (and ``greedy_bleu``, the same as ``test_bleu``): the same test
  sentences translated with lesson 07's beam search (beam 4, length penalty 0.6), and
  ``beam4_time_ratio``, its decoding time over greedy decoding's;
* ``kv_cache_speedup``: greedy generation of 64 tokens (never stopping at EOS) for 100
  test sentences, without lesson 07's key/value cache over with it (interleaved medians),
  and ``kv_cache_speedup_batch1`` for one sentence;
* and a few more (steps, tokens per second, parameters, losses, threads).

Everything runs on the CPU, also on a machine with a GPU: these are the figures of a
laptop. Lesson 08's ``benchmarks/levers.py --device cuda`` measures a GPU.

    python benchmarks/bench.py            # the default configuration (about 2-3 minutes on 2 cores)
    python benchmarks/bench.py --quick    # a tiny smoke run (seconds): checks the plumbing only

Progress messages go to stderr, the JSON lines to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"

# (notebook, names it defines): everything the benchmark runs comes from the course's notebooks.
COURSE_CODE = [
    ("01_attention.ipynb", ["scaled_dot_product_attention"]),
    ("02_masks.ipynb", ["make_padding_mask", "make_causal_mask", "make_target_mask"]),
    ("03_positional_encoding.ipynb", ["sinusoidal_positional_encoding", "PositionalEncoding"]),
    ("04_multi_head_attention.ipynb", ["MultiHeadAttention"]),
    ("05_transformer.ipynb", ["FeedForward", "EncoderLayer", "DecoderLayer", "Transformer"]),
    ("06_training.ipynb", ["TrainConfig", "device", "seed_everything", "noam_lr", "make_noam_scheduler",
                           "label_smoothing_loss", "greedy_decode", "build_model", "make_optimizer",
                           "train_step", "batch_stream", "translate"]),
    ("07_inference.ipynb", ["gnmt_length_penalty", "beam_search", "decode_step", "FusedAttention",
                            "with_fused_attention"]),
]

# The smoke configuration of --quick: it exercises every stage in seconds, and learns nothing.
QUICK = dict(d_model=32, num_heads=2, num_layers=1, d_ff=64, batch_size=32, num_steps=8, warmup_steps=4,
             test_sentences=24)


def log(message: str) -> None:
    """A progress message, on stderr (stdout carries only the JSON lines)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def load_course_code(folder: Path = SOLUTIONS) -> dict[str, Any]:
    """Run the defining cells of the course notebooks in ``folder``, in one namespace."""
    from course_utils.notebook import load_exercises

    # A real module as the namespace: the notebooks' dataclasses look their module up in sys.modules.
    module = types.ModuleType("course_code")
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. tqdm's note that ipywidgets is missing
        for notebook, names in COURSE_CODE:
            load_exercises(Path(folder) / notebook, names, namespace=namespace)
    return namespace


class TorchTransformer(nn.Module):
    """torch.nn.Transformer (post-LN, no final norms) inside the same embeddings, positional encoding and generator as ours."""

    def __init__(self, PositionalEncoding, src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff,
                 dropout, max_len, pad_id):
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, dropout, max_len)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nested-tensor notes, irrelevant to training
            self.core = nn.Transformer(d_model, num_heads, num_layers, num_layers, d_ff, dropout, batch_first=True)
        self.core.encoder.norm = None  # our post-LN stacks end with a layer's own LayerNorm,
        self.core.decoder.norm = None  # so the extra final LayerNorms are removed for a like-for-like model
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def forward(self, src, tgt):
        src_pad = src == self.pad_id  # (B, L_src), True = hidden (PyTorch's convention)
        tgt_pad = tgt == self.pad_id  # (B, L_tgt)
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).triu(1)  # True = hidden
        x = self.positional_encoding(self.src_embed(src) * math.sqrt(self.d_model))  # (B, L_src, d_model)
        y = self.positional_encoding(self.tgt_embed(tgt) * math.sqrt(self.d_model))  # (B, L_tgt, d_model)
        out = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                        memory_key_padding_mask=src_pad)  # (B, L_tgt, d_model)
        return self.generator(out)  # (B, L_tgt, tgt_vocab_size)


def step_time_ratio(code: dict[str, Any], config, src_vocab_size: int, tgt_vocab_size: int,
                    batches: Sequence[tuple[torch.Tensor, torch.Tensor]], warmup: int, repeats: int) -> dict[str, float]:
    """Median training-step times of our model, of its fused-attention copy and of nn.Transformer, interleaved."""
    from course_utils.data import PAD_ID

    ours = code["build_model"](config, src_vocab_size, tgt_vocab_size)
    fused = code["with_fused_attention"](ours, config.dropout)  # a copy: the same weights, trained separately
    torch.manual_seed(config.seed)
    theirs = TorchTransformer(code["PositionalEncoding"], src_vocab_size, tgt_vocab_size, config.d_model,
                              config.num_heads, config.num_layers, config.d_ff, config.dropout, config.max_len, PAD_ID)
    models = {"ours": ours, "fused": fused, "torch": theirs}
    optimizers = {name: code["make_optimizer"](m) for name, m in models.items()}
    schedulers = {name: code["make_noam_scheduler"](optimizers[name], config.d_model, config.warmup_steps)
                  for name in models}
    times: dict[str, list[float]] = {name: [] for name in models}
    names = list(models)
    for i in range(warmup + repeats):
        src, tgt = batches[i % len(batches)]
        order = names[i % len(names):] + names[: i % len(names)]  # each model goes first, second and last in turn
        for name in order:
            start = time.perf_counter()
            code["train_step"](models[name], src, tgt, optimizers[name], schedulers[name], config)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[name].append(elapsed)

    def paired(name: str) -> float:
        """Median over the timed steps of (this model's time / nn.Transformer's) on the same batch."""
        return statistics.median(a / b for a, b in zip(times[name], times["torch"]))

    ours_s, fused_s, torch_s = (statistics.median(times[name]) for name in ("ours", "fused", "torch"))
    return {"ours_step_ms": 1000 * ours_s, "fused_step_ms": 1000 * fused_s, "torch_step_ms": 1000 * torch_s,
            "ratio": paired("ours"), "sdpa_ratio": paired("fused"),
            "torch_params": sum(p.numel() for p in theirs.parameters())}


def translate_with(code: dict[str, Any], search: Callable, model, sentences, src_vocab, tgt_vocab, config):
    """Lesson 06's translate, with ``search(model, src, max_len, bos_id, eos_id, pad_id)`` in place of greedy_decode."""
    greedy = code["greedy_decode"]
    code["greedy_decode"] = search  # translate looks the name up in the course's namespace when it runs
    try:
        return code["translate"](model, sentences, src_vocab, tgt_vocab, config)
    finally:
        code["greedy_decode"] = greedy


@torch.no_grad()
def forced_generation_seconds(code: dict[str, Any], model, src: torch.Tensor, tokens: int, cached: bool) -> float:
    """Seconds to generate ``tokens`` columns (BOS included) greedily, never stopping at EOS, with or without the cache."""
    from course_utils.data import BOS_ID

    model.eval()
    start = time.perf_counter()
    memory = model.encode(src)  # (B, L_src, d_model)
    ys = torch.full((src.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)  # (B, 1)
    cache: dict = {}
    while ys.size(1) < tokens:
        if cached:
            logits, cache = code["decode_step"](model, ys[:, -1:], memory, src, cache)  # (B, V)
        else:
            logits = model.decode(ys, memory, src)[:, -1]  # (B, V): the whole prefix again
        ys = torch.cat([ys, logits.argmax(dim=-1, keepdim=True)], dim=1)  # (B, t + 1)
    return time.perf_counter() - start


def kv_cache_speedup(code: dict[str, Any], model, src: torch.Tensor, tokens: int, repeats: int = 3) -> dict[str, float]:
    """Median seconds of forced generation without and with the cache, interleaved (after one warm-up of each)."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(repeats + 1):
        for cached in ((False, True) if i % 2 == 0 else (True, False)):
            seconds = forced_generation_seconds(code, model, src, tokens, cached)
            if i > 0:
                times[cached].append(seconds)
    uncached, cached = statistics.median(times[False]), statistics.median(times[True])
    return {"uncached_s": uncached, "cached_s": cached, "speedup": uncached / cached}


def run(config, code: dict[str, Any], max_seconds: float, ratio_warmup: int, ratio_repeats: int,
        kv_tokens: int = 64) -> list[dict]:
    """Train, evaluate and time; returns the figures (the cache's speedup over ``kv_tokens`` generated tokens)."""
    import sacrebleu

    from course_utils.data import PAD_ID, build_vocab, load_corpus, make_batches, prepare, token_lists

    figures: list[dict] = []

    def figure(name: str, value: float, unit: str) -> None:
        figures.append({"name": name, "value": value, "unit": unit})

    train_split = load_corpus("bundled", "train")
    test_split = load_corpus("bundled", "test")
    src_vocab = build_vocab(token_lists(train_split, "en"))
    tgt_vocab = build_vocab(token_lists(train_split, "de"))
    train_src, train_tgt = prepare(train_split, src_vocab, tgt_vocab)
    log(f"{len(train_split)} training pairs, vocabularies {len(src_vocab)} / {len(tgt_vocab)}; {config}")

    # Training, against the clock: num_steps steps, or fewer if max_seconds runs out first.
    code["seed_everything"](config.seed)
    model = code["build_model"](config, len(src_vocab), len(tgt_vocab))
    optimizer = code["make_optimizer"](model)
    scheduler = code["make_noam_scheduler"](optimizer, config.d_model, config.warmup_steps)
    batches = code["batch_stream"](train_src, train_tgt, config)
    steps, tokens, losses = 0, 0, []
    start = time.perf_counter()
    while steps < config.num_steps and time.perf_counter() - start < max_seconds:
        src, tgt = next(batches)
        losses.append(code["train_step"](model, src, tgt, optimizer, scheduler, config))
        steps += 1
        tokens += int((tgt[:, 1:] != PAD_ID).sum())
        if steps % 100 == 0:
            log(f"step {steps}: loss {sum(losses[-100:]) / len(losses[-100:]):.3f} "
                f"({time.perf_counter() - start:.0f} s)")
    train_seconds = time.perf_counter() - start
    log(f"trained {steps} steps in {train_seconds:.1f} s")

    # Held-out test BLEU, greedy decoding.
    pairs = test_split["translation"][: config.test_sentences]
    start = time.perf_counter()
    hypotheses = code["translate"](model, [p["en"] for p in pairs], src_vocab, tgt_vocab, config)
    decode_seconds = time.perf_counter() - start
    bleu = sacrebleu.metrics.BLEU(lowercase=True)
    score = bleu.corpus_score(hypotheses, [[p["de"] for p in pairs]])
    log(f"test BLEU {score.score:.2f} on {len(pairs)} sentences ({bleu.get_signature()})")

    # Beam search (lesson 07): a beam of 4 and the paper's length penalty, on the same test sentences.
    def beam4(model, src, max_len, bos_id, eos_id, pad_id):
        return code["beam_search"](model, src, 4, max_len, bos_id, eos_id, pad_id, length_penalty=0.6)

    start = time.perf_counter()
    beam_hypotheses = translate_with(code, beam4, model, [p["en"] for p in pairs], src_vocab, tgt_vocab, config)
    beam_seconds = time.perf_counter() - start
    beam_score = bleu.corpus_score(beam_hypotheses, [[p["de"] for p in pairs]])
    log(f"beam 4: test BLEU {beam_score.score:.2f} in {beam_seconds:.1f} s (greedy: {score.score:.2f} in "
        f"{decode_seconds:.1f} s)")

    # The key/value cache (lesson 07): 64 tokens (16 in a quick run) for 100 test sentences (and for one), forced
    # to full length.
    from course_utils.data import encode, pad_batch, tokenize

    test_src = [encode(tokenize(p["en"]), src_vocab) for p in test_split["translation"][:100]]
    kv_tokens = min(kv_tokens, config.max_len)
    batch = pad_batch(test_src, PAD_ID)  # (100, L_src)
    kv_batch = kv_cache_speedup(code, model, batch, kv_tokens)
    kv_one = kv_cache_speedup(code, model, batch[:1, : len(test_src[0])], kv_tokens)
    log(f"kv cache, {kv_tokens} tokens: batch of {batch.size(0)}: {kv_batch['uncached_s']:.2f} s -> "
        f"{kv_batch['cached_s']:.2f} s; one sentence: {kv_one['uncached_s']:.3f} s -> {kv_one['cached_s']:.3f} s")

    # Step time against torch.nn.Transformer, on training batches of the usual kind.
    timing_batches = make_batches(train_src, train_tgt, config.batch_size, PAD_ID, shuffle=True, seed=12345)
    timing = step_time_ratio(code, config, len(src_vocab), len(tgt_vocab), timing_batches[:16],
                             ratio_warmup, ratio_repeats)
    log(f"step time: ours {timing['ours_step_ms']:.1f} ms, ours with fused attention {timing['fused_step_ms']:.1f} ms, "
        f"nn.Transformer {timing['torch_step_ms']:.1f} ms")

    tail = losses[-min(50, len(losses)):] or [float("nan")]
    figure("test_bleu", round(score.score, 2), "BLEU")
    figure("train_seconds", round(train_seconds, 2), "s")
    figure("step_time_ratio", round(timing["ratio"], 3), "x")
    figure("sdpa_step_time_ratio", round(timing["sdpa_ratio"], 3), "x")
    figure("train_steps", steps, "steps")
    figure("train_tokens_per_second", round(tokens / train_seconds, 1), "tokens/s")
    figure("final_train_loss", round(sum(tail) / len(tail), 4), "nats/token")
    figure("ours_step_ms", round(timing["ours_step_ms"], 2), "ms")
    figure("fused_step_ms", round(timing["fused_step_ms"], 2), "ms")
    figure("torch_step_ms", round(timing["torch_step_ms"], 2), "ms")
    figure("parameters", sum(p.numel() for p in model.parameters()), "params")
    figure("test_sentences", len(pairs), "sentences")
    figure("decode_seconds", round(decode_seconds, 2), "s")
    figure("greedy_bleu", round(score.score, 2), "BLEU")
    figure("beam4_bleu", round(beam_score.score, 2), "BLEU")
    figure("beam4_decode_seconds", round(beam_seconds, 2), "s")
    figure("beam4_time_ratio", round(beam_seconds / decode_seconds, 3), "x")
    figure("kv_cache_speedup", round(kv_batch["speedup"], 3), "x")
    figure("kv_cache_speedup_batch1", round(kv_one["speedup"], 3), "x")
    figure("kv_uncached_seconds", round(kv_batch["uncached_s"], 3), "s")
    figure("kv_cached_seconds", round(kv_batch["cached_s"], 3), "s")
    figure("threads", torch.get_num_threads(), "threads")
    return figures


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run (checks the plumbing, learns nothing)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the configuration's)")
    parser.add_argument("--max-seconds", type=float, default=180.0, help="stop training after this long (default 180)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--ratio-steps", type=int, default=60, help="timed steps per model for the step-time ratios")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help="folder of the notebooks to load the code from")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, emit: Callable[[str], None] = print) -> list[dict]:
    """Run the benchmark and print one JSON line per figure; returns the figures."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    code = load_course_code(args.solutions)
    code["device"] = torch.device("cpu")  # the lessons' functions read this global: the CPU even beside a GPU
    config = code["TrainConfig"]()
    if args.quick:
        config = dataclasses.replace(config, **QUICK)
    if args.steps is not None:
        config = dataclasses.replace(config, num_steps=args.steps)
    warmup, repeats = (1, 2) if args.quick else (3, args.ratio_steps)
    figures = run(config, code, args.max_seconds, warmup, repeats, kv_tokens=16 if args.quick else 64)
    for f in figures:
        emit(json.dumps(f))
    return figures


if __name__ == "__main__":
    main()
