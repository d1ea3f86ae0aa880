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
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Sequence

import torch
from torch import nn

from . import gpu as _gpu
from .._core import Check, Raised, describe, fmt_shape

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


__all__ = ["Runaway", "Script", "ScriptedModel", "WIDTH", "crashes_on_a_batch", "follow", "mix", "run_decoder",
           "second_batch", "training_mode_problem"]
