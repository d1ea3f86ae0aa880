"""Checker for lesson 07's sampling: ``sample_decode`` draws each next token at random.

The oracle is the distribution itself. A scripted model (:mod:`.stages.decoding`) gives logits the checker
knows, the same for 2,000 rows; every token the learner's function draws is counted, step by step, and
each token's frequency is set against its probability, softmax(logits / temperature) over the top_k
most likely tokens. The function may draw however it likes (``torch.multinomial``, the Gumbel-max
trick, an inverse CDF, ...): only what it draws is judged. The test is a Chernoff bound per token: a
frequency q among n rows is rejected when n * KL(q || p) > log(2M / 1e-10), M the number of tokens
tested in all, so a correct sampler fails with probability below 1e-10, whatever its random numbers.
Then what it does with its random numbers: the generator it is given, and only it (or the global one
when given none), the same seed the same tokens. With top_k=1 only the most likely token can be
drawn: greedy decoding's whole checker (:func:`.decoding.greedy_stages`) holds it to its conventions.

Known slips are one table of records, :data:`SLIPS`: a mutant of the oracle (of the distribution, or of
the generator it draws from) and the message that names it, replayed only once the learner's draws
disagree with the oracle's. A named slip fails at once; an unexplained disagreement waits until greedy
decoding's stages, which name a broken convention more precisely, have passed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from ._core import Check, CheckResult, Raised, describe, generator, seed_offset
from .exercise import checked as run_check
from .stages.decoding import ScriptedModel, run_decoder
from .decoding import greedy_stages

_V, _BOS, _EOS, _PAD, _ROWS = 9, 7, 2, 4, 2000
#: the scripted logits after a prefix of one and of two tokens; BOS and padding far below; 60 above zero, as a
#: trained model's can be: softmax does not mind, exp(logits / 0.5) written by hand overflows float32
_LOGITS = 60 + torch.tensor([[1.1, 2.0, -0.7, 0.2, -30, -0.9, 1.5, -30, 0.6],
                             [-0.3, 0.9, 1.4, 2.6, -30, 0.2, -1.0, -30, 0.5]], dtype=torch.float64)
#: (temperature, top_k) per run; None: left to the defaults, which must be 1.0 and None
_CASES = [(None, None), (0.5, 3), (2.0, None)]
_RISK = 1e-10  # a correct sampler's chance of failing the frequency test, at most
_BOUND = math.log(2 * len(_CASES) * len(_LOGITS) * (_V + 1) / _RISK)


def check_sample_decode(sample_decode: Callable) -> CheckResult:
    """Check ``sample_decode(model, src, max_len, bos_id, eos_id, pad_id, temperature, top_k, generator)``."""
    return run_check("sample_decode", _check_sample_decode, sample_decode)


def _check_sample_decode(check: Check, sample_decode: Callable) -> None:
    check.callable_(sample_decode, "sample_decode")
    unexplained = _frequencies(check, sample_decode) or _random_numbers(check, sample_decode)
    greedy_stages(check, sample_decode, temperature=0.7, top_k=1)
    check.require(not unexplained, unexplained)
    for temperature in (0.0, -1.0):
        raised = check.attempt(sample_decode, *_model_and_args(), temperature=temperature, what="sample_decode")
        check.require(isinstance(raised, Raised) and isinstance(raised.exception, ValueError),
                      f"sample_decode(..., temperature={temperature}) should raise ValueError (a temperature must be "
                      f"positive: softmax(logits / 0) means nothing), but it "
                      + (f"raised {type(raised.exception).__name__}." if isinstance(raised, Raised) else "returned.")
                      + " Start with `if temperature <= 0: raise ValueError(...)`.")
    check.ok("raises ValueError for a temperature <= 0")


def _probs(logits: torch.Tensor, temperature: float, top_k: int | None, step: int = 1) -> torch.Tensor:
    """The oracle: softmax(logits / temperature) over the top_k largest logits, (..., V) like ``logits``."""
    scaled = logits.double() / temperature
    if top_k is not None:
        scaled = scaled.masked_fill(scaled < scaled.topk(top_k, dim=-1).values[..., -1:], -math.inf)
    return scaled.softmax(dim=-1)


def _source(g: torch.Generator | None) -> torch.Generator | None:
    """The oracle's generator: the one it is given, else (None) the global one."""
    return g


# --------------------------------------------------------------------------
# The known slips: one record each, a mutant of the oracle and the message that names it


@dataclasses.dataclass(frozen=True)
class Slip:
    """A sampler's mistake: ``probs(logits, temperature, top_k, step)`` is what it draws from, ``source(generator)``
    the generator it draws with (the oracle's where the mistake is elsewhere)."""

    name: str
    message: str
    probs: Callable[..., torch.Tensor] = _probs
    source: Callable[[torch.Generator | None], torch.Generator | None] = _source


SLIPS: tuple[Slip, ...] = (
    Slip("multiplied", "Your sample_decode multiplies the logits by the temperature: divide them, "
         "`logits / temperature`, so that a temperature below 1 sharpens the distribution and above 1 flattens it.",
         probs=lambda logits, t, k, step: _probs(logits, 1 / t, k)),
    Slip("no temperature", "Your sample_decode draws as if the temperature were 1: divide the logits by it before "
         "the softmax (dividing the probabilities after it changes nothing once they are renormalised).",
         probs=lambda logits, t, k, step: _probs(logits, 1.0, k)),
    Slip("first step", "Your sample_decode divides by the temperature at the first step only: divide the logits "
         "of every step.", probs=lambda logits, t, k, step: _probs(logits, t if step == 1 else 1.0, k)),
    Slip("k + 1", "Your sample_decode keeps top_k + 1 tokens: keep the top_k largest logits, "
         "`logits.topk(top_k).values[:, -1:]` is the smallest of them.",
         probs=lambda logits, t, k, step: _probs(logits, t, k and k + 1)),
    Slip("k - 1", "Your sample_decode keeps top_k - 1 tokens: keep the top_k largest logits, "
         "`logits.topk(top_k).values[:, -1:]` is the smallest of them.",
         probs=lambda logits, t, k, step: _probs(logits, t, k and k - 1)),
    Slip("no top_k", "Your sample_decode ignores top_k: set every logit below the top_k largest to -inf before "
         "the softmax.", probs=lambda logits, t, k, step: _probs(logits, t, None)),
    Slip("global", "Your sample_decode draws from the global generator, not from the `generator` it is given "
         "(torch.distributions.Categorical(...).sample() takes no generator): pass it to the call that draws, "
         "`torch.multinomial(probs, 1, generator=generator)`.", source=lambda g: None),
    Slip("own", "Your sample_decode draws from a generator of its own, so it draws the same tokens whatever the "
         "generator it is given: draw from the `generator` argument.", source=lambda g: generator(0)),
    Slip("own when None", "With generator=None your sample_decode draws from a generator of its own, so every call "
         "draws the same tokens: pass generator=None on to torch.multinomial (or torch.rand), which then draws "
         "from the global generator, the one torch.manual_seed seeds.", source=lambda g: g or torch.Generator()),
    Slip("reseeds", "Your sample_decode reseeds the generator it is given, so every seed draws the same tokens: "
         "draw from it as it comes.", source=lambda g: g and g.set_state(generator(0).get_state())),
)


def _named(matches: Callable[[Slip], bool]) -> Slip | None:
    """The first known slip whose mutant, replayed on the same inputs, gives what the learner's function gave."""
    return next((slip for slip in SLIPS if matches(slip)), None)


# --------------------------------------------------------------------------
# The stages


def _model_and_args(rows: int = 1) -> tuple:
    model = ScriptedModel(lambda sentence, prefix: _LOGITS[min(len(prefix), 2) - 1], _V, _PAD, rows, max_len=3)
    return model, torch.tensor([[5, 6, 3]] * rows), 3, _BOS, _EOS, _PAD  # (model, src (rows, 3), max_len, ...)


def _run(check: Check, sample_decode: Callable, rows: int, **kwargs: Any) -> Any:
    return run_decoder(check, sample_decode, *_model_and_args(rows), what="sample_decode", runaway="", hint=lambda e: (
        "exp(logits / temperature) overflows: use torch.softmax (or subtract the largest logit first)"
        if "inf" in str(e) else ""), **kwargs)


def _frequencies(check: Check, sample_decode: Callable) -> str:
    """The tokens drawn at each step, against their probabilities; a named slip fails, any other misfit is returned."""
    for temperature, top_k in _CASES:
        given = {"temperature": temperature, "top_k": top_k} if temperature else {}
        out = _run(check, sample_decode, _ROWS, **given, generator=generator(7))
        t = temperature or 1.0
        setup = f"of {_ROWS} copies of a sentence whose logits the checker knows (temperature={t}, top_k={top_k})"
        if not (isinstance(out, torch.Tensor) and out.dtype == torch.long and out.shape == (_ROWS, 3)
                and (out[:, 0] == _BOS).all()):  # greedy decoding's stages will most likely say why first
            return (f"Your sample_decode returns {describe(out)} for a batch {setup} and max_len=3, where a "
                    f"LongTensor ({_ROWS}, 3), bos_id={_BOS} in column 0, was expected.")
        steps = [out[:, 1], out[:, 2][out[:, 1] != _EOS]]  # the tokens drawn at each step by the rows still open
        misfit = _misfit(steps, [_probs(logits, t, top_k) for logits in _LOGITS], setup)
        if misfit:
            slip = _named(lambda s: not _misfit(steps, [s.probs(l, t, top_k, j + 1) for j, l in enumerate(_LOGITS)]))
            check.require(slip is None, f"{slip and slip.message}\n{misfit}")
            return misfit
    check.ok("draws each token with probability softmax(logits / temperature) over the top_k most likely, "
             "never outside them (temperature 1 and no top_k by default)")
    return ""


def _misfit(steps: list[torch.Tensor], probs: list[torch.Tensor], setup: str = "") -> str:
    """The worst token frequency no correct sampler gives (a Chernoff bound: see the module's docstring), or ""."""
    for step, (drawn, p) in enumerate(zip(steps, probs), start=1):
        n, p = len(drawn), torch.cat([p, p.new_zeros(1)])  # index _V stands for every id outside the vocabulary
        if n == 0:
            continue
        q = torch.bincount(drawn.cpu().masked_fill((drawn < 0) | (drawn >= _V), _V), minlength=_V + 1).double() / n
        kl = torch.xlogy(q, q) - torch.xlogy(q, p) + torch.xlogy(1 - q, 1 - q) - torch.xlogy(1 - q, 1 - p)
        if (n * kl).max() > _BOUND:
            w = int((n * kl).argmax())
            rows = [("expected", p[:_V].tolist()), ("yours", q[:_V].tolist())]
            figures = "\n".join([f"  token    {''.join(f'{t:>7}' for t in range(_V))}"] + [
                f"  {name:<9}{''.join(f'{x:7.3f}' for x in row)}" for name, row in rows])
            return (f"At step {step} {setup}, token {w if w < _V else 'ids outside the vocabulary'} has probability "
                    f"{float(p[w]):.3g}" + (" (it is not among the top_k most likely)" if p[w] == 0 else "")
                    + f", but your sample_decode draws it in {round(float(q[w]) * n)} of {n} rows "
                    f"(a correct sampler strays so far with probability below {_RISK:g}):\n{figures}")
    return ""


def _random_numbers(check: Check, sample_decode: Callable) -> str:
    """The generator it is given, and only it, or the global one when given none; a named slip fails."""
    mine = _signature(lambda g: _run(check, sample_decode, 100, **({"generator": g} if g else {})))
    if all(mine):
        check.ok("draws from the generator it is given, and only from it, or from the global one when given none: "
                 "the same seed draws the same tokens")
        return ""
    slip = _named(lambda s: _signature(lambda g: torch.rand(8, generator=s.source(g))) == mine)
    check.require(slip is None, slip and slip.message)
    return "Your sample_decode does not draw its random numbers as it should: it " + "; it ".join(
        promise for promise, held in zip(_PROMISES, mine) if not held) + "."


_PROMISES = ("should draw from the generator it is given", "should leave the global generator alone when given one",
             "should draw the same tokens for the same seed", "should draw other tokens for another seed",
             "should draw from the global generator when given none", "should draw the same tokens after the same "
             "torch.manual_seed")


def _signature(draw: Callable[[torch.Generator | None], Any]) -> tuple[bool, ...]:
    """Which of :data:`_PROMISES` a sampler keeps: ``draw(generator)`` (None: left to the default) draws once."""
    g, outside = generator(1), torch.get_rng_state()
    first, state = draw(g), g.get_state()
    kept = [not torch.equal(state, generator(1).get_state()), torch.equal(torch.get_rng_state(), outside),
            _same(draw(generator(1)), first), not _same(draw(generator(2)), first)]
    torch.manual_seed(3 + seed_offset())  # the check runs in preserved_state: the learner's seed comes back after
    seeded = torch.get_rng_state()
    alone = draw(None)
    kept.append(not torch.equal(torch.get_rng_state(), seeded))
    torch.manual_seed(3 + seed_offset())
    return (*kept, _same(draw(None), alone))


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)


__all__ = ["SLIPS", "Slip", "check_sample_decode"]
