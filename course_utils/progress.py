"""How far you are: run your notebooks and collect what their checkers say.

    python -m course_utils.progress [notebooks/] [--fast] [--timeout SECONDS]

    from course_utils.progress import show      # inside a notebook
    show(fast=True)                             # a coloured table (chart=True adds a bar chart)

Each notebook runs headless (nbclient) on a copy in a temporary folder, with
the other notebooks next to it (later lessons load your code from earlier
ones). Your files are never written to. Errors do not stop a notebook; a cell
that runs too long is interrupted. ``--fast`` sets ``COURSE_FAST=1`` in the
kernels, so that lesson 06 trains a tiny model for a few steps instead of its
full run; the checkers' results do not depend on it. Without it, the kernels
get your environment as it is.

Every checker result publishes itself as JSON under ``RESULT_MIME_TYPE``; the
exercises are found in the source (cells calling ``check_<name>(exercise)``),
so an exercise whose cell never ran (the kernel died before it) is reported as
"not reached". Each exercise is named as you define it (the checker's
argument, e.g. ``make_causal_mask``), and each failure shows the checker's
first message in full. Runs offline; the exit status is 0 whatever the results.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from ._schema import (
    ERROR,
    FAILED,
    NOT_ATTEMPTED,
    NOT_REACHED,
    NOTEBOOK_NAME,
    PASSED,
    PROGRESS_ENV,
    RESULT_MIME_TYPE,
    STATUS_COLOURS,
    TAG_CHECKER_DEMO,
    TAG_COLAB_SETUP,
    cell_source,
    cell_tags,
    names_defined,
    parse_cell,
)

STATUSES = (PASSED, FAILED, NOT_ATTEMPTED, ERROR, NOT_REACHED)
_COLOURS = STATUS_COLOURS  # (text, background)
_IGNORED_WHEN_COPYING = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", ".course_progress", ".git")
DEFAULT_TIMEOUT = 300


@dataclasses.dataclass
class Row:
    """One exercise of one notebook."""

    notebook: str
    exercise: str
    status: str
    message: str = ""  # what went wrong: the checker's first message, in full


@dataclasses.dataclass
class Progress:
    """The rows of the report, in notebook order."""

    rows: list[Row]

    def count(self, status: str) -> int:
        return sum(row.status == status for row in self.rows)

    def summary(self) -> str:
        total = len(self.rows)
        line = f"{self.count(PASSED)} of {total} exercise{'s' if total != 1 else ''} passed"
        rest = [f"{self.count(s)} {s}" for s in STATUSES[1:] if self.count(s)]
        return line + (f" ({', '.join(rest)})" if rest else "")

    def __str__(self) -> str:
        """A table, each failure's message indented beneath its row."""
        header = ("notebook", "exercise", "status")
        widths = [max(len(row[i]) for row in [header] + [(r.notebook, r.exercise, r.status) for r in self.rows]) for i in range(3)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

        lines = [line(header), line(["-" * w for w in widths])]
        for r in self.rows:
            lines.append(line((r.notebook, r.exercise, r.status)))
            lines += [f"    {text}".rstrip() for text in r.message.splitlines()]
        return "\n".join(lines) + "\n\n" + self.summary()

    def _repr_html_(self) -> str:
        esc = html.escape
        body = []
        for r in self.rows:
            text, background = _COLOURS.get(r.status, ("#000000", "#ffffff"))
            body.append(
                f'<tr style="background:{background};color:{text}">'
                f"<td>{esc(r.notebook)}</td><td><code>{esc(r.exercise)}</code></td>"
                f'<td><b>{esc(r.status)}</b></td><td style="white-space:pre-wrap">{esc(r.message)}</td></tr>'
            )
        return (
            '<table style="border-collapse:collapse;font-family:sans-serif">'
            "<thead><tr><th>notebook</th><th>exercise</th><th>status</th><th>note</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>"
            f"<p><b>{esc(self.summary())}</b></p>"
        )

    def plot(self, ax: Any = None) -> Any:
        """A stacked bar per notebook: how many exercises are in each state."""
        import matplotlib.pyplot as plt

        notebooks = list(dict.fromkeys(r.notebook for r in self.rows))
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 0.5 + 0.4 * max(len(notebooks), 1)))
        left = [0] * len(notebooks)
        for status in STATUSES:
            counts = [sum(r.notebook == nb and r.status == status for r in self.rows) for nb in notebooks]
            if any(counts):
                ax.barh(notebooks, counts, left=left, color=_COLOURS[status][0], label=status)
                left = [a + b for a, b in zip(left, counts)]
        ax.invert_yaxis()
        ax.set_xlabel("exercises")
        ax.set_title(self.summary())
        ax.legend(loc="lower right", fontsize="small")
        return ax


def _first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


# ---------------------------------------------------------------------------
# Reading notebooks


def _defined_here(tree: ast.Module) -> set[str]:
    return {name for node in tree.body for name in names_defined(node)}


def checker_calls(source: str) -> list[str]:
    """The exercises a cell checks, in order, named as the learner defines them.

    ``check_noam_lr(noam_lr)`` -> ``["noam_lr"]``; ``check_causal_mask(make_causal_mask)``
    -> ``["make_causal_mask"]`` (the checker's argument; the checker's own name
    when the argument is not a plain name). A call on something the same cell
    defines (a deliberately wrong version, shown to demonstrate a failure) is a
    demonstration, not an exercise.
    """
    tree = parse_cell(source)
    if tree is None:
        return [arg or name for name, arg in re.findall(r"(?<!def )\bcheck_(\w+)\s*\(\s*(?:(\w+)\s*\))?", source)]
    local = _defined_here(tree)
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if not name.startswith("check_") or len(name) == len("check_"):
                continue
            argument = node.args[0].id if node.args and isinstance(node.args[0], ast.Name) else None
            if argument in local:
                continue
            calls.append((node.lineno, node.col_offset, argument or name[len("check_"):]))
    return [name for _, _, name in sorted(calls)]


def exercises(nb: dict) -> list[tuple[int, list[str]]]:
    """(cell index, exercises checked there, in call order) for every code cell that checks an exercise."""
    found = []
    for index, cell in enumerate(nb.get("cells", [])):
        tags = cell_tags(cell)
        if cell.get("cell_type") != "code" or TAG_COLAB_SETUP in tags or TAG_CHECKER_DEMO in tags:
            continue
        names = checker_calls(cell_source(cell))
        if names:
            found.append((index, names))
    return found


def _results(cell: dict) -> list[dict]:
    return [
        out["data"][RESULT_MIME_TYPE]
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result") and RESULT_MIME_TYPE in out.get("data", {})
    ]


def _error(cell: dict) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename', 'Error')}: {_first_line(out.get('evalue', ''))}".rstrip(": ")
    return None


def grade(name: str, executed: dict, exercises_found: Iterable[tuple[int, list[str]]] | None = None) -> list[Row]:
    """The rows for one executed notebook; an exercise checked twice counts once (its first check)."""
    rows = []
    reported: set[str] = set()
    cells = executed.get("cells", [])
    for index, names in exercises_found if exercises_found is not None else exercises(executed):
        cell = cells[index]
        results = _results(cell)
        error = _error(cell)
        for i, exercise in enumerate(names):
            result = results[i] if i < len(results) else None
            if result is not None and isinstance(result.get("exercise"), str) and result["exercise"]:
                exercise = result["exercise"]  # the name the checker gives the exercise
            if exercise in reported:
                continue
            reported.add(exercise)
            if result is not None:
                status = result.get("status", ERROR)
                messages = result.get("messages") or [""]
                note = str(messages[0]).strip() if status in (FAILED, ERROR) else ""
                rows.append(Row(name, exercise, status, note))
            elif cell.get("execution_count") is None and not cell.get("outputs"):
                rows.append(Row(name, exercise, NOT_REACHED, "the notebook stopped before this cell ran"))
            elif error:
                rows.append(Row(name, exercise, ERROR, error))
            else:
                rows.append(Row(name, exercise, ERROR, "the checker cell ran but showed no result (is the check the cell's last line?)"))
    return rows


# ---------------------------------------------------------------------------
# Running notebooks


def _clear(nb: dict) -> dict:
    """A copy without outputs, so that stale results from the learner's own session are never read."""
    nb = copy.deepcopy(nb)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def kernel_environment(fast: bool = False) -> dict[str, str]:
    """The environment the notebooks run in: yours, marked as a progress run, with ``COURSE_FAST=1`` when ``fast``."""
    env = dict(os.environ)
    if fast:
        env["COURSE_FAST"] = "1"
    env[PROGRESS_ENV] = "1"
    return env


def execute(path: Path, timeout: int = DEFAULT_TIMEOUT, kernel_name: str | None = None, fast: bool = False) -> tuple[dict, str | None]:
    """Run the notebook at ``path`` (already a copy) in its folder; return it executed and why it stopped early, if it did."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    nb = nbformat.from_dict(_clear(nb))
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name or nb.metadata.get("kernelspec", {}).get("name", "python3"),
        allow_errors=True,
        interrupt_on_timeout=True,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    stopped = None
    try:
        client.execute(env=kernel_environment(fast), stderr=subprocess.DEVNULL)  # the kernel's own log lines are noise here
    except Exception as exc:  # the kernel died or could not start: the rest is "not reached"
        stopped = f"{type(exc).__name__}: {_first_line(str(exc))}"
    return json.loads(nbformat.writes(client.nb)), stopped


def report(
    notebooks_dir: str | Path = ".",
    timeout: int = DEFAULT_TIMEOUT,
    kernel_name: str | None = None,
    verbose: bool = False,
    fast: bool = False,
) -> Progress:
    """Run every ``NN_*.ipynb`` of the folder on a copy and collect the checkers' results (``fast``: with ``COURSE_FAST=1``)."""
    folder = Path(notebooks_dir)
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and NOTEBOOK_NAME.match(p.name))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="course-progress-") as tmp:
        copy_dir = Path(tmp) / (folder.resolve().name or "notebooks")
        shutil.copytree(folder, copy_dir, ignore=_IGNORED_WHEN_COPYING, symlinks=False)
        for name in names:
            stem = name.removesuffix(".ipynb")
            try:
                original = json.loads((copy_dir / name).read_text(encoding="utf-8"))
                found = exercises(original)
            except (OSError, ValueError, AttributeError, TypeError) as exc:
                rows.append(Row(stem, "-", ERROR, f"cannot read this notebook ({type(exc).__name__}: {_first_line(str(exc))})"))
                continue
            if not found:
                continue
            if verbose:
                print(f"running {name} ...", file=sys.stderr, flush=True)
            executed, stopped = execute(copy_dir / name, timeout=timeout, kernel_name=kernel_name, fast=fast)
            notebook_rows = grade(stem, executed, found)
            if stopped:
                for row in notebook_rows:
                    if row.status == NOT_REACHED:
                        row.message = f"the notebook stopped before this cell ran ({stopped})"
            rows += notebook_rows
    return Progress(rows)


def show(notebooks_dir: str | Path | None = None, timeout: int = DEFAULT_TIMEOUT, chart: bool = False, fast: bool = False) -> Progress | None:
    """Inside a notebook: run the course notebooks and display a coloured table (and a chart with ``chart=True``).

    ``fast=True`` runs them with ``COURSE_FAST=1``, as ``--fast`` does.
    """
    if os.environ.get(PROGRESS_ENV):
        print("(The progress report does not run inside a progress run.)")
        return None
    progress = report(notebooks_dir if notebooks_dir is not None else Path.cwd(), timeout=timeout, fast=fast)
    try:
        from IPython.display import display

        display(progress)
    except ImportError:  # pragma: no cover - IPython ships with Jupyter
        print(progress)
    if chart:
        import matplotlib.pyplot as plt

        progress.plot()
        plt.show()
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.progress",
        description=(
            "Run your notebooks (on copies: your files are never changed) and report, for every exercise, "
            "whether its checker passed, with each failure's first message."
        ),
        epilog=(
            "Fast mode: --fast sets the environment variable COURSE_FAST=1 in the notebooks' kernels, which "
            "makes lesson 06 train a tiny model for a few steps (minutes for the whole report instead of a full "
            "training run). The checkers' results are the same either way. Setting COURSE_FAST=1 yourself has "
            "the same effect."
        ),
    )
    parser.add_argument("notebooks", nargs="?", type=Path, default=None, help="folder of your notebooks (default: ./notebooks, else .)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help=f"seconds a cell may run (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--kernel", default=None, help="Jupyter kernel to use (default: the notebook's own)")
    parser.add_argument("--fast", action="store_true", help="run the notebooks with COURSE_FAST=1: a tiny, quick training run in lesson 06")
    args = parser.parse_args(argv)
    folder = args.notebooks
    if folder is None:
        folder = Path("notebooks") if Path("notebooks").is_dir() else Path(".")
    if not folder.is_dir():
        print(f"error: no folder {folder}", file=sys.stderr)
        return 2
    progress = report(folder, timeout=args.timeout, kernel_name=args.kernel, verbose=True, fast=args.fast)
    if not progress.rows:
        print(f"No exercises found in {folder} (looked for NN_*.ipynb notebooks with checker cells).")
        return 0
    print(progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
