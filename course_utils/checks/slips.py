"""Known slips: one record for every exercise, and one matcher.

A slip is a mistake the checker can name. It is recorded as a *mutant of the
oracle*: either a function that computes what the slipped answer computes, or
the flags (keyword arguments) that make the exercise's oracle slip that way.
When the learner's answer disagrees with the oracle, :func:`matching_slip`
replays every slip on the same inputs and returns the first whose output is the
learner's; the checker then fails with that slip's :class:`Diagnosis`. A slip is
never used to accept an answer.

The same records drive the generated catalogue tests (``tests/test_slips.py``):
each slip, made into a learner's answer by its exercise's ``answer`` function,
must fail with its own message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

import torch

from ._core import ATOL, RTOL, close_enough


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """A message with a shape: the cause first, then the fix, then the numbers that show it."""

    cause: str
    fix: str = ""
    figures: str = ""

    def __str__(self) -> str:
        text = " ".join(part for part in (self.cause, self.fix) if part)
        return f"{text}\n{self.figures}" if self.figures else text

    def showing(self, figures: str) -> "Diagnosis":
        """The same diagnosis with these figures (a comparison, a table) after it."""
        return dataclasses.replace(self, figures=figures)


@dataclasses.dataclass(frozen=True)
class Slip:
    """One known mistake: its short name, what the learner reads, and the oracle's mutant that makes it.

    ``mutant`` is either a function (called with whatever the exercise's replay passes: the case, the inputs)
    or a mapping of flags that the exercise's oracle takes (``replay`` passes them as keyword arguments).
    """

    name: str
    says: Diagnosis | str
    mutant: Callable[..., Any] | Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def message(self) -> str:
        return str(self.says)

    def replay(self, oracle: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
        """What the slipped oracle gives on these inputs: ``mutant(*args, **kwargs)``, or ``oracle`` with the flags."""
        if callable(self.mutant):
            return self.mutant(*args, **kwargs)
        if oracle is None:
            raise TypeError(f"slip {self.name!r} is a set of flags, so its replay needs the oracle")
        return oracle(*args, **{**kwargs, **self.mutant})


def matching_slip(slips: Iterable[Slip], replay: Callable[[Slip], Any], agrees: Callable[[Any], bool]) -> Slip | None:
    """The first slip whose replay on the learner's inputs ``agrees`` with what the learner's answer gave.

    A replay that raises matches nothing (a slip need not make sense on every input).
    """
    for slip in slips:
        try:
            wrong = replay(slip)
        except Exception:  # noqa: BLE001 - a mutant that cannot run here names nothing here
            continue
        try:
            if agrees(wrong):
                return slip
        except Exception:  # noqa: BLE001
            continue
    return None


def same_tensor(out: Any, atol: float = ATOL, rtol: float = RTOL) -> Callable[[Any], bool]:
    """``agrees`` for :func:`matching_slip`: a tensor of ``out``'s shape, close to it."""
    def agrees(wrong: Any) -> bool:
        return (isinstance(out, torch.Tensor) and isinstance(wrong, torch.Tensor) and out.shape == wrong.shape
                and close_enough(out, wrong.to(out.dtype), atol, rtol))

    return agrees


__all__ = ["Diagnosis", "Slip", "matching_slip", "same_tensor"]
