"""Small helpers the lesson notebooks use around the exercises.

* :func:`pick_device` chooses cuda, then mps, then cpu, and says which.
* :func:`requires` wraps a demonstration cell that uses a learner's function,
  so that an unfinished exercise gives a friendly note instead of a traceback.
* :func:`load_exercises` brings a learner's own functions and classes from an
  earlier lesson's notebook into a later one (e.g. your attention into the
  multi-head lesson), by running the cells that define them.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import sys
import types
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from ._schema import ERROR, FAILED, PASSED, loaded_statements, names_defined, parse_cell


def pick_device(verbose: bool = True) -> torch.device:
    """The best available device: cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        device = torch.device("cuda")
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    if verbose:
        print(f"Using device: {device.type}")
    return device


class _Skipped(Exception):
    pass


@contextlib.contextmanager
def requires(*exercises: str) -> Iterator[None]:
    """Run a demonstration block that uses learner code; turn its failures into one clear note.

        with requires("scaled_dot_product_attention"):
            output, weights = scaled_dot_product_attention(q, k, v)
            plot_attention(weights, tokens)

    It remembers what each exercise's checker last said in this kernel:

    * before the block runs, an exercise whose checker last FAILED (or gave an
      ERROR) on the very object this cell will use gets a warning;
    * ``NotImplementedError`` (an untouched exercise) says which exercise to finish;
    * a ``NameError`` asks to run the cells above only when that would help (the
      cell itself, not the learner's code, uses a name that is not defined yet);
    * an ``AttributeError`` on a learner's object names what the course expected
      of it (from :mod:`course_utils.contracts`), and, when its checker passed,
      says the checker should have caught it;
    * any other exception is shown as one line with the learner's source line.
    """
    namespace = _caller_namespace()
    results = {name: _last_result(name, namespace) for name in exercises}
    for name, result in results.items():
        if result is not None and result.status in (FAILED, ERROR):
            print(_failing_warning(name, result))
    try:
        yield
    except NotImplementedError as exc:
        culprits = _culprits(exc, exercises) or list(exercises)
        print(f"This cell uses {_names(culprits)}. Finish that exercise first, then run this cell again.")
    except NameError as exc:
        print(_name_error_note(exc, exercises, results))
    except AttributeError as exc:
        print(_attribute_error_note(exc, exercises, results))
    except Exception as exc:  # a learner's bug: one clear line, not a traceback
        print(_error_note(exc, exercises, results))


def _names(exercises: Sequence[str]) -> str:
    return ", ".join(f"`{e}`" for e in exercises) or "the exercise above"


def _caller_namespace() -> dict[str, Any]:
    """The names visible in the cell that opened ``with requires(...)`` (its locals over its globals)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, contextlib.__file__):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - there is always a caller
        return {}
    return {**frame.f_globals, **frame.f_locals}


def _last_result(exercise: str, namespace: dict[str, Any]) -> Any:
    """What the exercise's checker last said about the object this cell will use (None: not checked)."""
    from .checks._core import last_result

    if exercise not in namespace:
        return None
    return last_result(exercise, namespace[exercise])


def _first_line(text: object) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _failing_warning(exercise: str, result: Any) -> str:
    what = "FAILED" if result.status == FAILED else "ended in an ERROR"
    headline = _first_line(result.messages[0]) if result.messages else ""
    return (
        f"Warning: your `{exercise}` {what} its checker the last time you ran it"
        + (f': "{headline}"' if headline else "")
        + "\nThis cell uses it, so expect an error or misleading results; fix it and run its checker "
        "cell again first."
    )


# Reading a traceback: which frames are the cell, which are the learner's exercises.


def _frames(exc: BaseException) -> list[types.FrameType]:
    """The frames an exception passed through, from the cell that ran ``with requires`` down to where it was raised."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename not in (__file__, contextlib.__file__):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _exercise_of(frame: types.FrameType, known: set[str]) -> str | None:
    """The exercise whose code a frame runs (a function, or a method of a class, with that name), if any."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", code.co_name)  # Python 3.11+; "Class.method", "f.<locals>.g"
    for part in reversed(qualname.split(".")):
        if part in known:
            return part
    self = frame.f_locals.get("self")
    if self is not None:
        for cls in type(self).__mro__:
            if cls.__name__ in known and cls.__dict__.get(code.co_name) is not None:
                return cls.__name__
    return None


def _known_exercises(exercises: Sequence[str]) -> set[str]:
    from . import contracts

    return set(exercises) | set(contracts.CONTRACTS)


def _culprits(exc: BaseException, exercises: Sequence[str]) -> list[str]:
    """The exercises whose code the exception passed through, outermost first."""
    known = _known_exercises(exercises)
    found = [_exercise_of(frame, known) for frame in _frames(exc)[1:]]
    return list(dict.fromkeys(name for name in found if name))


def _raised_in_exercise(exc: BaseException, exercises: Sequence[str]) -> types.FrameType | None:
    """The innermost frame of a learner's exercise the exception passed through, if it did."""
    known = _known_exercises(exercises)
    inside = [frame for frame in _frames(exc)[1:] if _exercise_of(frame, known)]
    return inside[-1] if inside else None


def _where(frame: types.FrameType | None, exc: BaseException) -> str:
    """`` (line N: <code>)`` for the line of ``frame`` that was running when ``exc`` went through it."""
    if frame is None:
        return ""
    tb = exc.__traceback__
    lineno = frame.f_lineno
    while tb is not None:
        if tb.tb_frame is frame:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    code = linecache.getline(frame.f_code.co_filename, lineno).strip()
    return f" (line {lineno}: `{code}`)" if code else f" (line {lineno})"


def _next_step(exercises: Sequence[str], results: dict[str, Any]) -> str:
    """What to do next, from what the exercises' checkers last said."""
    said = [results.get(name) for name in exercises]
    if any(r is not None and r.status in (FAILED, ERROR) for r in said):
        return "Its checker reported a problem (see the warning above): fix that first."
    if said and all(r is not None and r.status == PASSED for r in said):
        return (
            f"{_names(exercises)} passed its checker, so the checker should have caught this: "
            f"please report it to the course's authors."
        )
    return "Run its checker cell to find out what to fix."


def _name_error_note(exc: NameError, exercises: Sequence[str], results: dict[str, Any]) -> str:
    missing = getattr(exc, "name", None) or _first_line(exc)
    if missing in exercises:
        return (
            f"This cell uses `{missing}`, which is not defined yet. Run its exercise cell (Run > Run All Above "
            f"Selected Cell runs everything above), then this cell again."
        )
    frame = _raised_in_exercise(exc, exercises)
    if frame is None or missing in _known_exercises(exercises):
        return (
            f"This cell uses {_names(exercises)}, but {exc}. Run the cells above this one first "
            f"(Run > Run All Above Selected Cell), then this cell again."
        )
    culprit = _exercise_of(frame, _known_exercises(exercises))
    return (
        f"Your `{culprit}` uses `{missing}`, which is not defined{_where(frame, exc)}: a typo, or a name "
        f"that only exists inside another function. Fix it in your exercise cell"
        + (", then run its checker cell again." if results.get(culprit) is None else ". " + _next_step([culprit], results))
    )


def _expected_names(contract: Any) -> tuple[str, ...]:
    return tuple(contract.attributes) + tuple(contract.methods) + tuple(contract.submodules)


def _contract_for(obj: Any, attribute: str, exercises: Sequence[str]) -> Any:
    """The contract that covers ``obj``: its class's exercise, else a used exercise that lists ``attribute``."""
    from . import contracts

    for cls in type(obj).__mro__:
        found = contracts.CONTRACTS.get(cls.__name__)
        if found is not None and found.kind == "class":
            return found
    for name in exercises:
        found = contracts.CONTRACTS.get(name)
        if found is not None and attribute in _expected_names(found):
            return found
    return None


def _attribute_error_note(exc: AttributeError, exercises: Sequence[str], results: dict[str, Any]) -> str:
    attribute, obj = getattr(exc, "name", None), getattr(exc, "obj", None)
    frame = _raised_in_exercise(exc, exercises)
    contract = _contract_for(obj, attribute, exercises) if attribute and frame is None else None
    if contract is None or attribute not in _expected_names(contract):
        return _error_note(exc, exercises, results)
    expected = ", ".join(f"`{name}`" for name in _expected_names(contract))
    owner = contract.exercise
    note = (
        f"This cell uses `{attribute}` of your `{owner}`"
        + ("'s result" if contract.kind != "class" else "")
        + f", which has no such attribute. The course relies on these names ({contract.lesson} asks for them in "
        f"the exercise's text): {expected}. Give yours the same names."
    )
    result = results.get(owner) if owner in results else None
    if result is not None and result.status == PASSED:
        return note + f"\nYour `{owner}` passed its checker, so the checker should have caught this: please report it to the course's authors."
    if result is not None:
        return note + "\nIts checker reported a problem (see the warning above): fix that first."
    return note + "\nRun its checker cell: it checks every name the course relies on."


def _error_note(exc: BaseException, exercises: Sequence[str], results: dict[str, Any]) -> str:
    culprits = _culprits(exc, exercises)
    frame = _raised_in_exercise(exc, exercises)
    used = [name for name in culprits if name in exercises] or list(exercises)
    return (
        f"This cell uses {_names(exercises)}, which raised {type(exc).__name__}: {_first_line(exc)}"
        f"{_where(frame, exc)}.\n" + _next_step(used, results)
    )


# ---------------------------------------------------------------------------
# Carrying exercises from one notebook to the next.


def _defines(node: ast.stmt, names: set[str]) -> set[str]:
    """The names among ``names`` that a top-level statement defines."""
    return set(names_defined(node)) & names


def _code_cells(path: Path) -> list[str]:
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _register_source(path: Path, number: int, source: str) -> str:
    """A filename for one code cell of ``path``, whose lines tracebacks can show.

    Code compiled under the notebook's own path would make a traceback (and a
    checker's "at ..." line) quote the notebook's JSON; this name maps to the
    cell's source instead, through ``linecache``.
    """
    filename = f"<{path.name}, code cell {number}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return filename


def _locate_notebook(notebook: str | os.PathLike, names: Sequence[str]) -> Path:
    """The learner's notebook (here, or in Google Drive on Colab), else the course's reference, announced."""
    from . import colab

    own = colab.find_learner_notebook(notebook)
    if own is not None:
        return own
    reference = colab.reference_notebook(notebook)
    if reference is not None:
        colab.announce_reference(notebook, names, reference)
        return reference
    name = Path(notebook).name
    raise FileNotFoundError(
        f"Cannot find {name} (looked in: {colab.looked_in(notebook)}), nor the course's solutions/ folder. "
        f"This lesson reuses your code from that notebook: keep the course notebooks together in one folder "
        f"(on Colab, mount Google Drive or upload your completed {name} with the Files panel), "
        f"or paste your code for {', '.join(names)} into a cell here."
    )


def load_exercises(notebook: str | os.PathLike, names: Sequence[str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the cells of ``notebook`` that define ``names``, and return those objects.

    The imports of every cell run, and from each cell that defines one of the
    names, its functions, classes and assignments (helpers and constants the
    exercise uses; see ``_schema.loaded_statements``), in notebook order, all
    in one namespace (pass ``namespace`` to share it across several calls, so
    a class from one lesson can use a function from another). Nothing else in
    that notebook runs: no training, no plots, no checker cells.

    The notebook is looked for in the current folder, then (on Colab) in the
    mounted Google Drive's "Colab Notebooks" folder, "Copy of ..." names
    included. When it is in neither, the course's reference solution of the
    same name is used instead, with a loud notice naming what it replaced
    (see :mod:`course_utils.colab`).
    """
    path = _locate_notebook(notebook, names)
    wanted = set(names)
    ns: dict[str, Any] = namespace if namespace is not None else {}
    ns.setdefault("__name__", "__course_exercises__")
    found: set[str] = set()
    for number, source in enumerate(_code_cells(path), start=1):
        tree = parse_cell(source)
        if tree is None:
            continue
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        filename = _register_source(path, number, source)
        if imports:
            exec(compile(ast.Module(body=imports, type_ignores=[]), filename, "exec", dont_inherit=True), ns)
        for node in loaded_statements(tree, wanted):  # the exercise and the helpers of its cell
            code = compile(ast.Module(body=[node], type_ignores=[]), filename, "exec", dont_inherit=True)
            try:
                exec(code, ns)
            except Exception:  # a constant the cell computes from something that is not loaded: left out
                if _defines(node, wanted):
                    raise
            found |= _defines(node, wanted)
    missing = [n for n in names if n not in found]
    if missing:
        raise LookupError(f"{path.name} does not define {', '.join(missing)}. Did you rename it?")
    return {n: ns[n] for n in names}
