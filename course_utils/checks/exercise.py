"""One declaration per exercise: what its checker runs, in order, and the slips it names.

An :class:`Exercise` names in one place the contract (by name: the one in
``contracts.py``), the oracle, the cases, the stages its checker runs, and its
slip table (:mod:`.slips`). ``EXERCISE.check(obj)`` is the checker's whole
work; each topic module's ``check_x`` is a one-line function over it, with the
learner-facing docstring and the annotation the registry reads.

The stages the engine used to run behind the scenes are declared here: every
exercise runs ``before`` (by default :func:`~.stages.loading.parameter_order`:
later lessons pass arguments by position) and ``after`` (by default
:func:`~.stages.loading.defined_where_loaded`: later lessons load the exercise
from its own cell), around its own ``body``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from .. import contracts
from ._core import Check, CheckResult, Stop, run_check
from .slips import Slip
from .stages.loading import defined_where_loaded, parameter_order

#: a stage run on the learner's object: ``stage(check, obj, exercise_name)``
ObjectStage = Callable[[Check, Any, str], None]

#: every declared exercise, by name (filled as the topic modules are imported)
REGISTRY: dict[str, "Exercise"] = {}


@dataclasses.dataclass(frozen=True)
class Exercise:
    """An exercise's checker, declared.

    name      the exercise's name, the key of its contract in ``contracts.py``
    body      ``body(check, obj, ...)``: the exercise's own stages, in order (stages from the library, and the
              named diagnoses it needs beside its slip table)
    oracle    what an answer is compared with, in words ("F.layer_norm", "the formula of section 5.3")
    cases     the inputs, in words (sizes, dtypes, what is drawn from the seed)
    slips     the known slips the checker names once the comparison failed
    answer    ``answer(slip) -> obj``: a slip made into a learner's answer, for the generated catalogue tests
    before, after  the stages run on the learner's object around ``body`` (declared, not hidden in the engine)
    """

    name: str
    body: Callable[..., None]
    oracle: str = ""
    cases: str = ""
    slips: Sequence[Slip] = ()
    answer: Callable[[Slip], Any] | None = None
    before: Sequence[ObjectStage] = (parameter_order,)
    after: Sequence[ObjectStage] = (defined_where_loaded,)
    time_limit: float | None = None
    register: bool = True

    def __post_init__(self) -> None:
        if self.register:
            REGISTRY[self.name] = self

    @property
    def contract(self) -> Any:
        """This exercise's contract, from ``contracts.py`` (None for a name without one)."""
        return contracts.CONTRACTS.get(self.name)

    def check(self, *args: Any, **kwargs: Any) -> CheckResult:
        """Run the checker on the learner's object (the first argument); never raises on the learner's bug."""
        return run_check(self.name, self._run, *args, time_limit=self.time_limit, **kwargs)

    def _run(self, check: Check, *args: Any, **kwargs: Any) -> None:
        try:
            if args:
                for stage in self.before:
                    stage(check, args[0], self.name)
            self.body(check, *args, **kwargs)
        except Stop:
            self._after(check, args)
            raise
        self._after(check, args)

    def _after(self, check: Check, args: tuple) -> None:
        """The ``after`` stages, whatever the body found (unless it ended the check otherwise)."""
        if args:
            for stage in self.after:
                stage(check, args[0], self.name)


__all__ = ["Exercise", "REGISTRY"]
