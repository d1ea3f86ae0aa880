"""Checker for lesson 07's beam search, with the GNMT length penalty, on scripted models.

``beam_search`` is run on scripted stand-ins for a trained Transformer: modules
with ``encode(src)`` and ``decode(tgt, memory, src)`` whose next-token
distribution depends on the whole prefix and on the sentence (read from
``memory``, as a real model reads it), that record every prefix they decode,
whether gradients were on, and that refuse to be called far past ``max_len``.
The oracles are the contract itself, replayed one hypothesis at a time in
plain Python on the model's own log-probabilities, and exhaustive search on a
tiny vocabulary (a beam as wide as every hypothesis finds the best sequence).
When the output differs, the known slips (:data:`SLIPS`, each a flag of that
replay) are replayed the same way to name the cause; the same replay, reading
``model.decode``, makes each slip into a learner's answer (:func:`_as_answer`).

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

import inspect
import math
from typing import Any, Callable

import torch

from ._core import Check, CheckResult, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip
from .stages import decoding as kit
from .stages.decoding import ScriptedModel, crashes_on_a_batch, mix, second_batch

_row = kit.row


def check_beam_search(beam_search: Callable) -> CheckResult:
    """Check ``beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)``."""
    return BEAM_SEARCH.check(beam_search)


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

    def prepare(self, sentence: tuple[int, ...], prefixes: list[tuple[int, ...]]) -> None:
        """Nothing to prepare: the logits are computed when asked (a model's view decodes a step's prefixes here)."""

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
    if variant == "penalty_precedence":  # `**` binds before `/`: only 6 is raised to the power
        return (5.0 + n) / 6.0 ** alpha
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
    if not finished or variant == "finished_dropped":
        return False
    if variant == "stop_first":
        return True
    if variant == "stop_k_finished":
        return len(finished) >= beam_size
    bound = t if variant == "stop_current_length" else max_len - 1
    raw = variant in ("penalty_every_step", "stop_raw_bound")
    reach = max(s for _, s in beams) / (1.0 if raw else _penalty(bound, alpha, variant))
    if variant == "stop_raw_finished":  # the finished sums, not divided by their penalties
        return max(score * _penalty(len(seq) - 1, alpha) for score, seq in finished) >= reach
    return max(f[0] for f in finished) >= reach


def _search(language: _Language, sentence: tuple[int, ...], beam_size: int, max_len: int, alpha: float,
            variant: str = "") -> _Search:
    """The contract's beam search for one sentence, replayed in plain Python (or one known wrong ``variant``)."""
    bos, eos = language.bos_id, language.eos_id
    V = language.vocab_size
    alpha = 0.6 if variant == "alpha_fixed" else alpha
    beams = [((bos,), 0.0)] * (beam_size if variant == "duplicates" else 1)
    finished: list[tuple[float, tuple[int, ...]]] = []
    opened: list[set[tuple[int, ...]]] = []
    steps, every_step = 0, variant == "penalty_every_step"
    for t in range(1, max_len):
        steps = t
        opened.append({prefix for prefix, _ in beams})
        language.prepare(sentence, [prefix for prefix, _ in beams])
        candidates = []
        for prefix, score in beams:
            log_probs = language.log_probs(sentence, prefix[:1] if variant == "first_position" else prefix)
            if variant == "logits":
                log_probs = language.logits(sentence, prefix).tolist()
            if variant == "probabilities":
                log_probs = [math.exp(x) for x in log_probs]
            for w in range(V):
                total = score + log_probs[w]
                if variant == "float16":  # scores kept in half precision: each sum rounded as torch would
                    total = float(torch.tensor(score, dtype=torch.float16) + torch.tensor(log_probs[w]).half())
                candidates.append((total / _penalty(t, alpha) if every_step else total, prefix + (w,)))
        candidates.sort(key=lambda c: -c[0])
        beams = []
        for rank, (score, seq) in enumerate(candidates):
            if seq[-1] == eos:
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
    # hypotheses whose scores differ by less than float16 can tell apart: scores must be summed in the
    # model's precision (found by search)
    {"vocab_size": 7, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 10, "beam_size": 3, "alpha": 0.6,
     "sentences": [(2, 1, 5), (2, 36, 8), (0, 27, 2), (2, 19, 3)]},
    # each sentence stops on its own bound: a bound taken from the best open score of the whole batch keeps a
    # sentence searching one step too long (found by search)
    {"vocab_size": 6, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 10, "beam_size": 3, "alpha": 1.0,
     "sentences": [(2, 36, 3), (2, 24, 3), (2, 23, 5), (2, 19, 6)]},
]


def _margin(language: _Language, sentence: tuple[int, ...], beam_size: int, max_len: int, alpha: float) -> float:
    """How close the contract's search for one sentence comes to a tie: the smallest gap, at any step, between the
    last candidate kept and the first one left out (all candidates, and those not ending in EOS), between the best
    finished score and the stopping bound, and between the two best finished hypotheses."""
    beams, finished, gap = [((language.bos_id,), 0.0)], [], math.inf
    for t in range(1, max_len):
        candidates = sorted(((score + lp, prefix + (w,)) for prefix, score in beams
                             for w, lp in enumerate(language.log_probs(sentence, prefix))), key=lambda c: -c[0])
        others = [c for c in candidates if c[1][-1] != language.eos_id]
        for ranked in (candidates, others):
            if len(ranked) > beam_size:
                gap = min(gap, ranked[beam_size - 1][0] - ranked[beam_size][0])
        finished += [(score / _penalty(t, alpha), seq) for score, seq in candidates[:beam_size]
                     if seq[-1] == language.eos_id]
        beams = [(seq, score) for score, seq in others[:beam_size]]
        if finished:
            best, reach = max(f[0] for f in finished), max(b[1] for b in beams) / _penalty(max_len - 1, alpha)
            gap = min(gap, abs(best - reach))
            if best >= reach:
                break
    else:
        finished += [(score / _penalty(len(seq) - 1, alpha), seq) for seq, score in beams]
    scores = sorted((f[0] for f in finished), reverse=True)
    return min(gap, scores[0] - scores[1]) if len(scores) > 1 else gap


def _drawn_case(seed: int) -> dict:
    """A case drawn at random (``generator(seed)``: a grading run's hidden seed draws another): vocabulary, special
    ids, beam size, max_len, length penalty and one to three sentences, redrawn until no step of the contract's
    search comes within 1e-3 of a tie (float32 and float64 answers agree)."""
    g = generator(seed)
    for _ in range(50):
        k = int(torch.randint(2, 5, (), generator=g))
        V = int(torch.randint(k + 5, 12, (), generator=g))
        bos_id, eos_id, pad_id = (int(t) for t in torch.randperm(V, generator=g)[:3])
        B = int(torch.randint(1, 4, (), generator=g))
        sentences = [(0, int(torch.randint(1, 60, (), generator=g)), int(torch.randint(2, 9, (), generator=g)))
                     for _ in range(B)]
        case = {"vocab_size": V, "bos_id": bos_id, "eos_id": eos_id, "pad_id": pad_id, "beam_size": k,
                "max_len": int(torch.randint(4, 11, (), generator=g)),
                "alpha": round(float(torch.rand((), generator=g)) * 2, 2), "sentences": sentences}
        language = _Language(V, bos_id, eos_id, pad_id)
        rows = [tuple(t for t in row if t != pad_id) for row in _source(case).tolist()]
        if all(_margin(language, row, k, case["max_len"], case["alpha"]) > 1e-3 for row in rows):
            return case
    return _CASES[1]


def _source(case: dict) -> torch.Tensor:
    """(B, S) with S = 5: each sentence's kind, salt and target length, then two tokens; every other one padded."""
    return kit.source([list(sentence) + [b + 1, 2 * b + 3] for b, sentence in enumerate(case["sentences"])],
                      case["pad_id"], padded=1)


def _setup(case: dict, src: torch.Tensor) -> str:
    return kit.setup(src, beam_size=case["beam_size"], max_len=case["max_len"], length_penalty=case["alpha"],
                     bos_id=case["bos_id"], eos_id=case["eos_id"], pad_id=case["pad_id"])


_AT_MAX_LEN = (  # two slips that answers never tell apart: one message for both
    "When your search reaches max_len, the open hypotheses do not compete with the finished ones as they should:",
    "either they are ignored, or their raw sums of log-probabilities are compared with finished scores that are "
    "divided by the length penalty. At max_len every open hypothesis competes too, its sum divided by the penalty of "
    "its length, ((5 + n) / 6) ** length_penalty with n = max_len - 1.")


def _slip(variant: str, cause: str, fix: str) -> Slip:
    """A known slip: the flag ``variant`` of :func:`_search` that makes it, and what the learner reads."""
    return Slip(variant, Diagnosis(cause, fix), dict(variant=variant))


#: the known slips: each a wrong variant of the contract's search, the flag ``variant`` of :func:`_search`, tried
#: once the answer differs and named only when it replays every run as the learner's search ran it (:func:`_cause`)
SLIPS = (
    _slip("probabilities",
          "Your search scores hypotheses by adding probabilities.",
          "Add LOG-probabilities: `logits.log_softmax(dim=-1)`; the score of a sequence is the sum of the "
          "log-probabilities of its tokens."),
    _slip("logits",
          "Your search adds the raw logits, not log-probabilities:",
          "logits are shifted by a different amount at every position, so their sums do not compare. Add "
          "`logits.log_softmax(dim=-1)`; the score of a sequence is the sum of the log-probabilities of its tokens."),
    _slip("alpha_fixed",
          "Your search uses length_penalty = 0.6 whatever it is given:",
          "pass the `length_penalty` argument on to the penalty, `gnmt_length_penalty(n, length_penalty)`."),
    _slip("penalty_missing",
          "Your search ranks finished hypotheses of different lengths by their raw scores:",
          "the length penalty is missing. Divide a finished hypothesis's score by ((5 + n) / 6) ** length_penalty, n "
          "its number of tokens after BOS (EOS included)."),
    _slip("penalty_every_step",
          "Your search divides the scores by the length penalty at every step, so the penalty compounds.",
          "Keep the raw sums of log-probabilities in the beam, and divide only when a hypothesis finishes (and for "
          "the stopping test)."),
    _slip("penalty_len_power",
          "Your search uses n ** length_penalty as the length penalty.",
          "The GNMT penalty is ((5 + n) / 6) ** length_penalty."),
    _slip("penalty_precedence",
          "Your search's length penalty is (5 + n) / 6 ** length_penalty:",
          "in Python `**` binds before `/`, so only 6 is raised to the power, and the penalty grows with n as fast as "
          "n itself. Put brackets around the fraction: ((5 + n) / 6) ** length_penalty."),
    _slip("penalty_counts_bos",
          "Your search's length penalty counts BOS in the length.",
          "n is the number of tokens after BOS, EOS included: ((5 + n) / 6) ** length_penalty."),
    _slip("finished_dropped",
          "Your search drops the hypotheses that end in EOS instead of keeping them:",
          "put a candidate that ends in EOS (and ranks within the beam_size best) on a list of finished hypotheses, "
          "and choose the answer among them."),
    _slip("duplicates",
          "Your search starts every beam as BOS with score 0, so the top candidates are the same token beam_size "
          "times (duplicate beams).",
          "Start with one live hypothesis: scores [0, -inf, ..., -inf] for each sentence (or expand BOS alone at the "
          "first step)."),
    _slip("eos_from_2k",
          "Your search keeps as finished a candidate ending in EOS that ranks outside the beam_size best candidates.",
          "Only EOS candidates among the beam_size best become finished."),
    _slip("worst_first",
          "Your search returns the worst finished hypothesis instead of the best:",
          "sort by score in descending order (or take the max)."),
    _slip("max_len_finished_only", *_AT_MAX_LEN),
    _slip("max_len_raw", *_AT_MAX_LEN),
    _slip("stop_first",
          "Your search stops a sentence as soon as one hypothesis has finished, although an open one may still beat "
          "it.",
          "Stop only when the best finished score is at least the best open sum divided by the penalty of the longest "
          "possible hypothesis, ((5 + max_len - 1) / 6) ** length_penalty."),
    _slip("stop_k_finished",
          "Your search stops a sentence once beam_size hypotheses have finished, whatever their scores.",
          "Stop when the best finished score is at least the best open sum divided by the penalty of the longest "
          "possible hypothesis, ((5 + max_len - 1) / 6) ** length_penalty."),
    _slip("stop_raw_bound",
          "Your search's stopping test compares the best finished score (divided by its length penalty) with the best "
          "open sum without dividing that one:",
          "an open hypothesis can still grow to max_len - 1 tokens, so divide its sum by ((5 + max_len - 1) / 6) ** "
          "length_penalty."),
    _slip("stop_raw_finished",
          "Your search's stopping test compares the raw sum of the best finished hypothesis, not its score divided by "
          "its length penalty.",
          "Compare the finished hypothesis's normalised score with the best open sum divided by ((5 + max_len - 1) / "
          "6) ** length_penalty."),
    _slip("stop_current_length",
          "Your search's stopping test divides the best open sum by the penalty of its current length.",
          "An open hypothesis can still grow to max_len - 1 tokens, and a longer one is divided by more: use ((5 + "
          "max_len - 1) / 6) ** length_penalty."),
    _slip("penalty_without_eos",
          "Your search's length penalty does not count EOS:",
          "n is the number of tokens after BOS, EOS included, in ((5 + n) / 6) ** length_penalty."),
    _slip("float16",
          "Your search keeps the scores in float16 (`dtype=torch.float16`, `.half()`), which rounds sums of this size "
          "to steps of 0.002 to 0.004, so hypotheses whose scores are closer than that are ranked wrongly.",
          "Keep them in the dtype of the model's log-probabilities (float32)."),
    _slip("raw_pick",
          "Your search picks the answer by the raw sum of log-probabilities.",
          "The answer is the finished hypothesis with the best score divided by its length penalty, ((5 + n) / 6) ** "
          "length_penalty."),
    _slip("first_position",
          "Your search reads the logits at the first position of the decoded prefix (`logits[:, 0]`), which always "
          "predict the token after BOS, whatever was decoded since.",
          "The next token's scores are at the last position: `logits[:, -1]`."),
)


# --------------------------------------------------------------------------


def _run(check: Check, beam_search: Callable, case: dict, beam_size: int | None = None, alpha: float | None = None,
         max_len: int | None = None, probe: bool = False, device: torch.device | None | str = "cpu"):
    """Run beam_search on a fresh scripted model: (model, src, output, beam_size, alpha, max_len).

    ``device`` None runs on the pretend GPU. With ``probe`` a crash comes back as a ``Raised``; a loop that runs
    past the scripted model's bounds ends the check with a failure either way.
    """
    language = _Language(case["vocab_size"], case["bos_id"], case["eos_id"], case["pad_id"])
    max_len = case["max_len"] if max_len is None else max_len
    k = case["beam_size"] if beam_size is None else beam_size
    a = case["alpha"] if alpha is None else alpha
    src = _source(case)
    model, src, out = kit.decode(
        check, beam_search, language, case["vocab_size"], src, k, max_len, case["bos_id"], case["eos_id"],
        case["pad_id"], length_penalty=a, max_len=max_len, pad_id=case["pad_id"], what="beam_search", probe=probe,
        device=device, runaway=(f"{_setup(dict(case, beam_size=k, alpha=a), src)} Loop at most max_len - 1 times "
                                f"(`for t in range(1, max_len)`), and break once every sentence has stopped."))
    return model, src, out, k, a, max_len


def _check_beam_search(check: Check, beam_search: Callable) -> None:
    check.callable_(beam_search, "beam_search")
    _default_penalty(check, beam_search)
    _runs_on_one_sentence_and_a_batch(check, beam_search)
    _finds_the_contracts_best(check, beam_search)
    _second_batch(check, beam_search, _CASES[1])
    _beam_one_is_greedy(check, beam_search)
    _wide_beam_is_exhaustive(check, beam_search)
    _device(check, beam_search)  # tensors it creates follow src.device (a pretend GPU on a CPU-only machine)


def _runs_on_one_sentence_and_a_batch(check: Check, beam_search: Callable) -> None:
    """One sentence returns a (1, T) LongTensor; then a batch: crashing there but not on one means one sentence only."""
    case = _CASES[0]
    model, src, out, k, alpha, max_len = _run(check, beam_search, case)
    _output(check, out, case, src, max_len)
    check.ok("returns a LongTensor (B, T)")
    _, src_b, out_b, *_ = _run(check, beam_search, _CASES[1], probe=True)
    crashes_on_a_batch(
        check, "beam_search", out_b, src_b.shape[0],
        "It should search for every sentence of the batch at once: B * beam_size rows through the decoder, "
        "memory and src repeated with `repeat_interleave(beam_size, dim=0)`, scores of shape (B, beam_size). If "
        "stopped sentences leave the batch, every list that says which sentence a row belongs to (such as "
        "`active`) must shrink with the rows you keep.",
    )


def _finds_the_contracts_best(check: Check, beam_search: Callable) -> None:
    """Every case against the contract, one mechanism at a time; every case runs first, so that a cause is named on
    the evidence of all of them. Then a case drawn from the check's seed (another under a grading run's)."""
    runs = []
    for case in _CASES:
        model, src, out, k, alpha, max_len = _run(check, beam_search, case)
        runs.append((model, src, _output(check, out, case, src, max_len), case, k, alpha, max_len))
    for run in runs:
        _mechanics(check, *run)
        _compare(check, *run, evidence=runs)
    for run in runs:
        _stopping(check, *run, evidence=runs)
    drawn = _drawn_case(51)
    model, src, out, k, alpha, max_len = _run(check, beam_search, drawn)
    run = (model, src, _output(check, out, drawn, src, max_len), drawn, k, alpha, max_len)
    _mechanics(check, *run)
    _compare(check, *run, evidence=runs + [run])
    _stopping(check, *run, evidence=runs + [run])
    check.ok("finds the contract's best hypothesis for every sentence of a batch, with other special ids")


def _beam_one_is_greedy(check: Check, beam_search: Callable) -> None:
    """Beam 1 with no length penalty is greedy decoding."""
    for case in _CASES[1:3]:
        model, src, out, k, alpha, max_len = _run(check, beam_search, case, beam_size=1, alpha=0.0)
        out = _output(check, out, case, src, max_len)
        _mechanics(check, model, src, out, case, 1, 0.0, max_len)
        sentences = [model.sentence(row) for row in src.tolist()]
        greedy = [_greedy(model.script, s, max_len) for s in sentences]
        got = [_strip(row, case) for row in out.tolist()]
        if got != greedy:
            b = next(i for i, (g, m) in enumerate(zip(greedy, got)) if g != m)
            named = _cause(model, sentences, got, b, 1, max_len, 0.0, greedy=False)
            figures = (f"With beam_size=1 and length_penalty=0, beam search is greedy decoding, but sentence {b} "
                       f"differs {_setup(dict(case, beam_size=1, alpha=0.0), src)}:\n"
                       f"  greedy: {_row(greedy[b])}\n  yours:  {_row(got[b])}")
            check.fail(named.showing(figures) if named else f"{figures}\nWith one beam, each step keeps the single "
                       f"best continuation; check how you add the log-probabilities (logits[:, -1].log_softmax(-1)) to "
                       f"the scores and pick the top candidates.")
    check.ok("with beam_size=1 and no length penalty it equals greedy decoding")


def _wide_beam_is_exhaustive(check: Check, beam_search: Callable) -> None:
    """A beam as wide as every hypothesis is exhaustive search, with the paper's penalty and a strong one."""
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
    return kit.output(check, out, "beam_search", src, _setup(case, src), rows="one row (the best hypothesis) per "
                      "source sentence", max_len=max_len, beams=case["beam_size"], dtype_fix=(
                          "Build the output with `dtype=torch.long` (topk's indices are already long)."))


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
    kit.encoded_once(check, model, sentences, "beam_search", setup, beam_size=k, batched=False)
    check.ok("runs the encoder once per sentence")
    kit.without_grad(check, [model], "beam_search", setup, holds="runs under torch.no_grad()")
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
                        f"of different sentences are mixed. Rows b * beam_size to (b + 1) * beam_size - 1 belong to "
                        f"sentence b: repeat memory and src with `repeat_interleave(beam_size, dim=0)`, which keeps "
                        f"each sentence's rows together (`.repeat(beam_size, 1, 1)` tiles the whole batch instead); "
                        f"keep the scores as (B, beam_size), pick the top candidates per sentence (topk over dim=-1 "
                        f"of a (B, beam_size * V) tensor) and turn the beam index into a row with b * beam_size + beam."
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
                    f"the beam. If you do: the tokens appended to the new beam must be those of the kept candidates, "
                    f"`token.gather(1, keep)` (the same positions as the kept beams and scores), not the first ones."
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
                    favourite = int(torch.as_tensor(language(sentence, prefixes[0][:1])).argmax())
                    if prefixes[0][1] != favourite:  # not the init: a token the model does not prefer, k times
                        check.fail(
                            f"After the first step, the {k} beams of sentence {sentences.index(sentence)} are all "
                            f"{_row(prefixes[0])} {setup}, although the model's most probable first token is "
                            f"{favourite}: the tokens put in the beam are not the candidates that topk picked. With "
                            f"the candidates flattened to (B, beam_size * V), candidate i comes from beam "
                            f"`i // V` and is token `i % V` (V the vocabulary size, `log_probs.size(-1)`), not "
                            f"`i % beam_size` and `i // beam_size`."
                        )
                    check.fail(
                        f"{_DUPLICATES} After the first step, the {k} beams of sentence {sentences.index(sentence)} "
                        f"are all {_row(prefixes[0])} {setup}. If yours start so: every candidate must get its own "
                        f"beam's score, `scores.unsqueeze(-1) + "
                        f"log_probs.view(B, beam_size, V)`, flattened to (B, beam_size * V) (`scores.repeat(1, V)` "
                        f"puts the beams' scores in the wrong places)."
                    )


_DUPLICATES = next(slip.says for slip in SLIPS if slip.name == "duplicates")  # its invariant shows it first


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


_GREEDY = Diagnosis(
    "Your search returns what greedy decoding finds: it keeps one hypothesis per sentence.",
    "A beam of several hypotheses must find the better sequence that starts with a less likely token: keep the "
    "beam_size best candidates of all beam_size * V extensions, not the best extension of each beam.")


def _cause(model: ScriptedModel, sentences: list[tuple[int, ...]], got: list[tuple[int, ...]], b: int, k: int,
           max_len: int, alpha: float, evidence: list | None = None, greedy: bool = True) -> Diagnosis | None:
    """What returns ``got[b]`` for sentence b: greedy decoding (with ``greedy``), or a known slip of :data:`SLIPS`.

    A slip is consistent with a sentence when it returns the learner's answer for it and opens the same
    hypotheses as the learner's search did, step by step, for as many steps; a batch as a whole must stop when
    the slip's slowest sentence does. With ``evidence`` (every run of the check: model, src, out, case, k, alpha,
    max_len) a slip is named only when it is consistent with every run; without, the most consistent one is.
    """
    language = model.script
    histories = [model.history(s) for s in sentences]
    one_per_step = all(len(step) <= 1 for h in histories for step in h)
    if greedy and got[b] == _greedy(language, sentences[b], max_len) and one_per_step and got[b] != _search(
            language, sentences[b], k, max_len, alpha).best:
        return _GREEDY
    runs = evidence or [(model, None, None, None, k, alpha, max_len)]
    replayed: dict[str, tuple[tuple[int, ...], tuple[int, int]]] = {}

    def replay(slip: Slip) -> tuple[tuple[int, ...], tuple[int, int]]:
        """The slip's answer for sentence b and, when it is the learner's, its :func:`_agreement` with the runs."""
        if slip.name not in replayed:
            best = slip.replay(_search, language, sentences[b], k, max_len, alpha).best
            replayed[slip.name] = best, _agreement(slip.mutant["variant"], runs, sentences, got) if best == got[b] \
                else (0, 1)
        return replayed[slip.name]

    def explains(answer: tuple[tuple[int, ...], tuple[int, int]]) -> bool:
        (best, (score, possible)) = answer
        return best == got[b] and (evidence is None or score == possible)

    order = SLIPS if evidence is not None else sorted(SLIPS, key=lambda slip: -replay(slip)[1][0])  # most consistent
    slip = matching_slip(order, replay, explains)
    return slip.says if slip is not None else None


_TIED = {"first_position"}  # every hypothesis gets one distribution: candidates tie, and torch breaks ties its way


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
        score += sum(r.best == m and (variant in _TIED or _follows(r, h))
                     for r, m, h in zip(replays, run_got, run_histories))
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
        if len(history) == search.steps - 1 == model.max_len - 2:
            return (f"Your search stopped this sentence after {len(history)} steps, one before max_len: the loop ends "
                    f"a step early. A hypothesis may have max_len tokens, BOS included, so there are max_len - 1 "
                    f"steps: `for t in range(1, max_len)`.")
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
        if len(got) > 1 and len(set(got)) == 1 and len({s.best for s in searches}) > 1:
            check.fail(
                f"Every row of your output is the same hypothesis, {_row(mine)} {setup}, although the sentences "
                f"differ: the sentences share one list of finished hypotheses. `[[]] * B` makes B references to a "
                f"single list; build one list per sentence, `[[] for _ in range(B)]`.")
        others = [i for i, s in enumerate(searches) if s.best == mine and i != b]
        if others:
            check.fail(
                f"Row {b} of your output is the best hypothesis of sentence {others[0]} {setup}: the rows are in "
                f"the wrong order. Return the hypotheses in the order of the source sentences; and read each "
                f"sentence's hypotheses from its own rows of ys (sentence i's beam j is row `i * beam_size + j`)."
            )
        named = _cause(model, sentences, got, b, k, max_len, alpha, evidence)
        expected_text = f"  expected: {_row(search.best)} (score {score[search.best]:.4f})"
        yours_text = f"  yours:    {_row(mine)}" + (f" (score {score[mine]:.4f})" if mine in score else "")
        departure = _departure(model, sentences[b], search, k)
        off_by_one = mine in score and any(mine == max(  # either way: one case cannot tell which
            score, key=lambda s: score[s] * _penalty(len(s) - 1, alpha) / _penalty(len(s) - 1 + step, alpha))
            for step in (1, -1))
        t = len(mine) - 1  # the step at which a hypothesis ending in EOS finished
        eos = model.script.eos_id
        elsewhere = sorted({seq[:-1] for _, seq in search.finished if len(seq) == len(mine) and seq[-1] == eos}) if (
            mine[-1:] == (eos,) and 1 <= t <= len(search.opened) and mine[:-1] in search.opened[t - 1]) else []
        figures = (f"Sentence {b}: your beam search does not return the best hypothesis {setup}.\n{expected_text}\n"
                   f"{yours_text}")
        if named:
            check.fail(named.showing(figures))
        if departure:
            cause = (f"{departure}\nAt each step every open hypothesis is extended by every token, and its score is "
                     f"its sum of log-probabilities (log_softmax of the last position's logits); of these "
                     f"candidates, those ending in EOS among the beam_size best finish, and the beam_size best "
                     f"others stay open.")
        elif off_by_one:
            cause = ("Your search opened the same hypotheses as the contract's at every step, and your answer is the "
                     "best finished hypothesis if its length n is off by one (it counts BOS, or leaves out EOS): n is "
                     "the number of tokens after BOS, EOS "
                     "included (the step t at which it finished, `len(tokens) - 1`), in "
                     "sum / ((5 + n) / 6) ** length_penalty.")
        elif mine in score:
            cause = ("Your search opened the same hypotheses as the contract's at every step, and your answer is one "
                     "of the finished hypotheses, but not the best by the length-normalised score: compare "
                     "sum / ((5 + n) / 6) ** length_penalty, n = tokens after BOS, EOS included.")
        elif elsewhere:
            cause = (f"Your answer is {_row(mine[:-1])}, a hypothesis open at step {len(mine) - 1}, followed by EOS; "
                     f"but the candidates ending in EOS among the {k} best at that step extend "
                     f"{', '.join(map(_row, elsewhere))}. The finished hypothesis was read from another row of ys: "
                     f"a candidate's beam is `index // V` (V the vocabulary size) and its token `index % V`, and "
                     f"sentence i's beam j is row `i * beam_size + j`. Its rank among the top candidates is neither.")
        elif any(mine == seq[:-1] for _, seq in search.finished):
            cause = ("Your answer is one of the contract's finished hypotheses without its EOS: a finished hypothesis "
                     "is the candidate that ends in EOS, EOS included (its log-probability is part of the score), "
                     "and the output keeps it, padded after it.")
        else:
            cause = ("Your search opened the same hypotheses as the contract's at every step, but your answer is not "
                     "one of its finished hypotheses: the bookkeeping around the chosen candidates goes astray. "
                     "Likely causes: the scores kept for the new beam are not those of the kept candidates "
                     "(`top_scores.gather(1, keep)`, not `top_scores[:, :k]`); a finished hypothesis is read from "
                     "another row of ys (sentence i's beam j is row `i * beam_size + j`); or it is filed under "
                     "another sentence (once stopped sentences leave the batch, row i is sentence `active[i]`). "
                     "A finished hypothesis is the candidate ending in EOS, its sum divided by the length penalty; "
                     "return the best, BOS first.")
        check.fail(f"{cause}\n{figures}")


def _stopping(check: Check, model: ScriptedModel, src: torch.Tensor, out: torch.Tensor, case: dict, k: int,
              alpha: float, max_len: int, evidence: list | None = None) -> None:
    """Early stopping: no more steps than the slowest sentence of the batch needs."""
    setup, sentences, searches, got = _replayed(model, src, out, case, k, alpha, max_len)
    steps = max((len(p) for call in model.rows for _, p in call), default=0)
    needed = max(s.steps for s in searches)
    if steps != needed:
        def replay(slip: Slip) -> tuple[Slip, list[_Search]]:
            return slip, [slip.replay(_search, model.script, s, k, max_len, alpha) for s in sentences]

        def explains(replayed: tuple[Slip, list[_Search]]) -> bool:
            slip, replays = replayed
            return (all(r.best == m and _follows(r, model.history(s)) for r, m, s in zip(replays, got, sentences))
                    and max(r.steps for r in replays) == steps and (evidence is None or len(set(_agreement(
                        slip.mutant["variant"], evidence))) == 1))  # it explains every run

        slip = matching_slip(SLIPS, replay, explains)
        if slip is not None:
            check.fail(slip.says.showing(f"It stops after {steps} decoding steps instead of {needed} {setup}."))
    if steps > needed:
        check.fail(
            f"Your search ran {steps} decoding steps, but every sentence's best finished hypothesis was certain "
            f"after {needed} {setup}: no open hypothesis could still beat it. Stop a sentence once its best "
            f"finished score is at least its own best open score (that sentence's, not the batch's) divided by the penalty of the longest possible "
            f"hypothesis, ((5 + max_len - 1) / 6) ** length_penalty, and stop the loop when every sentence has "
            f"stopped."
        )
    check.ok("stops as soon as no open hypothesis can still win")


def _second_batch(check: Check, beam_search: Callable, case: dict) -> None:
    """The same model, then a second batch of the same shape: nothing carries over (lessons 07 and 08 translate so)."""
    language = _Language(case["vocab_size"], case["bos_id"], case["eos_id"], case["pad_id"])
    src = _source(case)
    model = ScriptedModel(language, case["vocab_size"], case["pad_id"], src.shape[0], case["max_len"])

    def right(out: Any, other: torch.Tensor) -> bool:
        want = [_search(language, model.sentence(row), case["beam_size"], case["max_len"], case["alpha"]).best
                for row in other.tolist()]
        return isinstance(out, torch.Tensor) and [_strip(row, case) for row in out.tolist()] == want

    second_batch(check, "beam_search", beam_search, model, src, (case["beam_size"], case["max_len"], case["bos_id"],
                 case["eos_id"], case["pad_id"]), {"length_penalty": case["alpha"]}, right,
                 lambda other: _setup(case, other), "Lessons 07 and 08")


def _device(check: Check, beam_search: Callable) -> None:
    """Search on a pretend GPU (and on a real one, if there is one): every tensor must follow src's device."""
    kit.on_gpu(check, lambda device, probe: _run(check, beam_search, _CASES[1], probe=probe, device=device)[2],
               "beam_search", "`torch.full(..., device=src.device)`, `torch.arange(..., device=src.device)`, "
               "`torch.tensor(rows, device=src.device)` (or `src.new_full(...)`)", code=beam_search)


class _Decoded:
    """The learner's view of a model as :func:`_search` reads a language, for one sentence (row ``b`` of src): the
    logits model.decode gives, each step's hypotheses decoded together in one call (the answers made from slips)."""

    def __init__(self, model: Any, memory: torch.Tensor, src: torch.Tensor, b: int, bos_id: int, eos_id: int):
        self.model, self.memory, self.src = model, memory[b: b + 1], src[b: b + 1]  # (1, S, d), (1, S)
        self.bos_id, self.eos_id = bos_id, eos_id
        self._logits: dict[tuple[int, ...], torch.Tensor] = {}
        self.vocab_size = len(self.logits(b, (bos_id,)))

    def prepare(self, b: int, prefixes: list[tuple[int, ...]]) -> None:
        n = len(prefixes)
        ys = torch.tensor(prefixes, dtype=torch.long, device=self.src.device)  # (n, t)
        logits = self.model.decode(ys, self.memory.expand(n, -1, -1), self.src.expand(n, -1)).float().cpu()
        for prefix, rows in zip(prefixes, logits):  # a causal model: position j predicts after prefix[:j + 1]
            self._logits.update({prefix[: j + 1]: rows[j] for j in range(len(prefix))})

    def logits(self, b: int, prefix: tuple[int, ...]) -> torch.Tensor:
        if prefix not in self._logits:
            self.prepare(b, [prefix])
        return self._logits[prefix]

    def log_probs(self, b: int, prefix: tuple[int, ...]) -> list[float]:
        return torch.log_softmax(self.logits(b, prefix).double(), dim=-1).tolist()


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's beam_search: the slipped search replayed on what model.decode gives."""
    @torch.no_grad()
    def slipped_beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
        memory = model.encode(src)
        best = [slip.replay(_search, _Decoded(model, memory, src, b, bos_id, eos_id), b, beam_size, max_len,
                            length_penalty).best for b in range(src.size(0))]
        out = torch.full((len(best), max(map(len, best))), pad_id, dtype=torch.long, device=src.device)  # (B, T)
        for row, hypothesis in enumerate(best):
            out[row, : len(hypothesis)] = torch.tensor(hypothesis, device=src.device)
        return out

    return slipped_beam_search


BEAM_SEARCH = Exercise(
    "beam_search", _check_beam_search,
    oracle="the contract replayed one hypothesis at a time in plain Python on the scripted model's log-probabilities, "
           "and exhaustive search for a beam wider than every hypothesis",
    cases="twelve fixed batches (the greedy trap, other special ids, close finished hypotheses, max_len reached, "
          "float16-close scores, per-sentence bounds) and one drawn from the check's seed; beam 1 with no penalty; a "
          "beam of 125 with length_penalty 0.6 and 2.0; a second batch on the same model; a pretend GPU",
    slips=SLIPS, answer=_as_answer)


__all__ = ["BEAM_SEARCH", "SLIPS", "check_beam_search"]
