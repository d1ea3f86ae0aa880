"""Checkers of lesson 03: the positional encoding table and module."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import expect, expect_fixed_device
from course_utils.checks import check_positional_encoding, check_positional_encoding_module


# --------------------------------------------------------------------------
# The function: correct versions in several styles.


def pe_vectorised(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1).float()  # (max_len, 1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))  # (d_model/2,)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_loops(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


def pe_pow_stack(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    angles = pos / torch.pow(10000.0, two_i / d_model)  # (max_len, d_model/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (max_len, d_model)


def pe_float64_numpy(max_len, d_model):
    pos = np.arange(max_len)[:, None]
    dims = np.arange(d_model)[None, :]
    angles = pos / np.power(10000, (2 * (dims // 2)) / d_model)
    table = np.where(dims % 2 == 0, np.sin(angles), np.cos(angles))
    return torch.from_numpy(table)  # float64


def pe_float64_then_float32(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    freq = 1.0 / (10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model))
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, ::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.float()


def pe_where(max_len, d_model):
    dim = torch.arange(d_model).float()
    two_i = 2 * torch.div(dim, 2, rounding_mode="floor")
    values = torch.arange(max_len).float().unsqueeze(1) / torch.pow(1e4, two_i / d_model)
    return torch.where(dim.long() % 2 == 0, torch.sin(values), torch.cos(values))


def pe_stub(max_len, d_model):
    # YOUR CODE HERE
    raise NotImplementedError()


def pe_crash(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(torch.arange(max_len))  # (max_len,) into (max_len, d_model/2)
    return pe


def pe_polar(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    z = torch.polar(torch.ones(max_len, d_model // 2, dtype=torch.float64), pos * freq)  # cos + i sin
    return torch.stack([z.imag, z.real], dim=-1).reshape(max_len, d_model).float()


def pe_complex_exp(max_len, d_model):
    angles = torch.outer(torch.arange(max_len).float(), 10000 ** (-torch.arange(0, d_model, 2).float() / d_model))
    z = torch.exp(1j * angles.to(torch.complex64))  # (max_len, d_model / 2)
    return torch.view_as_real(z).flip(-1).reshape(max_len, d_model)  # (real, imag) -> (sin, cos)


@pytest.mark.parametrize(
    "fn", [pe_vectorised, pe_loops, pe_pow_stack, pe_float64_then_float32, pe_where, pe_polar, pe_complex_exp]
)
def test_function_accepts_correct_variants(fn):
    result = check_positional_encoding(fn)
    assert result.passed, str(result)


def test_function_stub_is_not_attempted():
    expect(check_positional_encoding(pe_stub), "not attempted", "NotImplementedError")


def test_function_crash_is_an_error():
    expect(check_positional_encoding(pe_crash), "error", "RuntimeError", "max_len = 50", "(max_len, d_model // 2)")


def test_function_wants_the_function_itself():
    expect(check_positional_encoding(pe_vectorised(4, 4)), "failed", "expected a function")


# --------------------------------------------------------------------------
# The function: mistakes, each with the words of its diagnosis.


def _generic(max_len, d_model, *, pos0=0, base=10000.0, exponent=lambda col, d: 2 * (col // 2) / d, sin_even=True):
    """A table built with one knob turned (only for the tests)."""
    table = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for col in range(d_model):
            angle = (pos + pos0) / base ** exponent(col, d_model)
            use_sin = (col % 2 == 0) == sin_even
            table[pos, col] = math.sin(angle) if use_sin else math.cos(angle)
    return table


def wrong_transposed(max_len, d_model):
    return pe_vectorised(max_len, d_model).T


def wrong_batch_axis(max_len, d_model):
    return pe_vectorised(max_len, d_model).unsqueeze(0)


def wrong_integer_dtype(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.long)
    pe[:] = pe_vectorised(max_len, d_model).long()
    return pe


def wrong_swapped(max_len, d_model):
    return _generic(max_len, d_model, sin_even=False)


def wrong_halves(max_len, d_model):
    pos = torch.arange(max_len).float()[:, None]
    freq = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)


def wrong_seed_001_exponent(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d_model)))
    return pe


def wrong_column_exponent(max_len, d_model):
    return _generic(max_len, d_model, exponent=lambda col, d: col / d)


def wrong_i_not_2i(max_len, d_model):
    return _generic(max_len, d_model, exponent=lambda col, d: (col // 2) / d)


def wrong_doubled_step(max_len, d_model):
    pos = torch.arange(max_len).float()[:, None]
    i = torch.arange(0, d_model, 2).float()
    angles = pos / 10000 ** (2 * i / d_model)
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(max_len, d_model)


def wrong_integer_division(max_len, d_model):
    pos = torch.arange(max_len).float()[:, None]
    i = torch.arange(0, d_model, 2)
    angles = pos / 10000 ** (i // d_model)
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(max_len, d_model)


def wrong_positions_from_one(max_len, d_model):
    return _generic(max_len, d_model, pos0=1)


def wrong_base(max_len, d_model):
    return _generic(max_len, d_model, base=1000.0)


def wrong_reciprocal(max_len, d_model):
    return _generic(max_len, d_model, exponent=lambda col, d: -2 * (col // 2) / d)


def wrong_max_len_in_exponent(max_len, d_model):
    return _generic(max_len, d_model, exponent=lambda col, d: 2 * (col // 2) / max_len)


def wrong_nan(max_len, d_model):
    pe = torch.empty(max_len, d_model).fill_(float("nan"))
    pe[:, 0::2] = pe_vectorised(max_len, d_model)[:, 0::2]
    return pe


def wrong_cos_next_frequency(max_len, d_model):
    return _generic(max_len, d_model, exponent=lambda col, d: 2 * ((col + 1) // 2) / d)


def wrong_half_angles(max_len, d_model):
    pos = torch.arange(max_len).float()[:, None]
    freq = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    angles = pos * freq / 2  # an unknown mistake: every angle halved
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(1)


def wrong_hard_coded_16(max_len, d_model):
    return _generic(max_len, d_model, exponent=lambda col, d: 2 * (col // 2) / 16)


def wrong_float16(max_len, d_model):
    return pe_vectorised(max_len, d_model).half()


def wrong_half_precision_inside(max_len, d_model):
    return pe_vectorised(max_len, d_model).half().float()


def wrong_exp_without_minus(max_len, d_model):
    pos = torch.arange(max_len).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d_model, 2).float() * (math.log(10000.0) / d_model))  # sign lost
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def wrong_last_row_missing(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    pe[:-1] = pe_vectorised(max_len - 1, d_model) if max_len > 1 else pe[:-1]
    return pe


def wrong_last_pair_when_odd(max_len, d_model):
    pe = pe_vectorised(max_len, d_model)
    if (d_model // 2) % 2 == 1:  # right only when d_model / 2 is even
        pe[:, -2:] = pe[:, -4:-2]
    return pe


def wrong_linspace_exponent(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    exponent = torch.linspace(0, 1, d_model // 2, dtype=torch.float64)  # reaches 1 at the last pair
    angles = pos / 10000.0 ** exponent
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(1).float()


def wrong_float16_positions(max_len, d_model):
    pos = torch.arange(max_len).half().float()[:, None]  # float16 positions: not exact past 2048
    freq = 10000.0 ** (-torch.arange(0, d_model, 2).float() / d_model)
    return torch.stack([(pos * freq).sin(), (pos * freq).cos()], -1).flatten(1)


_TABLES = {}


def wrong_cached_by_max_len(max_len, d_model):
    if max_len not in _TABLES:  # keyed by max_len only: another d_model gets the old table
        _TABLES[max_len] = pe_vectorised(max_len, d_model)
    return _TABLES[max_len]


_BIG = {}


def wrong_cached_first_size(max_len, d_model):
    if "pe" not in _BIG:
        _BIG["pe"] = pe_vectorised(100, d_model)  # built once, for the first d_model and 100 positions
    return _BIG["pe"][:max_len]


FUNCTION_MISTAKES = [
    (wrong_transposed, ["wrong shape", "(16, 50)", "transposed"]),
    (wrong_batch_axis, ["wrong shape", "(1, 50, 16)", "extra axis"]),
    (wrong_integer_dtype, ["torch.int64", "floating-point", "truncated"]),
    (wrong_swapped, ["sine and cosine are swapped"]),
    (wrong_halves, ["first half", "interleaves"]),
    (wrong_seed_001_exponent, ["its own frequency", "10000^(-2 * column / d_model)", "do not double it"]),
    (wrong_column_exponent, ["its own frequency", "(2i + 1) / d_model", "pair index"]),
    (wrong_i_not_2i, ["i instead of 2i"]),
    (wrong_doubled_step, ["exponent is doubled"]),
    (wrong_integer_division, ["same frequency 1", "integer (floor) division"]),
    (wrong_positions_from_one, ["shifted by one position", "start at 0"]),
    (wrong_base, ["base 1000 instead of 10000"]),
    (wrong_reciprocal, ["multiplied by 10000^(2i / d_model) instead of divided"]),
    (wrong_max_len_in_exponent, ["divides by max_len instead of d_model"]),
    (wrong_nan, ["NaN", "columns 1, 3, 5"]),
    (wrong_cos_next_frequency, ["do not hold the sine and cosine of the same angle", "sin^2 + cos^2"]),
    (wrong_half_angles, ["frequencies", "wrong"]),
    (wrong_hard_coded_16, ["max_len=7, d_model=6", "divides the exponent by 16 instead of d_model=6"]),
    (wrong_float16, ["torch.float16", "too coarse"]),
    (wrong_half_precision_inside, ["not within float32 precision", "half precision"]),
    (lambda max_len, d_model: nn.Parameter(pe_vectorised(max_len, d_model)), ["requires grad", "nn.parameter"]),
    (wrong_exp_without_minus, ["multiplied by 10000^(2i / d_model) instead of divided"]),
    (wrong_last_row_missing, ["row 49", "all 0", "never written"]),
    (wrong_last_pair_when_odd, ["max_len=7, d_model=6", "frequencies", "wrong"]),
    # issue 9
    (pe_float64_numpy, ["torch.float64", "float32", ".float()"]),
    (wrong_linspace_exponent, ["linspace", "(d_model - 2) / d_model", "10000"]),
    (wrong_float16_positions, ["from position", "float16"]),
    (wrong_cached_by_max_len, ["earlier call"]),
    (wrong_cached_first_size, ["earlier call"]),
]


@pytest.mark.parametrize("fn, phrases", FUNCTION_MISTAKES, ids=[f.__name__ for f, _ in FUNCTION_MISTAKES])
def test_function_diagnoses_mistakes(fn, phrases):
    expect(check_positional_encoding(fn), "failed", *phrases)


def test_function_may_consume_the_rng():
    def noisy(max_len, d_model):
        torch.rand(3)
        random.random()
        return pe_vectorised(max_len, d_model)

    expect(check_positional_encoding(noisy), "passed")


# --------------------------------------------------------------------------
# The module: correct versions in several styles.


def _table(max_len, d_model):
    return pe_vectorised(max_len, d_model)


class PEModule(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", _table(max_len, d_model))  # (max_len, d_model)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class PEModuleBatchAxis(nn.Module):
    """Right values, but not the contract's names: table `encoding` (1, max_len, d_model), functional dropout."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.p = dropout
        self.register_buffer("encoding", pe_loops(max_len, d_model).unsqueeze(0), persistent=False)

    def forward(self, x):
        L = x.shape[1]
        return nn.functional.dropout(x + self.encoding[:, :L, :], self.p, training=self.training)


class PEModuleNarrow(nn.Module):
    """Right values, but not the contract's names (`table`, `drop`)."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.drop = nn.Dropout(p=dropout)
        self.register_buffer("table", pe_pow_stack(max_len, d_model))

    def forward(self, x):
        return self.drop(torch.add(x, self.table.narrow(0, 0, x.size(1)).unsqueeze(0)))


class PEModuleSeqFirstTable(nn.Module):
    """Table stored as (max_len, 1, d_model), transposed into place."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", pe_float64_then_float32(max_len, d_model).unsqueeze(1))

    def forward(self, x):
        pe = self.pe[: x.size(1)].transpose(0, 1)  # (1, L, d_model)
        return self.dropout(x + pe)


class PEModuleStub(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        # YOUR CODE HERE
        raise NotImplementedError()

    def forward(self, x):
        # YOUR CODE HERE
        raise NotImplementedError()


class PEModuleCrash(PEModule):
    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(2)])  # uses d_model as the length


class PEModuleRandLike(nn.Module):
    """Right values, dropout by hand with rand_like (on x's device, from the global RNG), but no `dropout` submodule."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.p = dropout
        self.register_buffer("pe", pe_vectorised(max_len, d_model))

    def forward(self, x):
        out = x + self.pe[: x.size(1)]
        if self.training and self.p > 0:
            out = out * (torch.rand_like(out) >= self.p) / (1 - self.p)
        return out


class PEModuleNarrowNamed(nn.Module):
    """Slices with narrow, adds with torch.add, non-persistent buffer, the contract's names."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.register_buffer("pe", pe_pow_stack(max_len, d_model), persistent=False)

    def forward(self, x):
        return self.dropout(torch.add(x, self.pe.narrow(0, 0, x.size(1)).unsqueeze(0)))


@pytest.mark.parametrize("cls", [PEModule, PEModuleSeqFirstTable, PEModuleNarrowNamed])
def test_module_accepts_correct_variants(cls):
    result = check_positional_encoding_module(cls)
    assert result.passed, str(result)


def test_module_stub_is_not_attempted():
    expect(check_positional_encoding_module(PEModuleStub), "not attempted", "NotImplementedError")


def test_module_crash_is_an_error():
    expect(check_positional_encoding_module(PEModuleCrash), "error", "RuntimeError", "x = tensor of shape (3, 11, 16)",
           "x.size(1)")


def test_module_wants_the_class():
    expect(check_positional_encoding_module(PEModule(4)), "failed", "expected a class")


# --------------------------------------------------------------------------
# The module: mistakes.


class PEParameter(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        nn.Module.__init__(self)
        self.dropout = nn.Dropout(dropout)
        self.pe = nn.Parameter(_table(max_len, d_model))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class PEPlainAttribute(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        nn.Module.__init__(self)
        self.dropout = nn.Dropout(dropout)
        self.pe = _table(max_len, d_model)


class PENoSlice(PEModule):
    def forward(self, x):
        return self.dropout(x + self.pe)


class PEDropoutFirst(PEModule):
    def forward(self, x):
        return self.dropout(x) + self.pe[: x.size(1)]


class PEScaled(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.d_model = d_model

    def forward(self, x):
        return self.dropout(x * math.sqrt(self.d_model) + self.pe[: x.size(1)])


class PEWrongTable(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.pe = wrong_seed_001_exponent(max_len, d_model)  # replaces the buffer's value


class PEBatchSlice(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.pe = self.pe.unsqueeze(1)  # (max_len, 1, d_model), as for seq-first inputs

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0)])


class PEInPlace(PEModule):
    def forward(self, x):
        x += self.pe[: x.size(1)]
        return self.dropout(x)


class PEAlwaysDropout(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.p = dropout

    def forward(self, x):
        return nn.functional.dropout(x + self.pe[: x.size(1)], self.p)


class PENoDropout(PEModule):
    def forward(self, x):
        return x + self.pe[: x.size(1)]


class PEFixedRate(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, 0.1, max_len)


class PEFloat64(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.pe = self.pe.double()


class PEUnscaledMask(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.p = dropout

    def forward(self, x):
        out = x + self.pe[: x.size(1)]
        if self.training:
            keep = torch.rand(out.shape) >= self.p
            out = out * keep
        return out


class PEModuleFloat64Cast(nn.Module):
    """Table registered in float64, cast to the input's dtype in forward."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", pe_float64_numpy(max_len, d_model).double())

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)].to(x.dtype))


class PEFloat16(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.pe = self.pe.half()


class PEDetachedInput(PEModule):
    def forward(self, x):
        return self.dropout(x.detach() + self.pe[: x.size(1)])


class PELearnedScale(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.dropout(x + self.alpha * self.pe[: x.size(1)])


class PEDropoutTwice(PEModule):
    def forward(self, x):
        return self.dropout(self.dropout(x + self.pe[: x.size(1)]))


class PEDropoutOnTable(PEModule):
    def forward(self, x):
        return x + self.dropout(self.pe[: x.size(1)])


class PEOffByOne(PEModule):
    def forward(self, x):
        return self.dropout(x + self.pe[1: x.size(1) + 1])


def test_a_float64_table_cast_in_forward_is_refused_for_lesson_07():
    """Right in forward, but lesson 07's decode_step adds pe[t] to float32 embeddings (a seventh hidden set)."""
    expect(check_positional_encoding_module(PEModuleFloat64Cast), "failed", "as torch.float64, not float32",
           "lesson 07", "mat1 and mat2 must have the same dtype")


class PEIgnoresMaxLen(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, 512)  # a fixed table size


class PEFrozenParameter(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        nn.Module.__init__(self)
        self.dropout = nn.Dropout(dropout)
        self.pe = nn.Parameter(_table(max_len, d_model), requires_grad=False)


class PENoDefaults(PEModule):
    def __init__(self, d_model, dropout, max_len):
        super().__init__(d_model, dropout, max_len)


class PEReseeds(PEModule):
    def forward(self, x):
        torch.manual_seed(0)  # the same dropout mask on every call
        return self.dropout(x + self.pe[: x.size(1)])


class PEOwnGenerator(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.p = dropout
        self.g = torch.Generator().manual_seed(0)  # not the global RNG: torch.manual_seed has no effect

    def forward(self, x):
        out = x + self.pe[: x.size(1)]
        if not self.training or self.p == 0:
            return out
        keep = torch.rand(out.shape, generator=self.g) >= self.p
        return out * keep / (1 - self.p)


class PESharedMaskOverBatch(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.p = dropout

    def forward(self, x):
        out = x + self.pe[: x.size(1)]
        if not self.training:
            return out
        keep = torch.rand_like(out[:1]) >= self.p  # one mask, shared by every sentence of the batch
        return out * keep / (1 - self.p)


class PECpuDropoutMask(PEModule):
    def forward(self, x):
        out = x + self.pe[: x.size(1)]
        if not self.training:
            return out
        keep = torch.rand(out.shape) >= self.dropout.p  # the module's rate, but always on the CPU
        return out * keep / (1 - self.dropout.p)


class PEStoredRate(PEModule):
    """Holds the contract's `dropout` module, but applies F.dropout with the rate it was built with."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.p = dropout

    def forward(self, x):
        return F.dropout(x + self.pe[: x.size(1)], self.p, self.training)


class PEOutputFloat32(PEModule):
    def forward(self, x):
        return self.dropout((x + self.pe[: x.size(1)]).float())


class PEForwardCache(PEModule):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        self.cache = None

    def forward(self, x):
        if self.cache is None:
            self.cache = self.pe[: x.size(1)]  # the first call's length, kept
        return self.dropout(x + self.cache)


def _wrong_table(max_len, d_model):  # a learner's sinusoidal_positional_encoding with the exponent doubled
    return _generic(max_len, d_model, exponent=lambda col, d: 4 * (col // 2) / d)


sinusoidal_positional_encoding = _wrong_table


class PEUsesOwnFunction(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])



class PEHalfPrecisionPositions(nn.Module):
    """Positions counted in float16: whole numbers are exact only up to 2048, so rows 2049 and on are wrong."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len, dtype=torch.float16).float().unsqueeze(1)  # (max_len, 1)
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


MODULE_MISTAKES = [
    (PEParameter, ["nn.Parameter", "register_buffer", "optimizer"]),
    (PEPlainAttribute, ["plain attribute", "not registered", "register_buffer"]),
    (PENoSlice, ["adds the whole table", "first L rows"]),
    (PEDropoutFirst, ["dropout to x before adding the table"]),
    (PEScaled, ["multiplies x by sqrt(d_model)", "embedding"]),
    (PEWrongTable, ["its own frequency", "do not double it"]),
    (PEBatchSlice, ["batch size instead of the sequence length"]),
    (PEInPlace, ["changed its input `x` in place"]),
    (PEAlwaysDropout, ["eval mode", "F.dropout"]),
    (PENoDropout, ["no dropout", "every entry arrives unchanged"]),
    (PEFixedRate, ["nn.Dropout(p=0.1)", "built with dropout=0.0"]),
    (PEStoredRate, ["stays deterministic", "lesson 08", "`dropout.p`"]),
    (PEFloat64, ["torch.float64", "float32"]),
    (PEUnscaledMask, ["not scaled by 1 / (1 - p)", "without the scaling"]),
    (PENoDefaults, ["defaults", "dropout=(none), max_len=(none)"]),
    (PEFloat16, ["torch.float16", "float32"]),
    (PEDetachedInput, ["does not require grad", ".detach()"]),
    (PELearnedScale, ["parameter `alpha`", "no parameters"]),
    (PEDropoutTwice, ["dropout twice", "1 / (1 - p)^2"]),
    (PEDropoutOnTable, ["dropout to the table alone", "dropout(x + PE[:L])"]),
    (PEOffByOne, ["shifted by one position"]),
    (PEIgnoresMaxLen, ["shape (512, 16)", "not max_len=40"]),
    (PEFrozenParameter, ["nn.Parameter", "requires_grad=False", "register_buffer"]),
    # issue 9
    (PEModuleBatchAxis, ["no buffer named `pe`", "yours is `encoding`", "lesson 07"]),
    (PEModuleNarrow, ["no buffer named `pe`", "yours is `table`"]),
    (PEModuleRandLike, ["submodule `dropout`", "nn.Dropout", "lesson 07"]),
    (PEReseeds, ["resets a global random seed"]),
    (PEOwnGenerator, ["global random number generator", "torch.manual_seed"]),
    (PESharedMaskOverBatch, ["same", "every sentence"]),
    (PECpuDropoutMask, ["creates a tensor on the cpu"]),
    (PEOutputFloat32, ["float64", "dtype"]),
    (PEForwardCache, ["earlier call"]),
    (PEUsesOwnFunction, ["your sinusoidal_positional_encoding", "fails its own checker", "fix that first"]),
    (PEHalfPrecisionPositions, ["max_len=5000 by default", "wrong from position 2049", "float16"]),
]


@pytest.mark.parametrize("cls, phrases", MODULE_MISTAKES, ids=[c.__name__ for c, _ in MODULE_MISTAKES])
def test_module_diagnoses_mistakes(cls, phrases):
    result = check_positional_encoding_module(cls)
    expect(result, "failed", *phrases)



def test_the_real_device_pass_runs(monkeypatch):
    """Where a GPU exists the module checker also runs there; the CPU stands in for it here."""
    from course_utils.checks.stages import gpu as _gpu

    monkeypatch.setattr(_gpu, "real_gpu", lambda: "cpu")
    expect(check_positional_encoding_module(PEModule), "passed")


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a table made on the GPU whenever there is one.


def pe_on_the_gpu_when_there_is_one(max_len, d_model):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    position = torch.arange(max_len, device=device).unsqueeze(1).float()  # (max_len, 1)
    div_term = torch.exp(torch.arange(0, d_model, 2, device=device).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model, device=device)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def test_a_table_made_on_the_gpu_whenever_there_is_one_is_caught_without_a_gpu():
    expect_fixed_device(check_positional_encoding(pe_on_the_gpu_when_there_is_one), "returns its result on the GPU",
           "PositionalEncoding registers it as a buffer")


def pe_halves_with_tensor2tensor_frequencies(max_len, d_model):
    """[sin | cos] halves, and tensor2tensor's frequencies: log(10000) / (d_model / 2 - 1) per pair."""
    half = d_model // 2
    position = torch.arange(max_len).float().unsqueeze(1)  # (max_len, 1)
    inverse = torch.exp(torch.arange(half).float() * -(math.log(10000.0) / max(half - 1, 1)))  # (half,)
    return torch.cat([torch.sin(position * inverse), torch.cos(position * inverse)], dim=1)  # (max_len, d_model)


def test_halves_with_other_frequencies_are_named_not_told_row_0_is_wrong():
    expect(check_positional_encoding(pe_halves_with_tensor2tensor_frequencies), "failed",
           "sines in the first half of the columns", "interleaves", "frequencies differ", "d_model / 2 - 1")
