"""Lesson 10's network path, run offline on a saved copy of a tiny Marian.

Without a network the lesson runs on its tiny stand-in (nbval compares that run). The code that loads the
real model from the hub (``MarianMTModel.from_pretrained`` and ``MarianTokenizer.from_pretrained``, with
SentencePiece) is exercised here on a folder that holds what the hub would send, in the same layout: a tiny
random ``MarianMTModel`` saved with ``save_pretrained``, and a ``MarianTokenizer`` made of two SentencePiece
models trained on the bundled corpus. The lesson finds it through ``COURSE_MARIAN_MODEL`` and takes its
"real model" path from the first cell to the last: the port, the proofs, beam search and BLEU.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from downstream_harness import SOLUTIONS, run_lesson

pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

LESSON = "10_real_translator"
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def saved_marian(tmp_path_factory) -> Path:
    """A folder such as from_pretrained reads: a tiny random MarianMTModel and its SentencePiece tokenizer."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    from course_utils.data import load_corpus

    folder = tmp_path_factory.mktemp("marian")
    pairs = load_corpus("bundled", "train")["translation"][:2000]
    pieces = []
    for lang in ("en", "de"):
        (folder / f"{lang}.txt").write_text("\n".join(p[lang] for p in pairs), encoding="utf-8")
        spm.SentencePieceTrainer.train(input=str(folder / f"{lang}.txt"), model_prefix=str(folder / lang),
                                       vocab_size=150, model_type="unigram", bos_id=-1, eos_id=-1, unk_id=0,
                                       minloglevel=2)
        processor = spm.SentencePieceProcessor(model_file=str(folder / f"{lang}.model"))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}  # Marian's layout: end of sentence 0, the pad id last
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    saved = folder / "opus-mt-tiny"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")  # not needed for German
        tokenizer = MarianTokenizer(str(folder / "en.model"), str(folder / "de.model"), str(folder / "vocab.json"))
    tokenizer.save_pretrained(saved)
    size, pad = len(vocab), len(vocab) - 1
    config = MarianConfig(vocab_size=size, decoder_vocab_size=size, d_model=16, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, max_position_embeddings=128, activation_function="swish",
                          scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0)
    torch.manual_seed(0)
    marian = MarianMTModel(config)
    marian.generation_config.bad_words_ids = [[pad]]
    with torch.no_grad():  # weights of a trained model's scale: clear winners at every decoding step
        for name, p in marian.named_parameters():
            if p.dim() == 2 and "embed_positions" not in name:
                p.normal_(0.0, p.size(1) ** -0.5)
        marian.final_logits_bias.normal_()
    marian.save_pretrained(saved)
    return saved


def test_the_network_path_runs_on_a_saved_copy(saved_marian: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COURSE_MARIAN_MODEL", str(saved_marian))
    monkeypatch.delenv("COURSE_FAST", raising=False)  # the lesson's own configuration, not the tests' stand-in
    for path in SOLUTIONS.glob("*.ipynb"):
        shutil.copy(path, tmp_path)
    ns = run_lesson(LESSON, {}, tmp_path).namespace  # every cell; the checker cell must pass
    assert ns["REAL"] is True and ns["reason"] is None
    assert type(ns["tokens"]).__name__ == "MarianTokens"
    assert ns["config"].vocab_size == json.loads((saved_marian / "vocab.json").read_text())["<pad>"] + 1
    assert ns["same"] is True  # greedy_decode picked marian.generate's tokens
    pairs, hypotheses = ns["pairs"], ns["hypotheses"]
    assert len(hypotheses) == len(pairs) > 0 and all(isinstance(h, str) for h in hypotheses)
    assert ns["where"].startswith("the bundled corpus")  # Multi30k is out of reach offline: said, not raised
