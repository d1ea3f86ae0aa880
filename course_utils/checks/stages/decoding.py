"""Scripted stand-ins for a trained Transformer: the model that decoding checkers drive.

:class:`ScriptedModel` offers what the decoding contract allows and no more:
``encode(src)``, ``decode(tgt, memory, src)``, ``forward(src, tgt)`` and what any
``nn.Module`` has (``eval``, ``train``, ``parameters``), as lesson 07's
``CachedDecoder`` does. Its next-token logits come from a *script*: any
function of the sentence (the source row without its padding) and the prefix
(BOS first) that returns ``(V,)`` logits. Every position of a prefix gets the
script's prediction after the tokens up to it, as a causal model's would.

Like a real model, it reads the sentence from ``memory`` (``src`` only gives
the padding), so memory and src rows that belong to different sentences are
counted. It is handed over in eval mode, as the lessons decode, and records
every encoded sentence and every decoded row (sentence, prefix), the calls made
with gradients on or in training mode, and refuses, with a
:class:`Runaway` that a learner's ``except Exception`` cannot swallow, to go
on past a bound tied to ``max_len``. It can live on the pretend GPU of
:mod:`.gpu`. :func:`run_decoder` runs a learner's search on it and turns a
runaway into a failure; :func:`follow` scripts a model to emit given tokens.

What every decoding checker (greedy decoding, beam search, sampling) shares is here once: :func:`decode` (a
fresh scripted model, on the CPU, the pretend GPU or a real device, and the learner's function run on it),
:func:`setup` and :func:`row` (how a call and a row are shown), :func:`source` (a padded source batch),
:func:`output` (a LongTensor (B, T)), :func:`encoded_once`, :func:`without_grad` (no gradients, the model's mode
left alone), :func:`on_gpu` (the device stages), :func:`second_batch`.

For sampling (lesson 07's ``sample_decode``, and any exercise that draws its tokens): :func:`sampler` (greedy
decoding's loop, drawing its tokens however it is told: the reference a slip is made into an answer from, by
:func:`sampling_answer`), :class:`KnownLogits` (a sentence whose logits the checker knows: the distribution of
each step, the frequencies of the tokens drawn against it (:func:`misfit`), the generator drawn from
(:func:`generator_use`, with the known :func:`generator_slips`)), and :func:`rejects` (an argument outside its
domain raises).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from . import gpu as _gpu
from .devices import decoder_on_gpu
from .._core import Check, Raised, describe, fmt_shape, generator, seed_offset
from ..slips import Diagnosis, Slip, matching_slip

#: features of the scripted memory (each holds the source token)
WIDTH = 3
Script = Callable[[tuple, tuple], torch.Tensor]


class Runaway(BaseException):
    """The scripted model's answer to a loop that does not stop (a BaseException: `except Exception` cannot hide it)."""


def mix(*numbers: int) -> float:
    """A deterministic pseudo-random number in [0, 1) from integers."""
    h = 1_000_003
    for n in numbers:
        h = (h * 7919 + int(n) + 17) % 2_147_483_647
        h = (h * 48271) % 2_147_483_647
    return h / 2_147_483_647


class ScriptedModel(nn.Module):
    """Stands in for a trained Transformer, deterministic and causal, and records how it is called."""

    def __init__(self, script: Script, vocab_size: int, pad_id: int, batch: int, max_len: int,
                 pretend_device: bool = False, slack: int = 3):
        super().__init__()
        self._anchor = nn.Parameter(torch.zeros((), device="cpu"))  # so that next(model.parameters()) works
        self._script, self._vocab_size, self._pad_id = script, vocab_size, pad_id
        self._max_len, self._slack, self._pretend = max_len, slack, pretend_device
        self.max_len = max_len  # the max_len the search was given
        self._max_calls = batch * (max_len + slack)  # enough for a loop that decodes one sentence at a time
        self.encoded: list[tuple[int, ...]] = []  # the sentences encoded, one entry per row
        self.encode_calls = 0
        self.rows: list[list[tuple[tuple[int, ...], tuple[int, ...]]]] = []  # per decode call: (sentence, prefix)
        self.grad_calls = 0  # calls made while gradients were on
        self.train_calls = 0  # calls made in training mode (the search called model.train())
        self.misaligned = 0  # decoded rows whose memory and src belong to different sentences
        self.runaway = ""  # set once a loop has run past the bounds
        self.eval()  # a trained model is decoded in eval mode: lessons 06 to 09 call model.eval() first

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_"):
                raise
            raise AttributeError(
                f"the model has no attribute `{name}` here: a decoding function may use only model.encode, "
                f"model.decode, model.parameters(), model.eval()/model.train() and model.training. Lesson 07 "
                f"decodes through its CachedDecoder, which offers nothing else. Take sizes and ids from the "
                f"arguments (pad_id, eos_id, ...) and from the tensors (the vocabulary size is logits.size(-1))"
            ) from None

    @property
    def script(self) -> Script:
        """What the model predicts (for the checker's replays)."""
        return self._script

    def parameters(self, recurse: bool = True):
        yield _gpu.on_device(self._anchor) if self._pretend else self._anchor

    def sentence(self, row: Sequence[int]) -> tuple[int, ...]:
        """A source row without its padding: what identifies the sentence."""
        return tuple(int(t) for t in row if t != self._pad_id)

    def sentences(self, src: torch.Tensor) -> list[tuple[int, ...]]:
        return [self.sentence(row) for row in _gpu.plain(src).tolist()]

    def _stop(self, message: str) -> None:
        self.runaway = self.runaway or message
        raise Runaway(self.runaway)

    def _arrived(self, what: str, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """Inputs must be on the model's device (it raises as a GPU would); returns them as plain CPU tensors."""
        self.grad_calls += torch.is_grad_enabled()
        self.train_calls += self.training
        if self._pretend and not all(_gpu.is_on_device(t) for t in tensors):
            raise _gpu.DeviceMismatch(f"model.{what} received a CPU tensor while the model is on {_gpu.PRETEND}")
        if not self._pretend and any(_gpu.is_on_device(t) for t in tensors):  # a GPU tensor made on its own
            raise _gpu.DeviceMismatch(f"model.{what} received a tensor on {_gpu.PRETEND} while the model is on the CPU")
        if not self._pretend and any(t.device != self._anchor.device for t in tensors):
            raise RuntimeError(f"Expected all tensors to be on the same device as the model ({self._anchor.device})")
        return [_gpu.plain(t).detach().cpu() for t in tensors]

    def _leave(self, tensor: torch.Tensor) -> torch.Tensor:
        return _gpu.on_device(tensor) if self._pretend else tensor.to(self._anchor.device)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        self.encode_calls += 1
        if self.encode_calls > self._max_calls:
            self._stop(f"your loop called model.encode {self.encode_calls} times with max_len={self._max_len}")
        if not isinstance(src, torch.Tensor) or src.dim() != 2:
            raise ValueError(f"model.encode(src) expects the source batch (B, S), got {describe(src)}")
        (src,) = self._arrived("encode", src)
        self.encoded += self.sentences(src)
        return self._leave(src.double().unsqueeze(-1).expand(-1, -1, WIDTH).float())  # (B, S, WIDTH)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        _validate(tgt, memory, src)
        calls = len(self.rows) + 1
        if calls > self._max_calls or tgt.shape[1] > self._max_len + self._slack:
            self._stop(f"your loop called model.decode {calls} times with max_len={self._max_len}"
                       + (f" (the last prefix had {tgt.shape[1]} tokens)" if tgt.shape[1] > self._max_len else "")
                       + ": it does not stop at max_len (the output, BOS included, has at most max_len columns, "
                         "so at most max_len - 1 decoding steps per sentence)")
        tgt, memory, src = self._arrived("decode", tgt, memory, src)
        from_memory = [self.sentence(row) for row in memory[..., 0].round().long().tolist()]
        self.misaligned += sum(a != b for a, b in zip(from_memory, self.sentences(src)))
        tokens = tgt.long().tolist()
        self.rows.append([(s, tuple(row)) for s, row in zip(from_memory, tokens)])
        logits = torch.stack([torch.stack([self._script(s, tuple(row[: j + 1])) for j in range(len(row))])
                              for s, row in zip(from_memory, tokens)])  # (B, L, V)
        return self._leave(logits.float())

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src), src)

    # -- what the records say ------------------------------------------------

    def history(self, sentence: tuple[int, ...]) -> list[set[tuple[int, ...]]]:
        """The prefixes decoded for one sentence, by length (index 0: length 1)."""
        steps: dict[int, set[tuple[int, ...]]] = {}
        for call in self.rows:
            for s, prefix in call:
                if s == sentence:
                    steps.setdefault(len(prefix), set()).add(prefix)
        return [steps.get(n, set()) for n in range(1, max(steps, default=0) + 1)]


def _validate(tgt: Any, memory: Any, src: Any) -> None:
    """Name an argument given in the wrong place, as the real model would crash on it."""
    if not isinstance(tgt, torch.Tensor) or tgt.dim() != 2:
        raise ValueError(f"model.decode(tgt, memory, src) expects tgt of shape (B, L), the tokens so far; got {describe(tgt)}")
    if isinstance(src, torch.Tensor) and src.dtype == torch.bool:
        raise ValueError("model.decode(tgt, memory, src) expects src, the source token ids (B, S), as its third "
                         "argument, not a mask: the model builds its masks itself")
    if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.shape[0] != tgt.shape[0] or memory.shape[-1] != WIDTH:
        more = (isinstance(memory, torch.Tensor) and memory.dim() == 3 and memory.shape[-1] == WIDTH
                and memory.shape[0] > tgt.shape[0])
        raise ValueError(f"model.decode(tgt, memory, src) expects memory = model.encode(src) as its second argument, "
                         f"one row per row of tgt ({tgt.shape[0]}); got {describe(memory)}. " + (
                             "memory has more rows than tgt: when the rows of stopped sentences leave ys, index "
                             "memory (and src) with the same rows, `memory[kept_rows]`" if more else
                             "For several hypotheses per sentence, repeat it: memory.repeat_interleave(beam_size, "
                             "dim=0)"))
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.shape[0] != tgt.shape[0] or src.shape[1] != memory.shape[1]:
        raise ValueError(f"model.decode(tgt, memory, src) expects src, the source batch (B, S), as its third argument "
                         f"(and memory = model.encode(src) as its second), one row per row of tgt; got {describe(src)} "
                         f"with tgt of shape {fmt_shape(tgt.shape)}. For several hypotheses per sentence, repeat it "
                         f"like memory: src.repeat_interleave(beam_size, dim=0)")


def run_decoder(check: Check, fn: Callable, model: ScriptedModel, src: torch.Tensor, *args: Any, what: str,
                runaway: str, probe: bool = False, pretend_device: bool = False, **kwargs: Any) -> Any:
    """Run a learner's search ``fn(model, src, *args, **kwargs)``; a runaway loop fails with ``runaway`` appended.

    With ``probe`` a crash comes back as a ``Raised`` (otherwise it ends the check as an error).
    """
    def guarded(model, src, *args, **kwargs):  # the names messages show: "changed its input `src` in place"
        try:
            return fn(model, src, *args, **kwargs)
        except Runaway as exc:
            check.fail(f"{what} does not stop: {exc}.\n{runaway}")

    with contextlib.suppress(TypeError, ValueError):  # messages name the arguments as the learner's function does
        guarded.__signature__ = inspect.signature(fn)
    run = check.attempt if probe else check.call
    with _gpu.elsewhere() if pretend_device else contextlib.nullcontext():
        return run(guarded, model, _gpu.on_device(src) if pretend_device else src, *args, what=what, **kwargs)


def follow(tokens: dict[tuple[int, ...], Sequence[int]], vocab_size: int, bos_id: int) -> Script:
    """A script whose argmax after each prefix is the next of ``tokens[sentence]`` (any ids, EOS and padding too).

    Past the end of a sentence's tokens the last one repeats. The other logits are a fixed, tie-free pattern.
    """
    def script(sentence: tuple, prefix: tuple) -> torch.Tensor:
        wanted = tokens[sentence]
        choice = wanted[min(len(prefix) - 1, len(wanted) - 1)]
        logits = torch.tensor([mix(w, len(prefix), *sentence) for w in range(vocab_size)], dtype=torch.float64)
        logits[bos_id] -= 10.0
        logits[choice] += 4.0
        return logits

    return script


def crashes_on_a_batch(check: Check, name: str, out: Any, batch_size: int, advice: str) -> None:
    """Fail when a search that ran on one sentence crashed on a batch (``out`` from a probing run)."""
    if isinstance(out, Raised) and not isinstance(out.exception, NotImplementedError):
        exc = out.exception
        text = str(exc).strip().splitlines()
        where = [line.strip() for line in out.message.splitlines() if line.strip().startswith("in ")][:1]
        check.fail(
            f"{name} works for one sentence but crashes on a batch of {batch_size}: "
            f"{type(exc).__name__}" + (f": {text[0]}" if text else "") + "".join(f"\n  {w}" for w in where)
            + f".\n{advice}"
        )


def training_mode_problem(name: str, models: Sequence[ScriptedModel]) -> str | None:
    """What to say when a search ran, or left, the model it was given (in eval mode) in training mode, else None."""
    calls = sum(model.train_calls for model in models)
    if calls:
        return (f"{name} ran the model in training mode ({calls} calls of model.encode/model.decode): it calls "
                f"model.train() (or .train(True)) on the model it was given. With dropout on, every translation "
                f"comes out differently, and worse. The lessons put the model in eval mode before decoding: leave "
                f"its mode as it is, or call model.eval(), never model.train().")
    if any(model.training for model in models):
        return (f"{name} hands the model back in training mode: it was given in eval mode, and after the call "
                f"model.training is True (a model.train() at the end?). Lesson 07 puts the model in eval mode once, "
                f"then decodes and compares with it: with dropout back on, every later translation and comparison "
                f"changes at random. Leave the mode as it was given (or call model.eval() only).")
    return None


# --------------------------------------------------------------------------
# What every decoding checker shares: a call on a scripted model, and how it is shown


def setup(src: torch.Tensor, **arguments: Any) -> str:
    """How a call is shown in messages, ``(B=3, max_len=9, bos_id=7, ...)``: the arguments in the order given."""
    return f"(B={src.shape[0]}" + "".join(f", {name}={value}" for name, value in arguments.items()) + ")"


def row(values: Sequence[int]) -> str:
    """A row of token ids as messages show it: ``[1, 5, 2]``."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def source(rows: Sequence[Sequence[int]], pad_id: int, padded: int) -> torch.Tensor:
    """A source batch (B, S): every other row ends in ``padded`` pad_id, as sentences of a real batch do."""
    batch = [list(r[: len(r) - padded]) + [pad_id] * padded if b % 2 and padded else list(r)
             for b, r in enumerate(rows)]
    return torch.tensor(batch)


def decode(check: Check, fn: Callable, script: Script, vocab_size: int, src: torch.Tensor, *args: Any, max_len: int,
           pad_id: int, what: str, runaway: str, probe: bool = False, device: Any = "cpu",
           **kwargs: Any) -> tuple[ScriptedModel, torch.Tensor, Any]:
    """Run ``fn(model, src, *args, **kwargs)`` on a fresh scripted model: (model, src, output).

    ``device``: where the model and src are (None: the pretend GPU of :mod:`.gpu`). ``runaway``: what a loop that
    does not stop is told, after the model's count. With ``probe`` a crash comes back as a ``Raised``.
    """
    pretend, elsewhere = device is None, device not in (None, "cpu")  # a real device: this machine's own GPU
    src = src.to(device) if elsewhere else src
    model = ScriptedModel(script, vocab_size, pad_id, src.shape[0], max_len, pretend)
    if elsewhere:
        model.to(device)
    out = run_decoder(check, fn, model, src, *args, what=what, runaway=runaway, probe=probe, pretend_device=pretend,
                      **kwargs)
    return model, src, out


def output(check: Check, out: Any, what: str, src: torch.Tensor, shown: str, dtype_fix: str,
           rows: str = "one row per source sentence", max_len: int | None = None, beams: int = 0) -> torch.Tensor:
    """The output is a LongTensor (B, T), one row per sentence (and at most ``max_len`` columns, when given)."""
    n = src.shape[0]
    out = check.tensor(out, f"the output of {what}", finite=False)
    if out.dtype != torch.long:
        check.fail(f"The output of {what} has dtype {out.dtype}, but token ids should be torch.long (int64).\n"
                   f"{dtype_fix}")
    if out.dim() != 2 or out.shape[0] != n:
        check.fail(
            f"The output of {what} should have shape (B, T) with B = {n}, {rows}, but it has shape "
            f"{fmt_shape(out.shape)} {shown}."
            + ("\nKeep the batch dimension, even for a single sentence." if out.dim() == 1 else "")
            + ("\nReturn only the best of the beam_size hypotheses of each sentence, not all of them."
               if beams and out.dim() == 2 and out.shape[0] == n * beams else ""))
    if max_len is not None and out.shape[1] > max_len:
        check.fail(f"The output has {out.shape[1]} columns, more than max_len = {max_len} {shown}: max_len counts BOS.")
    return out


def encoded_once(check: Check, model: ScriptedModel, sentences: list, what: str, shown: str, beam_size: int = 1,
                 batched: bool = True) -> None:
    """The encoder ran once per sentence of the batch (and, when ``batched``, once for the whole batch)."""
    calls, encoded = model.encode_calls, model.encoded
    if calls == 0:
        check.fail(f"{what} never called model.encode(src) {shown}. Encode the source once, before the loop, and pass "
                   f"the result to every model.decode(ys, memory, src).")
    if calls == 1 and sorted(encoded) != sorted(sentences):
        check.fail(f"model.encode received other sentences than the ones in src {shown}. Encode the source batch "
                   f"itself: memory = model.encode(src).")
    if sorted(encoded) != sorted(sentences):
        if beam_size > 1 and len(encoded) == len(sentences) * beam_size and set(encoded) == set(sentences):
            check.fail(f"{what} encodes every sentence {beam_size} times, once per beam {shown}. Run the encoder once "
                       f"on src, then repeat its output: memory.repeat_interleave(beam_size, dim=0).")
        check.fail(f"{what} called model.encode {calls} times, encoding {len(encoded)} sentences for a batch of "
                   f"{len(sentences)} {shown}; it should call it once: the encoder should run once per sentence. The "
                   f"source does not change while decoding, so compute memory = model.encode(src) before the loop "
                   f"and reuse it (calling model(src, ys) in the loop runs the encoder again at every step).")
    if batched and calls != 1:
        check.fail(f"{what} encodes the sentences one at a time ({calls} calls of model.encode for a batch of "
                   f"{len(sentences)}) {shown}. The exercise asks for batched decoding: encode the whole batch once "
                   f"with memory = model.encode(src), then extend every sentence by one token per step, all together.")


def without_grad(check: Check, models: Sequence[ScriptedModel], what: str, shown: str = "",
                 holds: str = "runs the model without gradients (torch.no_grad)") -> None:
    """Decoding ran without gradients (``holds`` is recorded), in the mode the model was given (eval), and left it
    so."""
    calls = sum(model.grad_calls for model in models)
    if calls:
        check.fail(f"{what} ran the model with gradients on ({calls} calls of model.encode/model.decode)"
                   f"{' ' * bool(shown)}{shown}.\nDecoding needs no gradients: decorate {what} with "
                   f"`@torch.no_grad()` (or run its body inside `with torch.no_grad():`). With gradients on, every "
                   f"step keeps the whole computation graph of the decoder in memory, which on a GPU runs out of "
                   f"memory for long sentences or large batches.")
    check.ok(holds)
    problem = training_mode_problem(what, models)
    if problem:
        check.fail(problem)
    check.ok("decodes in the mode the model was given (eval): no model.train()")


def on_gpu(check: Check, run: Callable[[Any, bool], Any], what: str, creates: str, code: Any) -> None:
    """The device stages (:func:`..devices.decoder_on_gpu`) for a decoding function: ``run(device, probe)`` is its
    output with the model and src on ``device`` (None: the pretend GPU); ``creates``: how its tensors are made."""
    decoder_on_gpu(check, lambda device: run(device, device is None), what, advice=(
        f"Create every tensor on src's device: {creates}."), code=code, cpu_run=lambda: run("cpu", True))


def second_batch(check: Check, name: str, fn: Callable, model: ScriptedModel, src: torch.Tensor, args: tuple,
                 kwargs: dict, right: Callable[[Any, torch.Tensor], bool], setup: Callable[[torch.Tensor], str],
                 lessons: str) -> None:
    """The same model, then a second batch of the same shape (its sentences in reverse order): ``right(output,
    src)`` must hold for both, so nothing is kept from one call to the next."""
    first = run_decoder(check, fn, model, src, *args, what=name, runaway="", **kwargs)
    other = src.flip(0)  # (B, S): the same shape, other sentences in each row
    second = run_decoder(check, fn, model, other, *args, what=name, runaway="", **kwargs)
    if right(second, other):
        return check.ok("a second batch of the same shape, on the same model, gets its own translations")
    same = isinstance(second, torch.Tensor) and isinstance(first, torch.Tensor) and torch.equal(second, first)
    check.fail(f"{name}, called on the same model with a second batch of the same shape {setup(other)}, "
               + ("returns the first batch's translations again" if same else
                  "does not return that batch's translations, although it did for the first")
               + f": something is kept from one call to the next (a cache in a default argument or a global, keyed "
               f"by the model or the batch's shape). {lessons} translate their test sets in chunks of equal shape, "
               f"one call each: compute everything from each call's own src.")


# --------------------------------------------------------------------------
# Sampling: a reference loop, token frequencies, and the random numbers drawn


def sampler(pick: Callable[..., torch.Tensor], source: Callable[[Any], Any] = lambda g: g, position: int = -1,
            stop_id: int | None = None) -> Callable:
    """A decoding function with greedy decoding's conventions, ``fn(model, src, max_len, bos_id, eos_id, pad_id,
    temperature=1.0, top_k=None, generator=None)``, whose next tokens (B,) are ``pick(logits (B, V), temperature,
    top_k, rng, step)``, ``rng = source(generator)`` taken once per call: the reference a decoding exercise's slip
    is made into a learner's answer from. ``position``: the logits read; ``stop_id``: the id that ends a sentence
    (None: eos_id)."""
    @torch.no_grad()
    def decoder(model, src, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None, generator=None):
        if temperature <= 0:
            raise ValueError(f"the temperature must be positive, not {temperature}")
        memory, rng = model.encode(src), source(generator)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
        while not finished.all() and ys.size(1) < max_len:
            logits = model.decode(ys, memory, src)[:, position]  # (B, V)
            next_token = pick(logits, temperature, top_k, rng, ys.size(1)).masked_fill(finished, pad_id)  # (B,)
            ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, T + 1)
            finished |= next_token == (eos_id if stop_id is None else stop_id)
        return ys

    decoder.pick = pick
    return decoder


def misfit(steps: Sequence[torch.Tensor], probs: Sequence[torch.Tensor], what: str, shown: str, tests: int,
           risk: float = 1e-10, excluded: str = "") -> str:
    """The worst token frequency no correct sampler gives, said, or "" when every one fits.

    ``steps[i]``: the tokens drawn at step i + 1 (one per row still open); ``probs[i]``: their distribution (V,).
    A frequency q among n rows is rejected when n * KL(q || p) > log(2 * tests / risk) (a Chernoff bound), ``tests``
    the number of tokens tested in all (ids outside the vocabulary count as one more), so that a correct sampler
    fails with probability below ``risk``, whatever its random numbers. ``excluded``: said of a token of
    probability 0.
    """
    bound = math.log(2 * tests / risk)
    for step, (drawn, p) in enumerate(zip(steps, probs), start=1):
        n, V = len(drawn), len(p)
        p = torch.cat([p.double(), p.new_zeros(1, dtype=torch.float64)])  # index V: every id outside the vocabulary
        if n == 0:
            continue
        q = torch.bincount(drawn.cpu().masked_fill((drawn < 0) | (drawn >= V), V), minlength=V + 1).double() / n
        kl = torch.xlogy(q, q) - torch.xlogy(q, p) + torch.xlogy(1 - q, 1 - q) - torch.xlogy(1 - q, 1 - p)
        if (n * kl).max() > bound:
            w = int((n * kl).argmax())
            figures = "\n".join([f"  token    {''.join(f'{t:>7}' for t in range(V))}"] + [
                f"  {name:<9}{''.join(f'{x:7.3f}' for x in values)}" for name, values in (
                    ("expected", p[:V].tolist()), ("yours", q[:V].tolist()))])
            return (f"At step {step} {shown}, token {w if w < V else 'ids outside the vocabulary'} has probability "
                    f"{float(p[w]):.3g}" + (excluded if p[w] == 0 else "") + f", but your {what} draws it in "
                    f"{round(float(q[w]) * n)} of {n} rows (a correct sampler strays so far with probability below "
                    f"{risk:g}):\n{figures}")
    return ""


@dataclasses.dataclass(frozen=True)
class KnownLogits:
    """One sentence whose next-token logits a sampling checker knows, for a model that gives them to every row.

    ``logits[i]`` (V,) follow a prefix of i + 1 tokens; the function decodes up to ``len(logits) + 1`` columns (BOS
    included), so that every step it draws is counted.
    """

    logits: torch.Tensor
    bos_id: int
    eos_id: int
    pad_id: int

    def arguments(self, rows: int = 1) -> tuple:
        """(model, src (rows, 3), max_len, bos_id, eos_id, pad_id): the call, on a fresh model."""
        steps = len(self.logits)
        model = ScriptedModel(lambda sentence, prefix: self.logits[min(len(prefix), steps) - 1], len(self.logits[0]),
                              self.pad_id, rows, max_len=steps + 1)
        return model, torch.tensor([[5, 6, 3]] * rows), steps + 1, self.bos_id, self.eos_id, self.pad_id

    def run(self, check: Check, fn: Callable, what: str, rows: int, **kwargs: Any) -> Any:
        return run_decoder(check, fn, *self.arguments(rows), what=what, runaway="", hint=lambda e: (
            "exp(logits / temperature) overflows: use torch.softmax (or subtract the largest logit first)"
            if "inf" in str(e) else ""), **kwargs)

    def distributions(self, values: dict, probs: Callable[..., torch.Tensor], **flags: Any) -> list[torch.Tensor]:
        """The distribution (V,) of each step, ``probs(logits, **values, step=step)``: a sampling exercise's oracle.
        Its slips are flags: ``probs`` (another distribution) or ``source`` (another generator, ignored here)."""
        return [probs(logits, **values, step=step) for step, logits in enumerate(self.logits, start=1)]

    def frequencies(self, check: Check, fn: Callable, what: str, cases: Sequence[dict], probs: Callable[..., Any],
                    slips: Sequence[Slip], holds: str, rows: int = 2000, excluded: str = "", seed: int = 7) -> str:
        """``fn`` on ``rows`` copies of the sentence, once per case (its keyword arguments, and a ``generator`` seeded
        ``seed``, fresh for each case), the tokens drawn at each step against :meth:`distributions`. A case's arguments equal to the defaults of ``probs`` are left out of
        the call, so that the function's defaults are tried too. A slip whose replay fits what was drawn
        (:func:`misfit`) fails with its message; any other misfit is returned, said, for the checker to fail with
        once more precise stages have passed."""
        defaults = {name: p.default for name, p in inspect.signature(probs).parameters.items()}
        tests = len(cases) * len(self.logits) * (len(self.logits[0]) + 1)
        for values in cases:
            given = {name: value for name, value in values.items() if value != defaults.get(name)}
            out = self.run(check, fn, what, rows, **given, generator=generator(seed))
            shown = f"of {rows} copies of a sentence whose logits the checker knows (" + ", ".join(
                f"{name}={value}" for name, value in values.items()) + ")"
            width = len(self.logits) + 1  # max_len: BOS, then one column per step
            if not (isinstance(out, torch.Tensor) and out.dtype == torch.long and out.shape == (rows, width)
                    and (out[:, 0] == self.bos_id).all()):  # the greedy stages will most likely say why first
                return (f"Your {what} returns {describe(out)} for a batch {shown} and max_len={width}, where a "
                        f"LongTensor ({rows}, {width}), bos_id={self.bos_id} in column 0, was expected.")
            still = (out[:, 1:] != self.eos_id).cumprod(dim=1).bool()  # (rows, steps): not finished after the step
            steps = [out[:, 1]] + [out[:, j + 1][still[:, j - 1]] for j in range(1, len(self.logits))]
            said = misfit(steps, self.distributions(values, probs), what, shown, tests, excluded=excluded)
            if said:
                slip = matching_slip(slips, lambda s: s.replay(self.distributions, values, probs=probs),
                                     lambda wrong: not misfit(steps, wrong, what, shown, tests))
                check.require(slip is None, f"{slip and slip.message}\n{said}")
                return said
        check.ok(holds)
        return ""

    def generator_use(self, check: Check, fn: Callable, what: str, slips: Sequence[Slip]) -> str:
        """:func:`generator_use` for ``fn`` on 100 copies of the sentence; a slip's ``source`` flag its generator."""
        def source(generator: torch.Generator | None, source: Callable = lambda g: g, **_: Any) -> Any:
            return source(generator)

        return generator_use(check, what, lambda g: self.run(check, fn, what, 100, **({"generator": g} if g else {})),
                             slips, lambda slip, g: torch.rand(8, generator=slip.replay(source, g)))


def generator_slips(what: str) -> tuple[Slip, ...]:
    """The known slips of a function that draws with the ``generator`` it is given: flags ``source`` of a sampling
    oracle, what it draws from instead (named by :func:`generator_use`)."""
    return (
        Slip("global", Diagnosis(f"Your {what} draws from the global generator, not from the `generator` it is given "
             "(torch.distributions.Categorical(...).sample() takes no generator):", "pass it to the call that draws, "
             "`torch.multinomial(probs, 1, generator=generator)`."), dict(source=lambda g: None)),
        Slip("own", Diagnosis(f"Your {what} draws from a generator of its own, so it draws the same tokens whatever "
             "the generator it is given:", "draw from the `generator` argument."),
             dict(source=lambda g: generator(0))),
        Slip("own when None", Diagnosis(f"With generator=None your {what} draws from a generator of its own, so every "
             "call draws the same tokens:", "pass generator=None on to torch.multinomial (or torch.rand), which then "
             "draws from the global generator, the one torch.manual_seed seeds."),
             dict(source=lambda g: g or torch.Generator())),
        Slip("reseeds", Diagnosis(f"Your {what} reseeds the generator it is given, so every seed draws the same "
             "tokens:", "draw from it as it comes."),
             dict(source=lambda g: g and g.set_state(generator(0).get_state()))),
    )


def sampling_answer(slip: Slip, probs: Callable[..., torch.Tensor]) -> Callable:
    """A slip of a sampling oracle made into a learner's answer (for the generated catalogue tests): :func:`sampler`
    drawing with torch.multinomial from ``probs`` and the generator given, or from the slip's flags instead."""
    def answer(probs: Callable = probs, source: Callable = lambda g: g) -> Callable:
        return sampler(lambda logits, t, k, g, step: torch.multinomial(
            probs(logits, temperature=t, top_k=k, step=step), 1, generator=g).squeeze(1), source=source)

    return slip.replay(answer)


def rejects(check: Check, fn: Callable, arguments: tuple, what: str, name: str, values: Sequence[Any], why: str,
            fix: str, holds: str, error: type[Exception] = ValueError) -> None:
    """``fn(*arguments, name=value)`` raises ``error`` for each of ``values``, outside the argument's domain."""
    for value in values:
        raised = check.attempt(fn, *arguments, **{name: value}, what=what)
        check.require(isinstance(raised, Raised) and isinstance(raised.exception, error),
                      f"{what}(..., {name}={value}) should raise {error.__name__} ({why}), but it "
                      + (f"raised {type(raised.exception).__name__}." if isinstance(raised, Raised) else "returned.")
                      + f" {fix}")
    check.ok(holds)


#: what a function that draws random numbers promises, in the order :func:`generator_signature` tests them
PROMISES = ("should draw from the generator it is given", "should leave the global generator alone when given one",
            "should draw the same tokens for the same seed", "should draw other tokens for another seed",
            "should draw from the global generator when given none", "should draw the same tokens after the same "
            "torch.manual_seed")


def generator_signature(draw: Callable[[torch.Generator | None], Any]) -> tuple[bool, ...]:
    """Which of :data:`PROMISES` ``draw(generator)`` keeps (it draws once; None: the generator left to its default).

    It seeds the global generator: run it inside the check (``preserved_state`` gives the learner's state back).
    """
    g, outside = generator(1), torch.get_rng_state()
    first, state = draw(g), g.get_state()
    kept = [not torch.equal(state, generator(1).get_state()), torch.equal(torch.get_rng_state(), outside),
            _same(draw(generator(1)), first), not _same(draw(generator(2)), first)]
    torch.manual_seed(3 + seed_offset())
    seeded = torch.get_rng_state()
    alone = draw(None)
    kept.append(not torch.equal(torch.get_rng_state(), seeded))
    torch.manual_seed(3 + seed_offset())
    return (*kept, _same(draw(None), alone))


def generator_use(check: Check, what: str, draw: Callable[[torch.Generator | None], Any], slips: Sequence[Slip] = (),
                  replay: Callable[[Slip, torch.Generator | None], Any] | None = None) -> str:
    """The generator it is given, and only it, or the global one when given none. A slip whose ``replay(slip,
    generator)`` (it draws once) keeps the same promises fails with its message; another broken promise is
    returned, said, for the checker to fail with once more precise stages have passed."""
    mine = generator_signature(draw)
    if all(mine):
        check.ok("draws from the generator it is given, and only from it, or from the global one when given none: "
                 "the same seed draws the same tokens")
        return ""
    if replay is not None:
        slip = matching_slip(slips, lambda s: generator_signature(lambda g: replay(s, g)), lambda kept: kept == mine)
        check.require(slip is None, slip and slip.message)
    return f"Your {what} does not draw its random numbers as it should: it " + "; it ".join(
        promise for promise, held in zip(PROMISES, mine) if not held) + "."


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)


__all__ = ["KnownLogits", "PROMISES", "Runaway", "Script", "ScriptedModel", "WIDTH", "crashes_on_a_batch", "decode",
           "encoded_once", "follow", "generator_signature", "generator_slips", "generator_use", "misfit", "mix",
           "on_gpu", "output", "rejects", "row", "run_decoder", "sampler", "sampling_answer", "second_batch", "setup",
           "source", "training_mode_problem", "without_grad"]
