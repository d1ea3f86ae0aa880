"""course_utils.data: the bundled corpus, loading (also offline), tokens, vocabularies, batches."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_utils import data
from course_utils.data import (
    BOS, EOS, PAD, SPECIALS, UNK, CorpusUnavailableError, build_vocab, decode, detokenize, encode,
    load_corpus, make_batches, pad_batch, prepare, tokenize,
)

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _rows(split: str) -> list[dict]:
    with gzip.open(data.corpus_path(split), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    return {split: _rows(split) for split in data.SPLITS}


# --------------------------------------------------------------------------
# The corpus files.


def test_files_have_the_opus100_schema_and_sizes(rows):
    assert {k: len(v) for k, v in rows.items()} == {"train": 30_000, "validation": 1_000, "test": 1_000}
    for split in rows.values():
        for row in split:
            assert set(row) == {"translation"} and set(row["translation"]) == {"en", "de"}
            assert all(isinstance(t, str) and t.strip() == t and t for t in row["translation"].values())


def test_splits_are_disjoint_on_both_sides(rows):
    for lang in ("en", "de"):
        seen: dict[str, str] = {}
        for split, split_rows in rows.items():
            for row in split_rows:
                text = row["translation"][lang].lower()
                assert text not in seen, f"{lang} sentence {text!r} is in {seen[text]} and {split}"
                seen[text] = split


def test_sentences_are_short_and_the_vocabulary_modest(rows):
    vocab = {"en": set(), "de": set()}
    for split_rows in rows.values():
        for row in split_rows:
            for lang, text in row["translation"].items():
                tokens = tokenize(text)
                assert 4 <= len(tokens) <= 13, text
                vocab[lang].update(tokens)
    assert 200 <= len(vocab["en"]) <= 500 and 300 <= len(vocab["de"]) <= 800


def test_sentences_look_like_sentences(rows):
    for row in rows["validation"]:
        en, de = row["translation"]["en"], row["translation"]["de"]
        assert en[0].isupper() and de[0].isupper()
        assert en[-1] in ".?" and de[-1] == en[-1]
        assert "  " not in en + de and " ," not in en + de and " ." not in en + de


def test_generator_reproduces_the_shipped_files(rows):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import make_corpus
    finally:
        sys.path.pop(0)
    state = random.getstate()
    assert make_corpus.generate() == rows
    assert random.getstate() == state


# --------------------------------------------------------------------------
# Loading.


def test_load_bundled_gives_a_dataset_with_a_translation_column():
    test = load_corpus("bundled", "test")
    assert len(test) == 1_000 and test.column_names == ["translation"]
    first = test[0]["translation"]
    assert set(first) == {"en", "de"} and first == _rows("test")[0]["translation"]
    assert len(load_corpus(split="valid")) == len(load_corpus("bundled", "validation")) == 1_000


def test_load_bundled_works_offline():
    code = "from course_utils.data import load_corpus; print(len(load_corpus('bundled', 'validation')))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "1000"


def test_opus100_offline_raises_a_clear_error_in_a_fresh_process():
    code = (
        "from course_utils.data import load_corpus, CorpusUnavailableError\n"
        "try:\n    load_corpus('opus100', 'train')\n"
        "except CorpusUnavailableError as exc:\n    print('UNAVAILABLE', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "UNAVAILABLE" in out.stdout and "network" in out.stdout and "load_corpus('bundled'" in out.stdout


def test_opus100_calls_the_hub_loader(monkeypatch):
    import datasets

    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False, raising=False)
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or "dataset")
    assert load_corpus("opus100", "validation") == "dataset"
    assert calls == [(("Helsinki-NLP/opus-100", "de-en"), {"split": "validation"})]

    def no_network(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Helsinki-NLP/opus-100' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    with pytest.raises(CorpusUnavailableError, match="bundled"):
        load_corpus("opus100", "train")


def test_unknown_source_or_split_is_a_clear_error():
    with pytest.raises(ValueError, match="bundled"):
        load_corpus("wmt14")
    with pytest.raises(ValueError, match="validation"):
        load_corpus("bundled", "dev-set")


# --------------------------------------------------------------------------
# Tokens.


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("Ich weiß, dass der Bäcker GRÜßE schickt.") == ["ich", "weiß", ",", "dass", "der", "bäcker", "grüße", "schickt", "."]
    assert tokenize("Kauft die Frau ein Auto?") == ["kauft", "die", "frau", "ein", "auto", "?"]
    assert tokenize("  ") == []


def test_detokenize_attaches_punctuation():
    assert detokenize(["wenn", "es", "regnet", ",", "schläft", "er", "."]) == "wenn es regnet, schläft er."
    assert detokenize([]) == ""


def test_tokenize_detokenize_round_trip_on_the_corpus(rows):
    for split_rows in rows.values():
        for row in split_rows:
            for text in row["translation"].values():
                assert detokenize(tokenize(text)) == text.lower()


# --------------------------------------------------------------------------
# Vocabulary helpers.


def test_specials_and_course_vocab_helpers():
    assert SPECIALS == (PAD, BOS, EOS, UNK) == ("<pad>", "<bos>", "<eos>", "<unk>")
    vocab = build_vocab([["b", "a", "a"], ["c", "a", "b"]], min_freq=2)
    assert vocab == {PAD: 0, BOS: 1, EOS: 2, UNK: 3, "a": 4, "b": 5}
    ids = encode(["a", "z", "b"], vocab)
    assert ids == [1, 4, 3, 5, 2]
    assert decode(ids + [0, 0], vocab) == ["a", UNK, "b"]
    assert decode(torch.tensor(ids), vocab) == ["a", UNK, "b"]
    assert pad_batch([[4], [], [5, 4]], 7).tolist() == [[4, 7], [7, 7], [5, 4]]


def test_prepare_encodes_both_sides():
    test = load_corpus("bundled", "test")
    src_vocab = build_vocab(data.token_lists(test, "en"))
    tgt_vocab = build_vocab(data.token_lists(test, "de"))
    src_ids, tgt_ids = prepare(test, src_vocab, tgt_vocab)
    assert len(src_ids) == len(tgt_ids) == len(test)
    first = test[0]["translation"]
    assert decode(src_ids[0], src_vocab) == tokenize(first["en"])
    assert decode(tgt_ids[0], tgt_vocab) == tokenize(first["de"])
    assert all(s[0] == 1 and s[-1] == 2 for s in src_ids + tgt_ids)


# --------------------------------------------------------------------------
# Batches.


def _toy(n: int = 500, seed: int = 3):
    rng = random.Random(seed)
    src = [[rng.randrange(4, 50) for _ in range(rng.randrange(1, 30))] for _ in range(n)]
    tgt = [[rng.randrange(4, 50) for _ in range(rng.randrange(1, 30))] for _ in range(n)]
    return src, tgt


def _unpad(row: torch.Tensor, pad_id: int) -> tuple:
    values = row.tolist()
    while values and values[-1] == pad_id:
        values.pop()
    return tuple(values)


@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_cover_every_pair_once_and_pad_with_the_pad_id(shuffle):
    src, tgt = _toy()
    pad_id = 99  # not 0, and never a real id here
    batches = make_batches(src, tgt, batch_size=32, pad_id=pad_id, shuffle=shuffle, seed=1, bucket_batches=4)
    seen = []
    for s, t in batches:
        assert s.dtype == torch.long and t.dtype == torch.long and s.shape[0] == t.shape[0] <= 32
        for row_s, row_t in zip(s, t):
            seen.append((_unpad(row_s, pad_id), _unpad(row_t, pad_id)))
        # right padding: once a row has a pad, the rest of the row is padding
        for batch in (s, t):
            is_pad = batch == pad_id
            assert torch.equal(is_pad, is_pad.cummax(dim=1).values)
            assert not bool(is_pad.all(dim=0).any()), "a column of padding only"
    assert sorted(seen) == sorted(zip(map(tuple, src), map(tuple, tgt)))


def test_batches_group_similar_lengths():
    src, tgt = _toy(2000)
    batches = make_batches(src, tgt, batch_size=32, pad_id=0, seed=0)
    padding = sum(int((s == 0).sum()) for s, _ in batches) / sum(s.numel() for s, _ in batches)
    rng = random.Random(0)
    order = list(range(len(src)))
    rng.shuffle(order)
    random_batches = [pad_batch([src[i] for i in order[j : j + 32]], 0) for j in range(0, len(order), 32)]
    random_padding = sum(int((s == 0).sum()) for s in random_batches) / sum(s.numel() for s in random_batches)
    assert padding < 0.1 < 0.3 < random_padding


def test_batches_are_deterministic_and_leave_the_global_rng_alone():
    src, tgt = _toy()
    random.seed(5)
    torch.manual_seed(5)
    before = (random.getstate(), torch.get_rng_state())
    a = make_batches(src, tgt, 16, 0, seed=7)
    b = make_batches(src, tgt, 16, 0, seed=7)
    c = make_batches(src, tgt, 16, 0, seed=8)
    assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b)) and len(a) == len(b)
    assert [x[0].tolist() for x in a] != [x[0].tolist() for x in c]
    d = make_batches(src, tgt, 16, 0, shuffle=False)
    e = make_batches(src, tgt, 16, 0, shuffle=False, seed=123)
    assert [x[0].tolist() for x in d] == [x[0].tolist() for x in e]


def test_batches_reject_mismatched_inputs():
    with pytest.raises(ValueError, match="sentences"):
        make_batches([[1]], [], 4, 0)
