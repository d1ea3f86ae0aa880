"""The course's data: the parallel corpus, tokens, vocabularies and batches.

    from course_utils.data import PAD_ID, build_vocab, load_corpus, make_batches, prepare, token_lists

    train = load_corpus("bundled", "train")          # datasets.Dataset, column "translation"
    src_vocab = build_vocab(token_lists(train, "en"))
    tgt_vocab = build_vocab(token_lists(train, "de"))
    src_ids, tgt_ids = prepare(train, src_vocab, tgt_vocab)
    for src, tgt in make_batches(src_ids, tgt_ids, batch_size=64, pad_id=PAD_ID):
        ...                                          # LongTensors (B, L_src), (B, L_tgt)

The bundled corpus (``corpus/``) is made by this project (see its README.md):
short English-German sentence pairs from a small bilingual grammar, in the
opus100 schema. ``load_corpus("multi30k")`` and ``load_corpus("opus100")``
load real data from the Hugging Face hub instead, when a network is
available, and ``load_corpus("path/to/folder")`` reads local files (see
``files.py``). Real text needs subword tokens: see ``bpe.py``; batches with a
budget of tokens rather than a number of sentences are in ``batching.py``.

Lesson 00 asks learners to write ``build_vocab``, ``encode``, ``decode`` and
``pad_batch`` themselves; the versions here are the course's own, which later
lessons import so that they do not depend on a learner's notebook.
"""

from __future__ import annotations

import os
import random
import re
import socket
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch

from .files import load_local, to_course_schema
from .files import quiet as _quiet

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
SPLITS = ("train", "validation", "test")
_SPLIT_ALIASES = {"valid": "validation", "dev": "validation", "val": "validation"}

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

OPUS100 = "Helsinki-NLP/opus-100"
MULTI30K = "bentrevett/multi30k"
#: Hub sources: name -> (hub dataset, configuration).
HUB = {"opus100": (OPUS100, "de-en"), "multi30k": (MULTI30K, None)}


class CorpusUnavailableError(ConnectionError):
    """The requested corpus cannot be loaded here (typically: no network for opus100)."""


# ---------------------------------------------------------------------------
# Loading.


def corpus_path(split: str = "train") -> Path:
    """The bundled file of ``split`` ("train", "validation" or "test"; "valid" also works)."""
    name = _SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise ValueError(f"Unknown split {split!r}: choose one of {', '.join(SPLITS)}.")
    return CORPUS_DIR / f"{name}.jsonl.gz"


def load_corpus(source: str | os.PathLike = "bundled", split: str = "train"):
    """A ``datasets.Dataset`` with a ``translation`` column of ``{"en": str, "de": str}``.

    ``source`` is one of

    * ``"bundled"``: the corpus shipped with the course (works offline);
    * ``"multi30k"``: Multi30k (29,000 training pairs of image captions) from
      the Hugging Face hub copy ``bentrevett/multi30k``;
    * ``"opus100"``: opus100 en-de from the hub (about 1M training pairs);
    * a folder of local files: parallel ``train.en``/``train.de`` (plain or
      ``.gz``, the layout of the Multi30k repository's ``data/task1/raw``) or
      ``train.jsonl`` in the hub's layout (see :mod:`course_utils.data.files`).

    The hub sources raise :class:`CorpusUnavailableError` when there is no
    network. ``split`` is "train", "validation" or "test" ("valid", "val" and
    "dev" also work); a local folder also takes its own split names, such as
    ``"test_2016_flickr"``.
    """
    import datasets

    if isinstance(source, str) and source in HUB:
        return _load_hub(datasets, source, _SPLIT_ALIASES.get(split, split))
    if source == "bundled":
        path = corpus_path(split)
        with _quiet(datasets):  # no progress bars: the same output on the first and every later load
            return datasets.load_dataset("json", data_files={"data": str(path)}, split="data")
    if Path(source).is_dir():
        return load_local(source, split)
    raise ValueError(
        f"Unknown corpus source {source!r}: use 'bundled', 'multi30k', 'opus100', or the path of a folder of corpus files."
    )


def _load_hub(datasets, source: str, split: str):
    """``source`` ("multi30k" or "opus100") from the Hugging Face hub, in the course's schema."""
    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}: choose one of {', '.join(SPLITS)}.")
    name, config = HUB[source]
    if _offline():
        reason = "the Hugging Face hub is switched to offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)"
        raise CorpusUnavailableError(_offline_message(source, reason))
    unreachable = _hub_unreachable()
    if unreachable:  # say so at once, rather than after datasets' retries (half a minute of messages)
        raise CorpusUnavailableError(_offline_message(source, unreachable))
    try:
        loaded = datasets.load_dataset(name, config, split=split) if config else datasets.load_dataset(name, split=split)
    except Exception as exc:  # no network, DNS failure, hub unreachable...
        if _looks_like_network_error(exc):
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise CorpusUnavailableError(_offline_message(source, f"{type(exc).__name__}: {first}")) from exc
        raise
    return to_course_schema(loaded, name) if source == "multi30k" else loaded


def _offline() -> bool:
    flags = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    if any(os.environ.get(f, "").strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags):
        return True
    try:
        import datasets

        return bool(getattr(datasets.config, "HF_HUB_OFFLINE", False) or getattr(datasets.config, "HF_DATASETS_OFFLINE", False))
    except Exception:  # pragma: no cover - an unusual datasets install
        return False


def _hub_unreachable(timeout: float = 3.0) -> str:
    """Why the hub cannot be reached: '' when a connection opens, or when a proxy stands between (datasets finds out)."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return ""
    address = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = address.hostname or "huggingface.co", address.port or (80 if address.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return f"no connection to {host} within {timeout:g} s ({type(exc).__name__}: {exc})"
    return ""


def _looks_like_network_error(exc: BaseException) -> bool:
    names = {"ConnectionError", "ConnectError", "ConnectTimeout", "Timeout", "ReadTimeout", "OfflineModeIsEnabled",
             "LocalEntryNotFoundError", "MaxRetryError", "NameResolutionError", "gaierror"}
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)) and not isinstance(exc, FileNotFoundError):
            return True
        if any(cls.__name__ in names for cls in type(exc).__mro__):
            return True
        text = str(exc).lower()
        if "offline" in text or "couldn't reach" in text or "connection" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _offline_message(source: str, reason: str) -> str:
    name, config = HUB[source]
    local = (
        " or, with the files of the public Multi30k repository (data/task1/raw), load_corpus('path/to/raw', split)"
        if source == "multi30k" else ""
    )
    return (
        f"Cannot load {source} ({name}{', ' + config if config else ''}): this needs a network connection to the "
        f"Hugging Face hub, and it is not available here ({reason}).\n"
        f"Use the corpus bundled with the course instead, which works offline: load_corpus('bundled', split){local}."
    )


# ---------------------------------------------------------------------------
# Tokens.

_TOKEN = re.compile(r"\w+|[^\w\s]")
_NO_SPACE_BEFORE = set(".,!?;:)]}%")
_NO_SPACE_AFTER = set("([{")


def tokenize(text: str) -> list[str]:
    """Lowercase words and punctuation marks: ``"Ich weiß, dass…"`` -> ``["ich", "weiß", ",", "dass", ...]``.

    Words are runs of Unicode letters and digits (umlauts and ß included);
    every other non-space character is a token of its own.
    """
    return _TOKEN.findall(text.lower())


def detokenize(tokens: Sequence[str]) -> str:
    """Join tokens into text, with no space before closing punctuation (for sacreBLEU).

    ``detokenize(tokenize(s)) == s.lower()`` for the corpus sentences.
    """
    out = ""
    for token in tokens:
        if out and token not in _NO_SPACE_BEFORE and out[-1] not in _NO_SPACE_AFTER:
            out += " "
        out += token
    return out


# ---------------------------------------------------------------------------
# Vocabularies (the course's own versions of the lesson-00 exercises).


def build_vocab(token_lists: Iterable[Sequence[str]], min_freq: int = 1) -> dict[str, int]:
    """Token -> id: the four specials at 0..3, then every token seen at least ``min_freq`` times.

    Ordinary tokens are ordered by decreasing count, ties alphabetically, so
    the result does not depend on the order of the sentences.
    """
    counts = Counter(token for tokens in token_lists for token in tokens)
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for token, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if count >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def encode(tokens: Sequence[str], vocab: Mapping[str, int]) -> list[int]:
    """``[<bos>] + ids + [<eos>]``; tokens missing from ``vocab`` become ``<unk>``."""
    unk = vocab[UNK]
    return [vocab[BOS]] + [vocab.get(token, unk) for token in tokens] + [vocab[EOS]]


def decode(ids: Sequence[int] | torch.Tensor, vocab: Mapping[str, int]) -> list[str]:
    """Tokens of ``ids``, without ``<bos>`` and ``<pad>``, stopping at the first ``<eos>``.

    ``ids`` may be a list of ints or a 1-D tensor.
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    itos = invert(vocab)
    skip = {vocab[BOS], vocab[PAD]}
    tokens = []
    for i in ids:
        i = int(i)
        if i == vocab[EOS]:
            break
        if i not in skip:
            tokens.append(itos.get(i, UNK))
    return tokens


def unknown_rate(token_lists: Iterable[Sequence[str]], vocab: Mapping[str, int]) -> float:
    """The fraction of tokens that ``vocab`` does not hold (they would all become ``<unk>``)."""
    total = unknown = 0
    for tokens in token_lists:
        total += len(tokens)
        unknown += sum(token not in vocab for token in tokens)
    return unknown / total if total else 0.0


def invert(vocab: Mapping[str, int]) -> dict[int, str]:
    """Id -> token."""
    return {i: token for token, i in vocab.items()}


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """A LongTensor ``(B, L_max)``: each sequence on its own row, padded on the right with ``pad_id``."""
    longest = max((len(s) for s in sequences), default=0)
    rows = [[*seq, *[pad_id] * (longest - len(seq))] for seq in sequences]  # B lists of L_max ids
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), longest)  # (B, L_max), also when B or L_max is 0


# ---------------------------------------------------------------------------
# From a corpus split to batches.


def translation_pairs(corpus_split) -> list[dict[str, str]]:
    """A split's pairs, ``{"en": ..., "de": ...}`` each, as a list read in one go.

    In datasets 4 and later, ``split["translation"]`` is a lazy column that formats one row per step
    of a loop: 20 times slower over the 30,000 bundled pairs than a slice, which reads the column at
    once (measured with datasets 5.2: 0.28 s against 0.014 s). A slice is also a list in older versions.
    """
    return corpus_split["translation"][:]


def token_lists(corpus_split, lang: str) -> list[list[str]]:
    """The tokenized sentences of one language (``"en"`` or ``"de"``) of a split."""
    return [tokenize(pair[lang]) for pair in translation_pairs(corpus_split)]


def prepare(corpus_split, src_vocab: Mapping[str, int], tgt_vocab: Mapping[str, int],
            src_lang: str = "en", tgt_lang: str = "de") -> tuple[list[list[int]], list[list[int]]]:
    """Tokenize and encode a split: ``(src_ids, tgt_ids)``, each sentence with ``<bos>`` and ``<eos>``."""
    pairs = translation_pairs(corpus_split)
    src_ids = [encode(tokenize(p[src_lang]), src_vocab) for p in pairs]
    tgt_ids = [encode(tokenize(p[tgt_lang]), tgt_vocab) for p in pairs]
    return src_ids, tgt_ids


def make_batches(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], batch_size: int,
                 pad_id: int, shuffle: bool = True, seed: int = 0,
                 bucket_batches: int = 50) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Padded ``(src, tgt)`` LongTensor batches of sentences of similar length.

    The pairs are cut into buckets of ``bucket_batches * batch_size`` pairs
    (in a random order seeded by ``seed`` when ``shuffle``, else in the given
    order); each bucket is sorted by length and cut into batches, so a batch
    holds little padding; then, when ``shuffle``, the batches are shuffled
    (seeded). The same arguments always give the same batches, and the global
    RNGs are not used. Without ``shuffle`` nothing random happens, but batches
    are still grouped by length: to keep the original sentence order (to line
    translations up with references), slice the lists and call
    :func:`pad_batch` yourself.
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"src_ids has {len(src_ids)} sentences but tgt_ids has {len(tgt_ids)}.")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    rng = random.Random(seed)
    order = list(range(len(src_ids)))
    if shuffle:
        rng.shuffle(order)
    bucket = max(1, bucket_batches) * batch_size
    groups: list[list[int]] = []
    for start in range(0, len(order), bucket):
        chunk = sorted(order[start : start + bucket], key=lambda i: (len(src_ids[i]), len(tgt_ids[i])))
        groups += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
    if shuffle:
        rng.shuffle(groups)
    return [
        (pad_batch([src_ids[i] for i in group], pad_id), pad_batch([tgt_ids[i] for i in group], pad_id))
        for group in groups
    ]


from .batching import padding_fraction, token_batches  # noqa: E402  (batching uses pad_batch, defined above)

__all__ = [
    "BOS", "BOS_ID", "CORPUS_DIR", "CorpusUnavailableError", "EOS", "EOS_ID", "HUB", "MULTI30K", "OPUS100", "PAD", "PAD_ID",
    "SPECIALS", "SPLITS", "UNK", "UNK_ID", "build_vocab", "corpus_path", "decode", "detokenize", "encode",
    "invert", "load_corpus", "load_local", "make_batches", "pad_batch", "padding_fraction", "prepare", "token_batches",
    "token_lists", "tokenize", "translation_pairs", "unknown_rate",
]
