"""Run the solution notebooks in-process with learners' variants in place of the solutions.

Used by tests/test_downstream.py. A lesson's code cells run in order in one
namespace, like a kernel would run them, with three differences:

* ``overrides`` ({exercise name: implementation}) replace the solutions: right
  after the cell that defines an exercise, and in everything
  ``load_exercises`` brings from an earlier lesson (the loaded code's globals
  included, so a solution ``MultiHeadAttention`` calls the variant attention);
* ``requires`` lets every exception through (in a notebook it would turn a
  crash into a printed note, which a test would never see);
* ``shrink`` may change a lesson's configuration right after the cell that
  defines it (lesson 06 trains for a few steps of a tiny model), and
  ``load_corpus`` gives the first :data:`CORPUS_ROWS` pairs of each split,
  loaded once per test session.

The value of a cell's last expression is kept, as Jupyter shows it: a
checker's result on an exercise must be PASSED. The Colab setup cell is
skipped, IPython magics are blanked, and figures are closed after each cell.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import linecache
import os
import random
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import matplotlib
import nbformat
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course_utils import data as course_data  # noqa: E402
from course_utils import notebook as course_notebook  # noqa: E402
from course_utils import progress  # noqa: E402
from course_utils._schema import TAG_COLAB_SETUP, cell_tags, names_defined, parse_cell  # noqa: E402
from course_utils.checks import CheckResult  # noqa: E402

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
#: How many sentence pairs of each split the lessons see (the first ones).
CORPUS_ROWS = {"train": 1000, "validation": 16, "test": 16}
_corpus_cache: dict[tuple, Any] = {}
_real_load_corpus = course_data.load_corpus


def _small_corpus(source="bundled", split="train"):
    key = (str(source), split)
    if key not in _corpus_cache:
        full = _real_load_corpus(source, split)
        _corpus_cache[key] = full.select(range(min(len(full), CORPUS_ROWS.get(split, 48))))
    return _corpus_cache[key]


@dataclasses.dataclass
class CellFailure(Exception):
    """A cell of a lesson raised, or showed a checker result that did not pass."""

    lesson: str
    cell: int
    source: str
    problem: str
    implicated: tuple[str, ...] = ()  # the substituted exercises whose code the error passed through

    def __str__(self) -> str:
        head = "\n".join(self.source.splitlines()[:6])
        blame = f"\nthe error passed through the variant of: {', '.join(self.implicated)}" if self.implicated else ""
        return f"{self.lesson}, code cell {self.cell}:\n{head}\n...\n{self.problem}{blame}"


def _implicated(exc: BaseException, overrides: dict[str, Any]) -> tuple[str, ...]:
    """The exercises whose substituted code appears in the exception's traceback."""
    owners = {}
    for exercise, impl in overrides.items():
        qualname = getattr(impl, "__qualname__", None)
        module = getattr(impl, "__module__", None)
        if qualname and module in sys.modules and getattr(sys.modules[module], "__file__", None):
            owners[exercise] = (sys.modules[module].__file__, qualname)
    found = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        name = getattr(code, "co_qualname", code.co_name)
        for exercise, (filename, qualname) in owners.items():
            if code.co_filename == filename and (name == qualname or name.startswith(qualname + ".")):
                found.append(exercise)
        tb = tb.tb_next
    return tuple(dict.fromkeys(found))


@dataclasses.dataclass
class LessonRun:
    """What running one lesson produced."""

    lesson: str
    namespace: dict[str, Any]
    results: dict[int, list[CheckResult]]  # cell index (in the notebook) -> the checker results it showed
    substituted: set[str]  # overrides that were put in place at least once
    notebook: nbformat.NotebookNode

    def executed(self) -> dict:
        """The notebook as a kernel would leave it, outputs being the checker results (for the progress report)."""
        nb = nbformat.from_dict(self.notebook)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                cell.outputs = [
                    nbformat.v4.new_output("display_data", data=r._repr_mimebundle_()) for r in self.results.get(index, [])
                ]
                cell.execution_count = index + 1
        return nb


def _global_state() -> tuple:
    """What a lesson's cells change for the whole process (print options, plot style, RNGs, dtype, grad mode)."""
    print_options = dict(vars(torch._tensor_str.PRINT_OPTS))
    return (print_options, matplotlib.rcParams.copy(), torch.get_rng_state(), random.getstate(),
            torch.get_default_dtype(), torch.is_grad_enabled())


def _restore(state: tuple) -> None:
    print_options, rc, rng, py_rng, dtype, grad = state
    vars(torch._tensor_str.PRINT_OPTS).update(print_options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matplotlib.rcParams.update(rc)
    torch.set_rng_state(rng)
    random.setstate(py_rng)
    torch.set_default_dtype(dtype)
    torch.set_grad_enabled(grad)


@contextlib.contextmanager
def _transparent_requires(*exercises: str) -> Iterator[None]:
    yield


def _run_cell(source: str, namespace: dict[str, Any], filename: str) -> Any:
    """Execute a cell like IPython: its last expression's value is returned."""
    tree = parse_cell(source)
    if tree is None:
        raise SyntaxError(f"{filename} is not valid Python")
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    body = tree.body[:-1] if last is not None else tree.body
    exec(compile(ast.Module(body=body, type_ignores=[]), filename, "exec", dont_inherit=True), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval", dont_inherit=True), namespace)


@contextlib.contextmanager
def substituted(overrides: dict[str, Any], record: set[str]) -> Iterator[None]:
    """``load_exercises`` hands out the overrides; ``requires`` lets exceptions through."""
    real_load = course_notebook.load_exercises

    def load_exercises(notebook, names, namespace=None):
        ns = namespace if namespace is not None else {}
        real_load(notebook, names, ns)
        ns.update(overrides)  # the loaded code's globals see the variants too
        record.update(n for n in names if n in overrides)
        return {n: ns[n] for n in names}

    saved = course_notebook.load_exercises, course_notebook.requires, course_data.load_corpus
    course_notebook.load_exercises, course_notebook.requires = load_exercises, _transparent_requires
    course_data.load_corpus = _small_corpus
    try:
        yield
    finally:
        course_notebook.load_exercises, course_notebook.requires, course_data.load_corpus = saved


def run_lesson(
    lesson: str,
    overrides: dict[str, Any],
    workdir: Path,
    shrink: Callable[[dict[str, Any]], None] | None = None,
    stop_after: int | None = None,
) -> LessonRun:
    """Run the code cells of ``solutions/<lesson>.ipynb`` in ``workdir`` (which holds copies of the solutions)."""
    nb = nbformat.read(str(SOLUTIONS / f"{lesson}.ipynb"), as_version=4)
    checked = {index for index, _ in progress.exercises(nb)}
    ns: dict[str, Any] = {"__name__": "__main__", "display": lambda *objs, **kw: [repr(o) for o in objs]}
    results: dict[int, list[CheckResult]] = {}
    record: set[str] = set()
    shrunk = None
    cwd, threads = os.getcwd(), torch.get_num_threads()
    saved = _global_state()
    os.chdir(workdir)
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and steady on a busy machine
    try:
        with substituted(overrides, record), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            for index, cell in enumerate(nb.cells):
                if stop_after is not None and index > stop_after:
                    break
                if cell.cell_type != "code" or TAG_COLAB_SETUP in cell_tags(cell):
                    continue
                try:
                    value = _run_cell(cell.source, ns, f"<{lesson}, cell {index}>")
                except Exception as exc:
                    blame = _implicated(exc, overrides)
                    raise CellFailure(lesson, index, cell.source, traceback.format_exc(limit=-8), blame) from None
                finally:
                    plt.close("all")
                tree = parse_cell(cell.source)
                defined = {n for node in tree.body for n in names_defined(node)} if tree is not None else set()
                for name in defined & set(overrides):
                    ns[name] = overrides[name]
                    record.add(name)
                if shrink is not None and ns.get("config") is not None and ns["config"] is not shrunk:
                    shrink(ns)  # a new configuration (it may be set inside an if)
                    shrunk = ns.get("config")
                if isinstance(value, CheckResult):
                    results.setdefault(index, []).append(value)
                    if index in checked and not value.passed:
                        raise CellFailure(lesson, index, cell.source, f"the checker did not pass:\n{value}")
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
        _restore(saved)
    return LessonRun(lesson, ns, results, record, nb)
