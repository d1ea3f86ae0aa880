"""The checker of lesson 07 for sampling: every way of drawing passes; its slips' tests are generated (test_slips)."""

from __future__ import annotations

import pytest
import torch

from course_utils.checks.sampling import check_sample_decode
from course_utils.checks.stages.decoding import sampler
from helpers import expect


def _scores(logits, temperature, top_k):
    scores = logits / temperature
    return scores if top_k is None else scores.masked_fill(scores < scores.topk(top_k).values[:, -1:], float("-inf"))


def _inverse_cdf(logits, temperature, top_k, generator, step):
    cdf = _scores(logits, temperature, top_k).softmax(-1).cumsum(-1)  # (B, V)
    u = torch.rand(len(logits), 1, generator=generator, device=logits.device) * cdf[:, -1:]  # (B, 1)
    return (cdf <= u).sum(-1).clamp(max=logits.size(-1) - 1)  # the first token whose cdf passes u


def _unnormalised(logits, temperature, top_k, generator, step):
    """Top-k on the probabilities, not renormalised (multinomial and Categorical do it); Categorical if no generator."""
    probs = (logits / temperature).softmax(-1)
    probs = probs if top_k is None else probs * (probs >= probs.topk(top_k).values[:, -1:])
    if generator is None:
        return torch.distributions.Categorical(probs=probs).sample()
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


CORRECT = [  # sampler(pick): greedy decoding's loop, the next tokens (B,) pick(logits, temperature, top_k, rng, step)
    sampler(lambda l, t, k, g, step: torch.multinomial(_scores(l, t, k).softmax(-1), 1, generator=g).squeeze(1)),
    sampler(lambda l, t, k, g, step: (_scores(l, t, k) - torch.rand(l.shape, generator=g, device=l.device).log().neg()
                                      .log()).argmax(-1)),  # the Gumbel-max trick
    sampler(_inverse_cdf),
    sampler(_unnormalised),
]


@pytest.mark.parametrize("sample_decode", CORRECT, ids=["multinomial", "gumbel", "inverse_cdf", "unnormalised"])
def test_every_correct_way_of_drawing_is_accepted(sample_decode):
    expect(check_sample_decode(sample_decode), "passed")


WRONG = {  # mistakes that are not slips of the oracle: (sample_decode, status, what the first message says)
    "exp by hand": (sampler(lambda l, t, k, g, step: torch.multinomial((l / t).exp(), 1, generator=g).squeeze(1)),
                    "error", "exp(logits / temperature) overflows"),
    "temperature squared": (sampler(lambda l, t, k, g, step: CORRECT[0].pick(l, t * t, k, g, step)), "failed",
                            "token 1 has probability 0.652, but your sample_decode draws it in"),
    "the first position": (sampler(CORRECT[0].pick, position=0), "failed", "it is the argmax at the FIRST position"),
    "the global generator too": (sampler(lambda l, t, k, g, step: CORRECT[0].pick(l, t, k, g, step)
                                         + 0 * torch.rand(1, device=l.device).long()),
                                 "failed", "it should leave the global generator alone when given one"),
    "no ValueError": (lambda *args, temperature=1.0, **kw: CORRECT[0](*args, temperature=max(temperature, 0.1), **kw),
                      "failed", "sample_decode(..., temperature=0.0) should raise ValueError"),
}


@pytest.mark.parametrize("name", WRONG)
def test_other_mistakes_are_named(name):
    sample_decode, status, phrase = WRONG[name]
    expect(check_sample_decode(sample_decode), status, phrase)
