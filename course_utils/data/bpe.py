"""Subword tokens: byte-pair encoding (BPE) with Hugging Face ``tokenizers``.

    from course_utils.data.bpe import train_bpe
    bpe = train_bpe(load_corpus("multi30k", "train"), vocab_size=4000)
    ids = bpe.encode("A man rides a bike.")   # [<bos>, ..., <eos>]: ints, <bos>=1, <eos>=2
    bpe.decode(ids)                           # "A man rides a bike." (detokenized, for sacreBLEU)

One vocabulary is shared by English and German (one BPE model trained on
both sides of the training split). The two languages share a script and
many pieces (names, numbers, punctuation, cognates such as "Hand" and
"Gitarre"), so one vocabulary covers both with fewer pieces in all, a name is
split the same way on both sides, and the model may tie its embeddings
(section 3.4 of the paper), though the course's ``Transformer`` keeps its own.

Text is split on spaces first (the space becomes part of the next piece, as
"▁"), so decoding gives back the exact text: ``decode(encode(s)) == s`` for
any sentence with single spaces whose characters all occur in the training
text. Case is kept (BLEU is then reported cased). The ids of the four
specials are the course's: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator, Sequence

import torch

from . import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK, UNK_ID, translation_pairs

# Tokenizers' thread pool warns on every later fork (a subprocess, a DataLoader worker)
# once it has been used; the course's corpora are small enough for one thread per call.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class SubwordTokenizer:
    """A trained BPE tokenizer: text -> ids with ``<bos>``/``<eos>``, and ids -> detokenized text."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer
        for token, expected in zip(SPECIALS, (PAD_ID, BOS_ID, EOS_ID, UNK_ID)):
            if tokenizer.token_to_id(token) != expected:
                raise ValueError(f"{token} must have id {expected}, not {tokenizer.token_to_id(token)}.")

    @property
    def vocab_size(self) -> int:
        """The number of ids (specials included): the size of the model's embedding tables."""
        return self.tokenizer.get_vocab_size()

    def tokens(self, text: str) -> list[str]:
        """The subword pieces of ``text`` (no ``<bos>``/``<eos>``): ``"▁A", "▁man", "▁ri", "des", ...``."""
        return self.tokenizer.encode(text).tokens

    def encode(self, text: str) -> list[int]:
        """``[<bos>] + piece ids + [<eos>]`` (as the course's word-level ``encode``)."""
        return [BOS_ID, *self.tokenizer.encode(text).ids, EOS_ID]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many sentences at once (faster)."""
        return [[BOS_ID, *e.ids, EOS_ID] for e in self.tokenizer.encode_batch(list(texts))]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Detokenized text of ``ids``, without ``<bos>`` and ``<pad>``, stopping at the first ``<eos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        kept = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (BOS_ID, PAD_ID):
                kept.append(i)
        return self.tokenizer.decode(kept, skip_special_tokens=False)

    def decode_batch(self, batch: torch.Tensor | Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each row of a ``(B, T)`` batch."""
        return [self.decode(row) for row in batch]

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer as one JSON file (reload with :meth:`load`)."""
        self.tokenizer.save(str(path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "SubwordTokenizer":
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))


def train_bpe_on_texts(texts: Iterable[str], vocab_size: int = 4000, min_frequency: int = 2) -> SubwordTokenizer:
    """Train BPE on ``texts`` until ``vocab_size`` ids (specials and single characters included)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFC()  # "ü" as one character, however it was typed
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return SubwordTokenizer(tokenizer)


def _both_sides(corpus_split, langs: Sequence[str]) -> Iterator[str]:
    for pair in translation_pairs(corpus_split):
        for lang in langs:
            yield pair[lang]


def train_bpe(corpus_split, vocab_size: int = 4000, langs: Sequence[str] = ("en", "de"),
              min_frequency: int = 2) -> SubwordTokenizer:
    """One BPE vocabulary shared by ``langs``, trained on both sides of a corpus split (the training split)."""
    return train_bpe_on_texts(_both_sides(corpus_split, langs), vocab_size, min_frequency)


def prepare_subwords(corpus_split, bpe: SubwordTokenizer, src_lang: str = "en",
                     tgt_lang: str = "de") -> tuple[list[list[int]], list[list[int]]]:
    """Encode a split with ``bpe``: ``(src_ids, tgt_ids)``, ready for ``make_batches``."""
    pairs = translation_pairs(corpus_split)
    return bpe.encode_batch([p[src_lang] for p in pairs]), bpe.encode_batch([p[tgt_lang] for p in pairs])


__all__ = ["SubwordTokenizer", "prepare_subwords", "train_bpe", "train_bpe_on_texts"]
