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
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from ._schema import names_defined, parse_cell


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
    """Run a demonstration block; if an exercise it uses is unfinished, say so instead of failing.

        with requires("scaled_dot_product_attention"):
            output, weights = scaled_dot_product_attention(q, k, v)
            plot_attention(weights, tokens)

    ``NotImplementedError`` (an untouched exercise) prints which exercise to
    finish first; a ``NameError`` asks to run the cells above first. Any other exception is shown as one line, with a pointer to
    the exercise's checker, which explains such problems in detail.
    """
    names = ", ".join(f"`{e}`" for e in exercises) or "the exercise above"
    try:
        yield
    except NotImplementedError:
        print(f"This cell uses {names}. Finish that exercise first, then run this cell again.")
    except NameError as exc:
        print(
            f"This cell uses {names}, but {exc}. Run the cells above this one first "
            f"(Run > Run All Above Selected Cell), then this cell again."
        )
    except Exception as exc:  # a learner's bug: one clear line, not a traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(
            f"This cell uses {names}, which raised {type(exc).__name__}: {first}\n"
            f"Run its checker cell to find out what to fix."
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


def load_exercises(notebook: str | os.PathLike, names: Sequence[str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the cells of ``notebook`` that define ``names``, and return those objects.

    The notebook's import cells run first, then each cell that defines one of
    the names, in notebook order, all in one namespace (pass ``namespace`` to
    share it across several calls, so a class from one lesson can use a
    function from another). Nothing else in that notebook runs: no training,
    no plots, no checker cells.
    """
    path = Path(notebook)
    if not path.exists():
        raise FileNotFoundError(
            f"Cannot find {path}. This lesson reuses your code from that notebook: keep the course "
            f"notebooks together in one folder (on Colab, upload your completed {path.name} with the "
            f"Files panel), or paste your code for {', '.join(names)} into a cell here."
        )
    wanted = set(names)
    ns: dict[str, Any] = namespace if namespace is not None else {}
    ns.setdefault("__name__", "__course_exercises__")
    found: set[str] = set()
    for number, source in enumerate(_code_cells(path), start=1):
        tree = parse_cell(source)
        if tree is None:
            continue
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        defining = [n for n in tree.body if _defines(n, wanted)]
        filename = _register_source(path, number, source)
        if imports:
            exec(compile(ast.Module(body=imports, type_ignores=[]), filename, "exec", dont_inherit=True), ns)
        if defining:
            exec(compile(ast.Module(body=defining, type_ignores=[]), filename, "exec", dont_inherit=True), ns)
            for node in defining:
                found |= _defines(node, wanted)
    missing = [n for n in names if n not in found]
    if missing:
        raise LookupError(f"{path.name} does not define {', '.join(missing)}. Did you rename it?")
    return {n: ns[n] for n in names}
