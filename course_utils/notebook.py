"""Small helpers the lesson notebooks use around the exercises.

* :func:`pick_device` chooses cuda, then mps, then cpu, and says which.
* :func:`requires` wraps a demonstration cell that uses a learner's function,
  so that an unfinished exercise gives a friendly note instead of a traceback.
* :func:`demonstrate` runs a checker on a deliberately wrong version and shows
  the verdict as a demonstration, titled with that version's name, never as
  the learner's exercise failing.
* :func:`load_exercises` brings a learner's own functions and classes from an
  earlier lesson's notebook into a later one (e.g. your attention into the
  multi-head lesson), by running the cells that define them.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import html
import json
import linecache
import os
import sys
import types
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from ._schema import (CRASH_MIME_TYPE, ERROR, FAILED, LOADED_CELL_FILENAME, PASSED, cell_source, lesson_stem,
                      loaded_statements, names_defined, parse_cell)


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


#: How a demonstration is shown: its own colours, neither the red of a failure nor the green of a pass.
_DEMO_COLOURS = ("#1565c0", "#e3f2fd")


@dataclasses.dataclass
class Demonstration:
    """A checker's verdict on a deliberately wrong version, shown as what it is: a demonstration.

    Titled with the name of the version that was checked, so that a notebook never seems to end on the
    learner's own exercise failing. It publishes no check result, so progress reports do not count it.
    """

    checked: str  # the name of the deliberately wrong version
    checker: str  # the checker that ran on it, e.g. "check_scaled_dot_product_attention"
    result: Any  # the CheckResult

    def verdict(self) -> str:
        if self.result.status.value == FAILED:
            return "the checker rejects it, as it should (your own exercise is not affected)"
        if self.result.status.value == PASSED:
            return "the checker passed it, yet it is wrong: please report this to the course's authors"
        return f"the checker says {self.result.status.value}"

    def title(self) -> str:
        return f"DEMONSTRATION: {self.checker}({self.checked}), a deliberately wrong version"

    def __str__(self) -> str:
        body = str(self.result).splitlines()[1:]  # the result's own heading names the exercise: left out
        return "\n".join([f"[{self.title()}]", f"  {self.verdict()[0].upper()}{self.verdict()[1:]}:", *body])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        border, background = _DEMO_COLOURS
        esc = html.escape
        messages = "".join(f'<div style="white-space:pre-wrap;margin:6px 0 0 0">{"<b>" if i == 0 else ""}{esc(m)}'
                           f'{"</b>" if i == 0 else ""}</div>' for i, m in enumerate(self.result.messages))
        return (f'<div style="border-left:6px solid {border};background:{background};padding:8px 12px;margin:4px 0;'
                f'font-family:sans-serif;color:#212121"><div style="color:{border}"><b>DEMONSTRATION</b> &nbsp;'
                f'<code>{esc(self.checker)}({esc(self.checked)})</code>, a deliberately wrong version</div>'
                f'<div style="margin:6px 0 0 0"><i>{esc(self.verdict()[0].upper() + self.verdict()[1:])}:</i></div>'
                f"{messages}</div>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {"text/plain": str(self), "text/html": self._repr_html_()}


def demonstrate(checker: Any, wrong: Any) -> Demonstration:
    """Run ``checker`` on ``wrong``, a deliberately wrong function or class, and show it as a demonstration."""
    name = getattr(wrong, "__name__", None) or repr(wrong)
    return Demonstration(name, getattr(checker, "__name__", repr(checker)), checker(wrong))


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
      when the name is missing because an earlier ``requires`` block stopped at an
      unfinished or failing exercise, it names that exercise instead;
    * an ``AttributeError`` on a learner's object names what the course expected
      of it (from :mod:`course_utils.contracts`), and, when its checker passed,
      says the checker should have caught it;
    * any other exception is shown as one line with the learner's source line.

    The note is displayed with, beside its text, a JSON record of the crash
    (``_schema.CRASH_MIME_TYPE``) that the progress report reads.
    """
    caller = _caller_frame()
    namespace = {**caller.f_globals, **caller.f_locals} if caller is not None else {}
    block = _block_of(caller)
    results = {name: _last_result(name, namespace) for name in exercises}
    for name, result in results.items():
        if result is not None and result.status in (FAILED, ERROR):
            print(_failing_warning(name, result))
    try:
        yield
    except NotImplementedError as exc:
        culprits = _culprits(exc, exercises) or list(exercises)
        note = f"This cell uses {_names(culprits)}. Finish that exercise first, then run this cell again."
        _stopped(block, f"{_names(culprits)} {'is' if len(culprits) == 1 else 'are'} not done yet", "finish")
        _show_note(note, exc, exercises, unfinished=True)
    except NameError as exc:
        note, cause = _name_error_note(exc, exercises, results), _stop_cause(exc, exercises, results)
        earlier = _earlier_stop(exc, exercises)
        _stopped(block, *cause)
        _show_note(note, exc, exercises, because=earlier.cause if earlier is not None else "")
    except AttributeError as exc:
        note, cause = _attribute_error_note(exc, exercises, results), _stop_cause(exc, exercises, results)
        _stopped(block, *cause)
        _show_note(note, exc, exercises)
    except Exception as exc:  # a learner's bug: one clear line, not a traceback
        note, cause = _error_note(exc, exercises, results), _stop_cause(exc, exercises, results)
        _stopped(block, *cause)
        _show_note(note, exc, exercises)
    else:
        _ran(block)


def _names(exercises: Sequence[str]) -> str:
    return ", ".join(f"`{e}`" for e in exercises) or "the exercise above"


def _caller_frame() -> types.FrameType | None:
    """The frame of the cell that opened ``with requires(...)``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, contextlib.__file__):
        frame = frame.f_back
    return frame


# What a block that stopped early leaves undefined, and why (this kernel's memory of it).


@dataclasses.dataclass
class _Stop:
    """A ``requires`` block that ended early because an exercise is unfinished or failing."""

    cause: str  # "`make_noam_scheduler` is not done yet"
    verb: str  # what to do to that exercise: "finish" or "fix"
    names: frozenset[str] | None  # what the block would have defined (None: its source could not be read)


#: The blocks that stopped early in this kernel, by the block's source (or its place when the source is not at
#: hand); a block that runs to its end later is forgotten.
_stopped_blocks: dict[object, _Stop] = {}


def _block_of(frame: types.FrameType | None) -> tuple[object, frozenset[str] | None] | None:
    """The ``with requires(...)`` block ``frame`` is entering: a key for it, and the names its body assigns."""
    if frame is None:
        return None
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    lines = linecache.getlines(filename, frame.f_globals)
    tree = parse_cell("".join(lines)) if lines else None
    headers = [
        node for node in (ast.walk(tree) if tree is not None else ())
        if isinstance(node, (ast.With, ast.AsyncWith)) and node.lineno <= lineno < node.body[0].lineno
    ]
    if not headers:
        return (filename, lineno), None
    node = max(headers, key=lambda n: n.lineno)
    source = "".join(lines[node.lineno - 1: node.end_lineno])
    return source, frozenset(_assigned(node.body))


def _assigned(body: Sequence[ast.stmt]) -> set[str]:
    """The names statements bind in their own scope (not inside the functions, classes or comprehensions they define)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return names


def _stopped(block: tuple[object, frozenset[str] | None] | None, cause: str | None, verb: str = "fix") -> None:
    """Remember that ``block`` ended early because of an exercise (``cause``: None when no exercise is to blame)."""
    if block is None:
        return
    key, names = block
    if cause is None:
        _stopped_blocks.pop(key, None)
    else:
        _stopped_blocks[key] = _Stop(cause, verb, names)


def _ran(block: tuple[object, frozenset[str] | None] | None) -> None:
    if block is not None:
        _stopped_blocks.pop(block[0], None)


def _earlier_stop(exc: NameError, exercises: Sequence[str]) -> _Stop | None:
    """The earlier block that stopped at an exercise and so left undefined the name this cell itself uses."""
    missing = getattr(exc, "name", None)
    if not missing or missing in _known_exercises(exercises) or _raised_in_exercise(exc, exercises) is not None:
        return None
    return _explained_by_a_stop(missing)


def _stop_cause(exc: BaseException, exercises: Sequence[str], results: dict[str, Any]) -> tuple[str | None, str]:
    """Why the block stopped, when an exercise is to blame: (cause in words, "finish" or "fix"); else (None, "")."""
    if isinstance(exc, NameError):
        explained = _earlier_stop(exc, exercises)
        if explained is not None:  # this block stops for the same reason as the earlier one
            return explained.cause, explained.verb
    culprits = _culprits(exc, exercises)
    if culprits:
        return f"your {_names(culprits)} raised {type(exc).__name__}: {_first_line(exc)}".rstrip(": "), "fix"
    attribute = getattr(exc, "name", None) if isinstance(exc, AttributeError) else None
    contract = _contract_for(getattr(exc, "obj", None), attribute, exercises) if attribute else None
    if contract is not None and attribute in _expected_names(contract):  # a name the course relies on is missing
        return f"your `{contract.exercise}` has no `{attribute}`", "fix"
    failing = [name for name in exercises if results.get(name) is not None and results[name].status in (FAILED, ERROR)]
    if failing:
        return f"{_names(failing)} did not pass {'its checker' if len(failing) == 1 else 'their checkers'}", "fix"
    return None, ""


def _explained_by_a_stop(missing: str) -> _Stop | None:
    """The earlier block that would have defined ``missing`` and stopped at an exercise, if there is one."""
    for stop in reversed(list(_stopped_blocks.values())):
        if stop.names is not None and missing in stop.names:
            return stop
    return None


def _stop_note(missing: str) -> str | None:
    """Why ``missing`` is not defined, when an earlier block stopped at an unfinished or failing exercise."""
    stop = _explained_by_a_stop(missing)
    if stop is not None:
        return (
            f"This cell uses `{missing}`, which was not defined because an earlier cell stopped: {stop.cause}. "
            f"{stop.verb.capitalize()} it, run its checker, then Run All again."
        )
    unknown = [s for s in _stopped_blocks.values() if s.names is None]  # blocks whose source could not be read
    if unknown:
        stop = unknown[-1]
        return (
            f"This cell uses `{missing}`, which is not defined. An earlier cell stopped early: {stop.cause}, "
            f"so `{missing}` may never have been defined. {stop.verb.capitalize()} it, run its checker, then Run All "
            f"again. (If you skipped cells above, run them first: Run > Run All Above Selected Cell.)"
        )
    return None


def _show_note(note: str, exc: BaseException, exercises: Sequence[str], unfinished: bool = False, because: str = "") -> None:
    """Show the note (in a notebook, with a JSON record of the crash for the progress report); else print it."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with Jupyter
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(note)
        return
    display({"text/plain": note, CRASH_MIME_TYPE: crash_record(exc, exercises, note, unfinished, because)}, raw=True)


def crash_record(
    exc: BaseException, exercises: Sequence[str], note: str = "", unfinished: bool = False, because: str = ""
) -> dict[str, Any]:
    """What ``requires`` publishes about a block it stopped (see ``_schema.CRASH_MIME_TYPE``)."""
    known = _known_exercises(exercises)
    culprits = _culprits(exc, exercises)
    notebooks = {}
    for frame in _frames(exc)[1:]:
        name = _exercise_of(frame, known)
        match = LOADED_CELL_FILENAME.match(frame.f_code.co_filename)
        if name and match and name not in notebooks:
            notebooks[name] = lesson_stem(match["notebook"])
    frame = _raised_in_exercise(exc, exercises)
    where = _where(frame, exc).strip()[1:-1] if frame is not None else ""
    return {
        "error": f"{type(exc).__name__}: {_first_line(exc)}".rstrip(": "),
        "exercises": culprits or (list(exercises) if unfinished else []),
        "notebooks": notebooks,
        "function": getattr(frame.f_code, "co_qualname", frame.f_code.co_name) if frame is not None else "",
        "line": where,
        "unfinished": unfinished,
        "because": because,
        "note": note,
    }


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
    if frame is None and missing not in _known_exercises(exercises):
        after_a_stop = _stop_note(missing)
        if after_a_stop is not None:
            return after_a_stop
    if frame is None or missing in _known_exercises(exercises):
        return (
            f"This cell uses {_names(exercises)}, but {exc}. Run the cells above this one first "
            f"(Run > Run All Above Selected Cell), then this cell again."
        )
    culprit = _exercise_of(frame, _known_exercises(exercises))
    return (
        f"Your `{culprit}` uses `{missing}`, which is not defined{_where(frame, exc)}: a typo, a name "
        f"that only exists inside another function, or a helper written in a cell of its own (this lesson "
        f"loads your exercise's cell alone: move the helper into it). Fix it in your exercise cell"
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
    """The sources of a notebook's code cells, read from its JSON.

    Read with :mod:`json` rather than ``nbformat.read``: importing nbformat costs about 3 s on a fresh
    kernel (its schema validator compiles URI grammars), which every lesson that loads earlier lessons
    would pay, and only the code cells' sources are needed here.
    """
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not a readable notebook (its JSON is broken: {exc}). If you edited it by "
                         f"hand, open it in Jupyter, or restore it from a copy.") from None
    if nb.get("nbformat") != 4:
        raise ValueError(f"{path} is a version {nb.get('nbformat')} notebook; the course reads version 4. "
                         f"Open it in Jupyter and save it again.")
    return [cell_source(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"]


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
    """The learner's notebook (here, a copy here, or in Google Drive on Colab), else the course's reference, announced.

    Looks afresh at every call, says in one line which file it used when that is not the notebook next to this
    one, and records what it used for :func:`loaded_summary`.
    """
    from . import colab

    found = colab.locate_learner_notebook(notebook)
    if found is not None:
        own, where = found
        if where != colab.HERE:
            colab.announce_found(notebook, own, where)
        _record_load(notebook, own, reference=False)
        return own
    reference = colab.reference_notebook(notebook)
    if reference is not None:
        colab.announce_reference(notebook, names, reference)
        _record_load(notebook, reference, reference=True)
        return reference
    name = Path(notebook).name
    raise FileNotFoundError(
        f"Cannot find {name} (looked in: {colab.looked_in(notebook)}), nor the course's solutions/ folder. "
        f"This lesson reuses your code from that notebook: keep the course notebooks together in one folder "
        f"(on Colab, mount Google Drive or upload your completed {name} with the Files panel), "
        f"or paste your code for {', '.join(names)} into a cell here."
    )


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What ``load_exercises`` used for one lesson notebook."""

    notebook: str  # the lesson asked for: "02_masks.ipynb"
    path: Path  # the file used
    reference: bool  # the course's reference solution stood in for the learner's notebook
    cell: int | None  # the notebook cell that loaded it (IPython's execution count), None outside IPython
    unfinished: tuple[str, ...] = ()  # the names asked for whose saved code still raises NotImplementedError


#: What ``load_exercises`` used, in the order loaded, since the last :func:`loaded_summary`.
loaded: list[Loaded] = []


def _current_cell() -> int | None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with Jupyter
        return None
    shell = get_ipython()
    return getattr(shell, "execution_count", None) if shell is not None else None


def _record_load(notebook: str | os.PathLike, path: Path, reference: bool) -> None:
    loaded.append(Loaded(Path(notebook).name, path, reference, _current_cell()))


def _lesson_label(name: str) -> str:
    stem = lesson_stem(name)
    return stem.split("_")[0] if stem[:2].isdigit() else stem


def _in_words(labels: Sequence[str]) -> str:
    """``01``; ``01 and 03``; ``01, 02 and 04``."""
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


def _lessons(labels: Sequence[str]) -> str:
    """``lesson 05``; ``lessons 01 to 04`` (a run with no gap); ``lessons 01, 02 and 04``."""
    if len(labels) == 1:
        return f"lesson {labels[0]}"
    numbers = [int(label) if label.isdigit() else None for label in labels]
    if None not in numbers and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"lessons {labels[0]} to {labels[-1]}"
    return f"lessons {_in_words(labels)}"


def loaded_summary() -> None:
    """Print one line on what this cell's ``load_exercises`` calls used: your code, or where the reference stood in.

    In a notebook it covers the loads of the cell that calls it; elsewhere, those since the last summary.
    """
    cell = _current_cell()
    used: dict[str, Loaded] = {}  # the last load of each lesson wins
    for record in loaded:
        if cell is None or record.cell == cell:
            used[_lesson_label(record.notebook)] = record
    loaded.clear()
    if not used:
        print("Nothing was loaded from earlier lessons.")
        return
    labels = sorted(used)
    reference = [label for label in labels if used[label].reference]
    unfinished = [f"`{name}` (lesson {label})" for label in labels for name in used[label].unfinished]
    if not reference:
        print(f"Loaded your code from {_lessons(labels)}.")
    elif len(reference) == len(labels):
        it = "it (see the note above)" if len(labels) == 1 else "all of them (see the notes above)"
        print(f"Loaded {_lessons(labels)}: the course's reference solution stands in for {it}.")
    else:
        yours = [label for label in labels if label not in reference]
        print(
            f"Loaded {_lessons(labels)}: your code for {_in_words(yours)}; the course's reference solution for "
            f"{_in_words(reference)} (see the note{'s' if len(reference) > 1 else ''} above)."
        )
    if unfinished:
        print(f"Not finished in the saved notebooks yet: {_in_words(unfinished)}. The cells that use "
              f"{'it' if len(unfinished) == 1 else 'them'} will say so: finish, run the checker, save, and run "
              f"this cell again.")


def saved_file(relative: str | os.PathLike) -> Path:
    """Where a file an earlier lesson saved is: next to this notebook, else (on Colab) in Drive's Colab Notebooks folder.

    Returns ``relative`` itself when it is in neither, so ``saved_file(...).exists()`` says whether there is one:

        checkpoint_path = saved_file(Path("checkpoints") / "06_transformer.pt")
    """
    from . import colab

    found = colab.find_saved_file(relative)
    return found if found is not None else Path(relative)


def _with_exercises_used(trees: list[ast.Module], wanted: set[str]) -> set[str]:
    """``wanted`` and, in turn, every other exercise of the same notebook that their cells use.

    An exercise may build on another of its lesson (lesson 05's layers on the lesson's own ``LayerNorm``):
    loading the layers loads that exercise's cell too, as the checkers assume.
    """
    from . import contracts

    exercises = {node.name for tree in trees for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in contracts.CONTRACTS}
    while True:
        used = {n.id for tree in trees for node in loaded_statements(tree, wanted) for n in ast.walk(node)
                if isinstance(n, ast.Name)}
        more = (used & exercises) - wanted
        if not more:
            return wanted
        wanted = wanted | more


def _still_a_stub(node: ast.AST) -> bool:
    """A function whose body (after its docstring) is only ``raise NotImplementedError``, or a class with such a
    method: an exercise as the learner's notebook first had it."""
    def stub(body: list) -> bool:
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
            body = body[1:]
        return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return stub(node.body)
    return isinstance(node, ast.ClassDef) and any(
        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and stub(item.body) for item in node.body)


class ExerciseLoadError(RuntimeError):
    """Running the cell that defines an exercise failed while a later lesson loaded it."""


def _load_failure(path: Path, number: int, names: list[str], exc: Exception) -> str:
    shown = ", ".join(f"`{n}`" for n in names)
    head = f"{path.name}, code cell {number}: defining {shown} raised {type(exc).__name__}: {exc}."
    if isinstance(exc, NameError):
        return (f"{head} This lesson runs only that cell of {path.name} (with the notebook's imports), so a name "
                f"that another cell of it defines is missing here, even where it is read only as a default "
                f"value or a decorator. Move `{getattr(exc, 'name', None) or 'it'}` into the cell that defines "
                f"{shown}, run that notebook's checker cell again, save the notebook, then run this cell again.")
    return f"{head} Fix that cell, run its checker cell again, save the notebook, then run this cell again."


def load_exercises(notebook: str | os.PathLike, names: Sequence[str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the cells of ``notebook`` that define ``names``, and return those objects.

    The imports of every cell run, and from each cell that defines one of the
    names, its functions, classes and assignments (helpers and constants the
    exercise uses; see ``_schema.loaded_statements``), in notebook order, all
    in one namespace (pass ``namespace`` to share it across several calls, so
    a class from one lesson can use a function from another). An exercise of the
    same notebook that a loaded cell uses is loaded with it (lesson 05's layers
    built on the lesson's own ``LayerNorm``). Nothing else in that notebook
    runs: no training, no plots, no checker cells.

    The notebook is looked for in the current folder, then (on Colab) in the
    mounted Google Drive's "Colab Notebooks" folder, "Copy of ..." names
    included. When it is in neither, the course's reference solution of the
    same name is used instead, with a loud notice naming what it replaced
    (see :mod:`course_utils.colab`).
    """
    path = _locate_notebook(notebook, names)
    cells = [(number, source, parse_cell(source)) for number, source in enumerate(_code_cells(path), start=1)]
    wanted = _with_exercises_used([tree for *_, tree in cells if tree is not None], set(names))
    ns: dict[str, Any] = namespace if namespace is not None else {}
    ns.setdefault("__name__", "__course_exercises__")
    found: set[str] = set()
    unfinished: set[str] = set()
    for number, source, tree in cells:
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
            except Exception as exc:  # a constant the cell computes from something that is not loaded: left out
                if _defines(node, wanted):
                    raise ExerciseLoadError(_load_failure(path, number, sorted(_defines(node, wanted)), exc)) from exc
            found |= _defines(node, wanted)
            if _still_a_stub(node):
                unfinished |= _defines(node, set(names))
    if unfinished and loaded and loaded[-1].path == path:
        loaded[-1] = dataclasses.replace(loaded[-1], unfinished=tuple(n for n in names if n in unfinished))
    missing = [n for n in names if n not in found]
    if missing:
        raise LookupError(f"{path.name} does not define {', '.join(missing)}. Did you rename it?")
    return {n: ns[n] for n in names}
