"""course_utils.data.batching: batches by tokens (lesson 08), and the padding they leave."""

from __future__ import annotations

import random

import pytest
import torch

from course_utils import data
from course_utils.data import make_batches, pad_batch
from course_utils.data.batching import padding_fraction, token_batch_indices, token_batches


def _captions(n: int = 12000, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Pairs with Multi30k's lengths in BPE pieces (<bos> and <eos> included): about 17 on average, 5 to 60.

    Measured on its training split with 4,000 pieces: log(source length) has mean 2.8 and deviation 0.3;
    log(target length / source length) mean 0.044 and deviation 0.167.
    """
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        length = min(60, max(5, round(rng.lognormvariate(2.8, 0.3))))
        other = min(60, max(5, round(length * rng.lognormvariate(0.044, 0.167))))  # its translation
        src.append([1] + [rng.randrange(4, 4000) for _ in range(length - 2)] + [2])
        tgt.append([1] + [rng.randrange(4, 4000) for _ in range(other - 2)] + [2])
    return src, tgt


def _unpad(row: torch.Tensor, pad_id: int) -> tuple:
    values = row.tolist()
    while values and values[-1] == pad_id:
        values.pop()
    return tuple(values)


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_pair_is_in_exactly_one_batch_padded_on_the_right(shuffle):
    src, tgt = _captions(800)
    pad_id = 5000  # never a real id here, and not 0
    batches = token_batches(src, tgt, max_tokens=400, pad_id=pad_id, shuffle=shuffle, seed=3)
    seen = []
    for s, t in batches:
        assert s.dtype == t.dtype == torch.long and s.size(0) == t.size(0) >= 1
        for side in (s, t):
            is_pad = side == pad_id
            assert torch.equal(is_pad, is_pad.cummax(dim=1).values), "padding only at the end of a row"
            assert not bool(is_pad.all(dim=0).any()), "a column of padding only"
        seen += [(_unpad(a, pad_id), _unpad(b, pad_id)) for a, b in zip(s, t)]
    assert sorted(seen) == sorted(zip(map(tuple, src), map(tuple, tgt)))
    groups = token_batch_indices([len(x) for x in src], [len(y) for y in tgt], 400, shuffle=shuffle, seed=3)
    assert sorted(i for group in groups for i in group) == list(range(len(src)))


@pytest.mark.parametrize("max_tokens", [64, 400, 2500])
def test_no_batch_holds_more_positions_than_the_budget_on_either_side(max_tokens):
    src, tgt = _captions(1500)
    for s, t in token_batches(src, tgt, max_tokens, pad_id=0, seed=1):
        assert s.numel() <= max_tokens and t.numel() <= max_tokens, (s.shape, t.shape)


def test_batches_are_filled_up_to_the_budget():
    """In length order (no shuffle), the first pair of each batch would not have fitted in the batch before it."""
    src, tgt = _captions(1500)
    src_len, tgt_len = [len(x) for x in src], [len(y) for y in tgt]
    groups = token_batch_indices(src_len, tgt_len, 600, shuffle=False)
    for group, following in zip(groups, groups[1:]):
        grown = group + following[:1]
        widest = max(max(src_len[i] for i in grown), max(tgt_len[i] for i in grown))
        assert len(grown) * widest > 600


def test_a_pair_longer_than_the_budget_gets_a_batch_of_its_own():
    src = [[1, 7, 2], [1] + [9] * 40 + [2], [1, 8, 8, 2]]
    tgt = [[1, 6, 2], [1, 5, 2], [1, 4, 2]]
    batches = token_batches(src, tgt, max_tokens=12, pad_id=0, shuffle=False)
    assert [s.size(0) for s, _ in batches] == [2, 1]
    assert batches[1][0].size(1) == 42, "the long pair is kept whole, never cut or dropped"


def test_pairs_of_similar_length_go_together_and_padding_drops():
    """On Multi30k's lengths: less padding than make_batches' buckets, far less than random batches."""
    src, tgt = _captions()
    by_tokens = token_batches(src, tgt, max_tokens=2500, pad_id=0, seed=0)
    per_batch = round(len(src) / len(by_tokens))  # the same number of pairs per batch, on average
    assert 110 <= per_batch <= 140, "lesson 08's budget holds about as many pairs as its 128-pair batches"
    bucketed = make_batches(src, tgt, per_batch, pad_id=0, seed=0)
    order = list(range(len(src)))
    random.Random(0).shuffle(order)
    at_random = [(pad_batch([src[i] for i in order[j:j + per_batch]], 0),
                  pad_batch([tgt[i] for i in order[j:j + per_batch]], 0)) for j in range(0, len(order), per_batch)]
    ours, theirs, random_ = (padding_fraction(b, 0) for b in (by_tokens, bucketed, at_random))
    assert ours < 0.1 and 1.5 * ours < theirs < random_, (ours, theirs, random_)
    spans = sorted(int(lengths.max() - lengths.min()) for lengths in ((t != 0).sum(dim=1) for _, t in by_tokens))
    assert spans[len(spans) // 2] <= 1, "a typical batch holds targets of one or two lengths"


def test_the_same_seed_gives_the_same_batches_and_the_global_rngs_are_untouched():
    src, tgt = _captions(600)
    random.seed(11)
    torch.manual_seed(11)
    before = random.getstate(), torch.get_rng_state()
    a = token_batches(src, tgt, 300, pad_id=0, seed=7)
    b = token_batches(src, tgt, 300, pad_id=0, seed=7)
    c = token_batches(src, tgt, 300, pad_id=0, seed=8)
    assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])
    assert len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
    as_sets = lambda batches: sorted(tuple(sorted(map(tuple, s.tolist()))) for s, _ in batches)  # noqa: E731
    assert as_sets(a) != as_sets(c), "another seed (epoch) breaks ties differently: other batches, not only another order"
    unshuffled = token_batch_indices([len(x) for x in src], [len(y) for y in tgt], 300, shuffle=False, seed=1)
    assert unshuffled == token_batch_indices([len(x) for x in src], [len(y) for y in tgt], 300, shuffle=False, seed=2)


def test_wrong_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="sentences"):
        token_batches([[1, 2]], [], 10, pad_id=0)
    with pytest.raises(ValueError, match="max_tokens"):
        token_batches([[1, 2]], [[1, 2]], 0, pad_id=0)


def test_padding_fraction_counts_both_sides():
    src = torch.tensor([[1, 4, 2], [1, 2, 0]])  # 1 pad in 6
    tgt = torch.tensor([[1, 2, 0, 0]])  # 2 pads in 4
    assert padding_fraction([(src, tgt)], pad_id=0) == pytest.approx(3 / 10)
    assert padding_fraction([], pad_id=0) == 0.0


def test_the_package_exports_them():
    assert data.token_batches is token_batches and data.padding_fraction is padding_fraction
