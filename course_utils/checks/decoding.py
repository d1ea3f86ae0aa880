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
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ._core import Check, CheckResult, describe, fmt_shape, fmt_values, run_check

_WIDTH = 3  # features of the scripted memory


def _next_token(prefix: list[int], src_row: tuple[int, ...], ordinary: list[int], eos_id: int) -> int:
    """The scripted model's choice after ``prefix``: EOS once the prefix has src_row[0] tokens.

    ``src_row`` holds the source sentence without its padding, so that (like a real model with a
    padding mask) the choice does not depend on how much padding the sentence carries.
    """
    if len(prefix) == src_row[0]:
        return eos_id
    mix = 17 + 13 * sum(src_row)
    for token in prefix:
        mix = (mix * 31 + token + 1) % 1_000_003
    return ordinary[mix % len(ordinary)]


class _ScriptedTransformer(nn.Module):
    """Stands in for a trained Transformer: deterministic, causal, and it records how it is called."""

    def __init__(self, vocab_size: int, bos_id: int, eos_id: int, pad_id: int):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # so that next(model.parameters()) works
        self.vocab_size, self.eos_id, self.pad_id = vocab_size, eos_id, pad_id
        self.ordinary = [t for t in range(vocab_size) if t not in (bos_id, eos_id, pad_id)]
        self.encode_calls = 0
        self.encoded: list[tuple[int, ...]] = []  # the sentences encoded, one entry per row
        self.decode_lengths: list[int] = []
        self.decoded: list[list[tuple[int, ...]]] = []  # the sentences in each decode call

    def sentence(self, row: list[int]) -> tuple[int, ...]:
        """A source row without its padding: what identifies the sentence."""
        return tuple(int(t) for t in row if t != self.pad_id)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        self.encode_calls += 1
        if not isinstance(src, torch.Tensor) or src.dim() != 2:
            raise ValueError(f"model.encode(src) expects the source batch (B, S), got {describe(src)}")
        self.encoded += [self.sentence(row) for row in src.detach().long().tolist()]
        return src.detach().double().unsqueeze(-1).expand(-1, -1, _WIDTH).float() + 0.0 * self.anchor

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        if not isinstance(tgt, torch.Tensor) or tgt.dim() != 2:
            raise ValueError(
                f"model.decode(tgt, memory, src) expects tgt of shape (B, L), the tokens so far; got {describe(tgt)}"
            )
        if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"model.decode(tgt, memory, src) expects src, the source batch (B, S), as its third argument "
                f"(and memory = model.encode(src) as its second); got {describe(src)} with tgt of shape "
                f"{fmt_shape(tgt.shape)}"
            )
        if src.dtype == torch.bool:
            raise ValueError(
                "model.decode(tgt, memory, src) expects src, the source token ids (B, S), as its third argument, "
                "not a mask: the model builds its masks itself"
            )
        wanted = src.detach().double().unsqueeze(-1).expand(-1, -1, _WIDTH)
        if (
            not isinstance(memory, torch.Tensor)
            or tuple(memory.shape) != tuple(wanted.shape)
            or not torch.equal(memory.detach().double(), wanted)
        ):
            raise ValueError(
                "model.decode(tgt, memory, src) expects memory = model.encode(src) as its second argument; "
                f"got {describe(memory)}"
            )
        self.decode_lengths.append(int(tgt.shape[1]))
        batch, length = tgt.shape
        tokens = tgt.detach().long().tolist()
        sources = [self.sentence(row) for row in src.detach().long().tolist()]
        self.decoded.append(sources)
        logits = torch.zeros(batch, length, self.vocab_size)
        ramp = torch.arange(self.vocab_size, dtype=torch.float32)
        for b in range(batch):
            for j in range(length):
                choice = _next_token(tokens[b][: j + 1], sources[b], self.ordinary, self.eos_id)
                logits[b, j] = ((ramp * 7 + 3 * j + b) % self.vocab_size) / self.vocab_size
                logits[b, j, choice] += 4.0
        return logits + 0.0 * self.anchor  # (B, L, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src), src)


# Each case: vocab size, special ids, max_len, and per sentence the prefix length at which it emits EOS
# (0: never within max_len). The source rows carry that length as their first token.
_CASES = [
    {"vocab_size": 10, "bos_id": 1, "eos_id": 2, "pad_id": 0, "max_len": 8, "stops": [5]},
    {"vocab_size": 12, "bos_id": 7, "eos_id": 3, "pad_id": 9, "max_len": 9, "stops": [3, 6, 0]},
    {"vocab_size": 11, "bos_id": 4, "eos_id": 8, "pad_id": 5, "max_len": 12, "stops": [7, 4]},
]


def _source(case: dict) -> torch.Tensor:
    rows = []
    for b, stop in enumerate(case["stops"]):
        row = [stop if stop else 99, 3 + b, 6 + b * b, 2 * b + 1, 4]  # (S,) with S = 5
        if b % 2:  # every other sentence is shorter, padded on the right as in a real batch
            row[-2:] = [case["pad_id"]] * 2
        rows.append(row)
    return torch.tensor(rows)  # (B, S)


def _expected(case: dict, src: torch.Tensor, model: _ScriptedTransformer) -> torch.Tensor:
    """Greedy decoding replayed with the scripted model's rule."""
    ordinary = model.ordinary
    rows = [[case["bos_id"]] for _ in case["stops"]]
    done = [False] * len(rows)
    sources = [model.sentence(row) for row in src.tolist()]
    while len(rows[0]) < case["max_len"] and not all(done):
        for b, row in enumerate(rows):
            if done[b]:
                row.append(case["pad_id"])
            else:
                row.append(_next_token(row, sources[b], ordinary, case["eos_id"]))
                done[b] = row[-1] == case["eos_id"]
    return torch.tensor(rows)


def _setup(case: dict, src: torch.Tensor) -> str:
    return (
        f"(B={src.shape[0]}, max_len={case['max_len']}, bos_id={case['bos_id']}, eos_id={case['eos_id']}, "
        f"pad_id={case['pad_id']})"
    )


def _row(values: list[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


# --------------------------------------------------------------------------


def check_greedy_decode(greedy_decode: Callable) -> CheckResult:
    """Check ``greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)`` on a scripted model."""
    return run_check("greedy_decode", _check_greedy_decode, greedy_decode)


class _Raised:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _run(check: Check, greedy_decode: Callable, case: dict, catch: bool):
    model = _ScriptedTransformer(case["vocab_size"], case["bos_id"], case["eos_id"], case["pad_id"])
    src = _source(case)

    def greedy_decode_(model, src, max_len, bos_id, eos_id, pad_id):
        try:
            return greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)
        except NotImplementedError:
            raise
        except Exception as exc:
            if not catch:
                raise
            return _Raised(exc)

    out = check.call(
        greedy_decode_, model, src, case["max_len"], case["bos_id"], case["eos_id"], case["pad_id"], what="greedy_decode"
    )
    return model, src, out


def _check_greedy_decode(check: Check, greedy_decode: Callable) -> None:
    check.callable_(greedy_decode, "greedy_decode")

    # 1. One sentence: it runs and returns a (1, T) LongTensor.
    single = _CASES[0]
    model, src, out = _run(check, greedy_decode, single, catch=False)
    _output(check, out, single, src)
    check.ok("returns a LongTensor (B, T)")

    # 2. A batch of three: crashing here but not above means the loop handles one sentence only.
    batch = _CASES[1]
    _, src_b, out_b = _run(check, greedy_decode, batch, catch=True)
    if isinstance(out_b, _Raised):
        exc = out_b.exc
        text = str(exc).strip().splitlines()
        check.fail(
            f"greedy_decode works for one sentence but crashes on a batch of {src_b.shape[0]}: "
            f"{type(exc).__name__}" + (f": {text[0]}" if text else "") + ".\n"
            "It should decode the whole batch at once: keep ys as a (B, T) tensor, take the argmax for every "
            "sentence (`.argmax(dim=-1)` gives shape (B,)), and avoid `.item()`, which works only for one sentence."
        )

    # 3. Every case, one mechanism at a time.
    for case in _CASES:
        model, src, out = _run(check, greedy_decode, case, catch=False)
        out = _output(check, out, case, src)
        _diagnose(check, model, src, out, case)
    check.ok("decodes a batch of sentences that end at different steps, with special ids other than 0, 1, 2")


def _output(check: Check, out, case: dict, src: torch.Tensor) -> torch.Tensor:
    n = src.shape[0]
    out = check.tensor(out, "the output of greedy_decode", finite=False)
    if out.dtype != torch.long:
        check.fail(
            f"The output of greedy_decode has dtype {out.dtype}, but token ids should be torch.long (int64).\n"
            f"Likely cause: ys built with torch.zeros/torch.ones/torch.full without `dtype=torch.long` (or "
            f"`.float()` somewhere). `argmax` already returns long, and `torch.cat` of float and long gives float."
        )
    if out.dim() != 2 or out.shape[0] != n:
        check.fail(
            f"The output of greedy_decode should have shape (B, T) with B = {n} (one row per source sentence), "
            f"but it has shape {fmt_shape(out.shape)} {_setup(case, src)}."
            + ("\nKeep the batch dimension, even for a single sentence." if out.dim() == 1 else "")
        )
    return out


def _diagnose(check: Check, model: _ScriptedTransformer, src: torch.Tensor, out: torch.Tensor, case: dict) -> None:
    setup = _setup(case, src)
    bos, eos, pad, max_len = case["bos_id"], case["eos_id"], case["pad_id"], case["max_len"]
    expected = _expected(case, src, model)
    sentences = [model.sentence(row) for row in src.tolist()]

    def shown(b: int = -1) -> str:
        which = f"sentence {b}" if b >= 0 else "last sentence"
        return f"  expected: {_row(expected[b].tolist())}\n  actual:   {_row(out[b].tolist())}  ({which})"

    # The encoder runs once per sentence (normally one call for the whole batch).
    if model.encode_calls == 0:
        check.fail(
            f"greedy_decode never called model.encode(src) {setup}. Encode the source once, before the loop, "
            f"and pass the result to every model.decode(ys, memory, src)."
        )
    if model.encode_calls == 1 and sorted(model.encoded) != sorted(sentences):
        check.fail(
            f"model.encode received other sentences than the ones in src {setup}. Encode the source batch "
            f"itself: memory = model.encode(src)."
        )
    if sorted(model.encoded) != sorted(sentences):
        check.fail(
            f"greedy_decode called model.encode {model.encode_calls} times for one batch {setup}; it should call "
            f"it once. The source does not change while decoding, so compute memory = model.encode(src) before "
            f"the loop and reuse it (calling model(src, ys) in the loop runs the encoder again at every step)."
        )
    if model.encode_calls != 1:
        check.fail(
            f"greedy_decode encodes the sentences one at a time ({model.encode_calls} calls of model.encode for a "
            f"batch of {src.size(0)}) {setup}. The exercise asks for batched decoding: encode the whole batch once "
            f"with memory = model.encode(src), then extend every sentence by one token per step, all together."
        )
    check.ok("encodes the whole batch once")

    # The decoder sees the whole prefix, one token longer at each step (followed sentence by sentence, so
    # that decoding the sentences one at a time, or dropping finished ones from the batch, is fine too).
    lengths = model.decode_lengths
    if len(lengths) > 1 and all(length == 1 for length in lengths):
        check.fail(
            f"Every call to model.decode received a single token {setup}: you feed back only the last token. "
            f"The decoder must see the whole prefix, BOS first: append each new token to ys "
            f"(`torch.cat([ys, next_token], dim=1)`) and pass all of ys at every step."
        )
    seen: list[list[int]] = [[] for _ in sentences]
    for call, length in zip(model.decoded, lengths):
        for sentence in call:
            if sentence not in sentences:
                check.fail(
                    f"model.decode received a source sentence that is not in the batch, {_row(list(sentence))} "
                    f"(padding left out) {setup}. Pass src itself (or rows of it) as the third argument."
                )
            seen[sentences.index(sentence)].append(length)
    for b, steps in enumerate(seen):
        if steps != list(range(1, len(steps) + 1)):
            shown_lengths = lengths if all(len(call) == len(sentences) for call in model.decoded) else steps
            check.fail(
                f"The prefixes given to model.decode had lengths {shown_lengths} {setup}; they should be 1, 2, 3, "
                f"...: start from ys = BOS alone (one column) and append exactly one token per step."
            )
    check.ok("gives model.decode the whole prefix, one token longer at each step")

    # Column 0, the length limit.
    t = out.shape[1]
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
        check.fail(f"{cause} {setup}.\n{shown()}")
    check.ok("column 0 is bos_id and T <= max_len")

    # Each token is the argmax at the last position of the prefix before it, until EOS.
    tokens = out.tolist()
    for b, row in enumerate(tokens):
        for j in range(1, len(row)):
            prefix = row[:j]
            if eos in prefix:
                break
            want = _next_token(prefix, sentences[b], model.ordinary, eos)
            if row[j] == want:
                continue
            at_first = _next_token(prefix[:1], sentences[b], model.ordinary, eos)
            if row[j] == at_first and j > 1:
                cause = (
                    "it is the argmax at the FIRST position of the decoder output. The prediction for the next "
                    "token is at the last position: `logits[:, -1, :]`, then `.argmax(dim=-1)`."
                )
            else:
                cause = (
                    "it is not the argmax of the logits at the last position. Take `logits[:, -1, :]` (shape (B, V)) "
                    "and its argmax over the vocabulary axis, `dim=-1`."
                )
                if row[j] == pad:
                    cause += " (Your token is pad_id: only the sentences that already emitted EOS get padding.)"
            check.fail(
                f"Sentence {b}, position {j}: after the prefix {_row(prefix)} the model's choice is {want}, but "
                f"your output has {row[j]} {setup}:\n{cause}\n{shown(b)}"
            )
    check.ok("each token is the argmax at the last position of the prefix before it")

    # After EOS: padding only.
    for b, row in enumerate(tokens):
        if eos in row:
            k = row.index(eos)
            after = row[k + 1 :]
            if any(x != pad for x in after):
                extra = ""
                if all(x == 0 for x in after) and pad != 0:
                    extra = f" Your padding is 0: use the pad_id argument ({pad}), not a fixed id."
                check.fail(
                    f"Sentence {b} emitted EOS at position {k}, so every later position should be pad_id = {pad}, "
                    f"but your output continues with {_row(after)} {setup}.{extra}\n"
                    f"Keep a boolean `finished` per sentence (set when it emits eos_id) and write pad_id where it "
                    f"is set, then stop the loop once every sentence has finished.\n{shown(b)}"
                )
        elif t < max_len:
            check.fail(
                f"Sentence {b} has not emitted EOS, yet decoding stopped after {t} column{'s' if t != 1 else ''}, "
                f"before max_len = {max_len} {setup}. Stop when EVERY sentence has finished (`finished.all()`), "
                f"not the first one, and let the loop run until T == max_len otherwise.\n{shown(b)}"
            )
    check.ok("pads every position after EOS")

    # Stop as soon as every sentence has finished.
    if t > expected.shape[1]:
        check.fail(
            f"Your output has {t} columns, but every sentence had emitted EOS after {expected.shape[1]} "
            f"{setup}: the extra columns hold only padding. Stop the loop as soon as every sentence has finished "
            f"(for example `if finished.all(): break`).\n{shown()}"
        )
    if t < expected.shape[1]:
        check.fail(f"Your output stops after {t} columns, but it should have {expected.shape[1]} {setup}.\n{shown()}")
    calls = max(len(steps) for steps in seen)
    if calls > expected.shape[1] - 1:
        check.fail(
            f"model.decode was called {calls} times, but every sentence had finished after "
            f"{expected.shape[1] - 1} steps {setup}. Stop the loop as soon as all sentences have emitted EOS: "
            f"each extra step runs the whole decoder for nothing."
        )
    if not torch.equal(out, expected):
        check.fail(f"The output of greedy_decode is not the greedy decoding of the model {setup}.\n"
                   f"  expected: {fmt_values(expected, 40)}\n  actual:   {fmt_values(out, 40)}")
    check.ok("stops as soon as every sentence has emitted EOS (or at max_len)")


__all__ = ["check_greedy_decode"]
