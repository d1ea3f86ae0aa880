"""Checker for lesson 06: cross entropy with label smoothing that ignores padding.

The oracle is PyTorch itself,
``F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id)``,
in double precision, for the loss and for its gradient with respect to the
logits. The known slips (``LOSS_SLIPS``: smoothing spread over V-1 classes,
padding counted, KL divergence...) are flags of one slipped oracle,
``_slipped_loss``, and slips from different families combine into slips too;
they are replayed only to name the cause once the values are known to be
wrong. ``LABEL_SMOOTHING_LOSS``, at the bottom, declares the exercise.
Lesson 06's sizes (a vocabulary of hundreds, a
batch of hundreds of positions) are checked too, and the loss runs once on a
pretend GPU (``stages.on_gpu``) so that a tensor built on the CPU is caught on any
machine. A crash gets a hint tied to the construct that usually causes it
(``F.one_hot`` without ``num_classes``, ``gather`` without ``unsqueeze``).
"""

from __future__ import annotations

import inspect
import itertools
from typing import Callable

import torch
import torch.nn.functional as F

from . import stages
from ._core import Check, CheckResult, Raised, close_enough, fmt_number, fmt_shape, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

_ORACLE = "F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id)"


def check_label_smoothing_loss(label_smoothing_loss: Callable) -> CheckResult:
    """Check ``label_smoothing_loss(logits, target, smoothing, pad_id)`` against F.cross_entropy."""
    return LABEL_SMOOTHING_LOSS.check(label_smoothing_loss)


def _check_label_smoothing_loss(check: Check, label_smoothing_loss: Callable) -> None:
    check.callable_(label_smoothing_loss, "label_smoothing_loss")
    cases = _cases()
    values = _check_runs(check, label_smoothing_loss, cases)
    oracles = [_oracle(case) for case in cases]
    _check_values(check, cases, values, [loss for loss, _ in oracles])
    check.ok(f"matches {_ORACLE}, with several smoothing values (0.0 included) and pad ids other than 0")
    _check_large_logits(check, label_smoothing_loss)
    _check_lesson_sizes(check, label_smoothing_loss)
    _check_gradients(check, label_smoothing_loss, cases, [grad for _, grad in oracles])
    _check_device(check, label_smoothing_loss, cases[0])
    check.ok("returns a scalar tensor and leaves its inputs unchanged")  # recorded last: it held on every call above


def _cases() -> list[dict]:
    """Inputs with N != V (and real tokens neither N nor V), pad ids other than 0, and real targets equal to 0; the first
    lacks the last class."""
    g = generator(6)
    cases = []
    for n, v, pad_id, smoothing in [(7, 5, 3, 0.1), (9, 6, 1, 0.0), (13, 8, 6, 0.3)]:
        logits = torch.randn(n, v, generator=g) * 2.0
        target = torch.randint(0, v, (n,), generator=g)
        target[0], target[1] = 0, pad_id  # a real 0 and a pad, whatever the draw gave
        target[n - 1] = pad_id
        target[2] = 0 if pad_id != 0 else 2
        if not cases:  # the largest class never occurs: F.one_hot(target) is then too narrow
            target[target == v - 1] = 0
        real = (target != pad_id).nonzero().flatten()
        if len(real) == v:  # as many real tokens as classes: dividing by V would be right by accident
            target[real[-1]] = pad_id  # the last real one: with v >= 5 real tokens, never the real 0s at 0 and 2
        cases.append({"logits": logits, "target": target, "smoothing": smoothing, "pad_id": pad_id})
    return cases


def _large_case() -> dict:
    """Logits far apart, where softmax underflows to 0 in float32 (log of it is -inf)."""
    g = generator(7)
    logits = torch.randn(6, 7, generator=g)
    logits[torch.arange(6), torch.tensor([1, 4, 0, 6, 2, 5])] += 150.0
    target = torch.tensor([1, 3, 0, 2, 5, 5])
    return {"logits": logits, "target": target, "smoothing": 0.2, "pad_id": 5}


def _lesson_case() -> dict:
    """Lesson 06's sizes: hundreds of positions (a third of them padding) over a vocabulary of hundreds."""
    g = generator(8)
    n, v, pad_id = 320, 629, 0
    logits = torch.randn(n, v, generator=g) * 3.0
    target = torch.randint(4, v, (n,), generator=g)
    target[torch.randperm(n, generator=g)[: n // 3]] = pad_id
    return {"logits": logits, "target": target, "smoothing": 0.1, "pad_id": pad_id}


def _describe_case(case: dict) -> str:
    n, v = case["logits"].shape
    real = int((case["target"] != case["pad_id"]).sum())
    return f"N={n}, V={v}, smoothing={case['smoothing']}, pad_id={case['pad_id']} ({n - real} pad positions)"


def _oracle(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss and its gradient w.r.t. the logits, by PyTorch, in float64."""
    x = case["logits"].double().requires_grad_(True)
    loss = F.cross_entropy(x, case["target"], label_smoothing=case["smoothing"], ignore_index=case["pad_id"])
    loss.backward()
    return loss.detach(), x.grad.detach()


# --------------------------------------------------------------------------
# Known slips: flags of one slipped oracle, one family of flags at a time (how the smoothing is spread, what is
# scored, which divergence, which pad id, how the positions are reduced); any combination of families is named too.


def _slipped_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int, spread: str = "all",
                  score: str = "log", kind: str = "ce", pad: str = "given", reduce: str = "mean_real",
                  memo: dict | None = None) -> torch.Tensor:
    """The loss, in float64, with the slips the flags name; with none, what F.cross_entropy computes. ``memo``
    keeps the loss at each position for these inputs, which slips that differ only in the reduction share."""
    pad_id = pad_id if pad == "given" else 0
    memo = {} if memo is None else memo
    key = (spread, score, kind, pad_id)
    if key not in memo:
        memo[key] = _slipped_per_token(logits.detach().double(), target, smoothing, spread, score, kind, pad_id)
    per_token = memo[key]
    real = target != pad_id
    return {"mean_real": lambda: per_token[real].sum() / real.sum().clamp(min=1),
            "mean_all": lambda: per_token.mean(),
            "mean_all_zeroed": lambda: per_token[real].sum() / target.numel(),
            "mean_pad": lambda: per_token[~real].sum() / (~real).sum().clamp(min=1),
            "sum_real": lambda: per_token[real].sum(),
            "sum_all": lambda: per_token.sum()}[reduce]()


def _slipped_per_token(logits: torch.Tensor, target: torch.Tensor, smoothing: float, spread: str, score: str,
                       kind: str, pad_id: int) -> torch.Tensor:
    """The loss at each position, (N,), with the slips the flags name."""
    q = _target_distribution(F.one_hot(target, logits.shape[-1]).double(), smoothing, spread, pad_id)
    scores = {"log": lambda: F.log_softmax(logits, dim=-1), "prob": lambda: F.softmax(logits, dim=-1),
              "raw": lambda: logits, "dim0": lambda: F.log_softmax(logits, dim=0)}[score]()
    per_token = -(q * scores).sum(-1)
    return per_token + torch.xlogy(q, q).sum(-1) if kind == "kl" else per_token


def _target_distribution(one_hot: torch.Tensor, s: float, spread: str, pad_id: int) -> torch.Tensor:
    """The smoothed target q, (N, V), with the smoothing mass spread as ``spread`` says."""
    v = one_hot.shape[-1]
    if spread == "others_no_pad":
        rest = s / (v - 2) * (1 - one_hot)
        rest[:, pad_id] = 0.0
        return (1 - s) * one_hot + rest
    return {"all": lambda: (1 - s) * one_hot + s / v,
            "others": lambda: (1 - s) * one_hot + s / (v - 1) * (1 - one_hot),
            "overwrite": lambda: (1 - s) * one_hot + s / v * (1 - one_hot),
            "swapped": lambda: s * one_hot + (1 - s) / v,
            "none": lambda: one_hot,
            "summed": lambda: (1 - s) * one_hot + s,
            "true_only": lambda: (1 - s) * one_hot}[spread]()


#: the known slips, one flag of ``_slipped_loss`` each, tried once the values differ (never to accept); after them,
#: every combination of flags from different families (``_COMBINED``), fewest first
LOSS_SLIPS = (
    Slip("V-1 classes", Diagnosis(
        "The smoothing mass is spread over the V-1 wrong classes (smoothing/(V-1) each, 1-smoothing on the true "
        "class).", "F.cross_entropy(label_smoothing=smoothing) spreads smoothing/V over all V classes, the true one "
        "included: the target is (1-smoothing) * one_hot + smoothing / V, so the true class gets "
        "1-smoothing+smoothing/V."), dict(spread="others")),
    Slip("the Annotated Transformer's target", Diagnosis(
        "Your target distribution follows the Annotated Transformer: smoothing/(V-2) on the classes other than the "
        "true one and the pad column, which is set to 0.", "That is a reasonable choice, but this course follows "
        "F.cross_entropy(label_smoothing=...): smoothing/V on every one of the V classes, the true class and the pad "
        "column included."), dict(spread="others_no_pad")),
    Slip("true class overwritten", Diagnosis(
        "The true class gets 1-smoothing, and the other classes smoothing/V: the uniform part was overwritten on the "
        "true class (a `fill` then a `scatter` of 1-smoothing, for example), so each row of your target "
        "distribution sums to 1-smoothing/V instead of 1.", "The target is (1-smoothing) * one_hot + smoothing / V: "
        "the true class gets 1-smoothing+smoothing/V."), dict(spread="overwrite")),
    Slip("weights swapped", Diagnosis(
        "The two weights are swapped: your target puts smoothing on the true class and 1-smoothing on the uniform "
        "part, so with smoothing = 0.1 it is nearly uniform.", "The target is (1-smoothing) * one_hot + smoothing / "
        "V: the one-hot part keeps most of the mass."), dict(spread="swapped")),
    Slip("no smoothing", Diagnosis(
        "Your loss ignores the smoothing: it equals plain cross entropy with one-hot targets.",
        "Mix the one-hot target with the uniform distribution: (1-smoothing) * one_hot + smoothing / V."),
        dict(spread="none")),
    Slip("true class only", Diagnosis(
        "Only the true class is smoothed: it gets 1-smoothing and every other class 0, so the smoothing mass "
        "disappears.", "It should be spread as smoothing/V over all V classes."), dict(spread="true_only")),
    Slip("uniform part summed", Diagnosis(
        "The uniform part is summed over the V classes instead of averaged: smoothing * -log_probs.sum(-1) gives "
        "every class the weight smoothing, V times the smoothing/V it should get.",
        "Average it, `-log_probs.mean(-1)`, or divide the sum by V."), dict(spread="summed")),
    Slip("probabilities", Diagnosis(
        "You used probabilities (softmax) where log-probabilities belong: cross entropy is -sum(q * log p).",
        "Use F.log_softmax(logits, dim=-1)."), dict(score="prob")),
    Slip("raw logits", Diagnosis(
        "You used the raw logits where log-probabilities belong (F.nll_loss, for example, expects log-probabilities, "
        "not logits).", "Apply F.log_softmax(logits, dim=-1) first."), dict(score="raw")),
    Slip("log_softmax over the positions", Diagnosis(
        "Your log-probabilities are normalised over the wrong axis: log_softmax over dim=0 (the N positions) "
        "instead of the vocabulary.", "Use F.log_softmax(logits, dim=-1)."), dict(score="dim0")),
    Slip("KL divergence", Diagnosis(
        "You computed the KL divergence KL(q || p) instead of the cross entropy. They differ by the entropy H(q) of "
        "the smoothed target distribution q: CE(q, p) = KL(q || p) + H(q). H(q) is a constant (it does not depend "
        "on the logits), so the gradients are the same and training is unaffected, but the loss value is lower than "
        "F.cross_entropy's (and can reach 0).", "Return -sum(q * log p) averaged over the real tokens."),
        dict(kind="kl")),
    Slip("pad id 0", Diagnosis(
        "You skip the positions where target == 0 instead of those where target == pad_id.",
        "The pad id is an argument (here not 0), and 0 is an ordinary token in these targets: compare with pad_id."),
        dict(pad="zero")),
    Slip("pads counted", Diagnosis(
        "The pad positions are counted: you average over all N positions, padding included.",
        "Positions where target == pad_id must add nothing to the sum and must not be counted in the average: "
        "divide by the number of non-pad tokens."), dict(reduce="mean_all")),
    Slip("pads zeroed, divided by N", Diagnosis(
        "You zero the loss at pad positions but still divide by N, all positions.",
        "Divide by the number of non-pad tokens instead."), dict(reduce="mean_all_zeroed")),
    Slip("pads only", Diagnosis(
        "You average over the pad positions only: the mask is inverted.",
        "Keep the positions where target != pad_id, and leave out those where target == pad_id."),
        dict(reduce="mean_pad")),
    Slip("summed over the real tokens", Diagnosis(
        "You return the sum over tokens; F.cross_entropy returns the mean over the non-pad tokens (reduction='mean').",
        "Divide the sum by the number of non-pad tokens."), dict(reduce="sum_real")),
    Slip("summed over every token", Diagnosis(
        "You return the sum over all tokens, padding included; F.cross_entropy returns the mean over the non-pad "
        "tokens (reduction='mean'), and pad positions add nothing.",
        "Sum over the non-pad tokens only, and divide by their number."), dict(reduce="sum_all")),
)

_FAMILIES = ("spread", "score", "kind", "pad", "reduce")


def _combined(slips: tuple[Slip, ...]) -> tuple[Slip, ...]:
    """Every combination of two or more slips from different families, as one slip (its flags together, its message
    the list of theirs), fewest slips first."""
    families = [[None] + [slip for slip in slips if family in slip.mutant] for family in _FAMILIES]
    combinations = [[slip for slip in combo if slip is not None] for combo in itertools.product(*families)]
    return tuple(Slip(" + ".join(slip.name for slip in combo), Diagnosis(
        f"Your loss does not match {_ORACLE}. It matches a loss with these differences:\n"
        + "\n".join(f"- {slip.says}" for slip in combo)), {k: v for slip in combo for k, v in slip.mutant.items()})
        for combo in sorted((c for c in combinations if len(c) > 1), key=len))


_COMBINED = _combined(LOSS_SLIPS)


def _loss_answer(slip: Slip) -> Callable:
    """The slip made into a learner's label_smoothing_loss (for the generated catalogue tests)."""
    def slipped_label_smoothing_loss(logits, target, smoothing, pad_id):
        return slip.replay(_slipped_loss, logits, target, smoothing, pad_id).to(logits.dtype)

    return slipped_label_smoothing_loss


# --------------------------------------------------------------------------


def _loss(check: Check, label_smoothing_loss: Callable, case: dict, logits: torch.Tensor | None = None):
    """One guarded call on copies of the case's inputs; a crash ends the check with a hint tied to its cause."""
    logits = case["logits"].clone() if logits is None else logits
    out = check.attempt(label_smoothing_loss, logits, case["target"].clone(), case["smoothing"], case["pad_id"],
                        what="label_smoothing_loss")
    if isinstance(out, Raised):
        hint = _crash_hint(label_smoothing_loss, out)
        if isinstance(out.exception, NotImplementedError) or not hint:
            check.call(label_smoothing_loss, logits, case["target"].clone(), case["smoothing"], case["pad_id"],
                       what="label_smoothing_loss")
        check.error(out.message + "\n" + hint)
    return _scalar(check, out, case)


def _crash_hint(label_smoothing_loss: Callable, raised: Raised) -> str:
    """The usual cause of a crash, when the learner's code shows it ("" otherwise)."""
    text = str(raised.exception)
    try:
        source = inspect.getsource(label_smoothing_loss)
    except (OSError, TypeError):
        source = raised.message
    if "one_hot" in source and ("must match the size" in text or "doesn't match" in text or "shape" in text):
        return (
            "Hint: `F.one_hot(target)` without `num_classes` makes max(target) + 1 columns, which is fewer than V "
            "whenever the largest token id does not occur in this batch, so the target distribution no longer "
            "lines up with the logits. Give the width explicitly: `F.one_hot(target, num_classes=logits.size(-1))`."
        )
    if "gather" in raised.message and "same number of dimensions" in text:
        return (
            "Hint: `gather(-1, index)` needs an index with as many dimensions as the tensor it reads: for log-probs "
            "(N, V) and target (N,), use `log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)`."
        )
    return ""


def _check_runs(check: Check, label_smoothing_loss: Callable, cases: list[dict]) -> list[torch.Tensor]:
    """It runs, returns a scalar tensor, leaves its inputs alone (logits without grad here, so that an in-place
    change shows up as such rather than as an autograd error); the values must be finite."""
    values = []
    for case in cases:
        values.append(_loss(check, label_smoothing_loss, case).detach().double())
        _check_untouched(check, label_smoothing_loss, case)
    for case, value in zip(cases, values):
        if not bool(torch.isfinite(value)):
            check.fail(
                f"The loss is {float(value)} for {_describe_case(case)}, with ordinary logits (between about -6 "
                f"and 6).\nLikely causes: the log of a probability that is 0 (use F.log_softmax rather than "
                f"torch.log(softmax(...))), or a division by zero when counting the non-pad tokens."
            )
    return values


def _check_untouched(check: Check, label_smoothing_loss: Callable, case: dict) -> None:
    """The engine's in-place guard (``_loss`` probes first, to tie a crash to its cause)."""
    check.call(label_smoothing_loss, case["logits"].clone(), case["target"].clone(), case["smoothing"], case["pad_id"],
               what="label_smoothing_loss")


def _check_values(check: Check, cases: list[dict], values: list[torch.Tensor], losses: list[torch.Tensor]) -> None:
    """Values against PyTorch; a mismatch is explained by the known slip, or the fewest slips together, that fit."""
    wrong = [i for i, (value, loss) in enumerate(zip(values, losses)) if not close_enough(value, loss)]
    if not wrong:
        return
    table = f"Compared with {_ORACLE}:\n" + "\n".join(
        f"  {_describe_case(cases[i])}: expected {fmt_number(losses[i])}, got {fmt_number(values[i])}"
        for i in range(len(cases))
    )
    observed = torch.stack(values)
    slip = matching_slip(LOSS_SLIPS + _COMBINED, _replayer(cases), lambda wrong: close_enough(observed, wrong))
    if slip is not None:
        check.fail(slip.says.showing(table))
    hint = ""
    if 1 not in wrong:  # the case with smoothing 0.0 is right
        hint = (
            " It is right when smoothing is 0, so the difference is in the smoothing term: how its mass is spread "
            "over the classes, or which positions its average covers (if you compute it apart from the cross "
            "entropy, it too counts only the positions where target != pad_id)."
        )
    check.fail(Diagnosis(
        f"Your loss does not match {_ORACLE}.{hint}",
        "The target distribution is (1-smoothing) * one_hot(target) + smoothing / V; the loss at a position "
        "is -sum(q * log_softmax(logits)), and the result is the mean over the positions where target != pad_id.",
        table))


def _replayer(cases: list[dict]) -> Callable[[Slip], torch.Tensor]:
    """A slip's losses on the cases, stacked; the losses at each position are computed once per case and flags,
    however many slips share them."""
    memos: list[dict] = [{} for _ in cases]
    return lambda slip: torch.stack([slip.replay(_slipped_loss, **case, memo=memo) for case, memo in zip(cases, memos)])


def _check_large_logits(check: Check, label_smoothing_loss: Callable) -> None:
    """Numerically stable for logits far apart."""
    _check_one_case(check, label_smoothing_loss, _large_case(), Diagnosis(
        "Your loss is wrong when the logits are far apart (differences of about 150, as a confident model "
        "produces). In float32, softmax of such logits underflows to exactly 0 for the unlikely classes, and log(0) "
        "is -inf (a small epsilon inside the log only moves the error).", "Compute the log-probabilities directly "
        "with F.log_softmax(logits, dim=-1), which subtracts the maximum first."))
    check.ok("stays exact for logits far apart (log_softmax, not log of softmax)")


def _check_lesson_sizes(check: Check, label_smoothing_loss: Callable) -> None:
    """Lesson 06's sizes: a vocabulary of hundreds and hundreds of positions."""
    case = _lesson_case()
    _check_one_case(check, label_smoothing_loss, case, Diagnosis(
        f"Your loss is right on small inputs but not at lesson 06's sizes ({_describe_case(case)}).",
        "Does your code depend on a fixed vocabulary size, a fixed number of positions, or a value remembered from "
        "an earlier call?"))
    check.ok("matches it at lesson 06's sizes too (V=629, 320 positions, a third of them padding)")


def _check_one_case(check: Check, label_smoothing_loss: Callable, case: dict, diagnosis: Diagnosis) -> None:
    """Fail with ``diagnosis``, the two values after it, unless the loss matches PyTorch's on ``case``."""
    value = _loss(check, label_smoothing_loss, case).detach().double()
    expected, _ = _oracle(case)
    if not close_enough(value, expected):
        check.fail(diagnosis.showing(f"Expected {fmt_number(expected)} ({_ORACLE}), got {fmt_number(value)}."))


def _check_gradients(check: Check, label_smoothing_loss: Callable, cases: list[dict], grads: list[torch.Tensor]) -> None:
    """Gradients w.r.t. the logits, on a fresh clone that requires grad."""
    for case, grad in zip(cases, grads):
        stages.gradients(check, lambda logits: _loss(check, label_smoothing_loss, case, logits=logits),
                         {"the logits": case["logits"]}, lambda r, grad=grad: {"the logits": r * grad}, "loss",
                         "F.cross_entropy", atol=1e-6, rtol=1e-4)


def _check_device(check: Check, label_smoothing_loss: Callable, case: dict) -> None:
    """On a pretend GPU every tensor the loss creates must follow the logits' device."""
    stages.on_gpu(check, label_smoothing_loss, case["logits"].clone(), case["target"].clone(), case["smoothing"],
                  case["pad_id"], what="label_smoothing_loss", inputs="the logits and the target",
                  outputs=("the loss",), source="logits")


def _scalar(check: Check, value, case: dict) -> torch.Tensor:
    n = case["logits"].shape[0]
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        check.fail(
            f"label_smoothing_loss returned a Python number ({fmt_number(value)}), not a tensor. The loss must stay "
            f"a tensor connected to the logits, so that `loss.backward()` can compute gradients: do not call "
            f"`.item()` or `float(...)` on it."
        )
    value = check.tensor(value, "the loss", dtype="float", finite=False)
    if value.dtype in (torch.float16, torch.bfloat16):
        check.fail(
            f"The loss has dtype {str(value.dtype).replace('torch.', '')} for float32 logits. That format keeps only "
            f"about 3 significant digits, so the loss (and its gradient) lose precision. Compute in the logits' "
            f"own dtype: no `.half()` or `.bfloat16()` inside the loss."
        )
    if value.dim() != 0:
        if tuple(value.shape) == (n,):
            cause = (
                "It looks like one loss per position: average them over the non-pad positions "
                "(the ones where target != pad_id)."
            )
        elif value.numel() == 1:
            cause = "It holds a single number: return a 0-d tensor (for example with `.squeeze()` or by reducing with `.sum()` / `.mean()`)."
        else:
            cause = "Reduce the per-token losses to one number: the mean over the non-pad positions."
        check.fail(
            f"The loss should be a scalar (a 0-d tensor, shape ()), but it has shape {fmt_shape(value.shape)} "
            f"for logits of shape {fmt_shape(case['logits'].shape)}.\n{cause}"
        )
    return value


LABEL_SMOOTHING_LOSS = Exercise(
    "label_smoothing_loss", _check_label_smoothing_loss,
    oracle=f"{_ORACLE} in float64, for the loss and its gradient with respect to the logits",
    cases="three (N, V) cases with N != V, pad ids other than 0, real targets equal to 0 and smoothing 0.1, 0.0 and "
          "0.3 (the first lacks the last class); logits about 150 apart; lesson 06's sizes (V=629, 320 positions, a "
          "third of them padding); a pretend GPU; all drawn from fixed seeds",
    slips=LOSS_SLIPS, answer=_loss_answer)


__all__ = ["check_label_smoothing_loss"]
