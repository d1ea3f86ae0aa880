"""Checkers for lesson 03: the sinusoidal positional encoding, as a table and as a module.

The oracle is the formula of the paper (section 3.5), evaluated in float64:
``PE[pos, 2i] = sin(pos / 10000^(2i / d_model))`` and ``PE[pos, 2i + 1] = cos(same)``.
Mistakes are told apart by invariants (row 0, one angle per column pair, the
frequency of each pair) and, only to *name* a cause, by the known slips
(``TABLE_SLIPS``, ``MODULE_SLIPS``: mutants of the formula, matched by
:func:`~.slips.matching_slip`). The module runs the library's stages for a
module that adds a table (``stages.table_*``), as lesson 09's learned one does.

What the rest of the course relies on (``contracts.CONTRACTS``) is checked too:
tables up to the model's default max_len of 5000 (float32 angles may lose
digits there, so the tolerance grows with the position), calls in turn with
other sizes (nothing cached wrongly); for the module, lengths past 64, a
registered buffer that ``.to(float64)`` and ``.to(device)`` move (the device
pretended where there is none), and dropout measured: the rate, a fresh mask
for every entry and every call, drawn from the global RNG, none in eval mode.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from . import stages
from ._core import ATOL, RTOL, Check, CheckResult, close_enough, fmt_shape, fmt_values, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip, same_tensor

_LONG = (5000, 10)  # the Transformer's default max_len, a d_model that is not a power of two


def check_positional_encoding(sinusoidal_positional_encoding: Callable) -> CheckResult:
    """Check ``sinusoidal_positional_encoding(max_len, d_model)`` against the paper's formula."""
    return SINUSOIDAL_TABLE.check(sinusoidal_positional_encoding)


def check_positional_encoding_module(PositionalEncoding: type[nn.Module]) -> CheckResult:
    """Check the ``PositionalEncoding(d_model, dropout, max_len)`` module: buffer, values, dropout."""
    return POSITIONAL_ENCODING.check(PositionalEncoding)


def _check_sinusoidal_positional_encoding(check: Check, fn: Callable) -> None:
    check.callable_(fn, "sinusoidal_positional_encoding")
    table = _table_from(check, fn, 50, 16)
    _diagnose_table(check, table, 50, 16, "your table")
    check.ok("for (50, 16): a float (max_len, d_model) table; row 0 is [0, 1, 0, 1, ...]; columns 2i and 2i + 1 "
             "hold sin and cos of one angle; pair i has the frequency 10000^(-2i / d_model)")
    sizes = ((50, 16), (7, 6), (1, 4), (3, 32), (50, 10))
    for i, (max_len, d_model) in enumerate(sizes[1:], start=1):
        other = _table_from(check, fn, max_len, d_model, sizes[:i])
        _diagnose_table(check, other, max_len, d_model, f"your table for max_len={max_len}, d_model={d_model}")
    check.ok("matches the paper's formula for (50, 16), (7, 6), (1, 4), (3, 32) and (50, 10), called in turn")
    drawn = _drawn_sizes(21, sizes)
    for i, (max_len, d_model) in enumerate(drawn):
        other = _table_from(check, fn, max_len, d_model, sizes + drawn[:i])
        _diagnose_table(check, other, max_len, d_model, f"your table for max_len={max_len}, d_model={d_model}")
    sizes = sizes + drawn
    _long_table_stage(check, fn, sizes)
    stages.fixed_device(check, lambda: fn(7, 6), "sinusoidal_positional_encoding", "", code=fn, advice=(
        "Create it on the CPU, with no `device=`: PositionalEncoding registers it as a buffer, and `.to(device)` "
        "moves it with the model."))
    check.ok(f"accurate up to position {_LONG[0] - 1} (max_len={_LONG[0]}, d_model={_LONG[1]})")


def _check_positional_encoding(check: Check, cls: type[nn.Module]) -> None:
    check.callable_(cls, "PositionalEncoding", want_class=True)
    stages.components_first(check, "PositionalEncoding", stages.called_parts(
        cls, {"sinusoidal_positional_encoding": (check_positional_encoding, "sinusoidal_positional_encoding")}))
    d_model, max_len = 16, 40

    def build(dropout: float = 0.0, d: int = d_model, n: int = max_len) -> nn.Module:
        return stages.is_module(check, check.build(cls, d, dropout, n), "PositionalEncoding")

    module = build()
    check.ok("PositionalEncoding(d_model, dropout, max_len) builds")
    _registration(check, module, max_len, d_model)
    check.stop_if_problems()  # the contract would only say again that `pe` is no buffer
    stages.contract_parts(check, module, "PositionalEncoding", {"d_model": d_model, "dropout": 0.0, "max_len": max_len})
    module.eval()
    g = generator(3)
    table = _reference(max_len, d_model)
    x = _zero_input_stage(check, module, table, max_len, d_model, g)
    stages.table_values(check, module, x, table, max_len, SINUSOIDAL, MODULE_SLIPS)
    stages.gradients(check, lambda x_: stages.table_forward(check, module, x_, max_len, SINUSOIDAL), {"x": x},
                     lambda r: {"x": r}, "PositionalEncoding's output", "the identity (eval mode adds a constant table)")
    stages.table_sizes(check, build, module, table, g, SINUSOIDAL)
    stages.follows_dtype(check, build(0.0, 8, 20).eval(), [torch.randn(2, 6, 8, generator=generator(5))],
                         "PositionalEncoding")
    stages.table_dropout(check, build, max_len, d_model, g, SINUSOIDAL)
    stages.module_on_gpu(check, build(0.5).train(), torch.randn(2, 6, d_model, generator=generator(7)),
                         what="PositionalEncoding")
    stages.state_dict_round_trip(check, build, lambda m: m(x), "PositionalEncoding")
    stages.table_defaults(check, cls, SINUSOIDAL)
    _long_module_stage(check, cls)


SINUSOIDAL = stages.AddedTable("PositionalEncoding", "PE[:L]",
                               lambda check, module, max_len, d_model: _reference(max_len, d_model))


# --------------------------------------------------------------------------
# The table's stages


def _table_from(check: Check, fn, max_len: int, d_model: int, earlier: tuple = ()) -> torch.Tensor:
    name = f"sinusoidal_positional_encoding({max_len}, {d_model})"
    out = check.call(fn, max_len, d_model, what="sinusoidal_positional_encoding", hint=(
        f"The angles have one row per position and one column per pair: (max_len, d_model // 2) = "
        f"{fmt_shape((max_len, d_model // 2))}, a column of positions (max_len, 1) times a row of frequencies "
        f"(d_model // 2,); each of `pe[:, 0::2]` and `pe[:, 1::2]` takes one such block."))
    if isinstance(out, torch.Tensor):
        shape = tuple(out.shape)
        if shape != (max_len, d_model):
            stale = [args for args in earlier if len(shape) == 2 and shape[1] == args[1] != d_model]
            if stale:
                cause = (
                    f"it has d_model = {shape[1]}, the d_model of an earlier call "
                    f"({stale[0][0]}, {stale[0][1]}): something is kept between calls (a cache keyed on max_len "
                    f"only, a global table). Build the table from each call's own max_len and d_model, or key a "
                    f"cache on both."
                )
            elif len(shape) == 2 and shape[1] == d_model and shape[0] < max_len:
                cause = (f"it has only {shape[0]} rows: a size is fixed somewhere (a table built once for "
                         f"{shape[0]} positions and sliced). Build it with `max_len` rows.")
            elif shape == (d_model, max_len):
                cause = "it looks transposed: rows are positions and columns are features."
            elif shape in ((1, max_len, d_model), (max_len, 1, d_model)):
                cause = (
                    "it has an extra axis of size 1. Return the plain table; the module adds the batch axis "
                    "where it needs one (broadcasting does it for free)."
                )
            else:
                cause = "build it with one row per position and one column per feature."
            check.fail(
                f"{name} has the wrong shape.\n"
                f"  expected: {fmt_shape((max_len, d_model))} (max_len, d_model)\n"
                f"  actual:   {fmt_shape(shape)}\n"
                f"Likely cause: {cause}"
            )
        if out.requires_grad or isinstance(out, nn.Parameter):
            check.fail(
                f"{name} returns a table that requires grad ({'an nn.Parameter' if isinstance(out, nn.Parameter) else 'part of an autograd graph'}): "
                f"the sinusoidal table is fixed, not learned. As PositionalEncoding's buffer it would collect "
                f"gradients that no optimizer clears, and `.numpy()` on it fails. Return a plain tensor (build it "
                f"without `requires_grad`, and without wrapping it in nn.Parameter)."
            )
        if not out.is_floating_point():
            check.fail(
                f"{name} has dtype {out.dtype}, but the table holds sines and cosines, so it must be a "
                f"floating-point tensor (float32).\nLikely cause: the table was created with an integer dtype "
                f"(e.g. from `torch.arange(max_len)` or `torch.zeros(..., dtype=torch.long)`), so every value "
                f"written into it is truncated. Create it with `torch.zeros(max_len, d_model)`."
            )
        if out.dtype in (torch.float16, torch.bfloat16):
            check.fail(f"{name} has dtype {out.dtype}, which is too coarse for this table: return float32.")
        if out.dtype != torch.float32 and out.is_floating_point() and not out.is_complex():
            check.fail(
                f"{name} has dtype {out.dtype}, but the course works in float32 (PyTorch's default dtype): "
                f"lesson 03 multiplies your table by float32 rotation matrices, and the module adds it to float32 "
                f"embeddings, which fails or changes their dtype with another one.\nComputing in float64 is a "
                f"good idea for accuracy; return the finished table with `.float()`."
            )
    out = check.tensor(out, name, finite=False)
    bad = ~torch.isfinite(out.detach())
    if bool(bad.any()):
        count = int(bad.sum())
        cols = sorted({int(c) for c in bad.nonzero()[:, 1]})[:6]
        check.fail(
            f"{name} contains {count} NaN or infinite value{'s' if count != 1 else ''} "
            f"(in columns {', '.join(str(c) for c in cols)}{', ...' if count > len(cols) else ''}).\n"
            f"Likely causes: entries of a `torch.empty` table that were never written, a log of 0, "
            f"or a division by zero in the exponent."
        )
    return out.detach().double()


def _drawn_sizes(seed: int, fixed: tuple) -> tuple:
    """Two (max_len, d_model) drawn at random, d_model even, other than the fixed ones (``generator(seed)``: a
    grading run's hidden seed draws others)."""
    g = generator(seed)
    drawn: list[tuple[int, int]] = []
    while len(drawn) < 2:
        size = (int(torch.randint(2, 81, (), generator=g)), 2 * int(torch.randint(2, 25, (), generator=g)))
        if size not in fixed and size not in drawn:
            drawn.append(size)
    return tuple(drawn)


def _long_table_stage(check: Check, fn, earlier: tuple) -> None:
    """The model's default max_len: float32 angles lose digits there, so the tolerance grows with the position."""
    max_len, d_model = _LONG
    table = _table_from(check, fn, max_len, d_model, earlier)
    _long_rows(check, table, f"your table for max_len={max_len}, d_model={d_model}")


def _long_module_stage(check: Check, cls: type[nn.Module]) -> None:
    """The module built with its default max_len (5000) adds the formula's rows up to the last one."""
    max_len, d_model = _LONG
    module = stages.is_module(check, check.build(cls, d_model), "PositionalEncoding").eval()
    out = stages.table_forward(check, module, torch.zeros(1, max_len, d_model), max_len, SINUSOIDAL)  # (1, L, d)
    _long_rows(check, out.detach().double()[0],
               f"PositionalEncoding(d_model={d_model}) (max_len={max_len} by default), on {max_len} zero vectors,")
    check.ok(f"built with its default max_len, it adds the right table up to position {max_len - 1}")


def _long_rows(check: Check, table: torch.Tensor, what: str) -> None:
    """Fail, naming the first wrong position, unless ``table`` (max_len, d_model) follows the formula; the slack
    grows with the position (a few float32 ulps of the angle)."""
    max_len, d_model = table.shape
    expected = _reference(max_len, d_model)
    slack = 1e-5 + 1e-6 * torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    bad = ((table - expected).abs() > slack).any(dim=1)
    if not bool(bad.any()):
        return
    first = int(bad.nonzero()[0, 0])
    if first < 64:
        _diagnose_table(check, table[:64], 64, d_model, what)
    worst = float((table - expected).abs().max())
    check.fail(
        f"{what[0].upper()}{what[1:]} is right up to position {first - 1} but wrong from "
        f"position {first} on (largest difference {worst:.2g}).\n"
        f"Likely causes: positions or angles kept in float16 or bfloat16 (exact whole numbers only up to 2048 and "
        f"256), an integer dtype too small for the positions, or a table built for fewer positions. Compute the "
        f"angles in float32 or float64 (the model builds a table of {max_len} positions by default)."
    )


# --------------------------------------------------------------------------
# Tables in float64, and naming what differs from the paper's


def _sinusoids(positions: torch.Tensor, freqs: torch.Tensor, is_sin: torch.Tensor) -> torch.Tensor:
    angles = positions.double()[:, None] * freqs.double()[None, :]
    return torch.where(is_sin[None, :], angles.sin(), angles.cos())


def _reference(max_len: int, d_model: int) -> torch.Tensor:
    """The table the paper defines, float64, (max_len, d_model)."""
    col = torch.arange(d_model)
    pair = torch.div(col, 2, rounding_mode="floor").double()
    freqs = 10000.0 ** (-2.0 * pair / d_model)
    return _sinusoids(torch.arange(max_len), freqs, col % 2 == 0)


def _pair(d_model: int) -> torch.Tensor:
    """The pair index i of every column (columns 2i and 2i + 1), float64."""
    return torch.div(torch.arange(d_model), 2, rounding_mode="floor").double()


def _even(d_model: int) -> torch.Tensor:
    return torch.arange(d_model) % 2 == 0


def _built(max_len: int, d_model: int, freqs: torch.Tensor, is_sin: torch.Tensor | None = None,
           start: int = 0) -> torch.Tensor:
    """A table of ``max_len`` rows (positions from ``start``) with these frequencies, sines where ``is_sin``."""
    return _sinusoids(torch.arange(start, start + max_len), freqs, _even(d_model) if is_sin is None else is_sin)


def _halves(max_len: int, d_model: int, table_len: int) -> torch.Tensor:
    half = d_model // 2
    col = torch.arange(d_model)
    return _built(max_len, d_model, 10000.0 ** (-2.0 * (col % half).double() / d_model), col < half)


def _linspace(max_len: int, d_model: int, table_len: int) -> torch.Tensor:
    if d_model // 2 < 2:
        raise ValueError("a linspace of exponents needs two pairs")
    return _built(max_len, d_model, 10000.0 ** (-_pair(d_model) / (d_model // 2 - 1)))


def _by_max_len(max_len: int, d_model: int, table_len: int) -> torch.Tensor:
    if table_len == d_model:
        raise ValueError("max_len and d_model are equal: the slip does not show")
    return _built(max_len, d_model, 10000.0 ** (-2.0 * _pair(d_model) / table_len))


#: the table's known slips, mutants ``(max_len, d_model, table_len) -> table`` (float64, ``max_len`` rows; ``table_len``
#: the max_len the learner's code was given); the module's zero-input stage names them too
TABLE_SLIPS = (
    Slip("sin and cos swapped", Diagnosis(
        "sine and cosine are swapped: the even columns (0, 2, 4, ...) should hold the sine and the odd columns "
        "(1, 3, 5, ...) the cosine.", "Row 0 should read [0, 1, 0, 1, ...] since sin(0) = 0 and cos(0) = 1."),
        lambda n, d, t: _built(n, d, 10000.0 ** (-2.0 * _pair(d) / d), ~_even(d))),
    Slip("halves", Diagnosis(
        "the sines fill the first half of the columns and the cosines the second half.",
        "The paper interleaves them: column 2i holds sin and column 2i + 1 holds cos of the same angle (write into "
        "`pe[:, 0::2]` and `pe[:, 1::2]`, or stack the two on a new last axis before flattening)."), _halves),
    Slip("2 * column", Diagnosis(
        "each column gets its own frequency 10000^(-2 * column / d_model), and the sine and cosine of a pair use "
        "different angles.", "In the formula, i counts column *pairs*: columns 2i and 2i + 1 share the frequency "
        "10000^(-2i / d_model). If your loop steps over the even columns (`for i in range(0, d_model, 2)`), that "
        "loop variable already is 2i: do not double it, and use the same angle for the cosine column."),
        lambda n, d, t: _built(n, d, 10000.0 ** (-2.0 * torch.arange(d).double() / d))),
    Slip("column", Diagnosis(
        "each column gets its own frequency 10000^(-column / d_model), so the cosine column 2i + 1 uses the exponent "
        "(2i + 1) / d_model.", "Both columns of a pair share one frequency, 10000^(-2i / d_model): compute the "
        "exponent from the pair index, not from the column index."),
        lambda n, d, t: _built(n, d, 10000.0 ** (-torch.arange(d).double() / d))),
    Slip("4i", Diagnosis(
        "the exponent is doubled: pair i uses 10000^(-4i / d_model) instead of 10000^(-2i / d_model).",
        "If you take `torch.arange(0, d_model, 2)` (or loop with step 2), those numbers already are 2i: do not "
        "multiply them by 2 again."), lambda n, d, t: _built(n, d, 10000.0 ** (-4.0 * _pair(d) / d))),
    Slip("i", Diagnosis(
        "the exponent uses i instead of 2i:", "pair i should have the frequency 10000^(-2i / d_model), yours is "
        "10000^(-i / d_model)."), lambda n, d, t: _built(n, d, 10000.0 ** (-_pair(d) / d))),
    Slip("frequency 1", Diagnosis(
        "every pair has the same frequency 1 (the angle is just the position), so the exponent 2i / d_model came out "
        "as 0.", "Likely cause: integer (floor) division, `2 * i // d_model`; use true division `/`."),
        lambda n, d, t: _built(n, d, torch.ones(d, dtype=torch.float64))),
    Slip("from 1", Diagnosis(
        "your rows are shifted by one position: row 0 looks like position 1.", "Positions start at 0 "
        "(`torch.arange(max_len)` or `range(max_len)`), so row 0 is [0, 1, 0, 1, ...]."),
        lambda n, d, t: _built(n, d, 10000.0 ** (-2.0 * _pair(d) / d), start=1)),
    Slip("multiplied", Diagnosis(
        "the position is multiplied by 10000^(2i / d_model) instead of divided by it:", "the frequencies should "
        "shrink from 1 (pair 0) towards 1/10000, not grow."),
        lambda n, d, t: _built(n, d, 10000.0 ** (2.0 * _pair(d) / d))),
    Slip("linspace", Diagnosis(
        "the exponents run from 0 to exactly 1 at the last pair, as `torch.linspace(0, 1, d_model // 2)` gives.",
        "The exponent of pair i is 2i / d_model, so the last pair's is (d_model - 2) / d_model, not 1: build it with "
        "`torch.arange(0, d_model, 2) / d_model` and keep the base 10000."), _linspace),
    Slip("max_len", Diagnosis(
        "the exponent divides by max_len instead of d_model:", "the frequency of pair i is 10000^(-2i / d_model), it "
        "does not depend on how many positions the table has."), _by_max_len),
)


def _first_rows_agree(table: torch.Tensor):
    """``agrees`` for the table's slips: close everywhere, or in the first rows (a float32 table whose angles grow
    large, as with a frequency that grows with i, carries large errors further down). Naming only."""
    first = min(table.shape[0], 4)
    return lambda wrong: close_enough(table, wrong) or bool(
        torch.allclose(table[:first], wrong[:first], atol=2e-3, rtol=0))


def _fitted_base(table: torch.Tensor, d_model: int) -> float | None:
    """The base b such that pair 1 has frequency b^(-2 / d_model), read from position 1."""
    if table.shape[0] < 2 or d_model < 4:
        return None
    s, c = float(table[1, 2]), float(table[1, 3])
    if abs(s * s + c * c - 1.0) > 1e-4:
        return None
    freq = math.atan2(s, c)
    if not 0.0 < freq < 1.0:
        return None
    return math.exp(-math.log(freq) * d_model / 2.0)


def _diagnose_table(
    check: Check, table: torch.Tensor, max_len: int, d_model: int, what: str, table_len: int | None = None
) -> None:
    """Fail with the likeliest cause when ``table`` (float64, right shape) is not the paper's table."""
    expected = _reference(max_len, d_model)
    if close_enough(table, expected):
        return
    title = what[0].upper() + what[1:]
    slip = matching_slip(TABLE_SLIPS, lambda s: s.replay(None, max_len, d_model, table_len or max_len),
                         _first_rows_agree(table))
    if slip is not None:
        check.fail(f"{title} does not follow the paper's formula.\nLikely cause: {slip.says}")
    base = _fitted_base(table, d_model)
    if base is not None and abs(base - 10000.0) > 1.0:
        col = torch.arange(d_model)
        pair = torch.div(col, 2, rounding_mode="floor").double()
        if close_enough(table, _sinusoids(torch.arange(max_len), base ** (-2.0 * pair / d_model), col % 2 == 0)):
            # base^(2i/d_model) == 10000^(2i/other): a size used in place of d_model, unless the base is round.
            other = d_model * math.log(10000.0) / math.log(base)
            round_base = abs(base - round(base)) < 1e-3 * base or abs(math.log10(base) - round(math.log10(base))) < 1e-4
            if abs(other - round(other)) < 1e-3 and not round_base:
                check.fail(
                    f"{title} divides the exponent by {round(other)} instead of d_model={d_model}: pair i should "
                    f"have the frequency 10000^(-2i / d_model). Did you use a fixed number or another variable "
                    f"(a global, a config field) instead of the d_model argument?"
                )
            check.fail(
                f"{title} uses the base {base:.4g} instead of 10000: pair i should have the frequency "
                f"1 / 10000^(2i / d_model). (With exp and log: `torch.exp(-math.log(10000.0) * 2i / d_model)`.)"
            )

    if close_enough(table, expected, atol=5e-3, rtol=0):  # about 3 significant digits, what half precision keeps
        worst = float((table - expected).abs().max())
        check.fail(
            f"{title} is close to the paper's table but not within float32 precision (largest difference "
            f"{worst:.1e}).\nLikely cause: part of the computation runs in half precision (`.half()`, float16, "
            f"bfloat16) and is converted back. Compute the table in float32 (or float64)."
        )
    empty = [int(r) for r in (table.abs().amax(dim=1) < 1e-12).nonzero()[:, 0]]
    if empty:
        shown = ", ".join(str(r) for r in empty[:4]) + (", ..." if len(empty) > 4 else "")
        check.fail(
            f"Row{'s' if len(empty) > 1 else ''} {shown} of {what} {'are' if len(empty) > 1 else 'is'} all 0, but "
            f"every row holds cosines, so no row can be all 0: {'they were' if len(empty) > 1 else 'it was'} never "
            f"written.\nLikely cause: a loop or a slice that stops one position short "
            f"(`range(max_len - 1)`, `[:-1]`). Every position 0 .. max_len - 1 gets a row."
        )

    _name_invariant(check, table, expected, max_len, d_model, what)


def _halves_message(table: torch.Tensor, max_len: int, d_model: int, what: str) -> str:
    """Row 0 is [0, ..., 0, 1, ..., 1]: the sines in the first half of the columns, the cosines in the second;
    the frequencies (read at position 1) are named too when they are not the paper's."""
    half = d_model // 2
    title = what[0].upper() + what[1:]
    message = (f"{title} puts the sines in the first half of the columns and the cosines in the second (row 0 is "
               f"[0, ..., 0, 1, ..., 1]: sin(0) then cos(0)). The paper interleaves them: column 2i holds sin and "
               f"column 2i + 1 holds cos of the same angle (write into `pe[:, 0::2]` and `pe[:, 1::2]`).")
    if max_len < 2:
        return message
    measured = torch.atan2(table[1, :half], table[1, half:]).double()  # pair i's angle at position 1
    pairs = torch.arange(half).double()
    wanted = 10000.0 ** (-2.0 * pairs / d_model)
    if bool(torch.allclose(measured, wanted, atol=1e-4, rtol=1e-3)):
        return message
    cause = ""
    if half > 1 and bool(torch.allclose(measured, 10000.0 ** (-pairs / (half - 1)), atol=1e-4, rtol=1e-3)):
        cause = (f" Yours divides the exponent by d_model / 2 - 1 = {half - 1} (as tensor2tensor's `timing_signal` "
                 f"does), so the slowest pair turns exactly 10000 times slower than the first.")
    return (f"{message}\nThe frequencies differ from the paper's too: pair i should turn by 10000^(-2i / d_model) "
            f"radians per position.{cause}\n  expected: {fmt_values(wanted)}\n  actual:   {fmt_values(measured)}")


def _name_invariant(check: Check, table: torch.Tensor, expected: torch.Tensor, max_len: int, d_model: int,
                    what: str) -> None:
    """No known mistake matched: name the first invariant that does not hold."""
    row0 = table[0]
    want0 = expected[0]
    half = d_model // 2
    if not close_enough(row0, want0) and d_model >= 4 and close_enough(
            row0, torch.cat([torch.zeros(half), torch.ones(half)]).to(row0.dtype)):
        check.fail(_halves_message(table, max_len, d_model, what))
    if not close_enough(row0, want0):
        check.fail(
            f"Row 0 (position 0) of {what} is wrong.\n"
            f"  expected: {fmt_values(want0, 8)}\n"
            f"  actual:   {fmt_values(row0, 8)}\n"
            f"At position 0 every angle is 0, so the even columns hold sin(0) = 0 and the odd columns cos(0) = 1."
        )
    sin_part, cos_part = table[:, 0::2], table[:, 1::2]
    norms = sin_part**2 + cos_part**2
    if not bool(torch.allclose(norms, torch.ones_like(norms), atol=1e-4)):
        bad = (norms - 1).abs().amax(dim=0)
        pair = int(bad.argmax())
        check.fail(
            f"In {what}, columns {2 * pair} and {2 * pair + 1} do not hold the sine and cosine of the same "
            f"angle: sin^2 + cos^2 should be 1 in every row, but it ranges from "
            f"{float(norms[:, pair].min()):.4f} to {float(norms[:, pair].max()):.4f} for that pair.\n"
            f"Both columns of pair i use the same angle pos / 10000^(2i / d_model)."
        )
    if max_len >= 2:
        measured = torch.atan2(sin_part[1], cos_part[1])
        pairs = torch.arange(d_model // 2).double()
        wanted = 10000.0 ** (-2.0 * pairs / d_model)
        if not bool(torch.allclose(measured, wanted, atol=1e-4, rtol=1e-3)):
            check.fail(
                f"The frequencies in {what} are wrong. The frequency of pair i (columns 2i, 2i + 1) is the angle "
                f"at position 1, and should be 10000^(-2i / d_model).\n"
                f"  expected: {fmt_values(wanted)}\n"
                f"  actual:   {fmt_values(measured)}"
            )
    check.close(
        table,
        expected,
        what,
        atol=ATOL,
        rtol=RTOL,
        hint="Row 0 and the pair frequencies look right, so look at how the positions enter the angle.",
    )


# --------------------------------------------------------------------------
# The module's stages


def _registration(check: Check, module: nn.Module, max_len: int, d_model: int) -> None:
    """Record a problem unless the table is a registered buffer and the module has no parameters."""
    size = max_len * d_model
    params = [(n, p) for n, p in module.named_parameters()]
    for name, p in params:
        what = "your table" if p.numel() == size else "a parameter"
        check.problem(
            f"PositionalEncoding stores {what} `{name}` (shape {fmt_shape(p.shape)}) as an nn.Parameter, so "
            + (
                "an optimizer would train it."
                if p.requires_grad
                else "it is listed among the model's weights (`model.parameters()`) even with requires_grad=False."
            )
            + "\nThe sinusoidal encoding is fixed: keep the table as a buffer with "
            "`self.register_buffer('pe', pe)`; it then follows `.to(device)` and is saved in the state_dict, "
            "but no optimizer changes it. The module should have no parameters at all."
        )
    if params:
        return
    buffers = [(n, b) for n, b in module.named_buffers() if b.numel() == size]
    if buffers:
        name, buffer = buffers[0]
        if buffer.dtype in (torch.float16, torch.bfloat16):
            check.problem(
                f"PositionalEncoding stores its table `{name}` as {buffer.dtype}, which keeps only about 3 "
                f"significant digits: the sines and cosines come out visibly wrong.\nBuild and register the table "
                f"in float32 (`torch.zeros(max_len, d_model)` is float32 by default)."
            )
        elif buffer.dtype != torch.get_default_dtype():
            check.problem(
                f"PositionalEncoding stores its table `{name}` as {buffer.dtype}, not float32 like the model's "
                f"weights. Lesson 07 adds a row of it, `pe[t]`, to float32 embeddings: the sum becomes "
                f"{buffer.dtype}, and the next nn.Linear stops with \"mat1 and mat2 must have the same dtype\".\n"
                f"Register the table in float32 (`torch.zeros(max_len, d_model)` is float32 by default; `.float()` "
                f"a table built in float64); `.to(dtype)` then moves it with the model."
            )
        check.ok("the table is a registered buffer, not a parameter")
        return
    plain = [n for n, v in vars(module).items() if isinstance(v, torch.Tensor) and v.numel() == size]
    if plain:
        check.problem(
            f"PositionalEncoding keeps its table in the plain attribute `self.{plain[0]}`, which is not "
            f"registered with the module: `.to(device)` would leave it behind on the CPU and `state_dict()` "
            f"would not contain it.\nRegister it as a buffer: `self.register_buffer('{plain[0]}', pe)`."
        )
    else:
        other = [(n, b) for n, b in module.named_buffers() if b.dim() >= 2 and b.shape[-1] == d_model]
        if other:
            name, buffer = other[0]
            check.fail(
                f"PositionalEncoding(d_model={d_model}, dropout=0.0, max_len={max_len}) registers a table `{name}` "
                f"of shape {fmt_shape(buffer.shape)}: its number of rows is not max_len={max_len}.\nBuild the "
                f"table with the `max_len` argument (one row per position 0 .. max_len - 1), not a fixed number."
            )
        check.problem(
            f"PositionalEncoding(d_model={d_model}, max_len={max_len}) has no registered buffer with the "
            f"table ({max_len} x {d_model} values).\nBuild the table once in __init__ and keep it with "
            f"`self.register_buffer('pe', pe)`; forward only slices it."
        )


def _zero_input_stage(check: Check, module: nn.Module, table, max_len: int, d_model: int, g) -> torch.Tensor:
    B, L = 3, 11
    zeros = torch.zeros(B, L, d_model)
    out = stages.table_forward(check, module, zeros, max_len, SINUSOIDAL)
    if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float32:
        check.fail(
            f"For a float32 input, PositionalEncoding returns {out.dtype}: the table was built in another "
            f"dtype. Build it in float32 (or convert it with `.float()` before registering it), so that the "
            f"output keeps the input's dtype."
        )
    out = check.tensor(
        out, "the output of PositionalEncoding", shape=(B, L, d_model), dtype=torch.float32, shape_hint=
        "The output has the shape of the input, (B, L, d_model): the table broadcasts over the batch axis."
    )
    check.ok("keeps a float32 input's shape (B, L, d_model) and dtype")
    rows = out.detach().double()
    if not close_enough(rows, table[:L].expand(B, L, d_model)):
        slip = matching_slip(MODULE_SLIPS, lambda s: s.replay(None, zeros.double(), table), same_tensor(rows))
        if slip is not None:
            check.fail(slip.says)
    if not bool(torch.allclose(rows, rows[:1].expand_as(rows), atol=1e-6)):
        check.fail(
            "With an all-zero input, every batch element should get the same output (the table), "
            "but yours differ across the batch axis."
        )
    _diagnose_table(
        check, rows[0], L, d_model, "the table your module adds (its output for an all-zero input)", max_len
    )
    check.ok("adds PE[:L], the table of the paper (output for a zero input)")

    return torch.randn(B, L, d_model, generator=g)


# --------------------------------------------------------------------------
# The declarations


def _batch_rows(x: torch.Tensor, table: torch.Tensor, *_) -> torch.Tensor:
    """Row b of the table added to every position of sentence b (the table sliced with the batch size)."""
    B, L, d_model = x.shape
    return x + table[:B, None, :].expand(B, L, d_model)


#: the module's own slips (mutants ``(x, table) -> output``, float64), after the general ones of a table-adding module
MODULE_SLIPS = (
    *stages.added_table_slips("PositionalEncoding", "PE[:L]"),
    Slip("batch rows", Diagnosis(
        "PositionalEncoding adds row b of the table to every position of batch element b: it slices the table "
        "with the batch size instead of the sequence length.", "x has shape (B, L, d_model), so the length is "
        "`x.size(1)`, and the table rows go along the second axis."), _batch_rows),
)


def _table_answer(slip: Slip) -> Callable:
    """A table slip made into a learner's sinusoidal_positional_encoding (for the generated catalogue tests)."""
    def slipped_sinusoidal_positional_encoding(max_len: int, d_model: int) -> torch.Tensor:
        try:
            return slip.replay(None, max_len, d_model, max_len).float()
        except ValueError:  # the slip does not show at these sizes
            return _reference(max_len, d_model).float()

    return slipped_sinusoidal_positional_encoding


def _module_answer(slip: Slip) -> type[nn.Module]:
    """A slip made into a learner's PositionalEncoding: a table slip builds its buffer, a module slip its forward."""
    in_table = slip in TABLE_SLIPS

    class SlippedPositionalEncoding(nn.Module):
        def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = _table_answer(slip)(max_len, d_model) if in_table else _reference(max_len, d_model).float()
            self.register_buffer("pe", pe)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if in_table:
                return self.dropout(x + self.pe[: x.size(1)])
            return self.dropout(slip.replay(None, x, self.pe).to(x.dtype))

    return SlippedPositionalEncoding


SINUSOIDAL_TABLE = Exercise(
    "sinusoidal_positional_encoding", _check_sinusoidal_positional_encoding,
    oracle="the formula of section 3.5, PE[pos, 2i] = sin(pos / 10000^(2i / d_model)), PE[pos, 2i + 1] = cos(same), "
           "in float64",
    cases="(50, 16), (7, 6), (1, 4), (3, 32), (50, 10) called in turn, two sizes drawn from the check's seed, then "
          "(5000, 10) with a tolerance growing with the position",
    slips=TABLE_SLIPS, answer=_table_answer)

POSITIONAL_ENCODING = Exercise(
    "PositionalEncoding", _check_positional_encoding,
    oracle="dropout(x + PE[:L]), PE the formula's table in float64; dropout measured",
    cases="d_model 16, max_len 40: zeros and random (3, 11) inputs, batch sizes 1, 2, 5 and lengths up to max_len, "
          "L = 100 of max_len 128, the default max_len 5000; dropout 0.5 and 0.1 in training",
    slips=(*MODULE_SLIPS, *TABLE_SLIPS), answer=_module_answer)
