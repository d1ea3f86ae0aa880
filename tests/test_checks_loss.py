"""The checker of lesson 06 for cross entropy with label smoothing."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from course_utils.checks import loss as _loss
from course_utils.checks.loss import check_label_smoothing_loss
from helpers import expect


# --------------------------------------------------------------------------
# Correct implementations


def label_smoothing_loss(logits, target, smoothing, pad_id):
    vocab_size = logits.size(-1)
    log_probs = F.log_softmax(logits, dim=-1)  # (N, V)
    with torch.no_grad():
        true_dist = torch.full_like(log_probs, smoothing / vocab_size)
        true_dist.scatter_add_(1, target.unsqueeze(1), torch.full_like(log_probs[:, :1], 1 - smoothing))
    per_token = -(true_dist * log_probs).sum(-1)  # (N,)
    real = target != pad_id
    return per_token[real].sum() / real.sum()


def pytorch_itself(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id)


def nll_plus_uniform(logits, target, smoothing, pad_id):
    """(1 - eps) * NLL + eps * mean over classes of -log p."""
    log_probs = logits.log_softmax(-1)
    mask = (target != pad_id).float()
    nll = -log_probs.gather(-1, target[:, None]).squeeze(-1)
    uniform = -log_probs.mean(-1)
    per_token = (1 - smoothing) * nll + smoothing * uniform
    return (per_token * mask).sum() / mask.sum()


def uniform_summed(logits, target, smoothing, pad_id):
    """The uniform term summed over the classes, not averaged: V times too large."""
    log_probs = logits.log_softmax(-1)
    mask = (target != pad_id).float()
    nll = -log_probs.gather(-1, target[:, None]).squeeze(-1)
    per_token = (1 - smoothing) * nll + smoothing * -log_probs.sum(-1)
    return (per_token * mask).sum() / mask.sum()


def weights_swapped(logits, target, smoothing, pad_id):
    """smoothing on the true class and 1 - smoothing on the uniform part."""
    log_probs = logits.log_softmax(-1)
    mask = (target != pad_id).float()
    nll = -log_probs.gather(-1, target[:, None]).squeeze(-1)
    per_token = smoothing * nll + (1 - smoothing) * -log_probs.mean(-1)
    return (per_token * mask).sum() / mask.sum()


def masked_select_float64(logits, target, smoothing, pad_id):
    keep = target != pad_id
    x = logits[keep].double()
    t = target[keep]
    log_probs = x - torch.logsumexp(x, dim=1, keepdim=True)
    q = F.one_hot(t, x.shape[1]).double() * (1 - smoothing) + smoothing / x.shape[1]
    return torch.einsum("nv,nv->", -q, log_probs) / t.numel()


def kl_plus_entropy(logits, target, smoothing, pad_id):
    """KL divergence with the entropy of the target added back: exactly cross entropy."""
    v = logits.shape[-1]
    log_probs = F.log_softmax(logits, -1)
    q = F.one_hot(target, v) * (1 - smoothing) + smoothing / v
    kl = F.kl_div(log_probs, q, reduction="none").sum(-1)
    entropy = -torch.xlogy(q, q).sum(-1)
    real = target != pad_id
    return (kl + entropy)[real].mean()


# --------------------------------------------------------------------------
# Wrong implementations


def _per_token(logits, target, smoothing, spread, zero_pad_col=None):
    v = logits.shape[-1]
    log_probs = F.log_softmax(logits, -1)
    one_hot = F.one_hot(target, v).float()
    q = (1 - smoothing) * one_hot + smoothing / spread * (1 - one_hot)
    if zero_pad_col is not None:
        q[:, zero_pad_col] = 0.0
    return -(q * log_probs).sum(-1)


def counts_pad(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, label_smoothing=smoothing)


def zeroes_pad_divides_by_n(logits, target, smoothing, pad_id):
    per_token = F.cross_entropy(logits, target, label_smoothing=smoothing, reduction="none", ignore_index=pad_id)
    return per_token.mean()


def seed_004(logits, target, smoothing, pad_id):
    """V-1 spread and no padding handling at all."""
    return _per_token(logits, target, smoothing, logits.shape[-1] - 1).mean()


def v_minus_one(logits, target, smoothing, pad_id):
    real = target != pad_id
    return _per_token(logits, target, smoothing, logits.shape[-1] - 1)[real].mean()


def annotated_transformer(logits, target, smoothing, pad_id):
    real = target != pad_id
    v = logits.shape[-1]
    return _per_token(logits, target, smoothing, v - 2, zero_pad_col=pad_id)[real].mean()


def sums(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id, reduction="sum")


def softmax_not_log(logits, target, smoothing, pad_id):
    probs = F.softmax(logits, -1)
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    real = target != pad_id
    return -(q * probs).sum(-1)[real].mean()


def log_of_softmax(logits, target, smoothing, pad_id):
    log_probs = torch.log(F.softmax(logits, -1))
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    real = target != pad_id
    return -(q * log_probs).sum(-1)[real].mean()


def log_of_softmax_eps(logits, target, smoothing, pad_id):
    log_probs = torch.log(F.softmax(logits, -1) + 1e-9)
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    real = target != pad_id
    return -(q * log_probs).sum(-1)[real].mean()


def kl_divergence(logits, target, smoothing, pad_id):
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    real = target != pad_id
    return F.kl_div(F.log_softmax(logits, -1), q, reduction="none").sum(-1)[real].mean()


def hard_coded_pad(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=0)


def per_token_losses(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id, reduction="none")


def no_smoothing(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, ignore_index=pad_id)


def true_class_only(logits, target, smoothing, pad_id):
    return (1 - smoothing) * F.cross_entropy(logits, target, ignore_index=pad_id)


def in_place(logits, target, smoothing, pad_id):
    logits -= logits.max(dim=-1, keepdim=True).values
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id)


def item(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id).item()


def detached(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits.detach(), target, label_smoothing=smoothing, ignore_index=pad_id)


def partly_detached(logits, target, smoothing, pad_id):
    log_probs = logits - torch.logsumexp(logits, -1, keepdim=True).detach()
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    real = target != pad_id
    return -(q * log_probs).sum(-1)[real].mean()


def stub(logits, target, smoothing, pad_id):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "fn", [label_smoothing_loss, pytorch_itself, nll_plus_uniform, masked_select_float64, kl_plus_entropy]
)
def test_accepts_correct_variants(fn):
    result = check_label_smoothing_loss(fn)
    expect(result, "passed")
    assert any("gradient" in item for item in result.checked)


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (counts_pad, ["pad positions are counted", "number of non-pad tokens"]),
        (zeroes_pad_divides_by_n, ["still divide by n"]),
        (seed_004, ["v-1 wrong classes", "smoothing/v over all v classes", "pad positions are counted"]),
        (v_minus_one, ["v-1 wrong classes", "the true one included"]),
        (annotated_transformer, ["annotated transformer", "smoothing/(v-2)", "pad column"]),
        (sums, ["sum over tokens", "mean"]),
        (softmax_not_log, ["probabilities (softmax) where log-probabilities belong"]),
        (log_of_softmax, ["far apart", "underflows", "f.log_softmax"]),
        (log_of_softmax_eps, ["far apart", "epsilon"]),
        (kl_divergence, ["kl divergence", "entropy", "constant", "gradients are the same"]),
        (hard_coded_pad, ["target == 0 instead of", "pad_id"]),
        (per_token_losses, ["should be a scalar", "shape (7,)", "one loss per position"]),
        (no_smoothing, ["ignores the smoothing"]),
        (true_class_only, ["only the true class is smoothed"]),
        (weights_swapped, ["two weights are swapped"]),
        (uniform_summed, ["summed over the v classes instead of averaged", "-log_probs.mean(-1)"]),
        (in_place, ["changed its input `logits` in place"]),
        (item, ["python number", ".item()"]),
        (detached, ["not connected to the logits", "requires_grad is false"]),
        (partly_detached, ["gradient with respect to the logits", "detach"]),
    ],
)
def test_diagnoses_mistakes(fn, phrases):
    expect(check_label_smoothing_loss(fn), "failed", *phrases)


def test_outcomes():
    expect(check_label_smoothing_loss(stub), "not attempted", "NotImplementedError")

    def crashes(logits, target, smoothing, pad_id):
        return F.cross_entropy(logits, target.float(), label_smoothing=smoothing)

    expect(check_label_smoothing_loss(crashes), "error", "logits = tensor of shape (7, 5)")


def test_messages_show_expected_and_actual():
    text = "\n".join(check_label_smoothing_loss(v_minus_one).messages)
    assert "expected" in text and "got" in text and "pad_id=3" in text


def test_code_that_draws_random_numbers_still_passes():
    def noisy(logits, target, smoothing, pad_id):
        torch.rand(1)
        random.random()
        return pytorch_itself(logits, target, smoothing, pad_id)

    expect(check_label_smoothing_loss(noisy), "passed")


# --------------------------------------------------------------------------
# Red-team catalogue: less common mistakes and unusual correct solutions.


def returns_float64(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits.double(), target, label_smoothing=smoothing, ignore_index=pad_id)


def python_loop(logits, target, smoothing, pad_id):
    total, count = 0.0, 0
    for i in range(logits.shape[0]):
        if int(target[i]) == pad_id:
            continue
        log_probs = F.log_softmax(logits[i], dim=-1)
        total = total - (1 - smoothing) * log_probs[target[i]] - smoothing * log_probs.mean()
        count += 1
    return total / count


def kl_div_module_plus_entropy(logits, target, smoothing, pad_id):
    real = target != pad_id
    q = F.one_hot(target[real], logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    kl = torch.nn.KLDivLoss(reduction="sum")(F.log_softmax(logits[real], -1), q)
    return (kl - torch.xlogy(q, q).sum()) / real.sum()


@pytest.mark.parametrize("fn", [returns_float64, python_loop, kl_div_module_plus_entropy])
def test_accepts_unusual_correct_variants(fn):
    expect(check_label_smoothing_loss(fn), "passed")


def half_precision(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits.half(), target, label_smoothing=smoothing, ignore_index=pad_id)


def bfloat16(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits.bfloat16(), target, label_smoothing=smoothing, ignore_index=pad_id)


def true_class_overwritten(logits, target, smoothing, pad_id):
    q = torch.full_like(logits, smoothing / logits.shape[-1]).scatter(1, target[:, None], 1 - smoothing)
    real = target != pad_id
    return -(q * F.log_softmax(logits, -1)).sum(-1)[real].mean()


def mask_inverted(logits, target, smoothing, pad_id):
    per_token = F.cross_entropy(logits, target, label_smoothing=smoothing, reduction="none")
    return per_token[target == pad_id].mean()


def log_softmax_over_positions(logits, target, smoothing, pad_id):
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    real = target != pad_id
    return -(q * F.log_softmax(logits, dim=0)).sum(-1)[real].mean()


def nll_loss_on_logits(logits, target, smoothing, pad_id):
    return F.nll_loss(logits, target, ignore_index=pad_id)


def kl_batchmean(logits, target, smoothing, pad_id):
    q = F.one_hot(target, logits.shape[-1]) * (1 - smoothing) + smoothing / logits.shape[-1]
    q = q * (target != pad_id)[:, None]
    return F.kl_div(F.log_softmax(logits, -1), q, reduction="batchmean")


def divides_by_vocab_size(logits, target, smoothing, pad_id):
    per_token = F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id, reduction="none")
    return per_token.sum() / logits.shape[-1]


def smoothing_term_over_every_position(logits, target, smoothing, pad_id):
    """The two terms apart: the cross entropy skips the pads, the smoothing term averages over them too."""
    uniform = -F.log_softmax(logits, dim=-1).mean(-1)  # (N,)
    return (1 - smoothing) * F.cross_entropy(logits, target, ignore_index=pad_id) + smoothing * uniform.mean()


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (smoothing_term_over_every_position, ["right when smoothing is 0", "which positions its average covers"]),
        (half_precision, ["dtype float16", "significant digits"]),
        (bfloat16, ["dtype bfloat16"]),
        (true_class_overwritten, ["1-smoothing+smoothing/v", "overwritten"]),
        (mask_inverted, ["pad positions only", "inverted"]),
        (log_softmax_over_positions, ["wrong axis", "dim=-1"]),
        (nll_loss_on_logits, ["raw logits", "log_softmax", "ignores the smoothing"]),
        (kl_batchmean, ["kl divergence", "still divide by n"]),
        (divides_by_vocab_size, ["does not match", "mean over the positions where target != pad_id"]),
    ],
)
def test_diagnoses_unusual_mistakes(fn, phrases):
    if fn in (half_precision, bfloat16) and not _cross_entropy_runs_in(torch.float16 if fn is half_precision else torch.bfloat16):
        # an older PyTorch (2.3 and before) has no float16 cross entropy on the CPU: the learner's code crashes there
        dtype = "float16" if fn is half_precision else "bfloat16"
        expect(check_label_smoothing_loss(fn), "error", "not implemented for", f"your code converts to {dtype}",
               "torch.autocast")
        return
    expect(check_label_smoothing_loss(fn), "failed", *phrases)


def _cross_entropy_runs_in(dtype: torch.dtype) -> bool:
    try:
        F.cross_entropy(torch.zeros(2, 3, dtype=dtype), torch.zeros(2, dtype=torch.long))
    except RuntimeError:
        return False
    return True


def test_one_hot_without_num_classes_is_an_error():
    def one_hot_too_narrow(logits, target, smoothing, pad_id):
        q = F.one_hot(target) * (1 - smoothing) + smoothing / logits.shape[-1]
        return -(q * F.log_softmax(logits, -1)).sum(-1)[target != pad_id].mean()

    expect(check_label_smoothing_loss(one_hot_too_narrow), "error", "RuntimeError", "F.one_hot(target)",
           "num_classes=logits.size(-1)")


def test_no_case_has_as_many_real_tokens_as_classes():
    """Dividing by V instead of the number of real tokens must never be right by accident."""
    from course_utils.checks.loss import _cases, _large_case

    for case in [*_cases(), _large_case()]:
        real = int((case["target"] != case["pad_id"]).sum())
        assert real != case["logits"].shape[1] and real != case["logits"].shape[0]


# --------------------------------------------------------------------------
# Raw exceptions get a hint tied to the line; lesson 06's sizes; tensors on the logits' device (issue 9).


def gather_without_unsqueeze(logits, target, smoothing, pad_id):
    log_probs = F.log_softmax(logits, dim=-1)
    nll = -log_probs.gather(-1, target)
    uniform = -log_probs.mean(dim=-1)
    real = target != pad_id
    return ((1 - smoothing) * nll + smoothing * uniform)[real].mean()


def one_hot_of_the_largest_id(logits, target, smoothing, pad_id):
    """Right whenever the largest class occurs in the target: F.one_hot's width follows the data."""
    q = F.one_hot(target, int(target.max()) + 1).float() * (1 - smoothing) + smoothing / logits.size(-1)
    return -(q * F.log_softmax(logits, -1)).sum(-1)[target != pad_id].mean()


def smoothing_built_on_the_cpu(logits, target, smoothing, pad_id):
    q = torch.full(logits.shape, smoothing / logits.size(-1))  # no device=: on the CPU whatever the logits'
    q = q.scatter_add(1, target[:, None], torch.full((len(target), 1), 1 - smoothing))
    per_token = -(q * F.log_softmax(logits, -1)).sum(-1)
    real = target != pad_id
    return per_token[real].sum() / real.sum()


def class_ids_on_the_cpu(logits, target, smoothing, pad_id):
    classes = torch.arange(logits.size(-1))  # on the CPU
    q = (classes[None, :] == target[:, None]).float() * (1 - smoothing) + smoothing / logits.size(-1)
    per_token = -(q * F.log_softmax(logits, -1)).sum(-1)
    real = target != pad_id
    return per_token[real].sum() / real.sum()


@pytest.mark.parametrize(
    "fn, status, phrases",
    [
        (gather_without_unsqueeze, "error", ["gather", "target.unsqueeze(-1)"]),
        (one_hot_of_the_largest_id, "error", ["one_hot", "num_classes=logits.size(-1)"]),
        (smoothing_built_on_the_cpu, "failed", ["cpu", "torch.full(logits.shape", "device=logits.device"]),
        (class_ids_on_the_cpu, "failed", ["cpu", "torch.arange", "device=logits.device"]),
    ],
)
def test_crashes_and_devices_are_named(fn, status, phrases):
    expect(check_label_smoothing_loss(fn), status, *phrases)


def on_the_logits_device(logits, target, smoothing, pad_id):
    vocab_size = logits.size(-1)
    classes = torch.arange(vocab_size, device=logits.device)
    q = (classes == target[:, None]).to(logits.dtype) * (1 - smoothing) + smoothing / vocab_size
    per_token = -(q * logits.log_softmax(-1)).sum(-1)
    real = (target != pad_id).to(logits.dtype)
    return (per_token * real).sum() / real.sum()


def einsum_and_new_tensors(logits, target, smoothing, pad_id):
    log_probs = F.log_softmax(logits, dim=-1)
    q = logits.new_full(logits.shape, smoothing / logits.size(-1))
    q = q + (1 - smoothing) * F.one_hot(target, num_classes=logits.size(-1)).to(q)
    per_token = -torch.einsum("nv,nv->n", q, log_probs)
    keep = target.ne(pad_id)
    return per_token.masked_select(keep).mean()


@pytest.mark.parametrize("fn", [on_the_logits_device, einsum_and_new_tensors])
def test_accepts_device_following_variants(fn):
    expect(check_label_smoothing_loss(fn), "passed")


def test_passing_lists_lesson_sizes_and_devices():
    result = check_label_smoothing_loss(label_smoothing_loss)
    expect(result, "passed")
    assert any("lesson 06" in item for item in result.checked)
    assert any("device" in item for item in result.checked)


# --------------------------------------------------------------------------
# Two slips together (the checker's own table, made into answers): named together, unless they compute what one does.

#: pairs that compute exactly what a single slip computes, on any input: no check can tell them apart
_SAME_AS_ONE_SLIP = {
    "pad id 0 + pads counted": "pads counted",  # every position is averaged: which one is the pad no longer matters
    "pad id 0 + summed over every token": "summed over every token",
    "no smoothing + KL divergence": "no smoothing",  # a one-hot target has entropy 0: KL is the cross entropy
}


@pytest.mark.parametrize("slip", [s for s in _loss._COMBINED if s.name.count(" + ") == 1], ids=lambda s: s.name)
def test_two_slips_together_are_named_together(slip):
    result = check_label_smoothing_loss(_loss._loss_answer(slip))
    expect(result, "failed")
    single = {s.name: s for s in _loss.LOSS_SLIPS}.get(_SAME_AS_ONE_SLIP.get(slip.name))
    assert (single or slip).says.cause in result.messages[0], result
