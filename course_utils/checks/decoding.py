"""Checker for lesson 06: greedy decoding.

``greedy_decode`` is run on a scripted stand-in for a trained Transformer: a
module with ``encode(src)`` and ``decode(tgt, memory, src)`` whose prediction
after a prefix depends on the whole prefix (and on the source sentence, not on
its padding), whose logits at earlier positions point to other tokens than the
last one, which records which sentences it encodes and decodes, and whose
sentences end at different steps (one never ends within ``max_len``). The
model's own argmax, replayed on the learner's output, is the oracle; the
recorded calls name what went wrong. The batch must be encoded in one call and
see prefixes of length 1, 2, 3, ...: the usual batched loop, a per-sentence
loop and a batch that drops its finished sentences all qualify.

The scripted model (:mod:`.stages.decoding`) counts its calls and stops answering
past a bound tied to ``max_len`` (a loop without its stopping condition ends
with a message, never hangs), records whether gradients were on (decoding must
run under ``torch.no_grad()``), and can live on a pretend GPU to catch tensors
created on the CPU whatever the input's device; where a real ``cuda`` or ``mps``
device exists, the decoding runs there too. Its one known slip, an eos id written into
the code (:data:`SLIPS`, a record per id, a flag of the replay), is named when it
replays every case as the learner's output, and shows on one.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ._core import Check, CheckResult, fmt_values, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip
from .stages import decoding as kit
from .stages.decoding import ScriptedModel, crashes_on_a_batch, second_batch

_row = kit.row


def check_greedy_decode(greedy_decode: Callable) -> CheckResult:
    """Check ``greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)`` on a scripted model."""
    return GREEDY_DECODE.check(greedy_decode)


def _check_greedy_decode(check: Check, greedy_decode: Callable) -> None:
    check.callable_(greedy_decode, "greedy_decode")
    greedy_stages(check, greedy_decode)


def greedy_stages(check: Check, greedy_decode: Callable, **extra: Any) -> None:
    """Every stage of greedy decoding's checker, run on ``greedy_decode(model, src, max_len, bos_id, eos_id, pad_id,
    **extra)``: a decoding function that the arguments ``extra`` make greedy (``sample_decode`` with ``top_k=1``)
    is held to greedy decoding's conventions. Messages name ``check.exercise`` and show ``extra``."""
    cases = [dict(case, extra=extra) for case in _CASES]
    _check_single_sentence(check, greedy_decode, cases[0])
    _check_batch_runs(check, greedy_decode, cases[1])
    runs = []  # every case runs first, so that a slip is named on the evidence of all of them
    for case in cases + [dict(_drawn_case(41), extra=extra)]:
        model, src, out = _decode(check, greedy_decode, case)
        runs.append((model, src, _output(check, out, case, src), case))
    _eos_written_in(check, runs)
    for i, run in enumerate(runs):  # what held is recorded on the last fixed case only: it held on those before it
        _diagnose(check, *run, ok=check.ok if i == len(cases) - 1 else _unrecorded)
    models = [model for model, *_ in runs]
    check.ok("returns a LongTensor (B, T)")  # recorded once every case returned one
    check.ok("decodes a batch of sentences that end at different steps, with special ids other than 0, 1, 2")
    _check_second_batch(check, greedy_decode, cases[1])
    kit.without_grad(check, models, check.exercise)
    _check_device(check, greedy_decode, cases[1])


# --------------------------------------------------------------------------
# The scripted model's rule.


def _next_token(prefix: list[int], src_row: tuple[int, ...], case: dict) -> int:
    """The scripted model's choice after ``prefix``: EOS once the prefix has src_row[0] tokens.

    ``src_row`` holds the source sentence without its padding, so that (like a real model with a
    padding mask) the choice does not depend on how much padding the sentence carries. In a case with
    ``pad_at``, the model chooses pad_id after a prefix of that length: a real model can, and the sentence
    goes on (only EOS ends it).
    """
    if len(prefix) == src_row[0]:
        return case["eos_id"]
    if len(prefix) == case.get("pad_at"):
        return case["pad_id"]
    mix = 17 + 13 * sum(src_row)
    for token in prefix:
        mix = (mix * 31 + token + 1) % 1_000_003
    ordinary = _ordinary(case)
    return ordinary[mix % len(ordinary)]


def _ordinary(case: dict) -> list[int]:
    return [t for t in range(case["vocab_size"]) if t not in (case["bos_id"], case["eos_id"], case["pad_id"])]


def _script(case: dict) -> kit.Script:
    """The scripted model's logits: its choice by :func:`_next_token`; the other logits a fixed pattern, far below."""
    V = case["vocab_size"]
    ramp = torch.arange(V, dtype=torch.float32)

    def script(sentence: tuple, prefix: tuple) -> torch.Tensor:
        logits = ((ramp * 7 + 3 * (len(prefix) - 1) + sentence[1]) % V) / V
        logits[_next_token(list(prefix), sentence, case)] += 4.0
        return logits

    return script


def _model(case: dict, batch: int) -> ScriptedModel:
    return ScriptedModel(_script(case), case["vocab_size"], case["pad_id"], batch, case["max_len"])


# Each case: vocab size, special ids, max_len, and per sentence the prefix length at which it emits EOS
# (0: never within max_len). The source rows carry that length as their first token.
_CASES = [
    {"vocab_size": 10, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 8, "stops": [5]},
    {"vocab_size": 12, "bos_id": 7, "eos_id": 3, "pad_id": 9, "max_len": 9, "stops": [3, 6, 0]},
    {"vocab_size": 11, "bos_id": 4, "eos_id": 8, "pad_id": 5, "max_len": 12, "stops": [7, 4]},
    # the model chooses pad_id as the third token: the sentences go on until EOS
    {"vocab_size": 10, "bos_id": 6, "eos_id": 2, "pad_id": 4, "max_len": 9, "stops": [6, 5], "pad_at": 3},
    # max_len = 1: <bos> alone, no step at all (a loop that tests its bound after its first step goes one too far)
    {"vocab_size": 10, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 1, "stops": [5, 3]},
]


def _drawn_case(seed: int) -> dict:
    """A case drawn at random (``generator(seed)``: a grading run's hidden seed draws another): vocabulary size,
    special ids, max_len, and one to four sentences of random tokens, right-padded to random lengths, that end at
    random steps (each after two tokens or more, some never within max_len)."""
    g = generator(seed)
    V = int(torch.randint(8, 17, (), generator=g))
    bos_id, eos_id, pad_id = (int(t) for t in torch.randperm(V, generator=g)[:3])
    max_len = int(torch.randint(4, 14, (), generator=g))
    B = int(torch.randint(1, 5, (), generator=g))
    stops, rows = [], []
    for b in range(B):
        stop = int(torch.randint(2, max_len + 2, (), generator=g))  # EOS after a prefix of `stop` tokens
        stop = 0 if stop > max_len or stop == pad_id else stop  # 0: never within max_len
        stops.append(stop)
        words = (V + b + 40 * torch.randint(0, 8, (4,), generator=g)).tolist()  # never pad_id; rows differ
        real = 1 + int(torch.randint(2, 5, (), generator=g))  # 3 to 5 real tokens, the stop first
        rows.append(([stop or 99] + words)[:real] + [pad_id] * (5 - real))  # (S,) with S = 5
    return {"vocab_size": V, "bos_id": bos_id, "eos_id": eos_id, "pad_id": pad_id, "max_len": max_len,
            "stops": stops, "src": rows}


def _source(case: dict) -> torch.Tensor:
    """(B, S) with S = 5: a drawn case brings its own; every other sentence is shorter, padded on the right."""
    if "src" in case:
        return torch.tensor(case["src"])
    return kit.source([[stop or 99, 3 + b, 6 + b * b, 2 * b + 1, 4] for b, stop in enumerate(case["stops"])],
                      case["pad_id"], padded=2)


def _expected(case: dict, src: torch.Tensor, model: ScriptedModel, stop_id: int | None = None) -> torch.Tensor:
    """Greedy decoding replayed with the scripted model's rule (``stop_id``: the id that ends a sentence, if not
    eos_id: a known slip)."""
    rows = [[case["bos_id"]] for _ in case["stops"]]
    done = [False] * len(rows)
    sources = [model.sentence(row) for row in src.tolist()]
    while len(rows[0]) < case["max_len"] and not all(done):
        for b, row in enumerate(rows):
            if done[b]:
                row.append(case["pad_id"])
            else:
                row.append(_next_token(row, sources[b], case))
                done[b] = row[-1] == (case["eos_id"] if stop_id is None else stop_id)
    return torch.tensor(rows)


def _setup(case: dict, src: torch.Tensor) -> str:
    return kit.setup(src, **{k: case[k] for k in ("max_len", "bos_id", "eos_id", "pad_id")}, **case.get("extra", {}))


# --------------------------------------------------------------------------
# Running the learner's loop.


def _decode(check: Check, greedy_decode: Callable, case: dict, probe: bool = False, device: Any = "cpu"):
    """Run greedy_decode on a fresh scripted model: (model, src, output); see :func:`.stages.decoding.decode`."""
    src = _source(case)
    return kit.decode(
        check, greedy_decode, _script(case), case["vocab_size"], src, case["max_len"], case["bos_id"], case["eos_id"],
        case["pad_id"], max_len=case["max_len"], pad_id=case["pad_id"], what=check.exercise, probe=probe,
        device=device, **case.get("extra", {}), runaway=(
            f"{_setup(case, src)} A sentence that never emits eos_id must stop when ys has max_len columns (BOS "
            f"included): loop `while ys.size(1) < max_len and not finished.all()`, or `for _ in range(max_len - 1)` "
            f"with a `break` once every sentence has finished."))


def _check_second_batch(check: Check, greedy_decode: Callable, case: dict) -> None:
    """The same model, then a second batch of the same shape: nothing carries over (lesson 06 translates so)."""
    src = _source(case)
    model = _model(case, src.shape[0])

    def right(out: Any, other: torch.Tensor) -> bool:
        want = _expected(case, other, model)
        return isinstance(out, torch.Tensor) and out.shape == want.shape and torch.equal(out.cpu(), want)

    second_batch(check, check.exercise, greedy_decode, model, src, (case["max_len"], case["bos_id"], case["eos_id"],
                 case["pad_id"]), case.get("extra", {}), right, lambda other: _setup(case, other), "Lessons 06 to 08")


def _check_single_sentence(check: Check, greedy_decode: Callable, case: dict) -> None:
    """One sentence: it runs and returns a (1, T) LongTensor."""
    _, src, out = _decode(check, greedy_decode, case)
    _output(check, out, case, src)


def _check_batch_runs(check: Check, greedy_decode: Callable, case: dict) -> None:
    """A batch of three: crashing here but not on one sentence means the loop handles one sentence only."""
    _, src, out = _decode(check, greedy_decode, case, probe=True)
    crashes_on_a_batch(
        check, check.exercise, out, src.shape[0],
        "It should decode the whole batch at once: keep ys as a (B, T) tensor, take the argmax for every "
        "sentence (`.argmax(dim=-1)` gives shape (B,)), and avoid `.item()`, which works only for one sentence.",
    )


def _output(check: Check, out, case: dict, src: torch.Tensor) -> torch.Tensor:
    return kit.output(check, out, check.exercise, src, _setup(case, src), dtype_fix=(
        "Likely cause: ys built with torch.zeros/torch.ones/torch.full without `dtype=torch.long` (or `.float()` "
        "somewhere). `argmax` already returns long, and `torch.cat` of float and long gives float."))


# --------------------------------------------------------------------------
# What the recorded calls and the output say, one mechanism at a time.


def _diagnose(check: Check, model: ScriptedModel, src: torch.Tensor, out: torch.Tensor, case: dict,
              ok: Callable[[str], None]) -> None:
    expected = _expected(case, src, model)
    sentences = model.sentences(src)
    setup = _setup(case, src)
    ok(_check_encoding(check, model, src, sentences, setup))
    seen = _check_prefixes(check, model, sentences, setup)
    ok("gives model.decode the whole prefix, one token longer at each step")
    ok(_check_first_column(check, out, expected, case, setup))
    _check_pad_is_a_token(check, out, expected, case, setup)
    ok(_check_tokens(check, model, out, expected, sentences, case, setup))
    ok(_check_padding(check, out, expected, case, setup))
    ok(_check_stopping(check, out, expected, seen, setup))


#: the known slips, tried on every case: an eos id written into the code (the sentences end at that token instead)
SLIPS = tuple(Slip(f"eos written as {constant}", Diagnosis(
    f"ends a sentence when it produces the token {constant}, not eos_id",
    "Compare with the `eos_id` argument, whatever the vocabulary numbers its specials."), dict(stop_id=constant))
    for constant in (0, 1, 2, 3))


def _eos_written_in(check: Check, runs: list) -> None:
    """The slip of :data:`SLIPS` whose replay gives the learner's output on every case, and shows on one."""
    def replay(slip: Slip) -> tuple[int, list[torch.Tensor]]:
        return slip.mutant["stop_id"], [slip.replay(lambda stop_id: _expected(case, src, model, stop_id))
                                        for model, src, _, case in runs]

    def shows(stop: int, wrong: torch.Tensor, model: ScriptedModel, src: torch.Tensor, case: dict) -> bool:
        """The sentences end at ``stop`` in the replay, which the contract's output does not."""
        return not torch.equal(wrong, _expected(case, src, model)) and any(
            a == stop and z == case["pad_id"] for row in wrong.tolist() for a, z in zip(row, row[1:]))

    def agrees(replayed: tuple[int, list[torch.Tensor]]) -> bool:
        stop, wrongs = replayed
        return all(out.shape == wrong.shape and torch.equal(out.cpu(), wrong) for wrong, (_, _, out, _) in
                   zip(wrongs, runs)) and any(shows(stop, wrong, *run[:2], run[3]) for wrong, run in zip(wrongs, runs))

    slip = matching_slip(SLIPS, replay, agrees)
    if slip is not None:
        stop, wrongs = replay(slip)
        model, src, out, case = next(run for wrong, run in zip(wrongs, runs) if shows(stop, wrong, *run[:2], run[3]))
        check.fail(f"Your {check.exercise} {slip.says.cause} = {case['eos_id']} {_setup(case, src)}: the id of <eos> "
                   f"is written into the code. {slip.says.fix}\n{_shown(_expected(case, src, model), out)}")


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's greedy_decode (for the generated catalogue tests)."""
    return slip.replay(lambda stop_id: kit.sampler(lambda logits, *_: logits.argmax(-1), stop_id=stop_id))


def _unrecorded(description: str) -> None:
    """Stands in for check.ok on the cases before the last."""


def _shown(expected: torch.Tensor, out: torch.Tensor, b: int = -1) -> str:
    which = f"sentence {b}" if b >= 0 else "last sentence"
    return f"  expected: {_row(expected[b].tolist())}\n  actual:   {_row(out[b].tolist())}  ({which})"


def _check_encoding(check: Check, model: ScriptedModel, src: torch.Tensor, sentences: list, setup: str) -> str:
    """The encoder runs once for the whole batch."""
    kit.encoded_once(check, model, sentences, check.exercise, setup)
    return "encodes the whole batch once"


def _check_prefixes(check: Check, model: ScriptedModel, sentences: list, setup: str) -> list[list[int]]:
    """The decoder sees the whole prefix, one token longer at each step (followed sentence by sentence, so
    that decoding the sentences one at a time, or dropping finished ones from the batch, is fine too)."""
    lengths = [len(call[0][1]) for call in model.rows]
    if model.misaligned:
        check.fail(
            f"In {model.misaligned} rows given to model.decode, memory and src belong to different sentences "
            f"{setup}. Give model.decode the memory of the very sentences of src: memory = model.encode(src), "
            f"and the same rows of both (memory[rows] with src[rows])."
        )
    if len(lengths) > 1 and all(length == 1 for length in lengths):
        check.fail(
            f"Every call to model.decode received a single token {setup}: you feed back only the last token. "
            f"The decoder must see the whole prefix, BOS first: append each new token to ys "
            f"(`torch.cat([ys, next_token], dim=1)`) and pass all of ys at every step."
        )
    seen: list[list[int]] = [[] for _ in sentences]
    for call, length in zip(model.rows, lengths):
        for sentence, _ in call:
            if sentence not in sentences:
                check.fail(
                    f"model.decode received a source sentence that is not in the batch, {_row(list(sentence))} "
                    f"(padding left out) {setup}. Pass src itself (or rows of it) as the third argument."
                )
            seen[sentences.index(sentence)].append(length)
    for steps in seen:
        if steps != list(range(1, len(steps) + 1)):
            shown_lengths = lengths if all(len(call) == len(sentences) for call in model.rows) else steps
            check.fail(
                f"The prefixes given to model.decode had lengths {shown_lengths} {setup}; they should be 1, 2, 3, "
                f"...: start from ys = BOS alone (one column) and append exactly one token per step."
            )
    return seen


def _check_first_column(check: Check, out: torch.Tensor, expected: torch.Tensor, case: dict, setup: str) -> str:
    """Column 0 is BOS, and the output respects the length limit."""
    bos, max_len, t = case["bos_id"], case["max_len"], out.shape[1]
    if t > max_len:
        check.fail(
            f"The output has {t} columns, more than max_len = {max_len} {setup}.\n"
            f"max_len counts BOS: the loop may add at most max_len - 1 tokens after it."
        )
    if t == 0 or not bool((out[:, 0] == bos).all()):
        first = out[:, 0].tolist() if t else []
        cause = "Column 0 of the output should be bos_id"
        if t and first == expected[:, 1].tolist():
            cause += ": your output starts with the first generated token. Return ys with its BOS column"
        elif t and len(set(first)) == 1:
            cause += f" ({bos}), yours is {first[0]}: use the bos_id argument, not a fixed id"
        check.fail(f"{cause} {setup}.\n{_shown(expected, out)}")
    return "column 0 is bos_id and T <= max_len"


def _check_pad_is_a_token(check: Check, out: torch.Tensor, expected: torch.Tensor, case: dict, setup: str) -> None:
    """A pad_id the model chooses in mid-sentence is a token like any other: only eos_id ends a sentence."""
    eos, pad = case["eos_id"], case["pad_id"]
    for b, (mine, want) in enumerate(zip(out.tolist(), expected.tolist())):
        for j in range(1, len(want) - 1):
            ends = eos in want and want.index(eos) < j
            if want[j] != pad or ends or all(t == pad for t in want[j + 1:]):
                continue  # not a pad_id in mid-sentence
            if mine[: j + 1] == want[: j + 1] and all(t == pad for t in mine[j + 1:]):
                check.fail(
                    f"Sentence {b}: the model chose pad_id ({pad}) as token {j}, in mid-sentence, and your "
                    f"{check.exercise} took it as the end of the sentence {setup}. A trained model can choose pad_id; "
                    f"only eos_id ends a sentence: keep the pad_id like any token and go on decoding (mark a "
                    f"sentence finished when it emits eos_id, `finished |= next_token == eos_id`).\n"
                    f"{_shown(expected, out, b)}"
                )
            break


def _check_tokens(check, model, out, expected, sentences, case, setup) -> str:
    """Each token is the argmax at the last position of the prefix before it, until EOS."""
    eos, pad = case["eos_id"], case["pad_id"]
    for b, row in enumerate(out.tolist()):
        for j in range(1, len(row)):
            prefix = row[:j]
            if eos in prefix:
                break
            want = _next_token(prefix, sentences[b], case)
            if row[j] == want:
                continue
            if row[j] == _next_token(prefix[:1], sentences[b], case) and j > 1:
                cause = (
                    "it is the argmax at the FIRST position of the decoder output. The prediction for the next "
                    "token is at the last position: `logits[:, -1, :]`, then `.argmax(dim=-1)`."
                )
            else:
                cause = (
                    "it is not the argmax of the logits at the last position. Take `logits[:, -1, :]` (shape (B, V)) "
                    "and its argmax over the vocabulary axis, `dim=-1`."
                )
                if row[j] == pad and want == eos:
                    cause = (
                        "the model's choice here is eos_id, and your output has pad_id in its place: the EOS itself "
                        "was overwritten with padding. Write pad_id only where a sentence had finished BEFORE this "
                        "step: first `next_token.masked_fill(finished, pad_id)`, then `finished |= next_token == "
                        "eos_id` (the other order pads the EOS away)."
                    )
                elif row[j] == pad:
                    cause += " (Your token is pad_id: only the sentences that already emitted EOS get padding.)"
            check.fail(
                f"Sentence {b}, position {j}: after the prefix {_row(prefix)} the model's choice is {want}, but "
                f"your output has {row[j]} {setup}:\n{cause}\n{_shown(expected, out, b)}"
            )
    return "each token is the argmax at the last position of the prefix before it"


def _check_padding(check: Check, out: torch.Tensor, expected: torch.Tensor, case: dict, setup: str) -> str:
    """After EOS: padding only; without EOS: on to max_len."""
    eos, pad, max_len, t = case["eos_id"], case["pad_id"], case["max_len"], out.shape[1]
    for b, row in enumerate(out.tolist()):
        if eos in row:
            k = row.index(eos)
            after = row[k + 1 :]
            if any(x != pad for x in after):
                extra = ""
                if all(x == 0 for x in after) and pad != 0:
                    extra = f" Your padding is 0: use the pad_id argument ({pad}), not a fixed id."
                elif after and after[0] == pad and any(x != pad for x in after):
                    extra = (" The first position after EOS is padded and a later one is not: your `finished` "
                             "flag forgets the sentence after one step (`finished = next_token == eos_id` instead of "
                             "`finished |= next_token == eos_id`): once finished, a sentence stays finished.")
                check.fail(
                    f"Sentence {b} emitted EOS at position {k}, so every later position should be pad_id = {pad}, "
                    f"but your output continues with {_row(after)} {setup}.{extra}\n"
                    f"Keep a boolean `finished` per sentence (set when it emits eos_id) and write pad_id where it "
                    f"is set, then stop the loop once every sentence has finished.\n{_shown(expected, out, b)}"
                )
        elif t < max_len:
            early = t == max_len - 1 and all(row[-1] != eos for row in out.tolist())  # no EOS just before the
            # stop, so no "stop at the first finished sentence": the loop's bound is one short
            check.fail(
                f"Sentence {b} has not emitted EOS, yet decoding stopped after {t} column{'s' if t != 1 else ''}, "
                f"before max_len = {max_len} {setup}. " + (
                    "No sentence had just finished, so the loop's bound ends one step early: ys may have max_len "
                    "columns, BOS included (`while ys.size(1) < max_len`, or `for _ in range(max_len - 1)`)."
                    if early else "Stop when EVERY sentence has finished (`finished.all()`), not the first one, and "
                    "let the loop run until T == max_len otherwise.") + f"\n{_shown(expected, out, b)}"
            )
    return "pads every position after EOS"


def _check_stopping(check: Check, out: torch.Tensor, expected: torch.Tensor, seen: list, setup: str) -> str:
    """Stop as soon as every sentence has finished."""
    t, wanted = out.shape[1], expected.shape[1]
    if t > wanted:
        check.fail(
            f"Your output has {t} columns, but every sentence had emitted EOS after {wanted} "
            f"{setup}: the extra columns hold only padding. Stop the loop as soon as every sentence has finished "
            f"(for example `if finished.all(): break`).\n{_shown(expected, out)}"
        )
    if t < wanted:
        check.fail(f"Your output stops after {t} columns, but it should have {wanted} {setup}.\n{_shown(expected, out)}")
    calls = max(len(steps) for steps in seen)
    if calls > wanted - 1:
        check.fail(
            f"model.decode was called {calls} times, but every sentence had finished after "
            f"{wanted - 1} steps {setup}. Stop the loop as soon as all sentences have emitted EOS: "
            f"each extra step runs the whole decoder for nothing."
        )
    if not torch.equal(out, expected):
        check.fail(f"The output of {check.exercise} is not the greedy decoding of the model {setup}.\n"
                   f"  expected: {fmt_values(expected, 40)}\n  actual:   {fmt_values(out, 40)}")
    return "stops as soon as every sentence has emitted EOS (or at max_len)"


# --------------------------------------------------------------------------
# Gradients and devices: what lesson 06 (and a GPU) need beyond the right tokens.


def _check_device(check: Check, greedy_decode: Callable, case: dict) -> None:
    """Decode on a pretend GPU (and on a real one, if there is one): every tensor must follow src's device."""
    kit.on_gpu(check, lambda device, probe: _decode(check, greedy_decode, case, probe, device)[2], check.exercise,
               "`torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)`, `torch.zeros(B, dtype=torch.bool, "
               "device=src.device)` (or `src.new_full(...)`, `src.new_zeros(...)`)", code=greedy_decode)


GREEDY_DECODE = Exercise(
    "greedy_decode", _check_greedy_decode,
    oracle="the scripted model's own argmax, replayed on the learner's output; its recorded calls name what went wrong",
    cases="five fixed batches (other special ids, sentences ending at different steps or never, a pad_id chosen in "
          "mid-sentence, max_len 1) and one drawn from the check's seed; a second batch on the same model; a pretend GPU",
    slips=SLIPS, answer=_as_answer)


__all__ = ["GREEDY_DECODE", "SLIPS", "check_greedy_decode", "greedy_stages"]
