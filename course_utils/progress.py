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

A green checker is not the last word: every cell that raised is listed under
the table, per notebook, with whose code raised. That is read from the
traceback of an error output (frames of the notebook's own cells, and of the
cells ``load_exercises`` ran, name functions and ``Class.method``s), and from
the record a ``with requires(...)`` block publishes under ``CRASH_MIME_TYPE``
when it stops (it shows a note, not an error). An exercise whose checker
passed but whose code raised in a later cell (of any notebook) is an "error",
its note saying which cell.
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
    CRASH_MIME_TYPE,
    ERROR,
    FAILED,
    LOADED_CELL_FILENAME,
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
    lesson_stem,
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
class Crash:
    """A code cell that raised: an error in its output, or a ``with requires(...)`` block it stopped."""

    notebook: str
    cell: int  # the code cell's number in its notebook, from 1 (as ``load_exercises`` names cells)
    error: str  # "AttributeError: 'int' object has no attribute 'size'"
    exercises: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (exercise, its lesson), outermost first
    where: str = ""  # the innermost line of the learner's code: "raised in `MultiHeadAttention.forward`, line 3: `...`"
    unfinished: bool = False  # a NotImplementedError: an exercise not done yet
    because: str = ""  # a name left undefined by an earlier block that stopped: why it stopped

    def whose(self) -> str:
        """Whose code raised, in words."""
        if not self.exercises and self.because:
            return f"an earlier cell stopped: {self.because}"
        if not self.exercises:
            return "an exercise not done yet" if self.unfinished else "this notebook's own code"
        names = ", ".join(f"`{name}`" + (f" from {lesson}" if lesson != self.notebook else "") for name, lesson in self.exercises)
        return f"{names} {'is' if len(self.exercises) == 1 else 'are'} not done yet" if self.unfinished else f"your {names}"

    def __str__(self) -> str:
        return f"code cell {self.cell}: {self.error} ({self.whose()}{'; ' + self.where if self.where else ''})"


@dataclasses.dataclass
class Progress:
    """The rows of the report, in notebook order, and the cells that raised an error."""

    rows: list[Row]
    crashes: list[Crash] = dataclasses.field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(row.status == status for row in self.rows)

    def crashes_by_notebook(self) -> dict[str, list[Crash]]:
        grouped: dict[str, list[Crash]] = {}
        for crash in self.crashes:
            grouped.setdefault(crash.notebook, []).append(crash)
        return grouped

    def summary(self) -> str:
        total = len(self.rows)
        line = f"{self.count(PASSED)} of {total} exercise{'s' if total != 1 else ''} passed"
        rest = [f"{self.count(s)} {s}" for s in STATUSES[1:] if self.count(s)]
        line += f" ({', '.join(rest)})" if rest else ""
        if self.crashes:
            where = [
                f"{notebook} (code cell{'s' if len(found) > 1 else ''} {', '.join(str(c.cell) for c in found)})"
                for notebook, found in self.crashes_by_notebook().items()
            ]
            line += f"; cells that raised an error: {', '.join(where)}"
        return line

    def __str__(self) -> str:
        """A table, each failure's message indented beneath its row, then the cells that raised, per notebook."""
        header = ("notebook", "exercise", "status")
        widths = [max(len(row[i]) for row in [header] + [(r.notebook, r.exercise, r.status) for r in self.rows]) for i in range(3)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

        lines = [line(header), line(["-" * w for w in widths])]
        for r in self.rows:
            lines.append(line((r.notebook, r.exercise, r.status)))
            lines += [f"    {text}".rstrip() for text in r.message.splitlines()]
        if self.crashes:
            lines += ["", "Cells that raised an error:"]
            for notebook, found in self.crashes_by_notebook().items():
                lines.append(f"  {notebook}")
                lines += [f"    {crash}" for crash in found]
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
        crashes = ""
        if self.crashes:
            items = "".join(
                f"<li>{esc(notebook)}<ul>{''.join(f'<li>{esc(str(crash))}</li>' for crash in found)}</ul></li>"
                for notebook, found in self.crashes_by_notebook().items()
            )
            crashes = f'<p style="font-family:sans-serif">Cells that raised an error:</p><ul style="font-family:sans-serif">{items}</ul>'
        return (
            '<table style="border-collapse:collapse;font-family:sans-serif">'
            "<thead><tr><th>notebook</th><th>exercise</th><th>status</th><th>note</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>"
            f"{crashes}<p><b>{esc(self.summary())}</b></p>"
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
# Cells that raised, and whose code raised


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: The first line of a traceback entry, as IPython 8+ writes it (``Cell In[12], line 3, in greedy_decode(model)``,
#: ``File <05_transformer.ipynb, code cell 12>:3, in MultiHeadAttention.forward(self, x)``), and as IPython 7
#: (Colab) writes it (``<ipython-input-12-5ac1...> in greedy_decode(model)``).
_ENTRY = re.compile(
    r"^(?:Cell In ?\[(?P<count>\d+)\], line (?P<line>\d+)"
    r"|Input In ?\[(?P<input>\d+)\]"
    r"|File (?P<file>.+?):(?P<file_line>\d+)(?=,|$)"
    r"|(?P<legacy><ipython-input-\d+-\w+>|<[^<>]+\.ipynb, code cell \d+>|\S+\.py))"
    r"(?:,? in (?P<function>[^\s(]+))?"
)
_ARROW = re.compile(r"^\s*-+>\s*(?P<line>\d+)\s?(?P<code>.*)$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


@dataclasses.dataclass
class _Frame:
    lesson: str  # the lesson notebook whose code this is ("" for library code)
    function: str  # the qualified name IPython shows ("MultiHeadAttention.forward"); "" at a cell's top level
    line: str  # "line 3: `return x.shape`"


def _traceback_frames(traceback: Sequence[str], notebook: str) -> list[_Frame]:
    """The frames of an error output's traceback (of its last exception, when exceptions were chained)."""
    frames: list[_Frame] = []
    for entry in traceback:
        text = _ANSI.sub("", str(entry))
        if any(marker in text for marker in _CHAINED):
            frames = []
            continue
        first, *rest = text.split("\n")
        match = _ENTRY.match(first.strip())
        if match is None:
            continue
        place = match["file"] or match["legacy"] or ""
        loaded = LOADED_CELL_FILENAME.match(place)
        if loaded:
            lesson = lesson_stem(loaded["notebook"])
        elif match["count"] or match["input"] or place.startswith("<ipython-input-"):
            lesson = notebook
        else:
            lesson = ""  # a library's file
        function = match["function"] or ""
        arrows = [a for a in (_ARROW.match(line) for line in rest) if a]
        line = f"line {arrows[-1]['line']}: `{arrows[-1]['code'].strip()}`" if arrows else ""
        frames.append(_Frame(lesson, "" if function.startswith("<") else function, line))
    return frames


def _exercise_in(function: str, known: set[str]) -> str | None:
    """The exercise a function belongs to: its own name, or its class's (``MultiHeadAttention.forward``)."""
    for part in reversed(function.split(".")):
        if part in known:
            return part
    return None


def _crash_from_error(notebook: str, cell: int, output: dict, known: set[str]) -> Crash:
    ename = str(output.get("ename", "Error"))
    frames = [f for f in _traceback_frames(output.get("traceback") or [], notebook) if f.lesson]  # the learner's code
    exercises: list[tuple[str, str]] = []
    for frame in frames:
        name = _exercise_in(frame.function, known)
        if name and (name, frame.lesson) not in exercises:
            exercises.append((name, frame.lesson))
    inner = frames[-1] if frames else None
    where = ""
    if inner is not None and inner.line:
        where = f"raised in `{inner.function}`, {inner.line}" if inner.function else f"raised at {inner.line}"
    error = f"{ename}: {_first_line(output.get('evalue', ''))}".rstrip(": ")
    return Crash(notebook, cell, error, exercises, where, unfinished=ename == "NotImplementedError")


def _crash_from_record(notebook: str, cell: int, record: dict) -> Crash:
    lessons = record.get("notebooks") or {}
    exercises = [(str(name), str(lessons.get(name, notebook))) for name in record.get("exercises") or []]
    function, line = str(record.get("function") or ""), str(record.get("line") or "")
    where = f"raised in `{function.rpartition('<locals>.')[2]}`, {line}" if function and line else ""
    return Crash(notebook, cell, str(record.get("error") or "Error"), exercises, where, bool(record.get("unfinished")),
                 str(record.get("because") or ""))


def crashes(name: str, executed: dict, known: Iterable[str]) -> list[Crash]:
    """The cells of one executed notebook that raised: error outputs, and blocks ``requires`` stopped.

    ``known`` are the exercises of all the notebooks: a frame of a function or method of one of them (in a cell
    of this notebook, or in a cell ``load_exercises`` ran) blames that exercise.
    """
    known = set(known)
    found = []
    code_cells = (cell for cell in executed.get("cells", []) if cell.get("cell_type") == "code")
    for number, cell in enumerate(code_cells, start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(_crash_from_error(name, number, out, known))
            elif out.get("output_type") in ("display_data", "execute_result") and CRASH_MIME_TYPE in out.get("data", {}):
                found.append(_crash_from_record(name, number, out["data"][CRASH_MIME_TYPE]))
    return found


def blame(rows: Sequence[Row], found: Sequence[Crash]) -> None:
    """An exercise whose checker passed but whose code raised in a later cell is an error, not a pass."""
    hits: dict[tuple[str, str], list[Crash]] = {}
    for crash in found:
        for exercise, lesson in crash.exercises:
            hits.setdefault((lesson, exercise), [])
            if crash not in hits[(lesson, exercise)]:
                hits[(lesson, exercise)].append(crash)
    for row in rows:
        crashed = hits.get((row.notebook, row.exercise))
        if row.status != PASSED or not crashed:
            continue
        first = crashed[0]
        row.status = ERROR
        row.message = (
            f"its checker passed, but code cell {first.cell} of {first.notebook} crashed inside it: {first.error}"
            + (f" ({first.where})" if first.where else "")
            + (f"\n(and {len(crashed) - 1} more cell{'s' if len(crashed) > 2 else ''}: see the cells listed below)" if len(crashed) > 1 else "")
        )


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
    ran: list[tuple[str, dict]] = []  # (notebook, executed)
    known: set[str] = set()  # every exercise of every notebook, to tell whose code raised
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
            ran.append((stem, executed))
            known |= {exercise for _, checked in found for exercise in checked} | {row.exercise for row in notebook_rows}
    raised = [crash for stem, executed in ran for crash in crashes(stem, executed, known)]
    blame(rows, raised)
    return Progress(rows, raised)


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
