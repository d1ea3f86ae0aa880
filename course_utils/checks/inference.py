"""Checkers for lesson 07: inference.

* ``check_beam_search``: beam search with the GNMT length penalty, on scripted models (below);
* ``check_decode_step``: one step of incremental decoding with a key/value cache, against full
  recomputation on a stand-in with the course's layout, every projection watched by hooks;
* ``check_to_torch_transformer``: the learner's weights in ``nn.Transformer``'s layers, same logits.

``beam_search`` is run on scripted stand-ins for a trained Transformer: modules
with ``encode(src)`` and ``decode(tgt, memory, src)`` whose next-token
distribution depends on the whole prefix and on the sentence (read from
``memory``, as a real model reads it), that record every prefix they decode,
whether gradients were on, and that refuse to be called far past ``max_len``.
The oracles are the contract itself, replayed one hypothesis at a time in
plain Python on the model's own log-probabilities, and exhaustive search on a
tiny vocabulary (a beam as wide as every hypothesis finds the best sequence).
When the output differs, the known wrong variants are replayed the same way to
name the cause.

The contract (lesson 07): ``beam_search(model, src, beam_size, max_len, bos_id,
eos_id, pad_id, length_penalty=0.6) -> (B, T)`` LongTensor.

* hypotheses are scored by the sum of the log-probabilities of their tokens
  after BOS (EOS included);
* at every step each open hypothesis is extended by every token; among these
  candidates, those ending in EOS that rank within the ``beam_size`` best
  become finished (and are never extended), and the ``beam_size`` best that
  do not end in EOS are the next open hypotheses;
* a finished hypothesis of ``n`` tokens after BOS scores
  ``sum / ((5 + n) / 6) ** length_penalty`` (GNMT); a sentence stops as soon
  as its best finished score is at least the best score any open hypothesis
  could still reach, ``open_sum / ((5 + max_len - 1) / 6) ** length_penalty``;
  at ``max_len`` the open hypotheses compete as they are;
* the best hypothesis per sentence is returned, BOS first, padded after EOS
  to the longest returned one.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from typing import Any, Callable

import torch
from torch import nn

from . import stages
from ._core import Check, CheckResult, Raised, close_enough, describe, fmt_shape, fmt_values, run_check
from ._dropout import drop_pattern, dropout_problem
from ._hooks import WeightUses
from ._scripted import ScriptedModel, crashes_on_a_batch, mix, run_decoder
from ._standins import D_MODEL, DROPOUT, HEADS, LAYERS, SRC_VOCAB, TGT_VOCAB, CourseTransformer, select_rows


# --------------------------------------------------------------------------
# Entry points


def check_beam_search(beam_search: Callable) -> CheckResult:
    """Check ``beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)``."""
    return run_check("beam_search", _check_beam_search, beam_search)


def check_decode_step(decode_step: Callable) -> CheckResult:
    """Check ``decode_step(model, y_last, memory, src, cache) -> (logits, cache)`` against full recomputation."""
    return run_check("decode_step", _check_decode_step, decode_step)


def check_to_torch_transformer(to_torch_transformer: Callable) -> CheckResult:
    """Check that ``to_torch_transformer(model)`` computes the model's logits with nn.Transformer's layers."""
    return run_check("to_torch_transformer", _check_to_torch_transformer, to_torch_transformer)


class _Language:
    """The next-token log-probabilities of the scripted model, one sentence at a time.

    A sentence is identified by its first two source tokens: ``kind`` and ``salt``. Kind 0 is a
    generic distribution (EOS more likely as the prefix grows); kind 1 is the "greedy trap": the
    most likely first token leads to a flat continuation, the second one to an almost certain EOS.
    """

    def __init__(self, vocab_size: int, bos_id: int, eos_id: int, pad_id: int):
        self.vocab_size, self.bos_id, self.eos_id, self.pad_id = vocab_size, bos_id, eos_id, pad_id
        self.ordinary = [t for t in range(vocab_size) if t not in (bos_id, eos_id, pad_id)]
        self._cache: dict[tuple, torch.Tensor] = {}

    def logits(self, sentence: tuple[int, ...], prefix: tuple[int, ...]) -> torch.Tensor:
        """(V,) float32 logits of the next token after ``prefix`` (BOS first)."""
        key = (sentence, prefix)
        if key not in self._cache:
            self._cache[key] = self._compute(sentence, prefix)
        return self._cache[key]

    __call__ = logits  # a script for ScriptedModel

    def log_probs(self, sentence: tuple[int, ...], prefix: tuple[int, ...]) -> list[float]:
        return torch.log_softmax(self.logits(sentence, prefix).double(), dim=-1).tolist()

    def _compute(self, sentence: tuple[int, ...], prefix: tuple[int, ...]) -> torch.Tensor:
        kind, salt, target = sentence[0], sentence[1], sentence[2]
        n = len(prefix) - 1  # tokens generated so far
        logits = torch.full((self.vocab_size,), -30.0, dtype=torch.float64, device="cpu")  # BOS and padding: never
        for w in self.ordinary + [self.eos_id]:
            logits[w] = 3.0 * mix(salt, w, *prefix)
        logits[self.eos_id] += 1.6 * (n + 1 - target)  # sentences tend to end near `target` tokens
        if kind == 1 and n <= 1:
            a, b = self.ordinary[0], self.ordinary[1]
            probs = torch.full((self.vocab_size,), 1e-13, dtype=torch.float64, device="cpu")
            if n == 0:
                table = {a: 0.5, b: 0.4}
            elif prefix[1] == b:
                table = {self.eos_id: 0.9}
            else:
                table = {}
            rest = [w for w in self.ordinary + [self.eos_id] if w not in table]
            left = 1.0 - sum(table.values())
            for i, w in enumerate(rest):  # the rest, spread out and never tied
                table[w] = left * (len(rest) + 1 - i) / sum(range(2, len(rest) + 2))
            for w, p in table.items():
                probs[w] = p
            logits = probs.log()
        return logits.float()


# --------------------------------------------------------------------------
# The oracle: the contract replayed one hypothesis at a time (and its known wrong variants).


def _penalty(n: int, alpha: float, variant: str = "") -> float:
    if variant == "penalty_missing":
        return 1.0
    if variant == "penalty_len_power":
        return float(max(n, 1)) ** alpha
    if variant == "penalty_counts_bos":
        n = n + 1
    if variant == "penalty_without_eos":
        n = n - 1
    return ((5.0 + n) / 6.0) ** alpha


class _Search:
    """The result of one replayed search for one sentence."""

    def __init__(self, best: tuple[int, ...], finished: list[tuple[float, tuple[int, ...]]],
                 opened: list[set[tuple[int, ...]]], steps: int):
        self.best = best
        self.finished = finished  # (normalised score, tokens), every finished hypothesis
        self.opened = opened  # opened[t]: the open hypotheses decoded at step t + 1
        self.steps = steps  # decoding steps before the search stopped


def _stops(variant: str, finished: list, beams: list, beam_size: int, t: int, max_len: int, alpha: float) -> bool:
    """Whether a sentence stops after step t (the contract's rule, or a variant's)."""
    if not finished or variant in ("no_early_stop", "finished_dropped", "extends_finished"):
        return False
    if variant == "stop_first":
        return True
    if variant == "stop_k_finished":
        return len(finished) >= beam_size
    bound = t if variant == "stop_current_length" else max_len - 1
    raw = variant in ("penalty_every_step", "stop_raw_bound")
    reach = max(s for _, s in beams) / (1.0 if raw else _penalty(bound, alpha, variant))
    return max(f[0] for f in finished) >= reach


def _search(language: _Language, sentence: tuple[int, ...], beam_size: int, max_len: int, alpha: float,
            variant: str = "") -> _Search:
    """The contract's beam search for one sentence, replayed in plain Python (or one known wrong ``variant``)."""
    bos, eos = language.bos_id, language.eos_id
    V = language.vocab_size
    beams = [((bos,), 0.0)] * (beam_size if variant == "duplicates" else 1)
    finished: list[tuple[float, tuple[int, ...]]] = []
    opened: list[set[tuple[int, ...]]] = []
    steps, every_step = 0, variant == "penalty_every_step"
    for t in range(1, max_len):
        steps = t
        opened.append({prefix for prefix, _ in beams})
        candidates = []
        for prefix, score in beams:
            log_probs = language.log_probs(sentence, prefix)
            if variant == "probabilities":
                log_probs = [math.exp(x) for x in log_probs]
            for w in range(V):
                total = score + log_probs[w]
                candidates.append((total / _penalty(t, alpha) if every_step else total, prefix + (w,)))
        candidates.sort(key=lambda c: -c[0])
        beams = []
        for rank, (score, seq) in enumerate(candidates):
            if seq[-1] == eos and variant != "extends_finished":
                if variant == "finished_dropped":
                    continue
                if rank < beam_size or variant == "eos_from_2k" and rank < 2 * beam_size:
                    finished.append((score if every_step else score / _penalty(t, alpha, variant), seq))
            elif len(beams) < beam_size:
                beams.append((seq, score))
        if _stops(variant, finished, beams, beam_size, t, max_len, alpha):
            break
    else:
        if not (variant == "max_len_finished_only" and finished):
            raw = every_step or variant == "max_len_raw"
            finished += [(score if raw else score / _penalty(len(seq) - 1, alpha, variant), seq) for seq, score in beams]
    if variant == "raw_pick":
        return _Search(max(finished, key=lambda f: f[0] * _penalty(len(f[1]) - 1, alpha))[1], finished, opened, steps)
    ranked = sorted(finished, key=lambda f: -f[0])
    return _Search(ranked[-1 if variant == "worst_first" else 0][1], ranked, opened, steps)


def _greedy(language: _Language, sentence: tuple[int, ...], max_len: int) -> tuple[int, ...]:
    seq = (language.bos_id,)
    while len(seq) < max_len and seq[-1] != language.eos_id:
        log_probs = language.log_probs(sentence, seq)
        seq = seq + (max(range(language.vocab_size), key=lambda w: log_probs[w]),)
    return seq


def _exhaustive(language: _Language, sentence: tuple[int, ...], max_len: int, alpha: float) -> tuple[float, tuple]:
    """The best sequence of all (EOS-ended, or cut at max_len), by normalised score."""
    best = (-math.inf, ())
    stack = [((language.bos_id,), 0.0)]
    while stack:
        seq, score = stack.pop()
        if seq[-1] == language.eos_id or len(seq) == max_len:
            value = score / _penalty(len(seq) - 1, alpha)
            best = max(best, (value, seq))
            continue
        log_probs = language.log_probs(sentence, seq)
        for w in language.ordinary + [language.eos_id]:  # BOS and padding (log-prob -30) can never win
            stack.append((seq + (w,), score + log_probs[w]))
    return best


# --------------------------------------------------------------------------
# The cases.

_CASES = [
    # one sentence, the greedy trap: beam 2 must find what greedy misses
    {"vocab_size": 6, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 7, "beam_size": 2, "alpha": 0.6,
     "sentences": [(1, 5, 3)]},
    # a batch with other special ids and lengths of padding, generic sentences
    {"vocab_size": 8, "bos_id": 6, "eos_id": 3, "pad_id": 7, "max_len": 9, "beam_size": 3, "alpha": 0.6,
     "sentences": [(0, 11, 3), (0, 4, 5), (1, 8, 3), (0, 23, 7)]},
    {"vocab_size": 7, "bos_id": 4, "eos_id": 0, "pad_id": 5, "max_len": 8, "beam_size": 4, "alpha": 1.0,
     "sentences": [(0, 2, 4), (0, 17, 2), (0, 9, 6)]},
    {"vocab_size": 9, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 10, "beam_size": 2, "alpha": 0.6,
     "sentences": [(0, 31, 5), (0, 6, 3), (0, 12, 8)]},
    # finished hypotheses of different lengths in close competition: the length penalty's exact form matters
    {"vocab_size": 7, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 10, "beam_size": 2, "alpha": 1.0,
     "sentences": [(0, 2, 7), (0, 10, 3)]},
    {"vocab_size": 8, "bos_id": 6, "eos_id": 3, "pad_id": 7, "max_len": 10, "beam_size": 3, "alpha": 0.6,
     "sentences": [(0, 29, 3), (0, 7, 5)]},
    # found by search: sentences that reach max_len with finished and better open hypotheses, and whose
    # answers tell the stop rules apart (the end at max_len, k finished, the bound without its penalty)
    {"vocab_size": 9, "bos_id": 6, "eos_id": 3, "pad_id": 7, "max_len": 7, "beam_size": 3, "alpha": 0.6,
     "sentences": [(0, 1, 6), (0, 32, 9)]},
    {"vocab_size": 7, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 10, "beam_size": 4, "alpha": 1.0,
     "sentences": [(0, 7, 3), (0, 7, 3), (0, 21, 6), (0, 25, 2)]},
    # the best by raw sum is not the best by score: the final pick shows
    {"vocab_size": 9, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 9, "beam_size": 3, "alpha": 0.6,
     "sentences": [(0, 28, 7)]},
    # a strong penalty (lesson 07 plots alpha = 2): the open hypotheses at max_len need the whole penalty, its
    # power included (found by search)
    {"vocab_size": 9, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 4, "beam_size": 4, "alpha": 2.0,
     "sentences": [(0, 26, 8), (0, 20, 5)]},
]


def _source(case: dict) -> torch.Tensor:
    rows = []
    for b, sentence in enumerate(case["sentences"]):
        row = list(sentence) + [b + 1, 2 * b + 3]  # (S,) with S = 5
        if b % 2:  # every other sentence ends in padding, as in a real batch
            row[-1] = case["pad_id"]
        rows.append(row)
    return torch.tensor(rows)  # (B, S)


def _setup(case: dict, src: torch.Tensor) -> str:
    return (
        f"(B={src.shape[0]}, beam_size={case['beam_size']}, max_len={case['max_len']}, "
        f"length_penalty={case['alpha']}, bos_id={case['bos_id']}, eos_id={case['eos_id']}, pad_id={case['pad_id']})"
    )


def _row(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


_AT_MAX_LEN = ("when the search reaches max_len, the open hypotheses do not compete with the finished ones as they "
               "should: either they are ignored, or their raw sums of log-probabilities are compared with finished "
               "scores that are divided by the length penalty. At max_len every open hypothesis competes too, its "
               "sum divided by the penalty of its length, ((5 + n) / 6) ** length_penalty with n = max_len - 1")
_VARIANTS = {
    "probabilities": "it scores hypotheses by adding probabilities. Add LOG-probabilities: "
    "`logits.log_softmax(dim=-1)`; the score of a sequence is the sum of the log-probabilities of its tokens",
    "penalty_missing": "it ranks finished hypotheses of different lengths by their raw scores: the length "
    "penalty is missing. Divide a finished hypothesis's score by ((5 + n) / 6) ** length_penalty, n its number "
    "of tokens after BOS (EOS included)",
    "penalty_every_step": "it divides the scores by the length penalty at every step, so the penalty compounds. "
    "Keep the raw sums of log-probabilities in the beam, and divide only when a hypothesis finishes (and for the "
    "stopping test)",
    "penalty_len_power": "it uses n ** length_penalty as the length penalty. The GNMT penalty is "
    "((5 + n) / 6) ** length_penalty",
    "penalty_counts_bos": "its length penalty counts BOS in the length. n is the number of tokens after BOS, "
    "EOS included: ((5 + n) / 6) ** length_penalty",
    "finished_dropped": "it drops the hypotheses that end in EOS instead of keeping them: put a candidate that "
    "ends in EOS (and ranks within the beam_size best) on a list of finished hypotheses, and choose the answer "
    "among them",
    "duplicates": "its beam starts with beam_size copies of BOS, all with score 0, so the first step picks the "
    "same token beam_size times (duplicate beams). Start with one live hypothesis: scores [0, -inf, -inf, ...]",
    "eos_from_2k": "it keeps as finished a candidate ending in EOS that ranks outside the beam_size best "
    "candidates. Only EOS candidates among the beam_size best become finished",
    "worst_first": "it returns the worst finished hypothesis instead of the best: sort by score in descending "
    "order (or take the max)",
    "max_len_finished_only": _AT_MAX_LEN,
    "max_len_raw": _AT_MAX_LEN,  # answers that never tell it from the one above: one message for both
    "stop_first": "it stops a sentence as soon as one hypothesis has finished, although an open one may still "
    "beat it. Stop only when the best finished score is at least the best open sum divided by the penalty of the "
    "longest possible hypothesis, ((5 + max_len - 1) / 6) ** length_penalty",
    "stop_k_finished": "it stops a sentence once beam_size hypotheses have finished, whatever their scores. Stop "
    "when the best finished score is at least the best open sum divided by the penalty of the longest possible "
    "hypothesis, ((5 + max_len - 1) / 6) ** length_penalty",
    "stop_raw_bound": "its stopping test compares the best finished score (divided by its length penalty) with the "
    "best open sum without dividing that one: an open hypothesis can still grow to max_len - 1 tokens, so divide "
    "its sum by ((5 + max_len - 1) / 6) ** length_penalty",
    "stop_current_length": "its stopping test divides the best open sum by the penalty of its current length. An "
    "open hypothesis can still grow to max_len - 1 tokens, and a longer one is divided by more: use "
    "((5 + max_len - 1) / 6) ** length_penalty",
    "penalty_without_eos": "its length penalty does not count EOS: n is the number of tokens after BOS, EOS "
    "included, in ((5 + n) / 6) ** length_penalty",
    "raw_pick": "it picks the answer by the raw sum of log-probabilities. The answer is the finished hypothesis "
    "with the best score divided by its length penalty, ((5 + n) / 6) ** length_penalty",
}


# --------------------------------------------------------------------------


def _run(check: Check, beam_search: Callable, case: dict, beam_size: int | None = None, alpha: float | None = None,
         max_len: int | None = None, probe: bool = False, device: torch.device | None | str = "cpu"):
    """Run beam_search on a fresh scripted model: (model, src, output, beam_size, alpha, max_len).

    ``device`` None runs on the pretend GPU. With ``probe`` a crash comes back as a ``Raised``; a loop that runs
    past the scripted model's bounds ends the check with a failure either way.
    """
    language = _Language(case["vocab_size"], case["bos_id"], case["eos_id"], case["pad_id"])
    pretend_device = device is None
    src = _source(case) if pretend_device else _source(case).to(device)
    max_len = case["max_len"] if max_len is None else max_len
    model = ScriptedModel(language, case["vocab_size"], case["pad_id"], src.shape[0], max_len, pretend_device)
    if not pretend_device:
        model.to(device)
    k = case["beam_size"] if beam_size is None else beam_size
    a = case["alpha"] if alpha is None else alpha
    out = run_decoder(
        check, beam_search, model, src, k, max_len, case["bos_id"], case["eos_id"], case["pad_id"],
        length_penalty=a, what="beam_search", probe=probe, pretend_device=pretend_device, runaway=(
            f"{_setup(dict(case, beam_size=k, alpha=a), src)} Loop at most max_len - 1 times "
            f"(`for t in range(1, max_len)`), and break once every sentence has stopped."))
    return model, src, out, k, a, max_len


def _check_beam_search(check: Check, beam_search: Callable) -> None:
    check.callable_(beam_search, "beam_search")
    _default_penalty(check, beam_search)

    # 1. One sentence: it runs and returns a (1, T) LongTensor.
    case = _CASES[0]
    model, src, out, k, alpha, max_len = _run(check, beam_search, case)
    _output(check, out, case, src, max_len)
    check.ok("returns a LongTensor (B, T)")

    # 2. A batch: crashing here but not above means one sentence only.
    batch = _CASES[1]
    _, src_b, out_b, *_ = _run(check, beam_search, batch, probe=True)
    crashes_on_a_batch(
        check, "beam_search", out_b, src_b.shape[0],
        "It should search for every sentence of the batch at once: B * beam_size rows through the decoder, "
        "memory and src repeated with `repeat_interleave(beam_size, dim=0)`, scores of shape (B, beam_size).",
    )

    # 3. Every case against the contract, one mechanism at a time.
    runs = []
    for case in _CASES:  # every case runs first, so that a cause is named on the evidence of all of them
        model, src, out, k, alpha, max_len = _run(check, beam_search, case)
        runs.append((model, src, _output(check, out, case, src, max_len), case, k, alpha, max_len))
    for run in runs:
        _mechanics(check, *run)
        _compare(check, *run, evidence=runs)
    for run in runs:
        _stopping(check, *run, evidence=runs)
    check.ok("finds the contract's best hypothesis for every sentence of a batch, with other special ids")

    # 4. Beam 1 with no length penalty is greedy decoding.
    for case in _CASES[1:3]:
        model, src, out, k, alpha, max_len = _run(check, beam_search, case, beam_size=1, alpha=0.0)
        out = _output(check, out, case, src, max_len)
        _mechanics(check, model, src, out, case, 1, 0.0, max_len)
        sentences = [model.sentence(row) for row in src.tolist()]
        greedy = [_greedy(model.script, s, max_len) for s in sentences]
        got = [_strip(row, case) for row in out.tolist()]
        if got != greedy:
            b = next(i for i, (g, m) in enumerate(zip(greedy, got)) if g != m)
            named = _causes(model, sentences, got, b, 1, max_len, 0.0)
            named = [n for n in named if not n.startswith("it returns what greedy")]
            check.fail(
                f"With beam_size=1 and length_penalty=0, beam search is greedy decoding, but sentence {b} differs "
                f"{_setup(dict(case, beam_size=1, alpha=0.0), src)}:\n"
                f"  greedy: {_row(greedy[b])}\n  yours:  {_row(got[b])}\n"
                + (f"Likely cause: {named[0]}." if named else
                   "With one beam, each step keeps the single best continuation; check how you add the "
                   "log-probabilities (logits[:, -1].log_softmax(-1)) to the scores and pick the top candidates.")
            )
    check.ok("with beam_size=1 and no length penalty it equals greedy decoding")

    # 5. A beam as wide as every hypothesis is exhaustive search, with the paper's penalty and a strong one.
    for alpha in (0.6, 2.0):
        wide = {"vocab_size": 5, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 5, "alpha": alpha,
                "sentences": [(0, 3, 3), (0, 14, 2)], "beam_size": 5 ** 3}
        model, src, out, k, alpha, max_len = _run(check, beam_search, wide)
        out = _output(check, out, wide, src, max_len)
        for b, sentence in enumerate(model.sentence(row) for row in src.tolist()):
            value, best = _exhaustive(model.script, sentence, max_len, alpha)
            got = _strip(out[b].tolist(), wide)
            if got != best:
                check.fail(
                    f"With beam_size={k}, wider than the number of hypotheses, beam search must find the best "
                    f"sequence of all (exhaustive search), but for sentence {b} it does not "
                    f"{_setup(wide, src)}:\n  best:  {_row(best)} (score {value:.4f})\n  yours: {_row(got)}\n"
                    f"Check that every candidate ending in EOS among the beam_size best is kept as finished, that "
                    f"the search stops only when no open hypothesis can still beat the best finished one, and that "
                    f"every score is divided by the whole penalty, ((5 + n) / 6) ** length_penalty, the open "
                    f"hypotheses' at max_len too."
                )
    check.ok("with a beam wider than all hypotheses it finds the best sequence (exhaustive search), with "
             "length_penalty 0.6 and 2.0")

    # 6. The device: tensors it creates follow src.device (caught on a pretend GPU on a CPU-only machine).
    _device(check, beam_search)


def _default_penalty(check: Check, beam_search: Callable) -> None:
    """length_penalty defaults to the paper's 0.6: lesson 07 also calls beam_search without it."""
    try:
        parameter = inspect.signature(beam_search).parameters.get("length_penalty")
    except (TypeError, ValueError):
        return
    if parameter is not None and parameter.default not in (inspect.Parameter.empty, 0.6):
        check.fail(
            f"The default of length_penalty is {parameter.default!r}; the exercise's signature gives the paper's "
            f"0.6 (`length_penalty=0.6`), and lesson 07 calls beam_search without it."
        )


def _strip(row: list[int], case: dict) -> tuple[int, ...]:
    eos, pad = case["eos_id"], case["pad_id"]
    if eos in row:
        return tuple(row[: row.index(eos) + 1])
    while row and row[-1] == pad:
        row = row[:-1]
    return tuple(row)


def _output(check: Check, out, case: dict, src: torch.Tensor, max_len: int) -> torch.Tensor:
    n = src.shape[0]
    out = check.tensor(out, "the output of beam_search", finite=False)
    if out.dtype != torch.long:
        check.fail(
            f"The output of beam_search has dtype {out.dtype}, but token ids should be torch.long (int64).\n"
            f"Build the output with `dtype=torch.long` (topk's indices are already long)."
        )
    if out.dim() != 2 or out.shape[0] != n:
        check.fail(
            f"The output of beam_search should have shape (B, T) with B = {n}, one row (the best hypothesis) per "
            f"source sentence, but it has shape {fmt_shape(out.shape)} {_setup(case, src)}."
            + ("\nReturn only the best of the beam_size hypotheses of each sentence, not all of them."
               if out.dim() == 2 and out.shape[0] == n * case["beam_size"] else "")
        )
    if out.shape[1] > max_len:
        check.fail(f"The output has {out.shape[1]} columns, more than max_len = {max_len} {_setup(case, src)}: "
                   f"max_len counts BOS.")
    return out


def _mechanics(check: Check, model: ScriptedModel, src: torch.Tensor, out: torch.Tensor, case: dict, k: int,
               alpha: float, max_len: int) -> None:
    setup = _setup(dict(case, beam_size=k, alpha=alpha), src)
    sentences = [model.sentence(row) for row in src.tolist()]
    bos, eos = case["bos_id"], case["eos_id"]

    _encoding_and_grad(check, model, sentences, setup, k)
    _prefixes(check, model, sentences, setup, bos, eos)
    _duplicate_beams(check, model, sentences, setup, k)
    _output_layout(check, out, case, setup)


def _encoding_and_grad(check: Check, model: ScriptedModel, sentences: list, setup: str, k: int) -> None:
    """The encoder runs once per sentence, under no_grad, with memory and src rows aligned."""
    if model.encode_calls == 0:
        check.fail(f"beam_search never called model.encode(src) {setup}. Encode the source once, before the loop.")
    if sorted(model.encoded) != sorted(sentences):
        if len(model.encoded) == len(sentences) * k and sorted(set(model.encoded)) == sorted(set(sentences)):
            check.fail(
                f"beam_search encodes every sentence {k} times, once per beam {setup}. Run the encoder once on src, "
                f"then repeat its output: memory.repeat_interleave(beam_size, dim=0)."
            )
        check.fail(
            f"beam_search called model.encode {model.encode_calls} times, encoding {len(model.encoded)} sentences "
            f"for a batch of {len(sentences)} {setup}. The encoder should run once per sentence: compute memory = "
            f"model.encode(src) before the loop and reuse it (model(src, ys) in the loop runs the encoder again)."
        )
    check.ok("runs the encoder once per sentence")

    if model.grad_calls:
        check.fail(
            f"beam_search ran the model with gradients enabled {setup}. Decoding needs no gradients: decorate "
            f"beam_search with @torch.no_grad(), or run its body inside `with torch.no_grad():`."
        )
    check.ok("runs under torch.no_grad()")

    if model.misaligned:
        check.fail(
            f"In {model.misaligned} rows given to model.decode, memory and src belong to different sentences "
            f"{setup}. Repeat both in the same way, each sentence's beams next to each other: "
            f"memory.repeat_interleave(beam_size, dim=0) and src.repeat_interleave(beam_size, dim=0) "
            f"(`.repeat(beam_size, 1, 1)` puts the copies in another order)."
        )


def _prefixes(check: Check, model: ScriptedModel, sentences: list, setup: str, bos: int, eos: int) -> None:
    """Every decoded prefix grows by one token from a prefix decoded for the same sentence."""
    seen: dict[tuple, set[tuple]] = {s: set() for s in sentences}
    for call in model.rows:
        for sentence, prefix in call:
            if sentence not in seen:
                check.fail(f"model.decode received a memory row that is not the encoding of any sentence of the "
                           f"batch {setup}. Pass memory = model.encode(src), repeated per beam.")
            if prefix[:1] != (bos,):
                check.fail(f"model.decode received the prefix {_row(prefix)}, which does not start with "
                           f"bos_id = {bos} {setup}. Every hypothesis starts with BOS.")
            if len(prefix) > 1 and prefix[:-1] not in seen[sentence]:
                owner = [b for b, s in enumerate(sentences) if s != sentence and prefix[:-1] in seen[s]]
                if owner:
                    check.fail(
                        f"model.decode received, for sentence {sentences.index(sentence)}, the prefix "
                        f"{_row(prefix)}, which extends a hypothesis of sentence {owner[0]} {setup}: the beams "
                        f"of different sentences are mixed. Keep the scores as (B, beam_size), pick the top "
                        f"candidates per sentence (topk over dim=-1 of a (B, beam_size * V) tensor) and turn "
                        f"the beam index into a row with b * beam_size + beam."
                    )
                check.fail(
                    f"model.decode received the prefix {_row(prefix)} for sentence {sentences.index(sentence)}, "
                    f"but its first {len(prefix) - 1} tokens were never decoded before {setup}. Each step should "
                    f"extend the hypotheses of the previous step by one token, and feed the whole prefix."
                )
            if len(prefix) > 1 and prefix[-1] == eos:
                check.fail(
                    f"model.decode received the prefix {_row(prefix)}, which ends in EOS {setup}: a finished "
                    f"hypothesis was kept in the beam, and its next token would continue after EOS. Move the "
                    f"candidates that end in EOS to a list of finished hypotheses, and keep only the others in "
                    f"the beam."
                )
            seen[sentence].add(prefix)


def _duplicate_beams(check: Check, model: ScriptedModel, sentences: list, setup: str, k: int) -> None:
    """No beam_size identical rows of one sentence after the first step."""
    language = model.script
    if k > 1 and len(language.ordinary) >= k:
        for call in model.rows:
            lengths = {len(p) for _, p in call}
            if lengths != {2}:
                continue
            for sentence in sentences:
                prefixes = [p for s, p in call if s == sentence]
                if len(prefixes) == k and len(set(prefixes)) == 1:
                    check.fail(
                        f"After the first step, the {k} beams of sentence {sentences.index(sentence)} are all "
                        f"{_row(prefixes[0])} {setup}: duplicate beams. Every beam starts as BOS with score 0, so "
                        f"the top candidates are the same token {k} times. Start with one live hypothesis: "
                        f"scores [0, -inf, ..., -inf] for each sentence (or expand BOS alone at the first step)."
                    )


def _output_layout(check: Check, out: torch.Tensor, case: dict, setup: str) -> None:
    """BOS first, padding only after EOS, as wide as the longest hypothesis."""
    bos, eos, pad = case["bos_id"], case["eos_id"], case["pad_id"]
    rows = out.tolist()
    if not all(row and row[0] == bos for row in rows):
        check.fail(f"Column 0 of the output should be bos_id = {bos} for every sentence {setup}; yours is "
                   f"{_row([row[0] for row in rows])}. Return the hypotheses with their BOS.")
    for b, row in enumerate(rows):
        if eos in row:
            after = row[row.index(eos) + 1:]
            if any(x != pad for x in after):
                check.fail(
                    f"Sentence {b} has EOS at position {row.index(eos)}, then {_row(after)} {setup}: after EOS the "
                    f"output holds pad_id = {pad} only. Either a finished hypothesis was extended past EOS, or the "
                    f"padding uses another id than pad_id.\n  yours: {_row(row)}"
                )
    lengths = [len(_strip(row, case)) for row in rows]
    if out.shape[1] != max(lengths):
        check.fail(
            f"The output has {out.shape[1]} columns, but its longest hypothesis has {max(lengths)} tokens "
            f"{setup}. Pad the hypotheses to the longest one, as greedy_decode does, no further."
        )
    check.ok("returns the best hypotheses BOS first, padded after EOS to the longest one")


def _follows(replay: _Search, history: list[set[tuple[int, ...]]]) -> bool:
    """Whether the learner's search opened the same hypotheses as ``replay`` while both ran, and ran as long.

    (A batched search may go on decoding a sentence that has stopped, so the learner's history may be longer.)
    """
    return len(history) >= replay.steps and all(replay.opened[t] == history[t] for t in range(replay.steps))


def _causes(model: ScriptedModel, sentences: list[tuple[int, ...]], got: list[tuple[int, ...]], b: int, k: int,
            max_len: int, alpha: float, evidence: list | None = None) -> list[str]:
    """The known wrong variants that return ``got[b]`` for sentence b, the most consistent with all runs first.

    A variant is consistent with a sentence when it returns the learner's answer for it and opens the same
    hypotheses as the learner's search did, step by step, for as many steps; a batch as a whole must stop when
    the variant's slowest sentence does. ``evidence`` (every run of the check: model, src, out, case, k, alpha,
    max_len) breaks the ties one case cannot.
    """
    language = model.script
    histories = [model.history(s) for s in sentences]
    ranked: list[tuple[int, int, str]] = []
    greedy = [_greedy(language, s, max_len) for s in sentences]
    one_per_step = all(len(step) <= 1 for h in histories for step in h)
    if got[b] == greedy[b] and one_per_step and got[b] != _search(language, sentences[b], k, max_len, alpha).best:
        ranked.append((-10**6, -1, (
            "it returns what greedy decoding finds: it keeps one hypothesis per sentence. A beam of several "
            "hypotheses must find the better sequence that starts with a less likely token: keep the beam_size best "
            "candidates of all beam_size * V extensions, not the best extension of each beam")))
    runs = evidence or [(model, None, None, None, k, alpha, max_len)]
    for order, (variant, why) in enumerate(_VARIANTS.items()):
        if _search(language, sentences[b], k, max_len, alpha, variant).best != got[b]:
            continue
        score, possible = _agreement(variant, runs, sentences, got)
        if score == possible or evidence is None:  # a cause is named only when it explains every run
            ranked.append((-score, order, why))
    return [why for _, _, why in sorted(ranked)]


def _agreement(variant: str, runs: list, sentences: list | None = None, got: list | None = None) -> tuple[int, int]:
    """How many of the runs' sentences (and batch lengths) the wrong variant replays as the learner's search did,
    out of how many: each sentence's answer and opened hypotheses, and each batch's number of steps."""
    score, possible = 0, 0
    for run_model, run_src, run_out, run_case, run_k, run_alpha, run_len in runs:
        if run_src is None:
            run_sentences, run_got = sentences, got
        else:
            run_sentences = run_model.sentences(run_src)
            run_got = [_strip(row, run_case) for row in run_out.tolist()]
        replays = [_search(run_model.script, s, run_k, run_len, run_alpha, variant) for s in run_sentences]
        run_histories = [run_model.history(s) for s in run_sentences]
        score += sum(r.best == m and _follows(r, h) for r, m, h in zip(replays, run_got, run_histories))
        score += max(r.steps for r in replays) == max(len(h) for h in run_histories)  # the batch stopped with it
        possible += len(replays) + 1
    return score, possible


def _departure(model: ScriptedModel, sentence: tuple[int, ...], search: _Search, k: int) -> str:
    """Where the learner's search first keeps other open hypotheses than the contract's ('' if it never does)."""
    history = model.history(sentence)
    language = model.script

    def total(prefix: tuple[int, ...]) -> float:
        return sum(language.log_probs(sentence, prefix[:i])[prefix[i]] for i in range(1, len(prefix)))

    for t in range(min(len(history), search.steps)):
        want, have = search.opened[t], history[t]
        if want == have:
            continue
        shown = lambda hyps: ", ".join(f"{_row(h)} ({total(h):.3f})" for h in sorted(hyps, key=total, reverse=True))
        extra, lacking = sorted(have - want, key=total, reverse=True), sorted(want - have, key=total, reverse=True)
        why = []
        if extra:
            why.append(f"{_row(extra[0])} (sum {total(extra[0]):.3f}) is not among the {k} best candidates that do "
                       f"not end in EOS")
        if lacking:
            why.append(f"{_row(lacking[0])} (sum {total(lacking[0]):.3f}) is")
        return (f"At step {t + 1} the contract's beam holds {shown(want)}; yours decoded {shown(have) or 'nothing'} "
                f"(sums of log-probabilities). {'; '.join(why)}.")
    if len(history) < search.steps:
        return (f"Your search stopped this sentence after {len(history)} steps; the contract's goes on for "
                f"{search.steps}, since an open hypothesis could still beat the best finished one.")
    return ""


def _replayed(model: ScriptedModel, src: torch.Tensor, out: torch.Tensor, case: dict, k: int, alpha: float,
              max_len: int) -> tuple[str, list, list, list]:
    """The case's description, its sentences, the contract's search of each, and the learner's hypotheses."""
    setup = _setup(dict(case, beam_size=k, alpha=alpha), src)
    sentences = [model.sentence(row) for row in src.tolist()]
    searches = [_search(model.script, s, k, max_len, alpha) for s in sentences]
    return setup, sentences, searches, [_strip(row, case) for row in out.tolist()]


def _compare(check: Check, model: ScriptedModel, src: torch.Tensor, out: torch.Tensor, case: dict, k: int,
             alpha: float, max_len: int, evidence: list | None = None) -> None:
    setup, sentences, searches, got = _replayed(model, src, out, case, k, alpha, max_len)
    for b, (search, mine) in enumerate(zip(searches, got)):
        if mine == search.best:
            continue
        score = dict((seq, value) for value, seq in search.finished)
        others = [i for i, s in enumerate(searches) if s.best == mine and i != b]
        if others:
            check.fail(
                f"Row {b} of your output is the best hypothesis of sentence {others[0]} {setup}: the rows are in "
                f"the wrong order. Return the hypotheses in the order of the source sentences."
            )
        named = _causes(model, sentences, got, b, k, max_len, alpha, evidence)
        expected_text = f"  expected: {_row(search.best)} (score {score[search.best]:.4f})"
        yours_text = f"  yours:    {_row(mine)}" + (f" (score {score[mine]:.4f})" if mine in score else "")
        departure = _departure(model, sentences[b], search, k)
        if named:
            cause = "Likely cause: " + named[0] + "."
        elif departure:
            cause = (f"{departure}\nAt each step every open hypothesis is extended by every token, and its score is "
                     f"its sum of log-probabilities (log_softmax of the last position's logits); of these "
                     f"candidates, those ending in EOS among the beam_size best finish, and the beam_size best "
                     f"others stay open.")
        elif mine in score:
            cause = ("Your search opened the same hypotheses as the contract's at every step, and your answer is one "
                     "of the finished hypotheses, but not the best by the length-normalised score: compare "
                     "sum / ((5 + n) / 6) ** length_penalty, n = tokens after BOS, EOS included.")
        else:
            cause = ("Your search opened the same hypotheses as the contract's at every step, but your answer is not "
                     "one of its finished hypotheses: check how you finish a hypothesis (the candidate ending in EOS, "
                     "with its sum divided by the length penalty) and what you return (the best, BOS first).")
        check.fail(f"Sentence {b}: your beam search does not return the best hypothesis {setup}.\n"
                   f"{expected_text}\n{yours_text}\n{cause}")


def _stopping(check: Check, model: ScriptedModel, src: torch.Tensor, out: torch.Tensor, case: dict, k: int,
              alpha: float, max_len: int, evidence: list | None = None) -> None:
    """Early stopping: no more steps than the slowest sentence of the batch needs."""
    setup, sentences, searches, got = _replayed(model, src, out, case, k, alpha, max_len)
    steps = max((len(p) for call in model.rows for _, p in call), default=0)
    needed = max(s.steps for s in searches)
    if steps != needed:
        named = []
        for variant, why in _VARIANTS.items():
            replays = [_search(model.script, s, k, max_len, alpha, variant) for s in sentences]
            if (all(r.best == m and _follows(r, model.history(s)) for r, m, s in zip(replays, got, sentences))
                    and max(r.steps for r in replays) == steps
                    and (evidence is None or len(set(_agreement(variant, evidence))) == 1)):  # it explains every run
                named.append(why)
        if named:
            check.fail(f"Your search stops after {steps} decoding steps instead of {needed} {setup}.\n"
                       f"Likely cause: {named[0]}.")
    if steps > needed:
        check.fail(
            f"Your search ran {steps} decoding steps, but every sentence's best finished hypothesis was certain "
            f"after {needed} {setup}: no open hypothesis could still beat it. Stop a sentence once its best "
            f"finished score is at least the best open score divided by the penalty of the longest possible "
            f"hypothesis, ((5 + max_len - 1) / 6) ** length_penalty, and stop the loop when every sentence has "
            f"stopped."
        )
    check.ok("stops as soon as no open hypothesis can still win")


def _device(check: Check, beam_search: Callable) -> None:
    """Search on a pretend GPU (and on a real one, if there is one): every tensor must follow src's device."""
    stages.decoder_on_gpu(
        check, lambda device: _run(check, beam_search, _CASES[1], probe=device is None, device=device)[2],
        "beam_search", advice=(
            "Create every tensor on src's device: `torch.full(..., device=src.device)`, "
            "`torch.arange(..., device=src.device)`, `torch.tensor(rows, device=src.device)` (or `src.new_full(...)`)."))


# ==========================================================================
# The key/value cache: decode_step(model, y_last, memory, src, cache) -> (logits, cache)
#
# The model is the checker's own, with the course's layout (lesson 05's names, lesson 04's W_q/W_k/W_v/W_o,
# lesson 03's positional_encoding.pe), its full recomputation written with PyTorch's own
# F.scaled_dot_product_attention. Forward hooks on every projection count the positions each one sees per step.

_CACHE_PAD = 0


def _cache_case(seed: int):
    """A model, a padded source batch with its memory, and the target tokens to feed (no padding among them)."""
    model = CourseTransformer(seed, _CACHE_PAD)
    g = torch.Generator().manual_seed(seed + 1)
    lengths = [5, 2, 4]
    src = torch.full((3, 5), _CACHE_PAD, dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(1, SRC_VOCAB, (n,), generator=g)
    memory = torch.randn(3, 5, D_MODEL, generator=g)  # (B, L_src, d_model): the encoder is not under test
    tgt = torch.randint(1, TGT_VOCAB, (3, 7), generator=g)  # (B, T): <bos> and six more tokens, no padding
    return model, src, memory, tgt


def _linear_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The decoder's linear maps by name, in the order one step uses them (cross-attention keys and values: step 0)."""
    weights = {}
    for i, layer in enumerate(model.decoder_layers):
        for attn in ("self_attn", "cross_attn"):
            for proj in ("W_q", "W_k", "W_v", "W_o"):
                weights[f"decoder_layers[{i}].{attn}.{proj}"] = getattr(getattr(layer, attn), proj).weight
        for lin in ("linear1", "linear2"):
            weights[f"decoder_layers[{i}].feed_forward.{lin}"] = getattr(layer.feed_forward, lin).weight
    weights["generator"] = model.generator.weight
    return weights


def _positions_seen(calls: list) -> dict[str, list[int]]:
    """For each linear map used in a step, how many positions each use covered."""
    seen: dict[str, list[int]] = {}
    for name, applied, _ in calls:
        seen.setdefault(name, []).append(int(applied.shape[-2]) if applied.dim() >= 3 else 1)
    return seen


def _step(check: Check, decode_step: Callable, model, y_last, memory, src, cache, t: int):
    out = check.call(decode_step, model, y_last, memory, src, cache, what="decode_step", may_change=(cache,),
                     hint=f"(step {t}: y_last is token {t} of each sentence, after <bos> at step 0)")
    out = check.unpack(out, ["logits", "cache"], "decode_step")
    logits = check.tensor(out[0], f"the logits of decode_step at step {t}")
    B = y_last.shape[0]
    if tuple(logits.shape) == (B, 1, TGT_VOCAB):
        check.fail(f"decode_step returns logits of shape {fmt_shape(logits.shape)}; they should be (B, V) = "
                   f"{fmt_shape((B, TGT_VOCAB))}, the scores of the next token: take `[:, -1]` (or squeeze dim 1).")
    check.tensor(logits, f"the logits of decode_step at step {t}", shape=(B, TGT_VOCAB))
    return logits, out[1]


def _check_decode_step(check: Check, decode_step: Callable) -> None:
    check.callable_(decode_step, "decode_step")
    model, src, memory, tgt = _cache_case(7)
    oracle, causes, trace = _cache_oracles(model, src, memory, tgt)
    _cache_steps(check, decode_step, model, src, memory, tgt, oracle, causes, trace)
    _cache_reorder(check, decode_step, model, src, memory, tgt)
    _caches_interleaved(check, decode_step, model, src, memory, tgt)


def _caches_interleaved(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor,
                        memory: torch.Tensor, tgt: torch.Tensor) -> None:
    """Two searches at once (two batches, two caches, stepped in turn) must not disturb each other: all that a
    step needs is in its own cache, as lesson 07's wrapper assumes."""
    halves = [slice(0, 1), slice(1, None)]
    caches: list[dict] = [{}, {}]
    with torch.no_grad():
        for t in range(3):
            for i, rows in enumerate(halves):
                expected = model.decode(tgt[rows, : t + 1], memory[rows], src[rows])[:, -1]
                out = check.attempt(decode_step, model, tgt[rows, t : t + 1], memory[rows], src[rows], caches[i],
                                    what="decode_step")
                logits = out[0] if isinstance(out, (tuple, list)) and len(out) == 2 else out
                if isinstance(out, Raised) or not isinstance(logits, torch.Tensor) or not close_enough(logits, expected):
                    check.fail(
                        f"Two decodings at once go wrong: with two caches stepped in turn (sentence 0 in one, the "
                        f"others in the other, as when two batches are translated side by side), step {t} of the "
                        f"{'first' if i == 0 else 'second'} differs from model.decode on its whole prefix. Something a "
                        f"step needs lives outside its cache (a step counter on the model, keys and values in a "
                        f"global or in a dict keyed by the memory tensor): keep all of it in the cache, which each "
                        f"decoding owns."
                    )
                caches[i] = out[1]
    check.ok("two decodings stepped in turn, each with its own cache, do not disturb each other")


def _cache_oracles(model: nn.Module, src: torch.Tensor, memory: torch.Tensor, tgt: torch.Tensor) -> tuple[dict, dict]:
    """Full recomputations in float64: the right logits, and those of each named mistake (with its cause)."""
    B, T = tgt.shape
    oracle = {}
    with torch.no_grad():
        double = copy.deepcopy(model).double()
        mem64 = memory.double()
        with WeightUses(_linear_weights(double)) as uses:
            oracle["right"] = double.decode(tgt, mem64, src).float()  # (B, T, V): position t predicts token t + 1
        trace = {name: (applied, out) for name, applied, out in uses.calls}  # each map once, on the whole prefix
        trace["model"] = double
        oracle["position 0"] = double.decode(tgt, mem64, src, positions=torch.zeros(T, dtype=torch.long)).float()
        oracle["self only"] = double.decode(tgt, mem64, src, keys="self_only").float()
        oracle["first only"] = double.decode(tgt, mem64, src, keys="first_only").float()
        oracle["no src mask"] = double.decode(tgt, mem64, src, src_padding=False).float()
    causes = {
        "position 0": "the positional encoding of every new token is taken at position 0. The newest token "
        "sits at position t (the number of tokens already in the cache): add `model.positional_encoding.pe[t]`",
        "self only": "each new token attends to itself only: the cache grows, but its keys and values are not "
        "used. Concatenate the new key and value to the cached ones (`torch.cat([cached_k, k], dim=2)`) and "
        "attend over all of them",
        "first only": "the new token's self-attention sees position 0 only, not the later tokens and not itself. "
        "Either the causal mask is applied in the wrong orientation (its first row, which belongs to the first "
        "query: a single query, the newest token, may see every cached key, so no causal mask is needed at all, "
        "or its LAST row, `make_causal_mask(t + 1)[-1:]`), or, if it happens from step 1 on only, the new key and "
        "value are appended to the cache after attending instead of before (attend over positions 0 to t, itself "
        "included)",
        "no src mask": "cross-attention ignores the source padding: pass the source padding mask, "
        "`make_padding_mask(src, model.pad_id)`, to the cross-attention, as model.decode does",
    }
    return oracle, causes, trace


def _cache_steps(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor, memory: torch.Tensor,
                 tgt: torch.Tensor, oracle: dict, causes: dict, trace: dict) -> None:
    """Steps 0..T-1 on the batch: logits equal the full recomputation, one new position per projection."""
    T = tgt.shape[1]
    with torch.no_grad():
        cache: object = {}
        for t in range(T):
            with WeightUses(_linear_weights(model)) as uses:
                logits, cache = _step(check, decode_step, model, tgt[:, t : t + 1], memory, src, cache, t)
            seen = _positions_seen(uses.calls)
            if not close_enough(logits, oracle["right"][:, t]):
                named = [f"Likely cause: {why}." for key, why in causes.items() if close_enough(logits, oracle[key][:, t])]
                named = named or [_where_it_departs(uses.calls, trace, t, tgt[:, t : t + 1])]
                check.fail(
                    f"At step {t} (the cache holds {t} token{'s' if t != 1 else ''}), the logits of decode_step "
                    f"differ from those of model.decode on the whole prefix (batch of 3 sentences of source "
                    f"lengths 5, 2 and 4, padded).\n"
                    f"  expected (first values): {fmt_values(oracle['right'][:, t])}\n"
                    f"  actual   (first values): {fmt_values(logits)}\n"
                    + (named[0] if named[0] else
                       "Follow model.decode for one position: embedding * sqrt(d_model) + pe[t], then per layer "
                       "self-attention over the cached keys and values plus the new ones, cross-attention "
                       "to memory with the source padding mask, the feed-forward network, each wrapped with "
                       "its residual and LayerNorm; then the generator.")
                )
            _positions(check, seen, t, memory.shape[1])
    check.ok("logits equal the full recomputation at every step (batch with source padding)")
    check.ok("every projection sees one new position per step; cross-attention keys and values are computed once")


def _cache_reorder(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor, memory: torch.Tensor,
                   tgt: torch.Tensor) -> None:
    """Beam search reorders the rows: the cache must follow (every tensor with the rows first)."""
    with torch.no_grad():
        rows = torch.tensor([2, 0, 0])  # (B,): beams reordered, one duplicated
        cache = {}
        for t in range(3):
            _, cache = _step(check, decode_step, model, tgt[:, t : t + 1], memory, src, cache, t)
        misfits = _not_rows_first(cache, tgt.shape[0])
        if misfits:
            path, shape = misfits[0]
            check.fail(
                f"Your cache holds `{path}`, a tensor of shape {fmt_shape(shape)}, whose first dimension is not the "
                f"batch's {tgt.shape[0]} rows. Beam search reorders the rows of every tensor in the cache along its "
                f"first dimension (lesson 07's reorder_cache), so each needs the rows first: (B, H, t, d_k) for keys "
                f"and values. Keep a step count as a plain Python int (or as a (B,) tensor, one per row)."
            )
        cache = select_rows(cache, rows)
        tgt2, memory2, src2 = tgt[rows], memory[rows], src[rows]
        expected = model.decode(tgt2[:, :4], memory2, src2)[:, -1]
        with WeightUses(_linear_weights(model)) as uses:
            out = check.attempt(decode_step, model, tgt2[:, 3:4], memory2, src2, cache, what="decode_step")
        again = sorted({name for name, *_ in uses.calls if ".cross_attn.W_k" in name or ".cross_attn.W_v" in name})
        logits = out[0] if isinstance(out, (tuple, list)) and len(out) == 2 else out
        if isinstance(out, Raised) or not isinstance(logits, torch.Tensor) or not close_enough(logits, expected):
            found = (f"decode_step raised {type(out.exception).__name__}: {str(out.exception).splitlines()[0]}"
                     if isinstance(out, Raised) else
                     f"expected (first values): {fmt_values(expected)}\n"
                     f"  actual   (first values): {fmt_values(logits) if isinstance(logits, torch.Tensor) else describe(logits)}")
            check.fail(
                "After the rows were reordered as beam search does (rows [2, 0, 0] of the batch, memory and src "
                "reordered the same way, and every tensor of the cache indexed along its first dimension), "
                "the next step goes wrong:\n"
                f"  {found}\n"
                "Keep everything a step needs inside the cache (not on the model or in a global), and give "
                "every tensor in it the rows as its first dimension, (B, H, t, d_k) for keys and values, so "
                "that reorder_cache can select rows."
            )
        if again and not isinstance(out, Raised):
            check.fail(
                f"After the rows were reordered as beam search does, decode_step projected memory again "
                f"({', '.join(again[:2])}): the reordered memory is a new tensor, and your step took that for a new "
                f"sentence. The cross-attention's keys and values are in the cache, reordered with it: compute them "
                f"at the first step only (when the cache is empty), whatever tensor memory is at later steps. "
                f"Lesson 07's wrapper reorders at every step of beam search, so this would recompute them every time."
            )
    check.ok("the cache follows the rows when beam search reorders them")


def _not_rows_first(cache: Any, rows: int, path: str = "cache") -> list[tuple[str, tuple]]:
    """(where, shape) of every tensor in ``cache`` whose first dimension is not ``rows``."""
    if isinstance(cache, torch.Tensor):
        return [] if cache.dim() and cache.shape[0] == rows else [(path, tuple(cache.shape))]
    if isinstance(cache, dict):
        return [m for key, value in cache.items() for m in _not_rows_first(value, rows, f"{path}[{key!r}]")]
    if isinstance(cache, (list, tuple)):
        return [m for i, value in enumerate(cache) for m in _not_rows_first(value, rows, f"{path}[{i}]")]
    return []


def _heads_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Merged multi-head attention of one query per row: q (B, d), k and v (B, L, d) -> (B, d)."""
    B, L, D = k.shape
    d_k = D // HEADS
    qh, kh, vh = q.view(B, HEADS, 1, d_k), k.view(B, L, HEADS, d_k).transpose(1, 2), v.view(B, L, HEADS, d_k).transpose(1, 2)
    return ((qh @ kh.transpose(-2, -1) * scale).softmax(-1) @ vh).reshape(B, D)  # (B, d_model)


def _where_it_departs(calls: list, trace: dict, t: int, y_last: torch.Tensor) -> str:
    """The first linear map of the step whose input differs from model.decode's: its cause, else where it is."""
    model = trace["model"]  # the float64 copy the trace comes from
    used = [name for name, _, _ in calls]
    unused = [n for n in _linear_weights(model) if n not in used and not (t > 0 and (".cross_attn.W_k" in n or
                                                                                  ".cross_attn.W_v" in n))]
    repeated = sorted({n for n in used if used.count(n) > 1})
    layers_unused = sorted({n.split(".")[0] for n in unused} - {n.split(".")[0] for n in used})
    if unused and repeated and unused[0].split(".")[0] == repeated[0].split(".")[0]:
        return (f"Where it goes wrong: `{unused[0]}` was never called, while `{repeated[0]}` ran "
                f"{used.count(repeated[0])} times in one step: each projection belongs to its own attention (the "
                f"cross-attention's keys and values come from its own W_k and W_v, applied to memory).")
    if unused and repeated:
        return (f"Where it goes wrong: `{unused[0]}` was never called, while `{repeated[0]}` ran "
                f"{used.count(repeated[0])} times in one step: every decoder layer must run with its own weights "
                f"(loop over `model.decoder_layers`, each layer with its own part of the cache).")
    if layers_unused:
        return (f"Where it goes wrong: {', '.join(f'`{n}`' for n in layers_unused)} never ran in this step: the "
                f"new token goes through every layer of `model.decoder_layers`, in order.")
    mine = {name: applied.double() for name, applied, _ in calls}
    for name in _linear_weights(model):
        if name not in mine or name not in trace:
            continue
        want = trace[name][0]
        cross_kv = ".cross_attn.W_k" in name or ".cross_attn.W_v" in name
        width = mine[name].shape[-1]  # d_model, or d_ff for the second linear map of a feed-forward network
        got = mine[name] if cross_kv else mine[name].reshape(y_last.shape[0], -1, width)[:, -1]
        want = want if cross_kv else want[:, t]
        if not close_enough(got, want, 1e-4, 1e-4):
            return _departure_cause(model, name, got, trace, t, y_last)
    return ""


def _departure_cause(model: nn.Module, name: str, got: torch.Tensor, trace: dict, t: int, y_last: torch.Tensor) -> str:
    """Named causes for the input of ``name`` (the first that differs), else where the step goes wrong."""
    i = int(name[len("decoder_layers["):name.index("]")]) if name.startswith("decoder_layers") else LAYERS
    layer = model.decoder_layers[min(i, LAYERS - 1)]
    at = lambda key, which=0: trace[f"decoder_layers[{i}].{key}"][which][:, t]  # noqa: E731 (input 0 / output 1)
    before = lambda key: trace[f"decoder_layers[{i - 1}].{key}"]  # noqa: E731
    named: list[tuple[torch.Tensor, str]] = []
    if name.endswith(("self_attn.W_q", "self_attn.W_k", "self_attn.W_v")) and i == 0:
        emb, pe, root = model.tgt_embed.weight[y_last[:, 0]], model.positional_encoding.pe, math.sqrt(D_MODEL)
        named = [(emb + pe[t], "the new token's embedding is not multiplied by sqrt(d_model) before the positional "
                               "encoding is added: `model.tgt_embed(y_last) * math.sqrt(model.d_model)`"),
                 (emb * root, "no positional encoding is added to the new token's embedding: add "
                              "`model.positional_encoding.pe[t]`, the row of its position t (the number of tokens "
                              "already in the cache)"),
                 (emb * root + pe[t + 1], "the new token gets the positional encoding of position t + 1; its position "
                                          "is t, the number of tokens already in the cache: add `pe[t]`")]
        where = ("what the first layer receives for the new token differs from model.decode's: "
                 "tgt_embed(y_last) * sqrt(d_model) + pe[t] (the positional encoding's dropout is off in eval mode)")
    elif name.endswith(("self_attn.W_q", "generator")):  # the end of the previous layer
        x, ffn = before("feed_forward.linear1")[0][:, t], before("feed_forward.linear2")[1][:, t]
        norm = model.decoder_layers[i - 1].norm3
        named = [(x + ffn, "the third sublayer's LayerNorm is missing: x = layer.norm3(x + feed_forward(x))"),
                 (norm(ffn), "the residual connection around the feed-forward network is missing: "
                             "norm3(x + feed_forward(x))")]
        where = f"the output of decoder layer {i - 1}'s feed-forward sublayer, norm3(x + feed_forward(x)), differs"
    elif name.endswith("self_attn.W_o"):
        q, k, v = at("self_attn.W_q", 1), trace[f"decoder_layers[{i}].self_attn.W_k"][1], trace[f"decoder_layers[{i}].self_attn.W_v"][1]
        d_k = D_MODEL // HEADS
        named = [(_heads_attend(q, k[:, :t], v[:, :t], d_k ** -0.5) if t else got + 1,
                  "the new token attends to the cached tokens but not to itself: append its own key and value to the "
                  "cache first, and attend over the keys and values of positions 0 to t"),
                 (_heads_attend(q, k[:, : t + 1], v[:, : t + 1], D_MODEL ** -0.5),
                  "the self-attention scores are divided by sqrt(d_model) instead of sqrt(d_k), the size of one head"),
                 (_heads_attend(q, k[:, : t + 1], v[:, : t + 1], 1.0),
                  "the self-attention scores are not divided by sqrt(d_k)")]
        where = ("the self-attention over the cache differs although its query, keys and values are right: attend with "
                 "the new query over the keys and values of every position so far, the cached ones and the new one, "
                 "softmax(q k^T / sqrt(d_k)) v per head, then merge the heads")
    elif name.endswith("cross_attn.W_q"):
        x, sa = at("self_attn.W_q"), at("self_attn.W_o", 1)
        named = [(x + sa, "the first sublayer's LayerNorm is missing: x = layer.norm1(x + self_attention_output)"),
                 (layer.norm1(sa), "the residual connection around the self-attention is missing: "
                                   "norm1(x + self_attention_output)")]
        where = "the output of the self-attention sublayer, norm1(x + self_attention_output), differs"
    elif name.endswith(("cross_attn.W_k", "cross_attn.W_v")):
        where = ("the cross-attention's keys and values are not computed from memory: W_k(memory) and W_v(memory), "
                 "once, at step 0, then kept in the cache")
    elif name.endswith("cross_attn.W_o"):
        where = ("the cross-attention over memory differs although its query is right: keys and values from memory "
                 "(computed at step 0, kept in the cache), the source padding mask (True = may attend, "
                 "`src != model.pad_id`), softmax(q k^T / sqrt(d_k)) v per head")
    elif name.endswith("feed_forward.linear1"):
        x, ca = at("cross_attn.W_q"), at("cross_attn.W_o", 1)
        named = [(x + ca, "the second sublayer's LayerNorm is missing: x = layer.norm2(x + cross_attention_output)"),
                 (layer.norm2(ca), "the residual connection around the cross-attention is missing: "
                                   "norm2(x + cross_attention_output)")]
        where = "the output of the cross-attention sublayer, norm2(x + cross_attention_output), differs"
    else:  # linear2: the hidden layer
        named = [(at("feed_forward.linear1", 1), "the ReLU between the feed-forward network's two linear layers is "
                                                  "missing")]
        where = "the feed-forward network's hidden layer, relu(linear1(x)), differs"
    cause = next((why for value, why in named if close_enough(got, value, 1e-4, 1e-4)), "")
    if cause:
        return f"Likely cause: {cause}."
    return f"Where it goes wrong: `{name}` is the first linear map whose input differs from model.decode's: {where}."


def _positions(check: Check, seen: dict[str, list[int]], t: int, src_len: int) -> None:
    """Each projection sees one new position per step; cross-attention keys and values only at step 0."""
    for name, calls in seen.items():
        cross_kv = ".cross_attn.W_k" in name or ".cross_attn.W_v" in name
        if cross_kv:
            if t > 0:
                check.fail(
                    f"At step {t}, {name} ran again on memory ({calls} positions): cross-attention keys and values "
                    f"are recomputed at every step. They depend only on memory: compute them at the first step, "
                    f"store them in the cache, and reuse them."
                )
            continue
        if any(n != 1 for n in calls) or len(calls) != 1:
            check.fail(
                f"At step {t}, {name} saw {' + '.join(str(n) for n in calls)} positions; with a cache it should see "
                f"exactly one, the newest token. Project only y_last's position, and concatenate its key and value "
                f"to the cached ones (the earlier positions' projections do not change)."
            )
    for i in range(LAYERS):
        for attn in ("self_attn", "cross_attn"):
            for proj in ("W_q", "W_k", "W_v", "W_o"):
                name = f"decoder_layers[{i}].{attn}.{proj}"
                if name not in seen and not (attn == "cross_attn" and proj in ("W_k", "W_v") and t > 0):
                    check.fail(f"At step {t}, {name} was never called: decode_step must use the model's own "
                               f"projections (W_q, W_k, W_v, W_o of each layer's self_attn and cross_attn).")


# ==========================================================================
# to_torch_transformer(model) -> nn.Module: the learner's weights in PyTorch's own layers.


def _same_values(a, b) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and tuple(a.shape) == tuple(b.shape) and \
        torch.allclose(a.detach().double(), b.detach().double(), atol=1e-6, rtol=0)


def _attention_problem(where: str, ours: nn.Module, theirs: nn.MultiheadAttention) -> str | None:
    """Names how the fused projection of a PyTorch attention differs from W_q, W_k, W_v, W_o."""
    w = [getattr(ours, n).weight for n in ("W_q", "W_k", "W_v")]
    b = [getattr(ours, n).bias for n in ("W_q", "W_k", "W_v")]
    if getattr(theirs, "num_heads", None) != ours.num_heads:
        return (f"{where} has num_heads = {theirs.num_heads}, where your attention has num_heads = {ours.num_heads}: "
                f"read it from `self_attn.num_heads` (d_k = d_model // num_heads is another number).")
    fused = theirs.in_proj_weight
    if fused is None:
        return f"{where} has separate q/k/v projection weights: build it with kdim = vdim = d_model (the default)."
    if not _same_values(fused, torch.cat(w)):
        if _same_values(fused, torch.cat([x.t() for x in w])):
            cause = "each block is transposed: nn.Linear already stores (out_features, in_features), copy it as it is"
        elif any(_same_values(fused, torch.cat([w[i] for i in order])) for order in
                 [(0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]):
            cause = "the three blocks are in the wrong order: it must stack W_q, W_k, W_v, in this order"
        else:
            cause = "it should be torch.cat([W_q.weight, W_k.weight, W_v.weight]) (rows: queries, then keys, then values)"
        return f"{where}.in_proj_weight does not hold your W_q, W_k, W_v: {cause}."
    if theirs.in_proj_bias is not None and not _same_values(theirs.in_proj_bias, torch.cat(b)):
        return f"{where}.in_proj_bias should be torch.cat([W_q.bias, W_k.bias, W_v.bias])."
    if not _same_values(theirs.out_proj.weight, ours.W_o.weight) or not _same_values(theirs.out_proj.bias, ours.W_o.bias):
        return f"{where}.out_proj should hold your W_o (weight and bias)."
    return None


def _layer_problem(where: str, ours: nn.Module, theirs: nn.Module, attentions: list[str], norms: int,
                   rate: float) -> str | None:
    dropout = getattr(getattr(theirs, "dropout", None), "p", rate)
    if dropout != rate:
        return (f"{where} is built with dropout={dropout}, where your model's rate is {rate} "
                f"(`model.positional_encoding.dropout.p`, which the exercise's contract names): build nn.Transformer "
                f"with it; lesson 07 trains the copy to time its steps.")
    for name in attentions:
        torch_name = "multihead_attn" if name == "cross_attn" else "self_attn"
        problem = _attention_problem(f"{where}.{torch_name}", getattr(ours, name), getattr(theirs, torch_name))
        if problem:
            return problem
    for lin in ("linear1", "linear2"):
        mine, yours = getattr(ours.feed_forward, lin), getattr(theirs, lin)
        if not (_same_values(yours.weight, mine.weight) and _same_values(yours.bias, mine.bias)):
            return f"{where}.{lin} should hold your feed_forward.{lin} (weight and bias)."
    for i in range(1, norms + 1):
        mine, yours = getattr(ours, f"norm{i}"), getattr(theirs, f"norm{i}")
        if not (_same_values(yours.weight, mine.weight) and _same_values(yours.bias, mine.bias)):
            others = [j for j in range(1, norms + 1) if _same_values(yours.weight, getattr(ours, f"norm{j}").weight)]
            extra = f" (it holds your norm{others[0]})" if others else ""
            return f"{where}.norm{i} should hold your norm{i}{extra}: each sublayer has its own LayerNorm."
        eps, want = getattr(yours, "eps", None), getattr(mine, "eps", 1e-5)
        # within a factor of 10 (1e-5 against a hand-written norm's 1e-6) the logits agree to the checker's 1e-5
        if isinstance(eps, float) and isinstance(want, float) and eps > 0 and want > 0 and \
                max(eps / want, want / eps) > 10 + 1e-9:
            return (f"{where}.norm{i} has eps = {eps:g}, where your norm{i} has {want:g}: build the layers with "
                    f"`layer_norm_eps` equal to your LayerNorms' eps (nn.Transformer's default is 1e-5).")
    if getattr(theirs, "norm_first", False):
        return (f"{where} has norm_first=True, the pre-LN variant. The paper's layers (and yours) are post-LN: "
                f"build PyTorch's layers with norm_first=False (the default).")
    activation = getattr(theirs, "activation", None)
    if activation is not None and not _computes_relu(activation):
        return f"{where} uses the activation {getattr(activation, '__name__', type(activation).__name__)}; yours is ReLU."
    return None


def _computes_relu(activation: Any) -> bool:
    """Whether ``activation`` is ReLU by what it computes (F.relu, nn.ReLU(), a lambda around either...)."""
    probe = torch.linspace(-3.0, 3.0, 13)
    try:
        out = activation(probe.clone())
    except Exception:  # noqa: BLE001  (a string such as "relu" is not called by nn.Transformer either)
        return activation == "relu"
    return isinstance(out, torch.Tensor) and out.shape == probe.shape and torch.equal(out, probe.clamp(min=0))


def _dense(out):
    """A layer's output as a dense (B, L, d) tensor (PyTorch's encoder runs its layers on nested tensors in eval)."""
    if isinstance(out, torch.Tensor) and out.is_nested:
        return out.to_padded_tensor(0.0)
    return out


def _real(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The values of x (B, L', d) at the real positions of ``real`` (B, L), L' <= L padded with zeros."""
    if x.dim() == 3 and x.shape[1] < real.shape[1]:
        x = torch.cat([x, x.new_zeros(x.shape[0], real.shape[1] - x.shape[1], x.shape[2])], dim=1)
    return x[real]


def _check_to_torch_transformer(check: Check, to_torch_transformer: Callable) -> None:
    check.callable_(to_torch_transformer, "to_torch_transformer")
    model = CourseTransformer(11, _CACHE_PAD)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    theirs = check.call(to_torch_transformer, model, what="to_torch_transformer")
    if [m.training for m in model.modules()] != modes:
        check.fail("to_torch_transformer changed the mode of your model (model.train() or model.eval() on it): "
                   "leave your model as it was given, and set the mode of the new module only.")
    if not isinstance(theirs, nn.Module):
        check.fail(f"to_torch_transformer should return an nn.Module, but it returned {describe(theirs)}.")
    if any(not torch.equal(before[k], v) for k, v in model.state_dict().items()):
        check.fail("to_torch_transformer changed the weights of your model: copy them into the new module "
                   "(`.copy_()` on the NEW parameters, inside torch.no_grad()), never the other way round.")

    check.ok("returns an nn.Module and leaves your model unchanged")

    enc, dec = _copied_layers(check, model, theirs)
    _shares_nothing(check, model, theirs)
    src, tgt, expected, got, inputs, seen = _traced_run(check, model, theirs, enc, dec)
    if (len(seen["their_enc"]), len(seen["their_dec"])) != (LAYERS, LAYERS):
        check.fail(
            f"The module's forward does not compute with the PyTorch layers it holds: in one call its "
            f"nn.TransformerEncoderLayers ran {len(seen['their_enc'])} times and its nn.TransformerDecoderLayers "
            f"{len(seen['their_dec'])} times, where each of the {LAYERS} + {LAYERS} should run once. Run the "
            f"embeddings and positional encoding, then nn.Transformer, then your generator; not a copy of your model."
        )
    _first_mismatch(check, src, tgt, expected, got, inputs, seen)
    _input_dropout(check, theirs, enc[0], dec[0])


_BATCH_FIRST = ("Our tensors are (B, L, d_model): build nn.Transformer with batch_first=True, or it reads the first "
                "axis as the positions.")


def _input_dropout(check: Check, theirs: nn.Module, first_enc: nn.Module, first_dec: nn.Module) -> None:
    """In training mode the first layers' inputs show the positional encoding's dropout, at the model's rate."""
    g = torch.Generator().manual_seed(9)
    src = torch.randint(1, SRC_VOCAB, (16, 12), generator=g)  # no padding: every entry counts
    tgt = torch.randint(1, TGT_VOCAB, (16, 10), generator=g)
    inputs: dict[bool, dict[str, torch.Tensor]] = {True: {}, False: {}}  # training? -> side -> first layer's input
    for training in (False, True):
        def remember(module, args, key, seen=inputs[training]):  # returns None: the layer's inputs stay as they are
            seen.setdefault(key, _dense(args[0]))

        handles = [layer.register_forward_pre_hook(lambda m, args, key=key: remember(m, args, key))
                   for key, layer in (("encoder", first_enc), ("decoder", first_dec))]
        try:
            theirs.train(training)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*nested tensors.*")
                check.call(theirs, src, tgt, hint=_BATCH_FIRST,
                           what="to_torch_transformer module's forward(src, tgt)" + ", in training mode" * training)
        finally:
            theirs.eval()
            for h in handles:
                h.remove()
    for side in ("encoder", "decoder"):
        dropped, plain = inputs[True].get(side), inputs[False].get(side)
        if not (isinstance(dropped, torch.Tensor) and isinstance(plain, torch.Tensor) and dropped.shape == plain.shape):
            continue
        where = f"the embeddings plus positions (the input of the first {side} layer)"
        pattern = drop_pattern(dropped, plain)
        problem = dropout_problem(pattern, DROPOUT, where, "copy") if pattern.exact else (
            f"In training mode something other than a dropout changes {where} in your copy.")
        if problem:
            check.fail(f"{problem}\nThe positional encoding's dropout (`model.positional_encoding.dropout`, "
                       f"p={DROPOUT} here) must act on the embeddings plus positions in the copy too: reuse a copy of "
                       f"your model's positional_encoding module (its dropout comes with it), rather than adding `pe` "
                       f"by hand or building a new nn.Dropout.")
    check.ok(f"in training mode, the embeddings plus positions are dropped at your model's rate ({DROPOUT})")


def _shares_nothing(check: Check, model: nn.Module, theirs: nn.Module) -> None:
    """The returned module holds copies: no parameter or buffer shares memory with the learner's model."""
    ours = {t.untyped_storage().data_ptr(): name for name, t in (*model.named_parameters(), *model.named_buffers())}
    shared = [ours[t.untyped_storage().data_ptr()] for _, t in (*theirs.named_parameters(), *theirs.named_buffers())
              if t.untyped_storage().data_ptr() in ours]
    if shared:
        shown = ", ".join(f"`{n}`" for n in dict.fromkeys(shared[:4]))
        check.fail(f"The module shares {len(set(shared))} tensors with your model ({shown}...): it holds your model's "
                   f"own tensors, not copies, so one optimizer step on it would change your model too. Copy them: "
                   f"`copy.deepcopy(model.src_embed)` for the modules you keep around nn.Transformer, and `.copy_()` "
                   f"into PyTorch's own parameters.")
    check.ok("holds copies of your tensors: none is shared with your model")


def _copied_layers(check: Check, model: nn.Module, theirs: nn.Module) -> tuple[list, list]:
    """PyTorch's own layers, each holding the weights of the learner's layer; no extra final norms."""
    enc = [m for m in theirs.modules() if isinstance(m, nn.TransformerEncoderLayer)]
    dec = [m for m in theirs.modules() if isinstance(m, nn.TransformerDecoderLayer)]
    if len(enc) != LAYERS or len(dec) != LAYERS:
        check.fail(
            f"The module should compute with PyTorch's own layers: {LAYERS} nn.TransformerEncoderLayer and "
            f"{LAYERS} nn.TransformerDecoderLayer for a model of {LAYERS} + {LAYERS} layers (nn.Transformer "
            f"holds them); it has {len(enc)} and {len(dec)}."
        )
    for i, (ours, yours) in enumerate(zip(model.encoder_layers, enc)):
        problem = _layer_problem(f"encoder layer {i}", ours, yours, ["self_attn"], 2, DROPOUT)
        if problem:
            check.fail(f"The weights of encoder layer {i} do not match yours: {problem}")
    for i, (ours, yours) in enumerate(zip(model.decoder_layers, dec)):
        problem = _layer_problem(f"decoder layer {i}", ours, yours, ["self_attn", "cross_attn"], 3, DROPOUT)
        if problem:
            check.fail(f"The weights of decoder layer {i} do not match yours: {problem}")
    check.ok("each PyTorch layer holds the weights of your layer (fused in_proj_weight = [W_q; W_k; W_v])")
    for stack in [m for m in theirs.modules() if isinstance(m, (nn.TransformerEncoder, nn.TransformerDecoder))]:
        if isinstance(stack.norm, nn.LayerNorm):
            which = "encoder" if isinstance(stack, nn.TransformerEncoder) else "decoder"
            check.fail(
                f"The {which} stack of your module ends with a final LayerNorm: nn.Transformer adds one to each "
                f"stack (for pre-LN models). The paper's post-LN layers end with their own LayerNorm, and your "
                f"model has no final one: set `transformer.encoder.norm = None` and `transformer.decoder.norm = None`."
            )
    return enc, dec


def _traced_run(check: Check, model: nn.Module, theirs: nn.Module, enc: list, dec: list) -> tuple:
    """Both models on a padded batch, with every layer's input and output recorded."""
    g = torch.Generator().manual_seed(5)
    src = torch.randint(1, SRC_VOCAB, (3, 6), generator=g)
    src[1, 4:], src[2, 2:] = _CACHE_PAD, _CACHE_PAD
    tgt = torch.randint(1, TGT_VOCAB, (3, 5), generator=g)
    tgt[0, 3:] = _CACHE_PAD
    seen: dict[str, list[torch.Tensor]] = {"ours_enc": [], "ours_dec": [], "their_enc": [], "their_dec": []}
    handles = []
    inputs: dict[str, torch.Tensor] = {}
    for key, layer in (("ours_enc", model.encoder_layers[0]), ("their_enc", enc[0]), ("ours_dec", model.decoder_layers[0]),
                       ("their_dec", dec[0])):
        def remember(module, args, key=key):
            if args and key not in inputs:
                inputs[key] = _dense(args[0])  # (returns None: the layer's inputs stay as they are)

        handles.append(layer.register_forward_pre_hook(remember))
    for key, layers in (("ours_enc", model.encoder_layers), ("ours_dec", model.decoder_layers),
                        ("their_enc", enc), ("their_dec", dec)):
        for layer in layers:
            handles.append(layer.register_forward_hook(lambda m, a, out, key=key: seen[key].append(_dense(out))))
    try:
        theirs.eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*nested tensors.*")  # PyTorch's note on its fast path
            expected = model(src, tgt)  # (B, L_tgt, V)
            got = check.call(theirs, src, tgt, what="to_torch_transformer module's forward(src, tgt)", hint=_BATCH_FIRST)
    finally:
        for h in handles:
            h.remove()
    got = check.tensor(got, "the logits of the module", shape=tuple(expected.shape), finite=False)
    return src, tgt, expected, got, inputs, seen


def _first_mismatch(check: Check, src: torch.Tensor, tgt: torch.Tensor, expected: torch.Tensor, got: torch.Tensor,
                    inputs: dict, seen: dict) -> None:
    """Equal logits pass; otherwise name the first piece (input, encoder, decoder, final norm) that differs."""
    real_src, real_tgt = src != _CACHE_PAD, tgt != _CACHE_PAD
    if close_enough(got[real_tgt], expected[real_tgt]):
        check.ok("its logits equal your model's to 1e-5 (eval mode, padded source and target)")
        return
    polarity = ("PyTorch's masks are the opposite of ours: True means HIDDEN. Pass src_key_padding_mask = "
                "memory_key_padding_mask = (src == pad_id), and a causal tgt_mask that is True ABOVE the diagonal "
                "(or nn.Transformer.generate_square_subsequent_mask(L)).")
    for side, real in (("enc", real_src), ("dec", real_tgt)):
        a, b = inputs.get(f"ours_{side}"), inputs.get(f"their_{side}")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not close_enough(_real(b, real), a[real]):
            which = "source" if side == "enc" else "target"
            check.fail(
                f"The input of the first {'encoder' if side == 'enc' else 'decoder'} layer differs from yours: "
                f"it should be the {which} embeddings times sqrt(d_model), plus the positional encoding (use your "
                f"model's own embeddings and positional_encoding).\n"
                f"  expected (first values): {fmt_values(a[real])}\n  actual   (first values): {fmt_values(_real(b, real))}"
            )
    for i, (a, b) in enumerate(zip(seen["ours_enc"], seen["their_enc"])):
        if isinstance(b, torch.Tensor) and close_enough(_real(b, real_src), a[real_src]):
            continue
        if i == 0 and seen["their_enc"] and not bool(torch.isfinite(seen["their_enc"][0]).all()):
            check.fail(f"Encoder layer 0 gives NaN: every key of some sentence is hidden. {polarity}")
        check.fail(
            f"The output of encoder layer {i} differs from yours (at the real source positions), although its "
            f"weights and its input match: check the source padding mask. {polarity}"
        )
    if seen["their_enc"] and len(seen["their_dec"]) and not close_enough(
            _real(seen["their_dec"][0], real_tgt), seen["ours_dec"][0][real_tgt]):
        check.fail(
            "The encoder and the decoder's input agree with yours, but decoder layer 0 does not: check the "
            "memory it receives (the encoder's output) and the masks: the causal tgt_mask, and "
            "memory_key_padding_mask for the source. " + polarity
        )
    for i, (a, b) in enumerate(zip(seen["ours_dec"], seen["their_dec"])):
        if not close_enough(_real(b, real_tgt), a[real_tgt]):
            check.fail(f"Decoder layer {i} differs from yours although decoder layer 0 agrees: check the memory and "
                       f"the masks it receives. " + polarity)
    check.fail(
        "Every layer agrees with yours, but the logits do not: check what comes after the last decoder layer. "
        "nn.Transformer's decoder ends with a LayerNorm of its own (set `transformer.decoder.norm = None`), and "
        "the output projection must be your generator.\n"
        f"  expected (first values): {fmt_values(expected[real_tgt])}\n  actual   (first values): "
        f"{fmt_values(got[real_tgt])}"
    )


__all__ = ["check_beam_search", "check_decode_step", "check_to_torch_transformer"]
