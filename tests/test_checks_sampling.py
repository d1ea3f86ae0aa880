"""The checker of lesson 07 for sampling: every way of drawing passes, each known slip fails with its own message."""

from __future__ import annotations

import pytest
import torch

from course_utils.checks.sampling import SLIPS, check_sample_decode
from helpers import expect


def loop(draw, position=-1, source=lambda generator: generator):
    """A sample_decode whose next tokens (B,) are ``draw(logits (B, V), temperature, top_k, rng, step)``, with
    ``rng = source(generator)`` once per call."""
    @torch.no_grad()
    def sample_decode(model, src, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None, generator=None):
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        memory, rng = model.encode(src), source(generator)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        while ys.size(1) < max_len and not finished.all():
            logits = model.decode(ys, memory, src)[:, position]  # (B, V)
            next_token = draw(logits, temperature, top_k, rng, ys.size(1)).masked_fill(finished, pad_id)
            ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, T + 1)
            finished |= next_token == eos_id
        return ys

    sample_decode.draw = draw
    return sample_decode


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


CORRECT = [
    loop(lambda l, t, k, g, step: torch.multinomial(_scores(l, t, k).softmax(-1), 1, generator=g).squeeze(1)),
    loop(lambda l, t, k, g, step: (_scores(l, t, k) - torch.rand(l.shape, generator=g, device=l.device).log().neg()
                                   .log()).argmax(-1)),  # the Gumbel-max trick
    loop(_inverse_cdf),
    loop(_unnormalised),
]


@pytest.mark.parametrize("sample_decode", CORRECT, ids=["multinomial", "gumbel", "inverse_cdf", "unnormalised"])
def test_every_correct_way_of_drawing_is_accepted(sample_decode):
    expect(check_sample_decode(sample_decode), "passed")


@pytest.mark.parametrize("slip", SLIPS, ids=lambda slip: slip.name)
def test_each_known_slip_fails_with_its_own_message(slip):
    answer = loop(lambda l, t, k, g, step: torch.multinomial(slip.probs(l, t, k, step), 1, generator=g).squeeze(1),
                  source=slip.source)
    expect(check_sample_decode(answer), "failed", slip.message)


def _no_value_error(model, src, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None, generator=None):
    return CORRECT[0](model, src, max_len, bos_id, eos_id, pad_id, max(temperature, 0.1), top_k, generator)


WRONG = {  # mistakes that are not slips of the oracle: (sample_decode, status, what the first message says)
    "exp by hand": (loop(lambda l, t, k, g, step: torch.multinomial((l / t).exp(), 1, generator=g).squeeze(1)),
                    "error", "exp(logits / temperature) overflows"),
    "temperature squared": (loop(lambda l, t, k, g, step: CORRECT[0].draw(l, t * t, k, g, step)), "failed",
                            "token 1 has probability 0.652, but your sample_decode draws it in"),
    "the first position": (loop(CORRECT[0].draw, position=0), "failed", "it is the argmax at the FIRST position"),
    "the global generator too": (loop(lambda l, t, k, g, step: CORRECT[0].draw(l, t, k, g, step)
                                      + 0 * torch.rand(1, device=l.device).long()),
                                 "failed", "it should leave the global generator alone when given one"),
    "no ValueError": (_no_value_error, "failed", "sample_decode(..., temperature=0.0) should raise ValueError"),
}


@pytest.mark.parametrize("name", WRONG)
def test_other_mistakes_are_named(name):
    sample_decode, status, phrase = WRONG[name]
    expect(check_sample_decode(sample_decode), status, phrase)
