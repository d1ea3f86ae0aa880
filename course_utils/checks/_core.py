"""The engine every checker runs on.

A checker is a plain function ``check_<exercise>(implementation) -> CheckResult``.
Its body is written against a :class:`Check`, which runs the learner's code
safely and records what held and what did not:

    def check_something(something) -> CheckResult:
        return run_check("something", _body, something)

    def _body(check: Check, something) -> None:
        out = check.call(something, torch.ones(2, 3))       # learner code, guarded
        out = check.tensor(out, "the output", shape=(2, 3))  # type / shape / dtype / NaN
        check.close(out, expected, "the output", hint="...")  # values, with tolerances
        check.ok("returns the right values")

``check.fail`` records a problem and ends the body; ``check.problem`` records
one and goes on. ``run_check`` turns the outcome into one of four statuses
and guarantees the checker leaves no trace on the learner's session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import html
import inspect
import math
import os
import random
import traceback
from typing import Any, Callable, Iterator, NoReturn, Sequence

import torch

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

#: MIME type under which a result also publishes itself as JSON, so that
#: tools (the progress report) can read results out of executed notebooks.
RESULT_MIME_TYPE = "application/vnd.course-utils.check+json"


class Status(str, enum.Enum):
    """The four outcomes of a check."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_ATTEMPTED = "not attempted"
    ERROR = "error"


_LABELS = {
    Status.PASSED: "PASSED",
    Status.FAILED: "FAILED",
    Status.NOT_ATTEMPTED: "NOT ATTEMPTED",
    Status.ERROR: "ERROR",
}
_COLOURS = {  # (border, background)
    Status.PASSED: ("#2e7d32", "#e8f5e9"),
    Status.FAILED: ("#c62828", "#ffebee"),
    Status.NOT_ATTEMPTED: ("#616161", "#f5f5f5"),
    Status.ERROR: ("#e65100", "#fff3e0"),
}


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


class _Stop(Exception):
    """Ends a checker body after a problem was recorded."""


class _NotAttempted(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _LearnerError(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


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
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE_DIR) or path.startswith(_TORCH_DIR):
            continue
        if frame.line:
            return f"in {frame.name}: {frame.line.strip()}"
    return None


def _bind_names(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """Pair each argument with its parameter name where the signature allows it."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
        return list(bound.arguments.items())
    except (TypeError, ValueError):
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


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exactly equal, NaN included (a NaN that stays a NaN is not a change)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.detach(), b.detach()) or torch.allclose(a.detach(), b.detach(), rtol=0, atol=0, equal_nan=True))


# --------------------------------------------------------------------------
# The object a checker body works with.


class Check:
    """Runs the learner's code for one checker and records what it finds."""

    def __init__(self, exercise: str):
        self.exercise = exercise
        self.problems: list[str] = []
        self.checked: list[str] = []

    # -- recording -----------------------------------------------------------

    def ok(self, description: str) -> None:
        """Record one property that holds (shown as a list when the check passes)."""
        if description not in self.checked:
            self.checked.append(description)

    def problem(self, message: str) -> None:
        """Record a problem and keep checking (for independent mechanisms)."""
        self.problems.append(message)

    def fail(self, message: str) -> NoReturn:
        """Record a problem and stop: what follows would not make sense."""
        self.problems.append(message)
        raise _Stop

    def require(self, condition: bool, message: str) -> None:
        if not condition:
            self.fail(message)

    def stop_if_problems(self) -> None:
        """Stop here if any problem was recorded so far."""
        if self.problems:
            raise _Stop

    # -- running the learner's code -------------------------------------------

    def call(self, fn: Callable, *args: Any, what: str | None = None, guard_inputs: bool = True, **kwargs: Any) -> Any:
        """Call the learner's ``fn`` and translate whatever goes wrong.

        * ``NotImplementedError`` means the exercise is not attempted yet;
        * any other exception becomes an error result that shows the learner's
          exception, the line of their code it came from, and the inputs;
        * with ``guard_inputs``, changing an input tensor in place is a failure.
        """
        name = what or getattr(fn, "__name__", None) or type(fn).__name__
        named = _bind_names(fn, args, kwargs)
        snapshots = [(n, t, t.detach().clone()) for n, v in named for t in _tensors_in(v)] if guard_inputs else []
        try:
            result = fn(*args, **kwargs)
        except NotImplementedError as exc:
            raise _NotAttempted(_not_attempted_message(name, exc)) from None
        except Exception as exc:  # the learner's bug: report it, never raise it
            raise _LearnerError(_error_message(name, exc, named)) from None
        for arg_name, tensor, before in snapshots:
            if not _same(tensor, before):
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

    # -- checking values --------------------------------------------------------

    def callable_(self, value: Any, name: str, want_class: bool = False) -> None:
        """Fail unless the learner passed a function (or a class) to the checker."""
        if want_class:
            ok = inspect.isclass(value)
            kind = "a class"
        else:
            ok = callable(value) and not inspect.isclass(value)
            kind = "a function"
        if not ok:
            self.fail(
                f"The checker expected {kind} ({name}), but received {describe(value)}.\n"
                f"Pass the {('class itself' if want_class else 'function itself')}, without calling it: "
                f"check_...({name})."
            )

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
            self.fail(f"{name[0].upper() + name[1:]} should be a torch.Tensor, but it is {describe(value)}.{extra}")
        if shape is not None and tuple(value.shape) != tuple(shape):
            self.fail(
                f"{name[0].upper() + name[1:]} has the wrong shape.\n"
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
                    f"{name[0].upper() + name[1:]} has dtype {value.dtype}, but it should be {want}."
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
                    f"{name[0].upper() + name[1:]} contains {count} {kind} value{'s' if count != 1 else ''} "
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
        atol: float = 1e-5,
        rtol: float = 1e-4,
        hint: str = "",
        stop: bool = True,
    ) -> bool:
        """Compare values with tolerances; on mismatch show where and by how much."""
        a = actual.detach().double()
        e = expected.detach().double().to(a.device)
        if a.shape != e.shape:
            msg = (
                f"{name[0].upper() + name[1:]} has the wrong shape: expected {fmt_shape(e.shape)}, "
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
            f"{name[0].upper() + name[1:]} has the wrong values.\n"
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


def _not_attempted_message(name: str, exc: BaseException) -> str:
    return (
        f"{name} still raises NotImplementedError, so there is nothing to check yet.\n"
        f"Replace `raise NotImplementedError()` with your code, run that cell, then run this one again. "
        f"(If you already did: it may be a function it builds on from an earlier exercise that is not done yet.)"
    )


def _error_message(name: str, exc: BaseException, named: list[tuple[str, Any]]) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    lines = [f"Your {name} raised {type(exc).__name__}: {first}".rstrip(": ")]
    where = _learner_frame(exc)
    if where:
        lines.append(f"  at {where}")
    if named:
        lines.append("It was called with:")
        lines += [f"  {n} = {describe(v)}" for n, v in named]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Leaving no trace.


@contextlib.contextmanager
def preserved_state(seed: int = 0) -> Iterator[None]:
    """Run a block with a known torch state, then restore the learner's exactly.

    Restores torch's, Python's and NumPy's global RNG state, the default dtype,
    the grad mode and torch's thread count. Inside, the default dtype is float32, grad mode is on,
    and the RNGs are seeded, so results (and messages) are reproducible.
    """
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    py_state = random.getstate()
    try:
        import numpy

        np_state = numpy.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
        numpy, np_state = None, None
    dtype = torch.get_default_dtype()
    grad = torch.is_grad_enabled()
    threads = torch.get_num_threads()
    try:
        # Checkers use tiny tensors: one thread is fastest, and stays fast on a busy machine.
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        torch.manual_seed(seed)
        random.seed(seed)
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        random.setstate(py_state)
        if numpy is not None:
            numpy.random.set_state(np_state)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)


def run_check(exercise: str, body: Callable[..., None], *args: Any, **kwargs: Any) -> CheckResult:
    """Run ``body(check, *args)`` and return its outcome; never raises."""
    check = Check(exercise)
    with preserved_state():
        try:
            body(check, *args, **kwargs)
        except _Stop:
            pass
        except _NotAttempted as signal:
            return CheckResult(exercise, Status.NOT_ATTEMPTED, [signal.message], list(check.checked))
        except _LearnerError as signal:
            return CheckResult(exercise, Status.ERROR, [signal.message], list(check.checked))
        except Exception as exc:  # the body tripped over something unexpected the learner returned
            check.problems.append(
                f"The checker could not finish ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).\n"
                f"This usually means your code returned a value of an unexpected type or shape. "
                f"Check what your {exercise} returns against the exercise's description."
            )
    status = Status.FAILED if check.problems else Status.PASSED
    return CheckResult(exercise, status, list(check.problems), list(check.checked))


def generator(seed: int) -> torch.Generator:
    """A private RNG for a checker's inputs, so the global RNG is never consumed."""
    return torch.Generator().manual_seed(seed)


__all__ = [
    "Check",
    "CheckResult",
    "RESULT_MIME_TYPE",
    "Status",
    "describe",
    "fmt_number",
    "fmt_shape",
    "fmt_values",
    "generator",
    "preserved_state",
    "run_check",
]
