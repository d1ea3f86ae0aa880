"""check_padding_mask, check_causal_mask, check_target_mask: meaning, shapes, dtype, known mistakes."""

import functools

import numpy as np
import pytest
import torch

from helpers import expect, expect_fixed_device
from course_utils.checks import check_causal_mask, check_padding_mask, check_target_mask


def stub(*args):
    # YOUR CODE HERE
    raise NotImplementedError()


# --------------------------------------------------------------------------
# Padding mask.


def padding_reference(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1).unsqueeze(2)


def padding_view(tokens, pad_id):
    B, L = tokens.shape
    return tokens.ne(pad_id).view(B, 1, 1, L)


def padding_indexing(tokens, pad_id):
    return ~(tokens == pad_id)[:, None, None, :]


def padding_where(tokens, pad_id):
    return torch.where(tokens == pad_id, False, True)[:, None, None]


def padding_numpy(tokens, pad_id):
    return torch.from_numpy(tokens.numpy() != pad_id).view(tokens.size(0), 1, 1, -1)


def padding_ones_masked_fill(tokens, pad_id):
    return torch.ones_like(tokens, dtype=torch.bool).masked_fill(tokens == pad_id, False)[:, None, None]


def padding_lru_cache_free(tokens, pad_id):
    return tokens.ne(pad_id).unsqueeze(-2).unsqueeze(-2)  # (B, 1, 1, L) with negative axes


def padding_squeeze_with_dim(tokens, pad_id):
    return (tokens != pad_id)[:, None, :, None].squeeze(-1).unsqueeze(1)  # (B, 1, L, 1) -> (B, 1, L) -> (B, 1, 1, L)


@pytest.mark.parametrize("impl", [padding_reference, padding_view, padding_indexing, padding_where,
                                  padding_ones_masked_fill, padding_lru_cache_free, padding_squeeze_with_dim],
                         ids=lambda f: f.__name__)
def test_padding_correct(impl):
    expect(check_padding_mask(impl), "passed")


def padding_in_place(tokens, pad_id):
    tokens[tokens != pad_id] = 1  # overwrites the caller's tokens
    return (tokens == 1)[:, None, None]


def padding_from_lengths(tokens, pad_id):
    lengths = (tokens != pad_id).sum(dim=1)  # assumes the padding is at the end
    positions = torch.arange(tokens.size(1))
    return (positions[None, :] < lengths[:, None]).reshape(tokens.size(0), 1, 1, -1)


def padding_cut_at_first_pad(tokens, pad_id):
    is_pad = (tokens == pad_id).long()
    return (is_pad.cumsum(dim=1) == 0)[:, None, None]  # everything after the first pad is hidden


def padding_first_token_real(tokens, pad_id):
    mask = tokens != pad_id
    mask[:, 0] = True  # assumes every sentence starts with a real token (BOS)
    return mask[:, None, None]


def padding_ones_without_device(tokens, pad_id):
    mask = torch.ones(tokens.shape, dtype=torch.bool)  # always on the CPU
    return mask.masked_fill(tokens == pad_id, False)[:, None, None, :]


_BY_SHAPE = {}


def padding_cached_by_shape(tokens, pad_id):
    key = tuple(tokens.shape)  # keyed on the shape only: a new batch of the same shape gets the old mask
    if key not in _BY_SHAPE:
        _BY_SHAPE[key] = (tokens != pad_id)[:, None, None, :]
    return _BY_SHAPE[key]


_POSITIONS = torch.arange(50)


def padding_fixed_length(tokens, pad_id):
    return (tokens[:, : len(_POSITIONS)] != pad_id)[:, None, None, :]  # written for batches of at most 50 tokens


PADDING_WRONG = [
    ("float (seed 004)", lambda t, p: (t != p).float().unsqueeze(1).unsqueeze(2), ["dtype torch.float32", "boolean"]),
    ("int", lambda t, p: (t != p).long()[:, None, None], ["dtype torch.int64", "boolean"]),
    ("inverted", lambda t, p: (t == p)[:, None, None], ["polarity is inverted", "True at real tokens"]),
    ("inverted float, pad 0 (seed 004)", lambda t, p: torch.eq(t, 0).float().view(t.size(0), 1, 1, t.size(1)),
     ["torch.float32", "boolean", "polarity is inverted"]),
    ("hard-coded 0", lambda t, p: (t != 0)[:, None, None], ["pad id 0 is hard-coded", "pad_id = 3"]),
    ("no axes", lambda t, p: t != p, ["wrong shape", "(3, 6)", "add a head axis"]),
    ("(B, 1, L) (seed 003)", lambda t, p: (t != p).unsqueeze(-2), ["wrong shape", "one axis short"]),
    ("query axis", lambda t, p: (t != p)[:, None, :, None], ["wrong shape", "query axis"]),
    ("all True", lambda t, p: torch.ones(t.size(0), 1, 1, t.size(1), dtype=torch.bool), ["true everywhere"]),
    ("in place", padding_in_place, ["changed its input `tokens` in place"]),
    ("no return", lambda t, p: None, ["forget a `return`"]),
    ("numpy", lambda t, p: (t.numpy() != p)[:, None, None], ["should be a torch.tensor", "ndarray"]),
    ("fixed batch size", lambda t, p: (t != p).reshape(3, 1, 1, -1), None),
    ("greater than pad id", lambda t, p: (t > p)[:, None, None], ["wrong values", "pad_id = 3", "real tokens"]),
    ("tokens.bool()", lambda t, p: t.bool()[:, None, None], ["pad id 0 is hard-coded"]),
    ("from lengths", padding_from_lengths, ["first n positions", "padded at the start", "tokens != pad_id"]),
    ("cut at first pad", padding_cut_at_first_pad, ["wrong values", "pad_id = 2", "from the first pad on"]),
    ("first token always real", padding_first_token_real, ["wrong values", "pad_id = 2"]),
    ("uint8", lambda t, p: (t != p).to(torch.uint8)[:, None, None], ["dtype torch.uint8", "boolean"]),
    # issue 9
    ("numpy (CPU only)", padding_numpy, ["on the cpu", "numpy"]),
    ("ones without device", padding_ones_without_device, ["creates a tensor on the cpu", "device="]),
    ("cached by shape", padding_cached_by_shape, ["earlier call", "cache"]),
    ("fixed length 50", padding_fixed_length, ["length 70", "fixed"]),
    ("bare squeeze, then unsqueeze", lambda t, p: (t != p).squeeze().unsqueeze(1).unsqueeze(2),
     ["wrong shape", "b = 1 (a single sentence)", "`squeeze` without a dim", "every axis of size 1", "view(B, 1, 1, L)"]),
]


@pytest.mark.parametrize("impl, phrases", [(f, p) for _, f, p in PADDING_WRONG], ids=[n for n, _, _ in PADDING_WRONG])
def test_padding_wrong(impl, phrases):
    if phrases is None:  # crashes on another batch size
        expect(check_padding_mask(impl), "error", "RuntimeError", "tensor of shape (2, 7)")
    else:
        expect(check_padding_mask(impl), "failed", *phrases)


def test_padding_bare_squeeze_crash_is_named():
    squeezed = lambda t, p: (t != p).squeeze()[:, None, None, :]  # noqa: E731  (L,) when B = 1: an IndexError
    expect(check_padding_mask(squeezed), "error", "IndexError", "b = 1 (a single sentence)",
           "`squeeze` without a dim", "unsqueeze")


def test_padding_stub_crash_and_trace():
    expect(check_padding_mask(stub), "not attempted", "NotImplementedError")
    expect(check_padding_mask(lambda tokens, pad_id: tokens.foo), "error", "AttributeError", "pad_id = 0")
    expect(check_padding_mask(3), "failed", "expected a function")


# --------------------------------------------------------------------------
# Causal mask.


def causal_reference(size):
    return torch.tril(torch.ones(size, size, dtype=torch.bool))


def causal_from_triu(size):
    return torch.triu(torch.ones(size, size), diagonal=1) == 0


def causal_arange(size):
    i = torch.arange(size)
    return i[:, None] >= i[None, :]


def causal_numpy(size):
    return torch.from_numpy(np.tril(np.ones((size, size), dtype=bool)))


def causal_transposed_upper(size):
    return torch.triu(torch.ones(size, size, dtype=torch.bool)).T


def causal_ones_tril_bool(size):
    return torch.ones(size, size).tril().bool()


def causal_expanded_view(size):
    return torch.ones(1, 1, dtype=torch.bool).expand(size, size).tril()  # tril of a broadcast view


@functools.lru_cache(maxsize=None)
def causal_lru_cache(size):
    return torch.ones(size, size, dtype=torch.bool).tril()  # keyed by size: right


@pytest.mark.parametrize("impl", [causal_reference, causal_from_triu, causal_arange, causal_numpy,
                                  causal_transposed_upper, causal_ones_tril_bool, causal_expanded_view,
                                  causal_lru_cache],
                         ids=lambda f: f.__name__)
def test_causal_correct(impl):
    expect(check_causal_mask(impl), "passed")


_CAUSAL_CACHE = []


def causal_cached_once(size):
    if not _CAUSAL_CACHE:
        _CAUSAL_CACHE.append(torch.ones(size, size, dtype=torch.bool).tril())  # the first size asked for
    return _CAUSAL_CACHE[0]


_TRIL_50 = torch.ones(50, 50, dtype=torch.bool).tril()


def causal_fixed_table(size):
    return _TRIL_50[:size, :size]  # right up to 50 positions


CAUSAL_WRONG = [
    ("float tril", lambda n: torch.tril(torch.ones(n, n)), ["dtype torch.float32", "boolean"]),
    ("diagonal hidden", lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1), ["diagonal is false"]),
    ("one step ahead", lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=1), ["off-by-one"]),
    ("upper triangular", lambda n: torch.triu(torch.ones(n, n, dtype=torch.bool)), ["upper-triangular"]),
    ("inverted", lambda n: torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), ["polarity is inverted"]),
    ("all True", lambda n: torch.ones(n, n, dtype=torch.bool), ["true everywhere"]),
    ("extra axes (seed 004)", lambda n: torch.triu(torch.ones((1, 1, n, n)), diagonal=1) == 0,
     ["wrong shape", "(1, 1, 5, 5)", "extra leading axes"]),
    ("hard-coded size", lambda n: torch.tril(torch.ones(5, 5, dtype=torch.bool)), ["wrong shape", "(5, 5)", "hard-coded"]),
    ("triu (seed 003)", lambda n: torch.triu(torch.ones((1, n, n)) == 1), ["wrong shape", "extra leading axes"]),
    ("additive float", lambda n: torch.triu(torch.full((n, n), float("-inf")), diagonal=1),
     ["dtype torch.float32", "boolean"]),
    ("numpy array", lambda n: np.tril(np.ones((n, n), dtype=bool)), ["should be a torch.tensor", "ndarray"]),
    ("random pattern", lambda n: (torch.arange(n)[:, None] + torch.arange(n)) % 2 == 0,
     ["wrong values", "row i"]),
    ("no return", lambda n: None, ["forget a `return`"]),
    # issue 9
    ("cached once", causal_cached_once, ["earlier call", "size = 5"]),
    ("fixed table of 50", causal_fixed_table, ["size = 64", "50 positions"]),
]


@pytest.mark.parametrize("impl, phrases", [(f, p) for _, f, p in CAUSAL_WRONG], ids=[n for n, _, _ in CAUSAL_WRONG])
def test_causal_wrong(impl, phrases):
    expect(check_causal_mask(impl), "failed", *phrases)


def test_causal_stub_crash_and_trace():
    expect(check_causal_mask(stub), "not attempted", "NotImplementedError")
    expect(check_causal_mask(lambda size: torch.ones(size).tril(1, 2)), "error", "size = 5")


# --------------------------------------------------------------------------
# Target mask.


def target_reference(tokens, pad_id):
    L = tokens.size(1)
    padding = (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, L)
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=tokens.device))  # (L, L)
    return padding & causal  # (B, 1, L, L)


def target_logical_and(tokens, pad_id):
    B, L = tokens.shape
    causal = torch.triu(torch.ones(L, L, device=tokens.device), diagonal=1) == 0
    return torch.logical_and(padding_view(tokens, pad_id), causal).expand(B, 1, L, L)


def target_broadcast_arange(tokens, pad_id):
    i = torch.arange(tokens.size(1), device=tokens.device)
    allowed = (i[None, None, :, None] >= i[None, None, None, :])
    return allowed * (tokens != pad_id).reshape(tokens.size(0), 1, 1, -1)


def target_from_float(tokens, pad_id):
    L = tokens.size(1)
    m = (tokens != pad_id).float()[:, None, None, :] * torch.tril(tokens.new_ones(L, L))
    return m.bool()


def target_causal_on_cpu(tokens, pad_id):
    L = tokens.size(1)
    return (tokens != pad_id)[:, None, None, :] & torch.tril(torch.ones(L, L, dtype=torch.bool))  # causal on the CPU


def target_loops_on_cpu(tokens, pad_id):
    B, L = tokens.shape
    mask = torch.zeros(B, 1, L, L, dtype=torch.bool)  # CPU; filled from the tokens' values
    real = (tokens != pad_id).tolist()
    for b in range(B):
        for q in range(L):
            for k in range(q + 1):
                mask[b, 0, q, k] = real[b][k]
    return mask


def make_padding_mask(tokens, pad_id):  # a learner's own, wrong (pad id 0 hard-coded)
    return (tokens != 0)[:, None, None, :]


def make_causal_mask(size):  # a learner's own, right
    return torch.ones(size, size, dtype=torch.bool).tril()


def target_with_own_parts(tokens, pad_id):
    return make_padding_mask(tokens, pad_id) & make_causal_mask(tokens.size(1)).to(tokens.device)


def target_with_own_causal(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :] & make_causal_mask(tokens.size(1)).to(tokens.device)


def target_loops_on_device(tokens, pad_id):
    B, L = tokens.shape
    mask = torch.zeros(B, 1, L, L, dtype=torch.bool, device=tokens.device)
    real = tokens != pad_id
    for q in range(L):
        mask[:, 0, q, : q + 1] = real[:, : q + 1]
    return mask


def target_squeeze_with_dim(tokens, pad_id):
    L = tokens.size(1)
    keys = (tokens != pad_id)[:, None, :, None].squeeze(3).unsqueeze(2)  # (B, 1, L, 1) -> (B, 1, L) -> (B, 1, 1, L)
    causal = torch.ones(1, L, L, dtype=torch.bool, device=tokens.device).tril().squeeze(0)  # (L, L)
    return keys & causal


def target_harmless_bare_squeeze(tokens, pad_id):
    L = tokens.size(1)
    causal = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril().squeeze()  # () when L = 1: still broadcasts
    return (tokens != pad_id)[:, None, None, :] & causal


@pytest.mark.parametrize("impl", [target_reference, target_logical_and, target_broadcast_arange, target_loops_on_device,
                                  target_from_float, target_with_own_causal, target_squeeze_with_dim,
                                  target_harmless_bare_squeeze], ids=lambda f: f.__name__)
def test_target_correct(impl):
    expect(check_target_mask(impl), "passed")


def _target(padding, causal, combine=lambda a, b: a & b):
    def impl(tokens, pad_id):
        return combine(padding(tokens, pad_id), causal(tokens.size(1)))

    return impl


KEYS = padding_reference
QUERIES = lambda t, p: (t != p)[:, None, :, None]  # noqa: E731
TRIL = causal_reference

def target_in_place(tokens, pad_id):
    tokens.masked_fill_(tokens == pad_id, -1)
    return target_reference(tokens, -1)


TARGET_WRONG = [
    ("query axis (seed 002)", _target(QUERIES, TRIL), ["query axis", "key axis"]),
    ("both axes", _target(lambda t, p: QUERIES(t, p) & KEYS(t, p), TRIL), ["query axis as well as on the key axis", "all False"]),
    ("OR", _target(KEYS, TRIL, lambda a, b: a | b), ["combined with or", "and (`&`)"]),
    ("no causal", _target(KEYS, TRIL, lambda a, b: a.expand(-1, -1, b.size(0), -1)), ["only the padding part"]),
    ("no padding", lambda t, p: TRIL(t.size(1)).expand(t.size(0), 1, -1, -1), ["only the causal part"]),
    ("hard-coded 0", _target(lambda t, p: KEYS(t, 0), TRIL), ["pad id 0 is hard-coded"]),
    ("inverted", lambda t, p: ~target_reference(t, p), ["whole mask is inverted"]),
    ("padding inverted", _target(lambda t, p: ~KEYS(t, p), TRIL), ["padding part is inverted"]),
    ("causal inverted", _target(KEYS, lambda n: ~TRIL(n)), ["causal part is inverted"]),
    ("causal transposed", _target(KEYS, lambda n: TRIL(n).T), ["upper-triangular"]),
    ("diagonal hidden", _target(KEYS, lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool), -1)),
     ["hides the diagonal"]),
    ("one step ahead", _target(KEYS, lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool), 1)),
     ["future leaks"]),
    ("float", lambda t, p: target_reference(t, p).float(), ["dtype torch.float32", "boolean"]),
    ("no head axis (seed 003)", lambda t, p: target_reference(t, p)[:, 0], ["wrong shape", "head axis is missing"]),
    ("padding mask only shape", lambda t, p: KEYS(t, p), ["wrong shape", "padding mask alone"]),
    ("in place", target_in_place, ["changed its input `tokens` in place"]),
    ("from lengths", _target(lambda t, p: padding_from_lengths(t, p), TRIL),
     ["first n positions", "padded at the start"]),
    ("heads axis of 8", lambda t, p: target_reference(t, p).expand(-1, 8, -1, -1), ["wrong shape", "(B, 1, L, L)"]),
    # issue 9
    ("causal on the CPU", target_causal_on_cpu, ["creates a tensor on the cpu", ".to(tokens.device)"]),
    ("loops, mask on the CPU", target_loops_on_cpu, ["on the cpu"]),
    ("own padding mask fails its checker", target_with_own_parts,
     ["your make_padding_mask", "fails its own checker", "fix that first", "wrong values"]),
    ("bare squeeze, then unsqueeze", lambda t, p: (t != p).squeeze().unsqueeze(1).unsqueeze(2) & TRIL(t.size(1)),
     ["wrong shape", "b = 1 (a single sentence)", "`squeeze` without a dim", "every axis of size 1", "unsqueeze"]),
    ("bare squeeze of the whole mask", lambda t, p: target_reference(t, p).squeeze(),
     ["wrong shape", "head axis is missing", "`squeeze` without a dim", "every axis of size 1"]),
    ("unsqueeze_ on a cached causal mask", lambda t, p: (t != p)[:, None, None, :] & _cached_causal(
        t.size(1), t.device).unsqueeze_(0), ["gains another axis", "`unsqueeze_`", "no underscore"]),
]


@functools.lru_cache(maxsize=None)
def _cached_causal(size, device):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


@pytest.mark.parametrize("impl, phrases", [(f, p) for _, f, p in TARGET_WRONG], ids=[n for n, _, _ in TARGET_WRONG])
def test_target_wrong(impl, phrases):
    expect(check_target_mask(impl), "failed", *phrases)


def test_target_stub_crash_and_trace():
    expect(check_target_mask(stub), "not attempted", "NotImplementedError")
    expect(check_target_mask(lambda tokens, pad_id: tokens @ tokens), "error", "RuntimeError", "pad_id = 0")
    batch_as_length = lambda t, p: (t != p)[:, None, None, :] & torch.ones(t.size(0), t.size(0)).bool().tril()  # noqa: E731
    expect(check_target_mask(batch_as_length), "error", "RuntimeError", "tokens.size(1)")


def target_squeezes_the_padding_mask(tokens, pad_id):
    keys = padding_reference(tokens, pad_id).squeeze()  # (B, L), but (L,) when B = 1
    return keys[:, None, None, :] & TRIL(tokens.size(1))


def test_target_bare_squeeze_crash_is_named_not_blamed_on_size():
    result = check_target_mask(target_squeezes_the_padding_mask)
    expect(result, "error", "IndexError", "b = 1 (a single sentence)", "`squeeze` without a dim", "unsqueeze")
    assert "not the batch size" not in "\n".join(result.messages)  # it already uses tokens.size(1)



def test_the_real_device_pass_runs(monkeypatch):
    """Where a GPU exists the mask checkers also run there; the CPU stands in for it here."""
    from course_utils.checks.stages import gpu as _gpu

    monkeypatch.setattr(_gpu, "real_gpu", lambda: "cpu")
    expect(check_padding_mask(padding_reference), "passed")
    expect(check_target_mask(target_reference), "passed")


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a device chosen by asking whether a GPU exists.


def causal_on_the_gpu_when_there_is_one(size):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


def padding_moved_to_the_gpu_when_there_is_one(tokens, pad_id):
    mask = (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, L)
    return mask.cuda() if torch.cuda.is_available() else mask


def test_a_causal_mask_made_on_the_gpu_whenever_there_is_one_is_caught_without_a_gpu():
    expect_fixed_device(check_causal_mask(causal_on_the_gpu_when_there_is_one), "returns its result on the GPU",
           "torch.cuda.is_available()", "let the caller move it")


def test_a_padding_mask_moved_to_the_gpu_whenever_there_is_one_is_caught_without_a_gpu():
    expect_fixed_device(check_padding_mask(padding_moved_to_the_gpu_when_there_is_one),
           "puts a tensor on the GPU although the tokens are on the CPU", "torch.cuda.is_available()")
