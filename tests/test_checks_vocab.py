"""Lesson 00 checkers: correct variants pass, each known mistake gets its diagnosis."""

from __future__ import annotations

import itertools
import types
from collections import Counter, OrderedDict, defaultdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from helpers import expect
from course_utils.checks import check_build_vocab, check_decode, check_encode, check_pad_batch

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def stub(*args, **kwargs):
    raise NotImplementedError()


# ==========================================================================
# build_vocab

# -- correct ----------------------------------------------------------------
# (each keeps the specials' ids when a special occurs in the data as a word: the table's ids are fixed)


def vocab_counter(token_lists, min_freq=1):
    counts = Counter(t for tokens in token_lists for t in tokens)
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for token, count in counts.most_common():
        if count >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def vocab_loops_sorted(token_lists, min_freq=1):
    counts = {}
    for sentence in token_lists:
        for token in sentence:
            counts[token] = counts.get(token, 0) + 1
    kept = sorted(t for t, c in counts.items() if c >= min_freq and t not in SPECIALS)
    return {t: i for i, t in enumerate(SPECIALS + kept)}


def vocab_ordered_first_seen(token_lists, min_freq=1):
    counts = defaultdict(int)
    order = []
    for sentence in token_lists:
        for token in sentence:
            if token not in counts:
                order.append(token)
            counts[token] += 1
    vocab = OrderedDict((s, i) for i, s in enumerate(SPECIALS))
    for token in order:
        if not counts[token] < min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def vocab_reverse_alphabetical_from_counter(token_lists, min_freq=1):
    counts = Counter()
    for tokens in token_lists:
        counts.update(tokens)
    rare_first = sorted(set(counts) - set(SPECIALS), reverse=True)
    vocab = dict(zip(SPECIALS, range(4)))
    vocab.update({t: 4 + i for i, t in enumerate(t for t in rare_first if counts[t] >= min_freq)})
    return vocab


class UnkDict(dict):
    """A dict whose unknown keys read as <unk> without being added."""

    def __missing__(self, key):
        return dict.__getitem__(self, "<unk>")


def vocab_dict_subclass_missing_is_unk(token_lists, min_freq=1):
    vocab = UnkDict({s: i for i, s in enumerate(SPECIALS)})
    counts = Counter(t for s in token_lists for t in s)
    for token in sorted(counts):
        if counts[token] >= min_freq and not dict.__contains__(vocab, token):
            vocab[token] = len(vocab)
    return vocab


def vocab_read_only_view(token_lists, min_freq=1):
    return types.MappingProxyType(vocab_loops_sorted(token_lists, min_freq))


def vocab_enumerate_most_common(token_lists, min_freq=1):
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for i, (token, count) in enumerate(Counter(t for s in token_lists for t in s if t not in vocab).most_common(), start=4):
        if count >= min_freq:  # most_common is sorted, so the kept ones come first: no holes
            vocab[token] = i
    return vocab


def vocab_numpy_ids(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    kept = [t for t in counts if counts[t] >= min_freq and t not in SPECIALS]
    ids = np.arange(4 + len(kept))
    return {t: ids[i] for i, t in enumerate(SPECIALS + kept)}


def vocab_added_when_count_reaches_min_freq(token_lists, min_freq=1):
    vocab, counts = {s: i for i, s in enumerate(SPECIALS)}, Counter()
    for sentence in token_lists:
        for token in sentence:
            counts[token] += 1
            if counts[token] == max(min_freq, 1) and token not in vocab:
                vocab[token] = len(vocab)
    return vocab


@pytest.mark.parametrize("fn", [vocab_counter, vocab_loops_sorted, vocab_ordered_first_seen, vocab_reverse_alphabetical_from_counter,
                                vocab_dict_subclass_missing_is_unk, vocab_read_only_view, vocab_enumerate_most_common,
                                vocab_numpy_ids, vocab_added_when_count_reaches_min_freq])
def test_build_vocab_correct_variants_pass(fn):
    result = check_build_vocab(fn)
    assert result.passed, str(result)


def test_build_vocab_course_version_passes():
    from course_utils.data import build_vocab

    assert check_build_vocab(build_vocab).passed


# -- wrong ----------------------------------------------------------------------


def vocab_strict_greater(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return {t: i for i, t in enumerate(SPECIALS + [t for t, c in counts.items() if c > min_freq])}


def vocab_ignores_min_freq(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return {t: i for i, t in enumerate(SPECIALS + list(counts))}


def vocab_counts_once_per_sentence(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in set(s))
    return {t: i for i, t in enumerate(SPECIALS + sorted(t for t, c in counts.items() if c >= min_freq))}


def vocab_specials_in_wrong_order(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    specials = ["<unk>", "<pad>", "<bos>", "<eos>"]
    return {t: i for i, t in enumerate(specials + sorted(t for t, c in counts.items() if c >= min_freq))}


def vocab_no_specials(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return {t: i for i, t in enumerate(sorted(t for t, c in counts.items() if c >= min_freq))}


def vocab_specials_last(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return {t: i for i, t in enumerate(sorted(t for t, c in counts.items() if c >= min_freq) + SPECIALS)}


def vocab_ids_collide_with_specials(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({t: i for i, t in enumerate(sorted(t for t, c in counts.items() if c >= min_freq))})
    return vocab


def vocab_off_by_one(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for token in sorted(t for t, c in counts.items() if c >= min_freq):
        vocab[token] = len(vocab) + 1
    return vocab


def vocab_skips_first_sentence(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists[1:] for t in s)
    return {t: i for i, t in enumerate(SPECIALS + sorted(t for t, c in counts.items() if c >= min_freq))}


def vocab_lowercases(token_lists, min_freq=1):
    counts = Counter(t.lower() for s in token_lists for t in s)
    return {t: i for i, t in enumerate(SPECIALS + sorted(t for t, c in counts.items() if c >= min_freq))}


def vocab_characters(token_lists, min_freq=1):
    counts = Counter(ch for s in token_lists for t in s for ch in t)
    return {t: i for i, t in enumerate(SPECIALS + sorted(t for t, c in counts.items() if c >= min_freq))}


def vocab_inverted(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return dict(enumerate(SPECIALS + sorted(t for t, c in counts.items() if c >= min_freq)))


def vocab_as_list(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return SPECIALS + sorted(t for t, c in counts.items() if c >= min_freq)


def vocab_wrong_default(token_lists, min_freq=2):
    return vocab_counter(token_lists, min_freq)


def vocab_mutates_input(token_lists, min_freq=1):
    token_lists.append(list(SPECIALS))  # "make sure the specials are counted"
    counts = Counter(t for s in token_lists for t in s)
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for token, count in counts.items():
        if count >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def vocab_returns_counts(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return Counter({**{s: 0 for s in SPECIALS}, **{t: c for t, c in counts.items() if c >= min_freq}})


def vocab_float_ids(token_lists, min_freq=1):
    return {t: float(i) for t, i in vocab_counter(token_lists, min_freq).items()}


def vocab_set_specials(token_lists, min_freq=1):
    vocab = {}
    for s in ["<eos>", "<bos>", "<unk>", "<pad>"]:  # as iteration over a set may give them
        vocab[s] = len(vocab)
    for t, c in Counter(t for s in token_lists for t in s).items():
        if c >= min_freq:
            vocab[t] = len(vocab)
    return vocab


def vocab_defaultdict_numbering(token_lists, min_freq=1):
    vocab = defaultdict(lambda: len(vocab))
    for s in SPECIALS:
        vocab[s]
    for token, count in Counter(t for s in token_lists for t in s).items():
        if count >= min_freq:
            vocab[token]
    return vocab


def vocab_defaultdict_int(token_lists, min_freq=1):
    vocab = defaultdict(int)
    for i, s in enumerate(SPECIALS):
        vocab[s] = i
    for token, count in Counter(t for s in token_lists for t in s).items():
        if count >= min_freq:
            vocab[token] = len(vocab)
    return vocab


def vocab_most_common_10(token_lists, min_freq=1):
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for token, count in Counter(t for s in token_lists for t in s).most_common(10):
        if count >= min_freq:
            vocab[token] = len(vocab)
    return vocab


def vocab_most_common_20(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return {t: i for i, t in enumerate(SPECIALS + [t for t, c in counts.most_common(20) if c >= min_freq])}


def vocab_mutable_default(token_lists, min_freq=1, vocab={}):  # noqa: B006 (the mistake under test)
    if not vocab:
        vocab.update({s: i for i, s in enumerate(SPECIALS)})
    for token, count in Counter(t for s in token_lists for t in s).items():
        if count >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


_SHARED = {}


def vocab_global_returned_as_copy(token_lists, min_freq=1):
    if not _SHARED:
        _SHARED.update({s: i for i, s in enumerate(SPECIALS)})
    for token, count in Counter(t for s in token_lists for t in s).items():
        if count >= min_freq and token not in _SHARED:
            _SHARED[token] = len(_SHARED)
    return dict(_SHARED)


def vocab_enumerate_then_filter(token_lists, min_freq=1):
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for i, (token, count) in enumerate(Counter(t for s in token_lists for t in s).items()):
        if count >= min_freq:
            vocab[token] = i + 4
    return vocab


def vocab_drops_punctuation(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s if t.isalnum())
    return {t: i for i, t in enumerate(SPECIALS + [t for t, c in counts.items() if c >= min_freq])}


def vocab_returns_stoi_and_itos(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    itos = SPECIALS + [t for t, c in counts.items() if c >= min_freq]
    return {t: i for i, t in enumerate(itos)}, itos


def vocab_counts_as_values(token_lists, min_freq=1):
    counts = Counter(t for s in token_lists for t in s)
    return {**{s: i for i, s in enumerate(SPECIALS)}, **{t: c for t, c in counts.items() if c >= min_freq}}


def vocab_tensor_ids(token_lists, min_freq=1):
    return {t: torch.tensor(i) for t, i in vocab_counter(token_lists, min_freq).items()}


def vocab_one_id_for_all(token_lists, min_freq=1):
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for token, count in Counter(t for s in token_lists for t in s).items():
        if count >= min_freq:
            vocab[token] = 4
    return vocab


BUILD_VOCAB_WRONG = [
    (vocab_strict_greater, ["misses tokens", "`>=`, not `>`"]),
    (vocab_ignores_min_freq, ["keeps tokens seen fewer than 2 times", "min_freq"]),
    (vocab_counts_once_per_sentence, ["not once per sentence", "'sehr'"]),
    (vocab_specials_in_wrong_order, ["special tokens", "wrong ids", "<pad>=0, <bos>=1, <eos>=2, <unk>=3"]),
    (vocab_set_specials, ["wrong ids", "wrong order"]),
    (vocab_no_specials, ["lacks the special tokens", "<pad>"]),
    (vocab_specials_last, ["wrong ids", "specials come first"]),
    (vocab_ids_collide_with_specials, ["share an id", "from 4 on"]),
    (vocab_off_by_one, ["0..", "contiguous", "off by one"]),
    (vocab_skips_first_sentence, ["misses tokens", "skip the first sentence"]),
    (vocab_lowercases, ["not in the sentences", "'berlin'", "lowercased"]),
    (vocab_characters, ["not in the sentences", "single characters", "iterate over a string"]),
    (vocab_inverted, ["from ids to tokens", "token -> id"]),
    (vocab_as_list, ["should return a dict", "a list of"]),
    (vocab_wrong_default, ["build_vocab(token_lists) misses", "default of min_freq is 1"]),
    (vocab_mutates_input, ["changed its input `token_lists`"]),
    (vocab_returns_counts, ["wrong ids"]),
    (vocab_float_ids, ["integer ids"]),
    (vocab_defaultdict_numbering, ["defaultdict", "made-up token", "plain dict"]),
    (vocab_defaultdict_int, ["defaultdict", "with the value 0", "plain dict"]),
    (vocab_most_common_10, ["capped vocabulary", "keeps 10 of the 24", "most_common()"]),
    (vocab_most_common_20, ["last sentence", "loop stops early", "capped vocabulary"]),
    (vocab_mutable_default, ["very same dict object", "mutable default argument"]),
    (vocab_global_returned_as_copy, ["'ente'", "earlier call", "mutable default argument"]),
    (vocab_enumerate_then_filter, ["holes", "numbered before", "len(vocab)"]),
    (vocab_drops_punctuation, ["punctuation", "'.'"]),
    (vocab_returns_stoi_and_itos, ["tuple of two things", "return only the dict"]),
    (vocab_counts_as_values, ["how often it occurs", "not to an id"]),
    (vocab_tensor_ids, ["plain python ints", "tensor"]),
    (vocab_one_id_for_all, ["24 tokens share an id", "all have id 4"]),
    (vocab_ids_collide_with_specials, ["2 tokens share an id"]),
]


@pytest.mark.parametrize("fn, phrases", BUILD_VOCAB_WRONG, ids=[f.__name__ for f, _ in BUILD_VOCAB_WRONG])
def test_build_vocab_mistakes_are_diagnosed(fn, phrases):
    expect(check_build_vocab(fn), "failed", *phrases)


# ==========================================================================
# encode

BOS_ID, EOS_ID, UNK_ID = 1, 2, 3


def encode_plain(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, vocab["<unk>"]) for t in tokens] + [vocab["<eos>"]]


def encode_loop(tokens, vocab):
    ids = [vocab["<bos>"]]
    for token in tokens:
        if token in vocab:
            ids.append(vocab[token])
        else:
            ids.append(vocab["<unk>"])
    ids.append(vocab["<eos>"])
    return ids


def encode_constants_and_unpacking(tokens, vocab):
    return [BOS_ID, *(vocab[t] if t in vocab else UNK_ID for t in tokens), EOS_ID]


def encode_try_except(tokens, vocab):
    ids = []
    for token in ["<bos>", *tokens, "<eos>"]:
        try:
            ids.append(vocab[token])
        except KeyError:
            ids.append(vocab["<unk>"])
    return ids


def encode_numpy_ints(tokens, vocab):
    return [np.int64(i) for i in encode_plain(tokens, vocab)]


def encode_map_chain(tokens, vocab):
    return list(map(lambda t: vocab.get(t, vocab["<unk>"]), itertools.chain(["<bos>"], tokens, ["<eos>"])))


def encode_via_tensor(tokens, vocab):
    body = torch.tensor([vocab.get(t, UNK_ID) for t in tokens], dtype=torch.long)
    return F.pad(body, (1, 1), value=0).index_put_((torch.tensor([0]),), torch.tensor(BOS_ID)).tolist()[:-1] + [EOS_ID]


def encode_defaultdict_copy(tokens, vocab):
    lookup = defaultdict(lambda: vocab["<unk>"], vocab)  # a copy: looking up unknown tokens grows only the copy
    return [lookup["<bos>"], *map(lookup.__getitem__, tokens), lookup["<eos>"]]


def encode_is_not_none(tokens, vocab):
    # <pad> has id 0, which is falsy: compare with None, never `vocab.get(t) or ...`
    return [vocab["<bos>"]] + [i if (i := vocab.get(t)) is not None else vocab["<unk>"] for t in tokens] + [vocab["<eos>"]]


@pytest.mark.parametrize("fn", [encode_plain, encode_loop, encode_constants_and_unpacking, encode_via_tensor,
                                encode_try_except, encode_numpy_ints, encode_map_chain, encode_defaultdict_copy,
                                encode_is_not_none])
def test_encode_correct_variants_pass(fn):
    result = check_encode(fn)
    assert result.passed, str(result)


def test_encode_course_version_passes():
    from course_utils.data import encode

    assert check_encode(encode).passed


def encode_no_specials(tokens, vocab):
    return [vocab.get(t, vocab["<unk>"]) for t in tokens]


def encode_no_bos(tokens, vocab):
    return [vocab.get(t, vocab["<unk>"]) for t in tokens] + [vocab["<eos>"]]


def encode_no_eos(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, vocab["<unk>"]) for t in tokens]


def encode_swapped(tokens, vocab):
    return [vocab["<eos>"]] + [vocab.get(t, vocab["<unk>"]) for t in tokens] + [vocab["<bos>"]]


def encode_by_position(tokens, vocab):
    keys = list(vocab)
    return [1] + [keys.index(t) if t in vocab else 3 for t in tokens] + [2]


def encode_key_error(tokens, vocab):
    return [vocab["<bos>"]] + [vocab[t] for t in tokens] + [vocab["<eos>"]]


def encode_unknown_as_pad(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, 0) for t in tokens] + [vocab["<eos>"]]


def encode_drops_unknown(tokens, vocab):
    return [vocab["<bos>"]] + [vocab[t] for t in tokens if t in vocab] + [vocab["<eos>"]]


def encode_adds_to_vocab(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.setdefault(t, len(vocab)) for t in tokens] + [vocab["<eos>"]]


def encode_mutates_tokens(tokens, vocab):
    tokens.insert(0, "<bos>")
    tokens.append("<eos>")
    return [vocab.get(t, vocab["<unk>"]) for t in tokens]


def encode_lowercases(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t.lower(), vocab["<unk>"]) for t in tokens] + [vocab["<eos>"]]


def encode_returns_tokens(tokens, vocab):
    return ["<bos>"] + [t if t in vocab else "<unk>" for t in tokens] + ["<eos>"]


def encode_returns_tensor(tokens, vocab):
    return torch.tensor(encode_plain(tokens, vocab))


def encode_wrong_unk_id(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, len(vocab)) for t in tokens] + [vocab["<eos>"]]


def encode_tuple(tokens, vocab):
    return tuple(encode_plain(tokens, vocab))


def encode_get_without_default(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t) for t in tokens] + [vocab["<eos>"]]


def encode_unk_string(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, "<unk>") for t in tokens] + [vocab["<eos>"]]


def encode_eos_twice(tokens, vocab):
    return encode_plain(tokens, vocab) + [vocab["<eos>"]]


def encode_pads_to_10(tokens, vocab):
    ids = encode_plain(tokens, vocab)
    return ids + [vocab["<pad>"]] * (10 - len(ids))


def encode_drops_punctuation(tokens, vocab):
    return encode_plain([t for t in tokens if t.isalnum()], vocab)


def encode_reversed(tokens, vocab):
    return encode_plain(list(reversed(tokens)), vocab)


def encode_list_of_tensors(tokens, vocab):
    return [torch.tensor(i) for i in encode_plain(tokens, vocab)]


def encode_deduplicates(tokens, vocab):
    return encode_plain(list(dict.fromkeys(tokens)), vocab)


def encode_get_or(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t) or vocab["<unk>"] for t in tokens] + [vocab["<eos>"]]  # <pad> is 0: falsy


def encode_skips_pad_words(tokens, vocab):
    return encode_plain([t for t in tokens if t != "<pad>"], vocab)


def encode_skips_bos_words(tokens, vocab):
    return encode_plain([t for t in tokens if t != "<bos>"], vocab)


def encode_skips_unk_words(tokens, vocab):
    return encode_plain([t for t in tokens if t != "<unk>"], vocab)


def encode_specials_as_unk(tokens, vocab):
    specials = {"<pad>", "<bos>", "<eos>", "<unk>"}
    body = [vocab[t] if t in vocab and t not in specials else vocab["<unk>"] for t in tokens]
    return [vocab["<bos>"]] + body + [vocab["<eos>"]]


def encode_stops_at_eos_word(tokens, vocab):
    ids = [vocab["<bos>"]]
    for t in tokens:
        if t == "<eos>":
            break
        ids.append(vocab.get(t, vocab["<unk>"]))
    return ids + [vocab["<eos>"]]


def encode_strips_given_frame(tokens, vocab):
    if tokens[:1] == ["<bos>"]:  # "do not add <bos> twice": but a '<bos>' token is a token like any other
        tokens = tokens[1:]
    if tokens[-1:] == ["<eos>"]:
        tokens = tokens[:-1]
    return encode_plain(tokens, vocab)


def encode_unk_after_10(tokens, vocab):
    body = [vocab.get(t, vocab["<unk>"]) if i < 10 else vocab["<unk>"] for i, t in enumerate(tokens)]
    return [vocab["<bos>"]] + body + [vocab["<eos>"]]


def make_encode_remembering_first_vocab():
    memory = {}

    def encode_remembers(tokens, vocab):
        if not memory:
            memory.update(vocab)
        return [memory["<bos>"]] + [memory.get(t, memory["<unk>"]) for t in tokens] + [memory["<eos>"]]

    return encode_remembers


ENCODE_WRONG = [
    (encode_no_specials, ["<bos> at the start and the id of <eos>"]),
    (encode_no_bos, ["<bos> (1) is missing"]),
    (encode_no_eos, ["<eos> (2) is missing"]),
    (encode_swapped, ["swapped"]),
    (encode_by_position, ["positions in the dict", "vocab[token]"]),
    (encode_key_error, ["KeyError", "vocab.get(token, vocab['<unk>'])"]),
    (encode_unknown_as_pad, ["unknown tokens became 0", "<unk>"]),
    (encode_drops_unknown, ["were dropped", "<unk>"]),
    (encode_adds_to_vocab, ["changed the vocabulary", "not added"]),
    (encode_mutates_tokens, ["changed its input `tokens`", "new list"]),
    (encode_lowercases, ["'hund' with a capital h", "exactly as given"]),
    (encode_returns_tokens, ["returned tokens", "not ids"]),
    (encode_returns_tensor, ["list of ints", "tensor"]),
    (encode_wrong_unk_id, ["unknown tokens became 13", "vocab['<unk>'] = 3"]),
    (encode_tuple, ["returned a tuple", "return a list", "ids + [...]"]),
    (encode_get_without_default, ["none", "`vocab.get(token)` gives none", "vocab.get(token, vocab['<unk>'])"]),
    (encode_unk_string, ["the string '<unk>'", "id of <unk>"]),
    (encode_eos_twice, ["<eos> is added twice"]),
    (encode_pads_to_10, ["added padding", "pad_batch"]),
    (encode_drops_punctuation, ["punctuation", "'.'"]),
    (encode_reversed, ["reverse order"]),
    (encode_list_of_tensors, ["list of tensors", "plain python ints"]),
    (encode_deduplicates, ["repeated token 'die'", "every occurrence"]),
    (encode_get_or, ["'<pad>' written as a word", "became 3", "vocab['<pad>'] = 0", "`vocab.get(token) or", "falsy"]),
    (encode_skips_pad_words, ["'<pad>' written as a word", "was dropped", "every token"]),
    (encode_skips_bos_words, ["'<bos>' written as a word", "was dropped", "every token"]),
    (encode_skips_unk_words, ["'<unk>' written as a word", "was dropped", "every token"]),
    (encode_specials_as_unk, ["'<eos>' written as a word", "became 3", "vocab['<eos>'] = 2"]),
    (encode_stops_at_eos_word, ["'<eos>' written as a word", "stopped", "only encode adds the final <eos>"]),
    (encode_strips_given_frame, ["the tokens start with '<bos>' and end with '<eos>'", "those words were dropped", "always adds"]),
    (encode_unk_after_10, ["the right number of ids (16)", "wrong ids at position", "14 tokens"]),
]


@pytest.mark.parametrize("fn, phrases", ENCODE_WRONG, ids=[f.__name__ for f, _ in ENCODE_WRONG])
def test_encode_mistakes_are_diagnosed(fn, phrases):
    expect(check_encode(fn), "failed", *phrases)


def test_encode_never_miscounts_the_ids():
    """A count is blamed only when the count is wrong (it once said "returned 6 ids ...; it should return 6")."""
    text = "\n".join(check_encode(encode_specials_as_unk).messages)
    assert "it should return" not in text, text


def test_encode_must_use_the_vocab_it_is_given():
    expect(check_encode(make_encode_remembering_first_vocab()), "failed", "second, different vocabulary",
           "the `vocab` argument")


# ==========================================================================
# decode


def decode_loop(ids, vocab):
    itos = {i: t for t, i in vocab.items()}
    tokens = []
    for i in ids:
        if i == vocab["<eos>"]:
            break
        if i in (vocab["<bos>"], vocab["<pad>"]):
            continue
        tokens.append(itos[i])
    return tokens


def decode_index_then_filter(ids, vocab):
    ids = list(ids)
    if vocab["<eos>"] in ids:
        ids = ids[: ids.index(vocab["<eos>"])]
    itos = dict(zip(vocab.values(), vocab.keys()))
    return [itos[i] for i in ids if i not in {vocab["<bos>"], vocab["<pad>"]}]


def decode_itertools(ids, vocab):
    from itertools import takewhile

    itos = [None] * len(vocab)
    for token, i in vocab.items():
        itos[i] = token
    return tuple(itos[i] for i in takewhile(lambda i: i != 2, ids) if i > 1)


def decode_via_tensor(ids, vocab):
    t = torch.tensor(ids, dtype=torch.long)
    stop = (t == 2).nonzero()
    if len(stop):
        t = t[: int(stop[0])]
    t = t[(t != 0) & (t != 1)]
    inverse = {i: tok for tok, i in vocab.items()}
    return [inverse[int(i)] for i in t]


def decode_numpy(ids, vocab):
    arr = np.asarray(ids, dtype=np.int64)
    stop = np.flatnonzero(arr == vocab["<eos>"])
    if stop.size:
        arr = arr[: stop[0]]
    arr = arr[(arr != vocab["<bos>"]) & (arr != vocab["<pad>"])]
    itos = {i: t for t, i in vocab.items()}
    return [itos[int(i)] for i in arr]


def decode_by_name(ids, vocab):
    itos = {i: t for t, i in vocab.items()}
    out = []
    for token in (itos[i] for i in ids):
        if token == "<eos>":
            break
        if token not in ("<bos>", "<pad>"):
            out.append(token)
    return out


@pytest.mark.parametrize("fn", [decode_loop, decode_index_then_filter, decode_itertools, decode_via_tensor,
                                decode_numpy, decode_by_name])
def test_decode_correct_variants_pass(fn):
    result = check_decode(fn)
    assert result.passed, str(result)


def test_decode_course_version_passes():
    from course_utils.data import decode

    assert check_decode(decode).passed


def _inverse(vocab):
    return {i: t for t, i in vocab.items()}


def decode_keeps_eos(ids, vocab):
    out = []
    for i in ids:
        if i in (0, 1):
            continue
        out.append(_inverse(vocab)[i])
        if i == 2:
            break
    return out


def decode_no_stop(ids, vocab):
    return [_inverse(vocab)[i] for i in ids if i not in (0, 1, 2)]


def decode_keeps_bos(ids, vocab):
    out = []
    for i in ids:
        if i == 2:
            break
        if i != 0:
            out.append(_inverse(vocab)[i])
    return out


def decode_keeps_pad(ids, vocab):
    out = []
    for i in ids:
        if i == 2:
            break
        if i != 1:
            out.append(_inverse(vocab)[i])
    return out


def decode_by_position(ids, vocab):
    keys = list(vocab)
    out = []
    for i in ids:
        if i == 2:
            break
        if i > 1:
            out.append(keys[i])
    return out


def decode_slice(ids, vocab):
    return [_inverse(vocab)[i] for i in ids[1:-1] if i not in (0, 2)]


def decode_strip_first(ids, vocab):
    out = []
    for i in ids[1:]:
        if i == 2:
            break
        if i != 0:
            out.append(_inverse(vocab)[i])
    return out


def decode_drops_unk(ids, vocab):
    return [t for t in decode_loop(ids, vocab) if t != "<unk>"]


def decode_joins(ids, vocab):
    return " ".join(decode_loop(ids, vocab))


def decode_pops(ids, vocab):
    while ids and ids[0] == 1:
        ids.pop(0)
    return decode_loop(ids, vocab)


def decode_returns_ids(ids, vocab):
    out = []
    for i in ids:
        if i == 2:
            break
        if i > 1:
            out.append(i)
    return out


def decode_stops_at_unk(ids, vocab):
    out = []
    for i in ids:
        if i in (2, 3):
            break
        if i > 1:
            out.append(_inverse(vocab)[i])
    return out


def decode_stops_at_pad(ids, vocab):
    out = []
    for i in ids:
        if i in (vocab["<eos>"], vocab["<pad>"]):
            break
        if i != vocab["<bos>"]:
            out.append(_inverse(vocab)[i])
    return out


def decode_drops_leading_bos_only(ids, vocab):
    ids = list(ids)
    if ids and ids[0] == vocab["<bos>"]:
        ids = ids[1:]
    out = []
    for i in ids:
        if i == vocab["<eos>"]:
            break
        if i != vocab["<pad>"]:
            out.append(_inverse(vocab)[i])
    return out


def decode_strips_trailing_pads_only(ids, vocab):
    ids = list(ids)
    while ids and ids[-1] == vocab["<pad>"]:
        ids.pop()
    out = []
    for i in ids:
        if i == vocab["<eos>"]:
            break
        if i != vocab["<bos>"]:
            out.append(_inverse(vocab)[i])
    return out


def decode_unk_as_question_mark(ids, vocab):
    return ["?" if t == "<unk>" else t for t in decode_loop(ids, vocab)]


def make_decode_remembering_first_vocab():
    memory = {}

    def decode_remembers(ids, vocab):
        if not memory:
            memory.update(_inverse(vocab))
        out = []
        for i in ids:
            if i == 2:
                break
            if i > 1:
                out.append(memory[i])
        return out

    return decode_remembers


def decode_mutable_default(ids, vocab, out=[]):  # noqa: B006  the slip itself
    itos = {i: t for t, i in vocab.items()}
    for i in ids:
        if i == vocab["<eos>"]:
            break
        if i not in (vocab["<bos>"], vocab["<pad>"]):
            out.append(itos[i])
    return out


DECODE_WRONG = [
    (decode_mutable_default, ["tokens of the earlier calls", "mutable default argument"]),
    (decode_keeps_eos, ["stop before it"]),
    (decode_no_stop, ["after the first <eos>", "break"]),
    (decode_keeps_bos, ["<bos> should be dropped"]),
    (decode_keeps_pad, ["<pad> should be dropped"]),
    (decode_by_position, ["by position in the dict", "id -> token"]),
    (decode_slice, ["first token was removed", "not by its position"]),
    (decode_strip_first, ["first token was removed", "not by its position"]),
    (decode_drops_unk, ["<unk> should stay"]),
    (decode_joins, ["one string", "list of tokens"]),
    (decode_pops, ["changed its input `ids`"]),
    (decode_returns_ids, ["returned ids", "not tokens"]),
    (decode_stops_at_unk, ["stopped at <unk>"]),
    (decode_stops_at_pad, ["a <pad> in the middle", "stopped at <pad>", "only <eos> ends"]),
    (decode_drops_leading_bos_only, ["a second <bos> in the middle", "<bos> should be dropped wherever it appears"]),
    (decode_strips_trailing_pads_only, ["<pad> should be dropped wherever it appears", "not only at the end"]),
    (decode_unk_as_question_mark, ["shown as '?'", "'<unk>'"]),
]


@pytest.mark.parametrize("fn, phrases", DECODE_WRONG, ids=[f.__name__ for f, _ in DECODE_WRONG])
def test_decode_mistakes_are_diagnosed(fn, phrases):
    expect(check_decode(fn), "failed", *phrases)


def test_decode_must_use_the_vocab_it_is_given():
    expect(check_decode(make_decode_remembering_first_vocab()), "failed", "second, different vocabulary",
           "the `vocab` argument")


# ==========================================================================
# pad_batch


def pad_full_and_copy(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    for i, s in enumerate(sequences):
        batch[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return batch


def pad_lists(sequences, pad_id):
    longest = max(map(len, sequences))
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in sequences], dtype=torch.long)


def pad_with_pad_sequence(sequences, pad_id):
    tensors = [torch.tensor(s, dtype=torch.long) for s in sequences]
    return pad_sequence(tensors, batch_first=True, padding_value=pad_id)


def pad_with_f_pad(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    rows = [F.pad(torch.as_tensor(s, dtype=torch.int64), (0, longest - len(s)), value=pad_id) for s in sequences]
    return torch.stack(rows)


def pad_full_without_dtype(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), longest), pad_id)  # an int fill value gives a long tensor
    for i, s in enumerate(sequences):
        batch[i, : len(s)] = torch.tensor(s)
    return batch


def pad_zip_longest(sequences, pad_id):
    columns = list(itertools.zip_longest(*sequences, fillvalue=pad_id))
    return torch.tensor(columns, dtype=torch.long).T.contiguous()


def pad_numpy(sequences, pad_id):
    batch = np.full((len(sequences), max(len(s) for s in sequences)), pad_id, dtype=np.int64)
    for i, s in enumerate(sequences):
        batch[i, : len(s)] = s
    return torch.from_numpy(batch)


@pytest.mark.parametrize("fn", [pad_full_and_copy, pad_lists, pad_with_pad_sequence, pad_with_f_pad,
                                pad_full_without_dtype, pad_zip_longest, pad_numpy])
def test_pad_batch_correct_variants_pass(fn):
    result = check_pad_batch(fn)
    assert result.passed, str(result)


def test_pad_batch_course_version_passes():
    from course_utils.data import pad_batch

    assert check_pad_batch(pad_batch).passed


def pad_left(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    return torch.tensor([[pad_id] * (longest - len(s)) + s for s in sequences])


def pad_zero(sequences, pad_id):
    return pad_sequence([torch.tensor(s, dtype=torch.long) for s in sequences], batch_first=True)


def pad_transposed(sequences, pad_id):
    return pad_sequence([torch.tensor(s, dtype=torch.long) for s in sequences], padding_value=pad_id)


def pad_float(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    batch = torch.zeros(len(sequences), longest) + pad_id
    for i, s in enumerate(sequences):
        batch[i, : len(s)] = torch.tensor(s)
    return batch


def pad_first_length(sequences, pad_id):
    width = len(sequences[0])
    return torch.tensor([(s + [pad_id] * width)[:width] for s in sequences])


def pad_one_extra(sequences, pad_id):
    longest = max(len(s) for s in sequences) + 1
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in sequences])


def pad_in_place(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    for s in sequences:
        s += [pad_id] * (longest - len(s))
    return torch.tensor(sequences)


def pad_sorted(sequences, pad_id):
    sequences = sorted(sequences, key=len, reverse=True)
    longest = len(sequences[0])
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in sequences])


def pad_returns_lists(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    return [s + [pad_id] * (longest - len(s)) for s in sequences]


def pad_empty_float(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    return torch.stack([F.pad(torch.tensor(s), (0, longest - len(s)), value=pad_id) for s in sequences])


def pad_cat_rows(sequences, pad_id):
    longest = max(len(s) for s in sequences)
    rows = [torch.cat([torch.tensor(s), torch.full((longest - len(s),), pad_id)]) for s in sequences]
    return torch.stack(rows)


def pad_skips_empty(sequences, pad_id):
    sequences = [s for s in sequences if s]
    longest = max(len(s) for s in sequences)
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in sequences])


def pad_sequence_without_dtype(sequences, pad_id):
    return pad_sequence([torch.tensor(s) for s in sequences], batch_first=True, padding_value=pad_id)


def pad_with_lengths(sequences, pad_id):
    return pad_full_and_copy(sequences, pad_id), torch.tensor([len(s) for s in sequences])


def pad_zip_cuts(sequences, pad_id):
    return torch.tensor(list(zip(*sequences)), dtype=torch.long).T.contiguous()


def pad_max_length_5(sequences, pad_id):
    width = min(5, max(len(s) for s in sequences))
    return torch.tensor([(s + [pad_id] * width)[:width] for s in sequences], dtype=torch.long)


def pad_three_dims(sequences, pad_id):
    return pad_full_and_copy(sequences, pad_id).unsqueeze(-1)


def pad_with_eos_id(sequences, pad_id):
    return pad_full_and_copy(sequences, 2)


def pad_replaces_zeros(sequences, pad_id):
    batch = pad_full_and_copy(sequences, 0)
    return torch.where(batch == 0, torch.tensor(pad_id), batch)


PAD_WRONG = [
    (pad_left, ["on the left", "right padding"]),
    (pad_zero, ["padding is 0", "pad_id is 13"]),
    (pad_transposed, ["transposed", "batch_first=True"]),
    (pad_float, ["torch.long", "dtype=torch.long"]),
    (pad_first_length, ["length of the first sequence"]),
    (pad_one_extra, ["column(s) too many"]),
    (pad_in_place, ["changed its input `sequences`", "seq += [pad_id]"]),
    (pad_sorted, ["different order"]),
    (pad_returns_lists, ["should return a torch.tensor", "torch.tensor(rows, dtype=torch.long)"]),
    (pad_empty_float, ["empty sequence", "torch.tensor([]) is a float tensor"]),
    (pad_cat_rows, ["empty sequence", "torch.tensor([]) is a float tensor"]),
    (pad_skips_empty, ["an empty sequence", "its row"]),
    (pad_sequence_without_dtype, ["empty sequence", "torch.tensor([]) is a float tensor"]),
    (pad_with_lengths, ["tuple of two things", "(batch, lengths)", "only the padded batch"]),
    (pad_zip_cuts, ["shortest sequence", "zip(*sequences)"]),
    (pad_max_length_5, ["fixed maximum of 5", "never drops ids"]),
    (pad_three_dims, ["3 dimensions", "(b, l_max)"]),
    (pad_with_eos_id, ["padding is 2", "pad_id is 13"]),
    (pad_replaces_zeros, ["real id 0 became pad_id", "by position"]),
]


@pytest.mark.parametrize("fn, phrases", PAD_WRONG, ids=[f.__name__ for f, _ in PAD_WRONG])
def test_pad_batch_mistakes_are_diagnosed(fn, phrases):
    expect(check_pad_batch(fn), "failed", *phrases)


def test_lesson_solutions_pass():
    from pathlib import Path

    from course_utils.notebook import load_exercises

    notebook = Path(__file__).resolve().parents[1] / "solutions" / "00_setup_and_data.ipynb"
    names = ["build_vocab", "encode", "decode", "pad_batch"]
    ns = load_exercises(str(notebook), names)
    for name, checker in zip(names, [check_build_vocab, check_encode, check_decode, check_pad_batch]):
        result = checker(ns[name])
        assert result.passed, str(result)


# ==========================================================================
# All four: not attempted, crashes, no trace, speed.

CHECKERS = [check_build_vocab, check_encode, check_decode, check_pad_batch]


@pytest.mark.parametrize("checker", CHECKERS)
def test_stub_is_not_attempted(checker):
    expect(checker(stub), "not attempted", "NotImplementedError")


@pytest.mark.parametrize("checker", CHECKERS)
def test_crash_is_an_error(checker):
    def crashes(first, second=None, **kwargs):
        return first[10 ** 6]

    expect(checker(crashes), "error", "IndexError")


@pytest.mark.parametrize("checker", CHECKERS)
def test_not_a_function(checker):
    expect(checker(None), "failed", "expected a function")


def test_checkers_are_deterministic():
    for checker, wrong in [(check_build_vocab, vocab_strict_greater), (check_encode, encode_by_position),
                           (check_decode, decode_slice), (check_pad_batch, pad_left)]:
        first = str(checker(wrong))
        assert first == str(checker(wrong)) and "0x" not in first


# --------------------------------------------------------------------------
# Literal special tokens in the data, long sentences, raw crashes with a hint (issue 9).


def vocab_renumbers_literal_specials(token_lists, min_freq=1):
    """Forgets that a special may occur in the data: '<unk>' written in a sentence gets a new id."""
    counts = Counter(t for tokens in token_lists for t in tokens)
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for token, count in counts.items():
        if count >= min_freq:
            vocab[token] = len(vocab)
    return vocab


def vocab_specials_listed_twice(token_lists, min_freq=1):
    kept = [t for t, c in Counter(t for tokens in token_lists for t in tokens).items() if c >= min_freq]
    return {t: i for i, t in enumerate(SPECIALS + kept)}


def vocab_skips_specials_in_the_data(token_lists, min_freq=1):
    """Correct: drops the specials from the counts, then numbers the rest."""
    counts = Counter(t for tokens in token_lists for t in tokens if t not in SPECIALS)
    vocab = dict(zip(SPECIALS, range(4)))
    vocab.update((t, 4 + i) for i, t in enumerate(t for t, c in counts.items() if c >= min_freq))
    return vocab


def encode_truncates(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, vocab["<unk>"]) for t in tokens[:10]] + [vocab["<eos>"]]


def encode_drops_literal_specials(tokens, vocab):
    return [vocab["<bos>"]] + [vocab.get(t, vocab["<unk>"]) for t in tokens if t not in SPECIALS] + [vocab["<eos>"]]


def pad_len_of_max(sequences, pad_id):
    width = len(max(sequences))  # the lexicographically largest list, not the longest
    batch = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for i, seq in enumerate(sequences):
        batch[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return batch


def pad_len_of_max_lists(sequences, pad_id):
    width = len(max(sequences))
    return torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in sequences], dtype=torch.long)


def pad_fixed_width(sequences, pad_id):
    width = 10
    return torch.tensor([(list(s) + [pad_id] * width)[:width] for s in sequences], dtype=torch.long)


def pad_caps_at_50(sequences, pad_id):
    width = min(50, max(len(s) for s in sequences))
    return torch.tensor([(list(s) + [pad_id] * width)[:width] for s in sequences], dtype=torch.long)


def vocab_skips_bracketed_words(token_lists, min_freq=1):
    """Skips every word written like a special, '<br>' included, instead of the four specials only."""
    counts = Counter(t for s in token_lists for t in s)
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>"])}
    for token, count in counts.most_common():
        if count >= min_freq and not (token.startswith("<") and token.endswith(">")):
            vocab[token] = len(vocab)
    return vocab


def encode_cut_at_62(tokens, vocab):
    """Cuts long sentences so that <bos> + tokens + <eos> fit in 64 ids."""
    return [vocab["<bos>"]] + [vocab.get(t, vocab["<unk>"]) for t in tokens[:62]] + [vocab["<eos>"]]


def decode_skips_a_leading_eos(ids, vocab):
    """Stops at <eos> only once a token has been produced: an empty translation then reads the tokens after it."""
    itos = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        if i == vocab["<eos>"] and out:
            break
        if i not in (vocab["<bos>"], vocab["<pad>"], vocab["<eos>"]):
            out.append(itos[i])
    return out


_PAD_BUFFER = torch.empty(256, 256, dtype=torch.long)


def pad_into_a_shared_buffer(sequences, pad_id):
    """Returns a view of one buffer that every call overwrites."""
    longest = max(len(s) for s in sequences)
    out = _PAD_BUFFER[: len(sequences), :longest]
    out.fill_(pad_id)
    for row, seq in enumerate(sequences):
        if seq:
            out[row, : len(seq)] = torch.tensor(seq)
    return out


def pad_caps_at_128(sequences, pad_id):
    width = min(128, max(len(s) for s in sequences))
    return torch.tensor([(list(s) + [pad_id] * width)[:width] for s in sequences], dtype=torch.long)


def pad_through_int16(sequences, pad_id):
    """Pads in int16, then converts: ids above 32,767 wrap around."""
    width = max(len(s) for s in sequences)
    rows = [list(s) + [pad_id] * (width - len(s)) for s in sequences]
    return torch.from_numpy(np.array(rows, dtype=np.int64).astype(np.int16)).long()


@pytest.mark.parametrize(
    "checker, fn, status, phrases",
    [
        (check_build_vocab, vocab_renumbers_literal_specials, "failed", ["'<unk>'", "literally", "already in the vocabulary"]),
        (check_build_vocab, vocab_specials_listed_twice, "failed", ["literally", "already in the vocabulary"]),
        (check_encode, encode_truncates, "failed", ["14 tokens", "every token"]),
        (check_encode, encode_drops_literal_specials, "failed", ["'<eos>'", "as a word", "vocab[token]"]),
        (check_pad_batch, pad_len_of_max, "error", ["max(sequences)", "max(len(s) for s in sequences)"]),
        (check_pad_batch, pad_len_of_max_lists, "error", ["max(sequences)", "max(len(s) for s in sequences)"]),
        (check_pad_batch, pad_fixed_width, "failed", ["4 column(s) too many"]),
        (check_pad_batch, pad_caps_at_50, "failed", ["a sequence of 70 ids", "fixed maximum of 50"]),
        (check_build_vocab, vocab_skips_bracketed_words, "failed", ["'<br>'", "only looks like a special"]),
        (check_encode, encode_cut_at_62, "failed", ["154 tokens", "no cut"]),
        (check_decode, decode_skips_a_leading_eos, "failed", ["<eos> right after <bos>", "first <eos>"]),
        (check_pad_batch, pad_into_a_shared_buffer, "failed", ["changed when pad_batch was called again"]),
        (check_pad_batch, pad_caps_at_128, "failed", ["150 ids", "fixed maximum of 128"]),
        (check_pad_batch, pad_through_int16, "failed", ["256 and more", "too narrow"]),
    ],
)
def test_specials_in_the_data_long_sentences_and_crashes(checker, fn, status, phrases):
    expect(checker(fn), status, *phrases)


def test_build_vocab_that_leaves_specials_out_of_the_counts_passes():
    expect(check_build_vocab(vocab_skips_specials_in_the_data), "passed")


def test_a_property_that_fails_later_is_not_listed_as_working():
    result = check_pad_batch(pad_caps_at_50)  # right shape on short batches, cut on 70 ids
    expect(result, "failed", "fixed maximum of 50")
    assert not any("(B, L_max)" in item for item in result.checked), result.checked
    result = check_build_vocab(vocab_renumbers_literal_specials)
    expect(result, "failed", "literally")
    assert not any("ids 0, 1, 2, 3" in item for item in result.checked), result.checked
