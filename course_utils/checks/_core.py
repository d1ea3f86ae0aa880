"""The engine every checker runs on.

A checker is a plain function ``check_<exercise>(implementation) -> CheckResult``.
Its body is written against a :class:`Check`, which runs the learner's code
safely and records what held and what did not::

    def check_something(something: Callable) -> CheckResult:
        return run_check("something", _check_something, something)

    def _check_something(check: Check, something: Callable) -> None:
        out = check.call(something, torch.ones(2, 3), hint="...")  # learner code, guarded
        out = check.tensor(out, "the output", shape=(2, 3))          # type / shape / dtype / NaN
        check.close(out, expected, "the output", hint="...")          # values, with tolerances
        check.ok("returns the right values")

The public API (everything a topic module may import):

Running a check
    ``run_check(exercise, body, *args, time_limit=None, **kwargs)`` runs
    ``body(check, *args, **kwargs)`` and turns its outcome into a
    :class:`CheckResult` with one of four :class:`Status` values. It never
    raises (a learner's ``KeyboardInterrupt`` still interrupts), and it leaves
    no trace: see :func:`preserved_state`. ``last_result(exercise)`` is the
    last result of that exercise's checker in this kernel.

Calling learner code (methods of :class:`Check`)
    ``check.call(fn, *args, what=, hint=, builds_on=, guard_inputs=, may_change=, time_limit=, **kwargs)``
    calls it and translates what goes wrong: ``NotImplementedError`` ends the
    check as *not attempted* (``builds_on`` is added to that message); any
    other exception, ``SystemExit`` included, ends it as *error*, with the
    learner's line, the inputs and ``hint``; a call that runs past its time
    limit ends it as *error* too. An input tensor changed in place (except in
    the inputs listed in ``may_change``, such as a cache the function owns), or a
    global setting changed by the call (grad mode, default dtype,
    deterministic algorithms, thread count, the global seed), is a named
    failure, and the setting is put back. ``check.build(cls, ...)``
    is the same for constructing a learner's class. ``check.attempt(fn, ...)``
    is the silent version for probing variants: it returns the value, or a
    :class:`Raised` sentinel instead of raising.

Recording
    ``check.ok(what)`` (a property that holds), ``check.problem(msg)`` (go
    on), ``check.fail(msg)`` (stop), ``check.require(cond, msg)``,
    ``check.stop_if_problems()``, ``check.not_attempted(msg)`` and
    ``check.error(msg)`` (stop with that status).

Checking values
    ``check.callable_``, ``check.unpack``, ``check.tensor`` and
    ``check.close`` record a message that shows expected against actual.
    ``close_enough(actual, expected, atol=ATOL, rtol=RTOL)`` is the silent
    comparison: same shape, and ``allclose`` in float64. The default
    tolerances, ``ATOL = 1e-5`` and ``RTOL = 1e-4``, suit float32 learner code
    against a float64 oracle. ``identical(a, b)`` is exact equality (shape,
    dtype and values, NaN equal to NaN).

Formatting
    ``fmt_shape``, ``fmt_number``, ``fmt_values`` and ``describe`` write
    shapes, numbers and values the same way in every message, with no memory
    addresses or timings. ``generator(seed)`` is a private RNG for a
    checker's inputs; its seed (and the global seed that ``preserved_state``
    sets) is shifted by ``seed_offset()``, which a grading run sets through
    ``$COURSE_CHECK_SEED`` so that its cases are ones the learner never saw.

Time limits
    Every call into learner code has a limit: ``DEFAULT_TIME_LIMIT`` seconds
    per call (generous: correct code takes milliseconds on the checkers'
    inputs), and ``DEFAULT_TOTAL_TIME`` seconds for all the learner calls of
    one check. On POSIX, in the main thread, the limit is a ``SIGALRM`` timer
    (``signal.setitimer``) that interrupts Python code and sleeps; a single
    long-running C call (one huge matmul) is interrupted when it returns.
    Elsewhere (Windows, other threads) a trace function stops Python-level
    loops, but cannot interrupt a sleep or a C call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import html
import inspect
import io
import math
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator, NoReturn, Sequence

import torch

from .._schema import ERROR, FAILED, NOT_ATTEMPTED, PASSED, RESULT_MIME_TYPE, STATUS_COLOURS, STATUS_LABELS

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

#: Tolerances of :func:`close_enough` and :meth:`Check.close`.
ATOL, RTOL = 1e-5, 1e-4
#: Seconds one call into learner code may take, and all of one check's calls together.
DEFAULT_TIME_LIMIT = 5.0
DEFAULT_TOTAL_TIME = 30.0
#: Characters of the learner's own printing shown during a check; the rest is dropped.
_PRINT_LIMIT = 2000


class Status(str, enum.Enum):
    """The four outcomes of a check."""

    PASSED = PASSED
    FAILED = FAILED
    NOT_ATTEMPTED = NOT_ATTEMPTED
    ERROR = ERROR


_LABELS = {status: STATUS_LABELS[status.value] for status in Status}
_COLOURS = {status: STATUS_COLOURS[status.value] for status in Status}  # (border, background)


@dataclasses.dataclass
class CheckResult:
    """What a checker found: a status, the problems (most important first), and what held."""

    exercise: str
    status: Status
    messages: list[str] = dataclasses.field(default_factory=list)
    checked: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        """One line: the status and the first message (or a summary when passed)."""
        if self.passed:
            n = len(self.checked)
            return f"all {n} check{'s' if n != 1 else ''} passed"
        return self.messages[0].splitlines()[0] if self.messages else ""

    def __str__(self) -> str:
        lines = [f"[{_LABELS[self.status]}] {self.exercise}"]
        if self.passed:
            lines[0] += f": {self.headline()}."
            lines += [f"  + {item}" for item in self.checked]
            return "\n".join(lines)
        for i, message in enumerate(self.messages):
            if i == 1:
                lines.append("  Also:")
            lines += ["  " + line if line else "" for line in message.splitlines()]
        if self.checked and self.status is Status.FAILED:
            lines.append("  What already works:")
            lines += [f"  + {item}" for item in self.checked]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        border, background = _COLOURS[self.status]
        esc = html.escape
        title = f"<b>{_LABELS[self.status]}</b> &nbsp;<code>{esc(self.exercise)}</code>"
        parts = [
            f'<div style="border-left:6px solid {border};background:{background};'
            f'padding:8px 12px;margin:4px 0;font-family:sans-serif;color:#212121">',
            f'<div style="color:{border}">{title}</div>',
        ]
        pre = 'style="white-space:pre-wrap;margin:6px 0 0 0;font-family:inherit"'
        if self.passed:
            parts.append(f"<div {pre}>{esc(self.headline())}.</div>")
        elif self.messages:
            parts.append(f"<div {pre}><b>{esc(self.messages[0])}</b></div>")
            if len(self.messages) > 1:
                items = "".join(
                    f'<li><div style="white-space:pre-wrap">{esc(m)}</div></li>'
                    for m in self.messages[1:]
                )
                parts.append(f'<div style="margin-top:6px">Also:<ul style="margin:2px 0">{items}</ul></div>')
        if self.checked and self.status in (Status.PASSED, Status.FAILED):
            label = "What was checked" if self.passed else "What already works"
            items = "".join(f"<li>{esc(c)}</li>" for c in self.checked)
            parts.append(
                f'<details style="margin-top:6px"><summary>{label} ({len(self.checked)})</summary>'
                f'<ul style="margin:2px 0">{items}</ul></details>'
            )
        parts.append("</div>")
        return "".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "exercise": self.exercise,
            "status": self.status.value,
            "messages": list(self.messages),
            "checked": list(self.checked),
        }

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {
            "text/plain": str(self),
            "text/html": self._repr_html_(),
            RESULT_MIME_TYPE: self.to_dict(),
        }


# --------------------------------------------------------------------------
# Signals a checker body raises. They never escape run_check.


class Stop(Exception):
    """Ends a checker body after a problem was recorded."""


class _Ending(Exception):
    """Ends a checker body with a status other than failed."""

    status: Status

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _NotAttempted(_Ending):
    status = Status.NOT_ATTEMPTED


class _LearnerError(_Ending):
    status = Status.ERROR


class _TimeLimit(BaseException):
    """Raised inside learner code when its time is up (a BaseException: ``except Exception`` cannot swallow it)."""

    def __init__(self, deadline: "_Deadline"):
        super().__init__("time limit")
        self.deadline = deadline


@dataclasses.dataclass
class Raised:
    """What :meth:`Check.attempt` returns instead of raising: the exception, and the message ``call`` would give."""

    exception: BaseException
    message: str

    def __bool__(self) -> bool:  # so that `if check.attempt(...)` never mistakes a crash for a truthy result
        return False


# --------------------------------------------------------------------------
# Formatting helpers: every message shows shapes and values the same way.


def fmt_shape(shape: Sequence[int] | torch.Size) -> str:
    """``(2, 3)`` for a shape, ``()`` for a scalar."""
    dims = tuple(int(d) for d in shape)
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def fmt_number(x: float) -> str:
    """A float with 4 significant decimals, stable across platforms for display."""
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3e}"
    return f"{x:.4f}"


def fmt_values(t: torch.Tensor, limit: int = 6) -> str:
    """The first few values of a tensor, flattened: ``[0.1000, 0.2000, ...]``."""
    flat = t.detach().reshape(-1)
    if flat.dtype == torch.bool:
        items = ["True" if bool(v) else "False" for v in flat[:limit]]
    elif not flat.is_floating_point():
        items = [str(int(v)) for v in flat[:limit]]
    else:
        items = [fmt_number(v) for v in flat[:limit].double()]
    more = ", ..." if flat.numel() > limit else ""
    return "[" + ", ".join(items) + more + "]"


def describe(value: Any) -> str:
    """A short, deterministic description of any value (no memory addresses)."""
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {fmt_shape(value.shape)}, dtype {str(value.dtype).replace('torch.', '')}"
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, (tuple, list)):
        kind = type(value).__name__
        return f"a {kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, torch.nn.Module):
        return f"a {type(value).__name__} module"
    if callable(value):
        return f"the callable {getattr(value, '__name__', type(value).__name__)}"
    return f"an object of type {type(value).__name__}"


def _learner_frame(exc: BaseException) -> str | None:
    """The last line of the learner's own code in a traceback (not ours, not torch's)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if is_ours(frame.filename):
            continue
        if frame.line:
            return f"in {frame.name}, the line `{frame.line.strip()}`"
    return None


def _ran_learner_code(exc: BaseException) -> bool:
    """Whether any frame of the traceback is the learner's (their code ran before it raised)."""
    return any(not is_ours(frame.filename) for frame in traceback.extract_tb(exc.__traceback__))


def is_ours(filename: str) -> bool:
    """Whether a frame's file is this package's or torch's (not the learner's)."""
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE_DIR) or path.startswith(_TORCH_DIR) or path.startswith(os.path.dirname(contextlib.__file__))


def _bind_names(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """Pair each argument with its parameter name where the signature allows it."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        signature = inspect.signature(target)
        bound = signature.bind(*args, **kwargs)
    except Exception:  # no signature, or one these arguments do not fit
        bound = None
    if bound is not None:
        named: list[tuple[str, Any]] = []
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                named += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                named += list(value.items())
            else:
                named.append((name, value))
        return named
    named = [(f"argument {i + 1}", a) for i, a in enumerate(args)]
    return named + list(kwargs.items())


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


# --------------------------------------------------------------------------
# Comparing tensors.


def close_enough(actual: torch.Tensor, expected: torch.Tensor, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """Same shape, and equal within ``atol + rtol * |expected|``, compared in float64 (silent)."""
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return False
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    a = actual.detach().to("cpu", torch.float64) if not actual.is_complex() else actual.detach().cpu()
    e = expected.detach().to("cpu", torch.float64) if not expected.is_complex() else expected.detach().cpu()
    try:
        return bool(torch.allclose(a, e, atol=atol, rtol=rtol))
    except RuntimeError:  # e.g. complex against real
        return False


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exactly equal: same shape, dtype and values, a NaN equal to a NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach()
    return bool(torch.equal(a, b) or torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))


# --------------------------------------------------------------------------
# Time limits on learner code.


@dataclasses.dataclass(eq=False)
class _Deadline:
    at: float  # time.monotonic() when time is up
    seconds: float  # the limit, for messages


_deadlines: list[_Deadline] = []  # innermost last


def _alarm(signum: int, frame: Any) -> None:
    if _deadlines:
        earliest = min(_deadlines, key=lambda d: d.at)
        now = time.monotonic()
        if now >= earliest.at - 1e-3 and (now >= earliest.at + IMPORT_GRACE or not _importing(frame)):
            raise _TimeLimit(earliest)


#: Seconds past a time limit that an import may take to finish (an endless loop at a module's top level still stops).
IMPORT_GRACE = 30.0


def _importing(frame: Any) -> bool:
    """True while a module is being imported: the limit waits for the import to end (the alarm re-fires).

    Stopped halfway, a module stays half made: ``import sympy`` cut short (torch imports it lazily, and slowly on a
    busy machine, the first time a call validates a key_padding_mask) leaves ``sympy.core`` loaded but no longer an
    attribute of ``sympy``, and every later call that needs it fails, the learner's and the checkers' alike.
    """
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _can_use_signal() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[_Deadline]:
    """Raise :class:`_TimeLimit` inside the block once ``seconds`` have passed (nested limits allowed)."""
    deadline = _Deadline(time.monotonic() + seconds, seconds)
    outer = min(_deadlines, key=lambda d: d.at) if _deadlines else None
    _deadlines.append(deadline)
    use_signal = _can_use_signal()
    previous_handler = previous_trace = None
    try:
        if use_signal:
            previous_handler = signal.signal(signal.SIGALRM, _alarm)
            first = max(min(deadline.at, outer.at if outer else deadline.at) - time.monotonic(), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, first, 0.2)  # re-fires, in case learner code swallows one
        else:
            previous_trace = sys.gettrace()
            sys.settrace(_make_tracer())
        yield deadline
    finally:
        _deadlines.remove(deadline)
        if use_signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)
            if _deadlines:  # an outer limit is still running
                remaining = max(min(d.at for d in _deadlines) - time.monotonic(), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, remaining, 0.2)
        else:
            sys.settrace(previous_trace)


def _make_tracer() -> Callable:
    """A trace function that raises :class:`_TimeLimit` in Python code once time is up."""

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        _alarm(0, frame)
        return tracer

    return tracer


# --------------------------------------------------------------------------
# Global settings learner code must not change.


_SETTINGS: dict[str, tuple[Callable[[], Any], Callable[[Any], None], str]] = {
    # name: (read, restore, the call that usually changes it)
    "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled, "torch.set_grad_enabled(...)"),
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype, "torch.set_default_dtype(...)"),
    "deterministic algorithms": (
        torch.are_deterministic_algorithms_enabled,
        torch.use_deterministic_algorithms,
        "torch.use_deterministic_algorithms(...)",
    ),
    "number of threads": (torch.get_num_threads, torch.set_num_threads, "torch.set_num_threads(...)"),
}
#: Settings whose change makes the rest of the check meaningless.
_STOPPING_SETTINGS = {"grad mode", "default dtype"}
#: The functions that reseed a global RNG; watched during learner calls.
_SEEDERS = (
    (torch, "manual_seed"),
    (torch, "seed"),
    (torch.random, "manual_seed"),
    (random, "seed"),
)


@dataclasses.dataclass
class _Watch:
    """What one learner call did to the session: the settings before it, and the seeding calls it made."""

    settings: dict[str, Any]
    seeded: list[str] = dataclasses.field(default_factory=list)


def _read_settings() -> dict[str, Any]:
    return {name: read() for name, (read, _, _) in _SETTINGS.items()}


def _caller_line() -> str:
    """The learner's line that called the current function (skipping this package and torch)."""
    for frame_info in inspect.stack(context=1)[2:]:
        if is_ours(frame_info.filename):
            continue
        line = frame_info.code_context[0].strip() if frame_info.code_context else ""
        return f"in {frame_info.function}: {line}" if line else f"in {frame_info.function}"
    return ""


@contextlib.contextmanager
def _watched() -> Iterator[_Watch]:
    """Record seeding calls and cap printing while learner code runs."""
    watch = _Watch(_read_settings())
    originals = [(owner, name, getattr(owner, name)) for owner, name in _SEEDERS]

    def spy(original: Callable, label: str) -> Callable:
        def seeding(*args: Any, **kwargs: Any) -> Any:
            watch.seeded.append(f"{label}(...) {_caller_line()}".rstrip())
            return original(*args, **kwargs)

        return seeding

    sink = _CappedOutput(sys.stdout)
    for owner, name, original in originals:
        setattr(owner, name, spy(original, f"{owner.__name__}.{name}"))
    try:
        with contextlib.redirect_stdout(sink):
            yield watch
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


class _CappedOutput(io.TextIOBase):
    """Passes the first ``_PRINT_LIMIT`` characters through, counts and drops the rest."""

    def __init__(self, target: Any):
        self.target = target
        self.written = 0

    def write(self, text: str) -> int:
        room = _PRINT_LIMIT - self.written
        if room > 0:
            self.target.write(text[:room])
            if len(text) > room:
                self.target.write("\n[... the checker hides the rest of what your code printed]\n")
        self.written += len(text)
        return len(text)

    def flush(self) -> None:
        self.target.flush()


def _settings_changed(check: "Check", name: str, watch: _Watch) -> None:
    """Name every setting the call changed, put it back, and stop if the rest would be meaningless."""
    after = _read_settings()
    stop = False
    for setting, before in watch.settings.items():
        if after[setting] == before:
            continue
        _, restore, usual = _SETTINGS[setting]
        restore(before)
        stop = stop or setting in _STOPPING_SETTINGS
        check.problem(
            f"Your {name} changed a global setting of your session: {setting} was {before} before the call "
            f"and {after[setting]} after it.\n"
            f"Code that changes global settings breaks every cell that runs after it. "
            f"Likely cause: a call such as `{usual}` in your code; to change a setting for a few lines only, "
            f"use a context manager (`with torch.no_grad():`). The checker put the setting back."
        )
    if watch.seeded:
        check.problem(
            f"Your {name} resets a global random seed ({watch.seeded[0]}).\n"
            f"Seeding inside a function makes every call draw the same random numbers (dropout would drop the "
            f"same positions every time) and overrides the seed the learner chose. Seed once, at the top of a "
            f"notebook, never inside a function or `forward`."
        )
    if stop:
        raise Stop


# --------------------------------------------------------------------------
# The object a checker body works with.


class Check:
    """Runs the learner's code for one checker and records what it finds."""

    def __init__(self, exercise: str, time_limit: float | None = None, total_time: float | None = None):
        self.exercise = exercise
        self.problems: list[str] = []
        self.checked: list[str] = []
        self.time_limit = DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit)
        self.total_time = DEFAULT_TOTAL_TIME if total_time is None else float(total_time)
        self._spent = 0.0  # seconds spent in learner code so far

    # -- recording -----------------------------------------------------------

    def ok(self, description: str) -> None:
        """Record one property that holds (shown as a list when the check passes)."""
        if description not in self.checked:
            self.checked.append(description)

    def problem(self, message: Any) -> None:
        """Record a problem and keep checking (for independent mechanisms); a :class:`~.slips.Diagnosis` reads as
        its cause, fix and figures."""
        message = str(message)
        if message not in self.problems:
            self.problems.append(message)

    def fail(self, message: Any) -> NoReturn:
        """Record a problem and stop: what follows would not make sense."""
        self.problem(message)
        raise Stop

    def require(self, condition: bool, message: str) -> None:
        if not condition:
            self.fail(message)

    def stop_if_problems(self) -> None:
        """Stop here if any problem was recorded so far."""
        if self.problems:
            raise Stop

    def not_attempted(self, message: str) -> NoReturn:
        """Stop: the exercise (or one it builds on) is not attempted yet."""
        raise _NotAttempted(message)

    def error(self, message: str) -> NoReturn:
        """Stop: the learner's code crashed (``message`` says where and why)."""
        raise _LearnerError(message)

    def require_component(self, checker: Callable[[Any], "CheckResult"], implementation: Any, name: str) -> None:
        """Stop, blaming the earlier exercise ``name``, when its own checker does not pass on ``implementation``.

        For combined checkers: a layer that fails because the learner's
        multi-head attention is wrong should say so first, not show a
        mismatch deep inside the layer.
        """
        result = checker(implementation)
        if result.passed:
            self.ok(f"builds on a {name} that passes its own checker")
            return
        first = result.headline()
        if result.status is Status.NOT_ATTEMPTED:
            self.not_attempted(f"This exercise uses your {name}, which is not done yet ({first}). Finish {name} first.")
        self.fail(
            f"Your {name} fails its own checker: fix that first, then run this checker again.\n"
            f"Its first problem: {first}"
        )

    # -- running the learner's code -------------------------------------------

    def call(
        self,
        fn: Callable,
        *args: Any,
        what: str | None = None,
        hint: str | Callable[[BaseException], str] = "",
        builds_on: str = "",
        guard_inputs: bool = True,
        may_change: Sequence[Any] = (),
        time_limit: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call the learner's ``fn`` and translate whatever goes wrong.

        * ``NotImplementedError`` means the exercise is not attempted yet
          (``builds_on`` is appended: say which earlier exercise it may come from);
        * any other exception, or running past the time limit, becomes an error
          result that shows the exception, the learner's line, ``hint`` (or ``hint(exception)``) and the inputs;
        * with ``guard_inputs``, changing an input tensor in place is a failure, except inside the
          inputs in ``may_change`` (compared by identity: e.g. a cache that the function may write into);
        * a global setting or seed changed by the call is a named failure (put back).
        """
        name = what or _name_of(fn)
        named = _bind_names(fn, args, kwargs)
        snapshots = ([(n, t, t.detach().clone()) for n, v in named if not any(v is m for m in may_change)
                      for t in _tensors_in(v)] if guard_inputs else [])
        result = self._run(fn, args, kwargs, name, named, time_limit)
        if isinstance(result, Raised):
            if isinstance(result.exception, NotImplementedError):
                self.not_attempted(_not_attempted_message(name) + (f"\n{builds_on}" if builds_on else ""))
            self.error(_with_hint(result.message, hint(result.exception) if callable(hint) else hint))
        for arg_name, tensor, before in snapshots:
            if not identical(tensor, before):
                self.fail(
                    f"Your {name} changed its input `{arg_name}` in place.\n"
                    f"A function should leave its inputs as they were: the caller may still need them.\n"
                    f"Likely cause: an in-place operation such as `masked_fill_`, `+=`, `.div_()` or an "
                    f"indexed assignment on an input tensor. Use the out-of-place version "
                    f"(`masked_fill`, `x = x + ...`) instead."
                )
        return result

    def build(self, cls: Callable, *args: Any, **kwargs: Any) -> Any:
        """Instantiate a learner's class (``NotImplementedError`` in ``__init__`` = not attempted)."""
        name = getattr(cls, "__name__", "your class")
        return self.call(cls, *args, what=f"{name}(...)", guard_inputs=False, **kwargs)

    def attempt(self, fn: Callable, *args: Any, what: str | None = None, time_limit: float | None = None, **kwargs: Any) -> Any:
        """Run learner code silently: its value, or a :class:`Raised` sentinel if it raised or ran out of time."""
        name = what or _name_of(fn)
        return self._run(fn, args, kwargs, name, None, time_limit)

    def _run(self, fn: Callable, args: tuple, kwargs: dict, name: str, named: list | None, time_limit: float | None) -> Any:
        """One guarded call: time-limited, printing capped, global settings watched."""
        limit = self.time_limit if time_limit is None else float(time_limit)
        budget = self.total_time - self._spent
        total_bound = budget < limit
        limit = max(min(limit, budget), 0.05)
        start = time.monotonic()
        with _watched() as watch:
            try:
                with _time_limit(limit) as deadline:
                    result = fn(*args, **kwargs)
            except _TimeLimit as stop:
                if stop.deadline is not deadline:
                    raise
                named = named if named is not None else _bind_names(fn, args, kwargs)
                result = Raised(TimeoutError(name), _timeout_message(name, limit, named, total_bound, self.total_time))
            except (KeyboardInterrupt, Stop, _Ending):
                raise
            except BaseException as exc:  # the learner's bug, SystemExit included: report it, never raise it
                named = named if named is not None else _bind_names(fn, args, kwargs)
                result = Raised(exc, _error_message(name, exc, named))
        self._spent += time.monotonic() - start
        _settings_changed(self, name, watch)
        return result

    # -- checking values --------------------------------------------------------

    def callable_(self, value: Any, name: str, want_class: bool = False) -> None:
        """Fail unless the learner passed a function (or a class) to the checker, saying what to pass instead."""
        if want_class:
            ok, kind = inspect.isclass(value), "a class"
        else:
            ok, kind = callable(value) and not inspect.isclass(value), "a function"
        if ok:
            return
        what = "class itself" if want_class else "function itself"
        fix = f"Pass the {what}, without calling it: check_...({name})."
        if want_class and isinstance(value, torch.nn.Module):
            cls = type(value).__name__
            fix = f"Pass the class `{cls}`, not an instance such as `{cls}(...)`: the checker builds its own instances."
        elif not want_class and inspect.isclass(value):
            fix = f"The exercise asks for a function, not the class `{value.__name__}`: pass the function `{name}`."
        elif isinstance(value, str):
            fix = f"Pass the {what}, without quotes: check_...({name}), not check_...({value!r})."
        elif value is None:
            fix += f" (A value of None often means the cell that defines {name} has not run, or returned nothing.)"
        self.fail(f"The checker expected {kind} ({name}), but received {describe(value)}.\n{fix}")

    def unpack(self, value: Any, names: Sequence[str], what: str) -> tuple:
        """Fail unless ``value`` is a tuple/list with one item per name."""
        n = len(names)
        if not isinstance(value, (tuple, list)) or len(value) != n:
            listing = ", ".join(names)
            self.fail(
                f"{what} should return {n} values, ({listing}), but returned {describe(value)}.\n"
                f"End it with `return {listing}`."
            )
        return tuple(value)

    def tensor(
        self,
        value: Any,
        name: str,
        shape: Sequence[int] | None = None,
        dtype: torch.dtype | str | None = None,
        finite: bool = True,
        shape_hint: str = "",
    ) -> torch.Tensor:
        """Fail unless ``value`` is a tensor of the given shape and dtype, free of NaN.

        ``dtype`` may be a dtype or one of ``"float"`` (any floating dtype) and
        ``"bool"``.
        """
        if not isinstance(value, torch.Tensor):
            extra = ""
            if value is None:
                extra = "\nDid you forget a `return` statement?"
            elif inspect.isgenerator(value):
                extra = "\nA generator comes from `yield`: use `return` to give back the result."
            elif isinstance(value, (list, tuple)):
                extra = "\nBuild the result as one tensor (for example with torch.stack or torch.tensor), not a Python list."
            self.fail(f"{_capitalised(name)} should be a torch.Tensor, but it is {describe(value)}.{extra}")
        if shape is not None and tuple(value.shape) != tuple(shape):
            self.fail(
                f"{_capitalised(name)} has the wrong shape.\n"
                f"  expected: {fmt_shape(shape)}\n"
                f"  actual:   {fmt_shape(value.shape)}"
                + (f"\n{shape_hint}" if shape_hint else "")
            )
        if dtype is not None:
            if dtype == "float":
                good, want = value.is_floating_point(), "a floating-point dtype (such as float32)"
            elif dtype == "bool":
                good, want = value.dtype == torch.bool, "torch.bool"
            else:
                good, want = value.dtype == dtype, str(dtype)
            if not good:
                self.fail(
                    f"{_capitalised(name)} has dtype {value.dtype}, but it should be {want}."
                    + (
                        "\nMasks are boolean: build them with comparisons such as `tokens != pad_id`, "
                        "or convert with `.bool()`."
                        if dtype == "bool"
                        else ""
                    )
                )
        if finite and value.is_floating_point():
            bad = ~torch.isfinite(value.detach())
            if bool(bad.any()):
                count = int(bad.sum())
                kind = "NaN" if bool(value.detach().isnan().any()) else "infinite"
                self.fail(
                    f"{_capitalised(name)} contains {count} {kind} value{'s' if count != 1 else ''} "
                    f"(out of {value.numel()}).\n"
                    f"Likely causes: a softmax over a row where every entry is -inf, a division by zero, "
                    f"or exp() of large numbers without subtracting the maximum first."
                )
        return value

    def close(
        self,
        actual: torch.Tensor,
        expected: torch.Tensor,
        name: str,
        atol: float = ATOL,
        rtol: float = RTOL,
        hint: str = "",
        stop: bool = True,
    ) -> bool:
        """Compare values with tolerances; on mismatch show where and by how much."""
        a = actual.detach().to("cpu", torch.float64)
        e = expected.detach().to("cpu", torch.float64)
        if a.shape != e.shape:
            msg = (
                f"{_capitalised(name)} has the wrong shape: expected {fmt_shape(e.shape)}, "
                f"got {fmt_shape(a.shape)}."
            )
            if stop:
                self.fail(msg)
            self.problem(msg)
            return False
        if torch.allclose(a, e, atol=atol, rtol=rtol):
            return True
        diff = (a - e).abs()
        worst = int(diff.reshape(-1).argmax())
        index = _unravel(worst, tuple(a.shape))
        msg = (
            f"{_capitalised(name)} has the wrong values.\n"
            f"  expected (first values): {fmt_values(e)}\n"
            f"  actual   (first values): {fmt_values(a)}\n"
            f"  largest difference: {fmt_number(float(diff.max()))} at index {fmt_shape(index) if index else '()'}"
            + (f"\n{hint}" if hint else "")
        )
        if stop:
            self.fail(msg)
        self.problem(msg)
        return False


def _unravel(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The multi-index of a flat index (plain Python: torch.unravel_index is slow on first use)."""
    index = []
    for size in reversed(shape):
        flat_index, i = divmod(flat_index, size)
        index.append(i)
    return tuple(reversed(index))


def _name_of(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _not_attempted_message(name: str) -> str:
    return (
        f"{name} still raises NotImplementedError, so there is nothing to check yet.\n"
        f"Replace `raise NotImplementedError()` with your code, run that cell, then run this one again. "
        f"(If you already did: it may be a function it builds on from an earlier exercise that is not done yet.)"
    )


def _error_message(name: str, exc: BaseException, named: list[tuple[str, Any]]) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, SystemExit):
        lines = [
            f"Your {name} called sys.exit() (or raised SystemExit{': ' + first if first else ''}).\n"
            f"In a notebook that would stop the kernel's work; a function should return its result or raise "
            f"an exception instead."
        ]
    else:
        lines = [f"Your {name} raised {type(exc).__name__}: {first}".rstrip(": ")]
        if len(text) > 1 and first.rstrip().endswith(":"):  # PyTorch's "but expected one of:" and its list
            lines += [f"    {line.strip()}" for line in text[1:9] if line.strip()]
    where = _learner_frame(exc)
    if where:
        lines.append(f"  {where}")
    if isinstance(exc, IndexError) and "index out of range in self" in first:  # the cause first, the inputs after
        lines.append(
            "Likely cause: an nn.Embedding received an id at or beyond its number of rows. In the model each side "
            "has its own table: the source ids go through src_embed (src_vocab_size rows), the target ids through "
            "tgt_embed (tgt_vocab_size rows), and the checker's two vocabularies differ in size to show which is "
            "which. In a table of positions, every position must be below max_len."
        )
    half = re.search(r"not implemented for '(Half|BFloat16)'", first)
    if isinstance(exc, RuntimeError) and half:  # older PyTorch releases lack many half-precision CPU kernels
        dtype = {"Half": "float16", "BFloat16": "bfloat16"}[half.group(1)]
        lines.append(
            f"Likely cause: your code converts to {dtype} (`.{'half' if dtype == 'float16' else 'bfloat16'}()`), "
            f"and this PyTorch ({torch.__version__}) has no {dtype} version of that operation on this device. "
            f"Keep the computation in the dtype of the input; to train in lower precision, leave the choice of "
            f"dtype to `torch.autocast`."
        )
    if named:
        lines.append("It was called with:")
        lines += [f"  {n} = {describe(v)}" for n, v in named]
    if isinstance(exc, TypeError) and ("argument" in first or "positional" in first) and not _ran_learner_code(exc):
        # raised by the call itself (no line of the learner's ran): the signature, not a call inside it
        lines.append(
            "Check that your code's parameters match the signature the exercise gives "
            "(their number, order and names)."
        )
    return "\n".join(lines)


def _timeout_message(name: str, limit: float, named: list[tuple[str, Any]], total_bound: bool, total: float) -> str:
    if total_bound:
        head = f"Your code took more than {fmt_number(total)} s in all across this checker's calls, so it was stopped in {name}."
    else:
        head = f"Your {name} did not return within {limit:g} s, so the checker stopped it."
    lines = [head]
    if named:
        lines.append("It was called with:")
        lines += [f"  {n} = {describe(v)}" for n, v in named]
    lines.append(
        "Likely causes: a loop whose stopping condition is never met (a `while` loop that never reaches its "
        "end condition, such as `max_len` or the end-of-sentence token), or Python loops over the elements "
        "of a tensor, which are thousands of times slower than one tensor operation on the whole tensor."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Leaving no trace.


@contextlib.contextmanager
def preserved_state(seed: int = 0) -> Iterator[None]:
    """Run a block with a known torch state, then restore the learner's exactly.

    Restores torch's, Python's and NumPy's global RNG state, the default dtype,
    the grad mode, the deterministic-algorithms flag and torch's thread count.
    Inside, the default dtype is float32, grad mode is on, and the RNGs are
    seeded, so results (and messages) are reproducible.
    """
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    py_state = random.getstate()
    try:
        import numpy

        np_state = numpy.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
        numpy, np_state = None, None
    settings = _read_settings()
    try:
        # Checkers use tiny tensors: one thread is fastest, and stays fast on a busy machine.
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        torch.manual_seed(seed + seed_offset())
        random.seed(seed + seed_offset())
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        random.setstate(py_state)
        if numpy is not None:
            numpy.random.set_state(np_state)
        now = _read_settings()
        for name, (_, restore, _) in _SETTINGS.items():
            if now[name] != settings[name]:  # only what changed: restoring the deterministic flag imports torch._inductor
                restore(settings[name])


_FALLBACK = (
    "Your {exercise} gave the checker something it could not use ({error}).\n"
    "Compare what your code returns (its type, shape and dtype) and the attributes it defines with the "
    "exercise's description."
)
#: the same, when what the learner returned sits on a real GPU while the checker's inputs are on the CPU
_ON_THE_GPU = (
    "Your {exercise} returned a tensor on the GPU although the checker gave it inputs on the CPU, so the checker "
    "could not compare it ({error}). A device chosen by asking `torch.cuda.is_available()`, or written as `'cuda'` "
    "or `.cuda()`, is not the device of the inputs: on a machine with a GPU, a model or a batch kept on the CPU "
    "then fails with \"Expected all tensors to be on the same device\".\n"
    "Create new tensors on the device of the inputs (`device=x.device`); a function given no tensor returns its "
    "result on the CPU, and its caller moves it."
)
_ANY = object()
# exercise -> {id of an implementation: its last result}, the latest last: a lesson's demonstration of a wrong
# version (check_x(a_wrong_x)) must not replace the result of the learner's own x
_last: dict[str, dict[int, CheckResult]] = {}


def _with_hint(message: str, hint: str) -> str:
    """A crash's message with the checker's diagnosis right after the learner's line, before the inputs."""
    if not hint:
        return message
    head, inputs, rest = message.partition("\nIt was called with:")
    return f"{head}\n{hint}{inputs}{rest}" if inputs else f"{message}\n{hint}"


def run_check(exercise: str, body: Callable[..., None], *args: Any, time_limit: float | None = None, **kwargs: Any) -> CheckResult:
    """Run ``body(check, *args, **kwargs)`` and return its outcome; never raises (except KeyboardInterrupt).

    The engine runs the body and nothing else: the stages every exercise runs around it (the argument order
    later lessons use, the cell they load) are declared by :class:`~.exercise.Exercise`.
    """
    check = Check(exercise, time_limit=time_limit)
    with preserved_state():
        result = _outcome(check, body, args, kwargs)
    results = _last.setdefault(exercise, {})
    key = id(args[0]) if args else 0
    results.pop(key, None)
    results[key] = result
    while len(results) > 8:  # the ids of objects long gone may be reused: keep the few latest
        del results[next(iter(results))]
    return result


def _outcome(check: Check, body: Callable[..., None], args: tuple, kwargs: dict) -> CheckResult:
    exercise = check.exercise
    try:
        body(check, *args, **kwargs)
    except Stop:
        pass
    except _Ending as signal_:
        messages = [signal_.message] + [p for p in check.problems if p != signal_.message]
        return CheckResult(exercise, signal_.status, messages, list(check.checked))
    except _TimeLimit as stop:  # only when the alarm fell between two lines of the checker's own code
        message = _timeout_message(exercise, stop.deadline.seconds, [], False, check.total_time)
        return CheckResult(exercise, Status.ERROR, [message], list(check.checked))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the body tripped over something unexpected the learner returned
        first = str(exc).splitlines()[0] if str(exc) else ""
        error = f"{type(exc).__name__}: {first}".rstrip(": ")
        fallback = _ON_THE_GPU if "same device" in first and "cuda" in first else _FALLBACK
        check.problem(fallback.format(exercise=exercise, error=error))
    status = Status.FAILED if check.problems else Status.PASSED
    return CheckResult(exercise, status, list(check.problems), list(check.checked))


def last_result(exercise: str, implementation: Any = _ANY) -> CheckResult | None:
    """The last result of ``exercise``'s checker in this session, or None.

    With ``implementation``, only a result about that very object counts (a
    lesson may run a checker on a deliberately wrong version to show a failure).
    """
    results = _last.get(exercise) or {}
    if implementation is _ANY:
        return next(reversed(results.values()), None)
    return results.get(id(implementation))


#: Environment variable that shifts every seed the checkers draw their inputs with (see :func:`seed_offset`).
SEED_ENV = "COURSE_CHECK_SEED"


def seed_offset() -> int:
    """How far a grading run shifts the checkers' seeds: the integer in ``$COURSE_CHECK_SEED``, else 0.

    Every random input a checker draws comes from :func:`generator` or from the global RNG as
    :func:`preserved_state` seeds it, and both add this offset. A learner's session leaves it at 0, so a
    checker cell shows the same cases every time; an autograder (``python -m course_utils.grading``) sets
    it, for the length of one check, to a number that only the autograder holds, so that an answer tuned
    to the cases the learner saw meets others there. A correct answer passes under any offset
    (``tests/test_grading.py`` runs the checker tests under other ones). Read at every call.
    """
    value = os.environ.get(SEED_ENV, "").strip()
    try:
        return int(value) % 2**62 if value else 0
    except ValueError:
        return 0


def generator(seed: int) -> torch.Generator:
    """A private RNG for a checker's inputs, so the global RNG is never consumed (``seed`` shifted by :func:`seed_offset`)."""
    return torch.Generator().manual_seed(seed + seed_offset())


__all__ = [
    "ATOL",
    "DEFAULT_TIME_LIMIT",
    "DEFAULT_TOTAL_TIME",
    "RTOL",
    "Stop",
    "SEED_ENV",
    "Check",
    "CheckResult",
    "RESULT_MIME_TYPE",
    "Raised",
    "Status",
    "close_enough",
    "describe",
    "fmt_number",
    "fmt_shape",
    "fmt_values",
    "generator",
    "identical",
    "last_result",
    "preserved_state",
    "is_ours",
    "run_check",
    "seed_offset",
]
