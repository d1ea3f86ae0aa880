"""course_utils.data: the bundled corpus, loading (also offline), tokens, vocabularies, batches."""

from __future__ import annotations

import gzip
import json
import os
import random
import socket
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


OFFLINE_RUN = """
import json
from course_utils.data import CorpusUnavailableError, load_corpus

found = {"bundled": len(load_corpus("bundled", "validation"))}
for source, split in [("opus100", "train"), ("multi30k", "test")]:
    try:
        load_corpus(source, split)
        found[source] = "loaded"
    except CorpusUnavailableError as exc:
        found[source] = "UNAVAILABLE " + str(exc)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def offline_process() -> dict:
    """One fresh process with the hub switched off: what each source gave (shared by the three tests below)."""
    out = subprocess.run([sys.executable, "-c", OFFLINE_RUN], env={**os.environ, **OFFLINE}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_load_bundled_works_offline(offline_process):
    assert offline_process["bundled"] == 1000


def test_opus100_offline_raises_a_clear_error_in_a_fresh_process(offline_process):
    said = offline_process["opus100"]
    assert said.startswith("UNAVAILABLE") and "network" in said and "load_corpus('bundled'" in said


def test_opus100_calls_the_hub_loader(monkeypatch):
    import datasets

    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False, raising=False)
    monkeypatch.setattr(data, "_hub_unreachable", lambda: "")  # as if the hub answered
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


def test_translation_pairs_reads_a_dataset_column_or_a_plain_list_in_order():
    test = load_corpus("bundled", "test")
    pairs = data.translation_pairs(test)
    assert isinstance(pairs, list) and len(pairs) == len(test)
    assert pairs[0] == test[0]["translation"] and pairs[-1] == test[len(test) - 1]["translation"]
    plain = {"translation": [{"en": "a cat", "de": "eine katze"}, {"en": "hi", "de": "hallo"}]}  # older datasets
    assert data.translation_pairs(plain) == plain["translation"]
    assert data.token_lists(plain, "de") == [["eine", "katze"], ["hallo"]]


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


# --------------------------------------------------------------------------
# Real corpora: local files in every layout, and the hub's Multi30k.
# The fixtures are written here (Multi30k-like captions made up for the tests).

CAPTIONS = [
    {"en": "A man in a blue shirt is standing on a ladder.", "de": "Ein Mann in einem blauen Hemd steht auf einer Leiter."},
    {"en": "Two young girls are playing in the sand.", "de": "Zwei junge Mädchen spielen im Sand."},
    {"en": "A dog runs through the grass.", "de": "Ein Hund läuft durch das Gras."},
    {"en": "People are walking down a busy street.", "de": "Leute gehen eine belebte Straße entlang."},
    {"en": "A woman with a red umbrella waits at the bus stop.", "de": "Eine Frau mit einem roten Regenschirm wartet an der Bushaltestelle."},
    {"en": "The boy kicks a soccer ball.", "de": "Der Junge schießt einen Fußball."},
]


def _split_pairs(split: str) -> list[dict]:
    """Different sentences per split, so a wrong split is noticed."""
    offset = {"train": 0, "val": 2, "test_2016_flickr": 4}[split]
    return [dict(CAPTIONS[(i + offset) % len(CAPTIONS)]) for i in range(3 + offset // 2)]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def _layout(folder: Path, layout: str) -> Path:
    """A corpus folder with train/val/test_2016_flickr in one layout."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test_2016_flickr"):
        pairs = _split_pairs(split)
        if layout in ("parallel", "parallel-gz"):
            data.files.write_parallel(pairs, folder, split, gz=layout == "parallel-gz")
        elif layout == "hub-jsonl":  # bentrevett/multi30k: {"en": ..., "de": ...} per line
            _write_jsonl(folder / f"{split}.jsonl", pairs)
        elif layout == "course-jsonl-gz":  # the bundled corpus: {"translation": {...}} per line
            _write_jsonl(folder / f"{split}.jsonl.gz", [{"translation": p} for p in pairs])
    return folder


LAYOUTS = ["parallel", "parallel-gz", "hub-jsonl", "course-jsonl-gz"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_local_files_load_in_the_course_schema(tmp_path, layout):
    folder = _layout(tmp_path / layout, layout)
    for split, stem in [("train", "train"), ("validation", "val"), ("valid", "val"), ("test", "test_2016_flickr"),
                        ("test_2016_flickr", "test_2016_flickr")]:
        loaded = load_corpus(folder, split)
        assert loaded.column_names == ["translation"], (layout, split)
        assert loaded["translation"] == _split_pairs(stem), (layout, split)
    assert load_corpus(str(folder), "train")["translation"] == _split_pairs("train"), "a str path works too"


def test_the_layout_of_the_multi30k_repository_files(tmp_path):
    """data/task1/raw holds gzipped parallel files: train.en.gz, val.de.gz, test_2016_flickr.en.gz, ..."""
    folder = _layout(tmp_path / "data" / "task1" / "raw", "parallel-gz")
    assert sorted(p.name for p in folder.iterdir())[:2] == ["test_2016_flickr.de.gz", "test_2016_flickr.en.gz"]
    test = load_corpus(folder, "test")
    assert test[0]["translation"] == CAPTIONS[4] and len(test) == 5


def test_every_multi30k_test_set_loads_by_its_own_name(tmp_path):
    """Lesson 08 scores test_2016_flickr, test_2017_flickr, test_2017_mscoco and test_2018_flickr from one folder."""
    folder = _layout(tmp_path / "raw", "parallel-gz")
    others = {"test_2017_flickr": CAPTIONS[:2], "test_2017_mscoco": CAPTIONS[2:3], "test_2018_flickr": CAPTIONS[3:7]}
    for name, pairs in others.items():
        data.files.write_parallel(pairs, folder, name, gz=True)
    for name, pairs in others.items():
        assert load_corpus(folder, name)["translation"] == pairs, name
    assert load_corpus(folder, "test")["translation"] == _split_pairs("test_2016_flickr"), "test is still 2016's"
    with pytest.raises(FileNotFoundError, match="test_2016_flickr.en.gz"):  # names what the folder holds
        load_corpus(folder, "test_2016_mscoco")


def test_local_files_that_do_not_line_up_are_clear_errors(tmp_path):
    folder = tmp_path / "broken"
    data.files.write_parallel(CAPTIONS, folder, "train")
    (folder / "train.de").write_text("Nur eine Zeile.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not parallel"):
        load_corpus(folder, "train")
    (folder / "val.en").write_text("Only English.\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="other language"):
        load_corpus(folder, "validation")
    with pytest.raises(FileNotFoundError, match="No 'test' split .* holds: train.de, train.en, val.en"):
        load_corpus(folder, "test")
    _write_jsonl(folder / "odd.jsonl", [{"english": "a", "german": "b"}])
    with pytest.raises(ValueError, match="expected 'en' and 'de'"):
        load_corpus(folder, "odd")
    with pytest.raises(ValueError, match="path of a folder"):
        load_corpus(tmp_path / "nowhere", "train")


def _online(monkeypatch):
    import datasets

    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False, raising=False)
    monkeypatch.setattr(data, "_hub_unreachable", lambda: "")  # as if the hub answered
    return datasets


def test_an_unreachable_hub_is_said_at_once_without_datasets_retries(monkeypatch):
    import datasets

    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy",
                 "ALL_PROXY", "all_proxy", "HF_ENDPOINT"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False, raising=False)

    def refused(address, timeout=None):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets was asked anyway"))
    with pytest.raises(CorpusUnavailableError, match="(?s)no connection to huggingface.co.*load_corpus\\('bundled'"):
        load_corpus("multi30k", "train")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")  # behind a proxy, datasets finds out itself
    assert data._hub_unreachable() == ""


def test_multi30k_comes_from_the_hub_copy_in_the_course_schema(monkeypatch, tmp_path):
    """The hub's files (train.jsonl, fields en and de) are stood in for by a local copy read with the same loader."""
    datasets = _online(monkeypatch)
    folder = _layout(tmp_path / "hub", "hub-jsonl")
    real_load = datasets.load_dataset
    calls = []

    def hub(name, *args, split=None, **kwargs):
        calls.append((name, args, split))
        files = {"train": "train.jsonl", "validation": "val.jsonl", "test": "test_2016_flickr.jsonl"}
        return real_load("json", data_files={"data": str(folder / files[split])}, split="data")

    monkeypatch.setattr(datasets, "load_dataset", hub)
    for split, stem in [("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")]:
        loaded = load_corpus("multi30k", split)
        assert loaded.column_names == ["translation"] and loaded["translation"] == _split_pairs(stem)
    assert calls == [("bentrevett/multi30k", (), "train"), ("bentrevett/multi30k", (), "validation"),
                     ("bentrevett/multi30k", (), "test")]
    with pytest.raises(ValueError, match="validation"):
        load_corpus("multi30k", "test_2016_flickr")

    def no_network(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'bentrevett/multi30k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    with pytest.raises(CorpusUnavailableError, match="(?s)multi30k .*network.*data/task1/raw"):
        load_corpus("multi30k", "train")


def test_multi30k_offline_raises_a_clear_error_in_a_fresh_process(offline_process):
    said = offline_process["multi30k"]
    assert said.startswith("UNAVAILABLE") and "bentrevett/multi30k" in said and "load_corpus('bundled'" in said


def test_unknown_rate_counts_tokens_missing_from_the_vocabulary():
    vocab = build_vocab([["a", "man", "runs"]])
    assert data.unknown_rate([["a", "man"], ["a", "zebra", "runs", "fast"]], vocab) == 2 / 6
    assert data.unknown_rate([], vocab) == 0.0


# --------------------------------------------------------------------------
# Subword tokens (BPE with Hugging Face tokenizers).

from course_utils.data.bpe import SubwordTokenizer, prepare_subwords, train_bpe, train_bpe_on_texts  # noqa: E402


@pytest.fixture(scope="module")
def bpe() -> SubwordTokenizer:
    return train_bpe(load_corpus("bundled", "train"), vocab_size=1000)


def test_bpe_keeps_the_course_specials_and_its_size(bpe):
    vocab = bpe.tokenizer.get_vocab()
    assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3]
    assert bpe.vocab_size == 1000


def test_bpe_round_trips_every_sentence_of_the_corpus_exactly(bpe, rows):
    for split_rows in rows.values():
        for row in split_rows[:300]:
            for text in row["translation"].values():
                ids = bpe.encode(text)
                assert ids[0] == 1 and ids[-1] == 2 and 3 not in ids, text
                assert bpe.decode(ids) == text, "cased, with its punctuation attached: ready for sacreBLEU"


def test_bpe_round_trips_unseen_words_through_pieces(tmp_path):
    bpe = train_bpe_on_texts([p[lang] for p in CAPTIONS for lang in ("en", "de")] * 5, vocab_size=120, min_frequency=1)
    for text in ["A girl plays in the grass.", "Eine Frau läuft.", "Mädchen"]:
        pieces = bpe.tokens(text)
        assert bpe.decode(bpe.encode(text)) == text
        assert "".join(pieces).replace("▁", " ").strip() == text
    assert len(bpe.tokens("Bushaltestelle")) > 1, "a rare long word is split into pieces, not <unk>"


def test_bpe_decode_skips_bos_and_pad_and_stops_at_eos(bpe):
    ids = bpe.encode("Die Katze schläft.")
    padded = ids + [0, 0]
    assert bpe.decode(padded) == "Die Katze schläft."
    assert bpe.decode(torch.tensor(ids[:2] + [2] + ids[2:])) == bpe.decode(ids[:2] + [2])
    assert bpe.decode([1, 2]) == "" and bpe.decode([]) == ""
    assert bpe.decode_batch(torch.tensor([padded, padded])) == ["Die Katze schläft."] * 2


def test_bpe_shares_one_vocabulary_and_splits_a_name_the_same_on_both_sides(bpe):
    pair = load_corpus("bundled", "test")[0]["translation"]
    src_ids, tgt_ids = prepare_subwords(load_corpus("bundled", "test").select(range(5)), bpe)
    assert src_ids[0] == bpe.encode(pair["en"]) and tgt_ids[0] == bpe.encode(pair["de"])
    assert bpe.tokens("Anna") == bpe.tokens("Anna"), "one tokenizer for both languages"
    assert bpe.encode_batch(["Anna geht.", "Anna walks."]) == [bpe.encode("Anna geht."), bpe.encode("Anna walks.")]


def test_bpe_saves_and_loads(bpe, tmp_path):
    bpe.save(tmp_path / "bpe.json")
    again = SubwordTokenizer.load(tmp_path / "bpe.json")
    text = "Mein Freund weiß es."
    assert again.encode(text) == bpe.encode(text) and again.vocab_size == bpe.vocab_size


def test_bpe_output_scores_100_cased_bleu_against_its_own_text(bpe):
    import sacrebleu

    refs = [p["de"] for p in load_corpus("bundled", "test")["translation"][:100]]
    hyps = [bpe.decode(bpe.encode(r)) for r in refs]
    assert hyps == refs and sacrebleu.corpus_bleu(hyps, [refs]).score == pytest.approx(100.0)
    lowered = sacrebleu.corpus_bleu([h.lower() for h in hyps], [refs]).score
    assert lowered < 100.0, "case is kept, so cased BLEU can tell"


def test_bpe_leaves_the_global_rng_alone():
    random.seed(3)
    torch.manual_seed(3)
    before = (random.getstate(), torch.get_rng_state())
    first = train_bpe_on_texts([c["en"] for c in CAPTIONS], vocab_size=80, min_frequency=1)
    second = train_bpe_on_texts([c["en"] for c in CAPTIONS], vocab_size=80, min_frequency=1)
    assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])
    assert first.tokenizer.get_vocab() == second.tokenizer.get_vocab(), "training is deterministic"
