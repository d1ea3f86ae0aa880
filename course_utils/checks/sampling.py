"""Checker for lesson 07's sampling, ``sample_decode``: the tokens it draws at each step are counted against the
distribution (:class:`.stages.decoding.KnownLogits`), so any way of drawing passes; then the generator it draws from,
greedy decoding's whole checker with top_k=1 (:func:`.decoding.greedy_stages`), and a ValueError for a temperature <= 0.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ._core import Check, CheckResult
from .decoding import greedy_stages
from .exercise import Exercise
from .slips import Diagnosis, Slip
from .stages import decoding as kit

#: the scripted logits after a prefix of one and of two tokens; BOS and padding far below; 60 above zero, as a
#: trained model's can be: softmax does not mind, exp(logits / 0.5) written by hand overflows float32
_LOGITS = 60 + torch.tensor([[1.1, 2.0, -0.7, 0.2, -30, -0.9, 1.5, -30, 0.6],
                             [-0.3, 0.9, 1.4, 2.6, -30, 0.2, -1.0, -30, 0.5]], dtype=torch.float64)
_SENTENCE = kit.KnownLogits(_LOGITS, bos_id=7, eos_id=2, pad_id=4)
_CASES = [dict(temperature=1.0, top_k=None), dict(temperature=0.5, top_k=3), dict(temperature=2.0, top_k=None)]


def check_sample_decode(sample_decode: Callable) -> CheckResult:
    """Check ``sample_decode(model, src, max_len, bos_id, eos_id, pad_id, temperature, top_k, generator)``."""
    return SAMPLE_DECODE.check(sample_decode)


def _check_sample_decode(check: Check, sample_decode: Callable) -> None:
    check.callable_(sample_decode, "sample_decode")
    unexplained = _SENTENCE.frequencies(
        check, sample_decode, "sample_decode", _CASES, _probs, SLIPS, holds=(
            "draws each token with probability softmax(logits / temperature) over the top_k most likely, never "
            "outside them (temperature 1 and no top_k by default)"), excluded=" (it is not among the top_k most likely)"
    ) or _SENTENCE.generator_use(check, sample_decode, "sample_decode", SLIPS)
    greedy_stages(check, sample_decode, temperature=0.7, top_k=1)  # an unexplained misfit waits for their messages
    check.require(not unexplained, unexplained)
    kit.rejects(check, sample_decode, _SENTENCE.arguments(), "sample_decode", "temperature", (0.0, -1.0),
                "a temperature must be positive: softmax(logits / 0) means nothing",
                "Start with `if temperature <= 0: raise ValueError(...)`.", "raises ValueError for a temperature <= 0")


def _probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, step: int = 1) -> torch.Tensor:
    """The oracle: softmax(logits / temperature) over the top_k largest logits, (..., V) like ``logits``."""
    scaled = logits.double() / temperature
    if top_k is not None:
        scaled = scaled.masked_fill(scaled < scaled.topk(top_k, dim=-1).values[..., -1:], -math.inf)
    return scaled.softmax(dim=-1)


def _probs_with(scale: Callable = lambda t, step: t, keep: Callable = lambda k: k) -> dict:
    """The oracle's flag for a slip of its distribution: the temperature it divides by (at a step), the top_k kept."""
    return dict(probs=lambda logits, temperature, top_k, step: _probs(logits, scale(temperature, step), keep(top_k)))


_TOP_K = "keep the top_k largest logits, `logits.topk(top_k).values[:, -1:]` is the smallest of them."
#: the known slips, tried once the draws disagree with the oracle: the oracle's flags make each one
SLIPS = (
    Slip("multiplied", Diagnosis("Your sample_decode multiplies the logits by the temperature:", "divide them, "
         "`logits / temperature`, so that a temperature below 1 sharpens the distribution and above 1 flattens it."),
         _probs_with(scale=lambda t, step: 1 / t)),
    Slip("no temperature", Diagnosis("Your sample_decode draws as if the temperature were 1:", "divide the logits "
         "by it before the softmax (dividing the probabilities after it changes nothing once they are renormalised)."),
         _probs_with(scale=lambda t, step: 1.0)),
    Slip("first step", Diagnosis("Your sample_decode divides by the temperature at the first step only:",
         "divide the logits of every step."), _probs_with(scale=lambda t, step: t if step == 1 else 1.0)),
    Slip("k + 1", Diagnosis("Your sample_decode keeps top_k + 1 tokens:", _TOP_K),
         _probs_with(keep=lambda k: k and k + 1)),
    Slip("k - 1", Diagnosis("Your sample_decode keeps top_k - 1 tokens:", _TOP_K),
         _probs_with(keep=lambda k: k and k - 1)),
    Slip("no top_k", Diagnosis("Your sample_decode ignores top_k:", "set every logit below the top_k largest to -inf "
         "before the softmax."), _probs_with(keep=lambda k: None)),
    *kit.generator_slips("sample_decode"),  # the generator it draws from
)


SAMPLE_DECODE = Exercise(
    "sample_decode", _check_sample_decode,
    oracle="softmax(logits / temperature) over the top_k largest logits, against the frequencies of what is drawn",
    cases="2,000 copies of one sentence whose logits the checker knows, at temperature 1 (the defaults), 0.5 with "
          "top_k=3, and 2.0; generators seeded 1 and 2, and none; greedy decoding's cases with top_k=1",
    slips=SLIPS, answer=lambda slip: kit.sampling_answer(slip, _probs))
