"""What the authoring tools and the learner runtime agree on about notebooks.

The marker lines that delimit a solution, the cell tags and metadata keys the
generator writes, and the one small scanner that finds solution regions in a
code cell (used by ``generate`` to blank them and by ``solutions`` to show
them). Nothing here imports torch or the checkers.

Marker rules (code cells only; markdown and raw cells are never scanned, so
prose may quote the markers freely):

* a region starts at a line that is exactly ``### BEGIN SOLUTION`` and ends at
  the next line that is exactly ``### END SOLUTION`` (surrounding whitespace
  ignored); its indentation is that of its BEGIN line;
* lines ``### STARTER: <code>`` right after BEGIN are the starter code that
  replaces the region in the exercise (one space after the colon is dropped,
  anything more is kept as extra indentation); without them the region
  becomes ``# YOUR CODE HERE`` and ``raise NotImplementedError()``;
* a region lies within one cell; an unclosed region, a BEGIN inside a region,
  an END without BEGIN, a STARTER line anywhere else, and a line that looks
  like a marker but is not spelled exactly (``## BEGIN SOLUTION``,
  ``### END SOLUTIONS``) are errors.
"""

from __future__ import annotations

import ast
import dataclasses
import re

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
STARTER_PREFIX = "### STARTER:"
#: What an exercise shows in place of a region without starter lines.
STUB_LINES = ("# YOUR CODE HERE", "raise NotImplementedError()")

#: Cell tags.
TAG_SOLUTION_ONLY = "solution-only"  # removed from exercise notebooks
TAG_COLAB_BADGE = "colab-badge"  # stamped by the generator
TAG_COLAB_SETUP = "colab-setup"  # stamped by the generator
TAG_LESSON_NEEDS = "lesson-needs"  # stamped by the generator after the title, from course_utils.lessons
TAG_LESSON_MAP = "lesson-map"  # stamped by the generator after the needs: the lesson's map of the model
TAG_CONTRACT_BOX = "contract-box"  # stamped by the generator before each exercise's cell: its contract, collapsed
#: A cell that runs a checker on purpose on something other than the learner's
#: exercise (e.g. to show what a failure looks like): not counted as an exercise.
#: A checker call on a function defined in the same cell is treated the same way.
TAG_CHECKER_DEMO = "checker-demo"
#: Given by the generator to an exercise cell that raises NotImplementedError
#: when run (a region outside any function): nbval and JupyterLab's "Run All"
#: then expect the error and go on.
TAG_RAISES_EXCEPTION = "raises-exception"

#: Notebook metadata the generator records in each exercise notebook:
#: ``metadata["course"] = {"generated_from": "solutions/01_x.ipynb", "generated_sha256": "..."}``.
META_KEY = "course"
META_SOURCE = "generated_from"
META_HASH = "generated_sha256"

#: Environment variable the progress report sets in the kernels it starts.
PROGRESS_ENV = "COURSE_PROGRESS_RUN"

#: The MIME type under which a CheckResult publishes itself as JSON, so that
#: the progress report can read results out of executed notebooks without
#: importing torch. Defined here only; the checker engine imports it.
RESULT_MIME_TYPE = "application/vnd.course-utils.check+json"

#: The MIME type under which ``notebook.requires`` publishes, as JSON, a block it
#: stopped because the code raised (beside ``text/plain``: the note the learner
#: reads), so that the progress report can list the crash and blame the
#: exercises whose code raised. Keys: "error" ("ValueError: its first line"),
#: "exercises" (whose code the exception went through, outermost first),
#: "notebooks" (exercise -> the lesson notebook its code was loaded from, for
#: code run by ``load_exercises``), "function" and "line" (the innermost of the
#: learner's frames: its qualified name, and ``line N: `code` ``), "unfinished"
#: (a NotImplementedError: an exercise not done yet), "because" (for a name an
#: earlier block left undefined when it stopped: why that block stopped, e.g.
#: "`make_noam_scheduler` is not done yet") and "note".
CRASH_MIME_TYPE = "application/vnd.course-utils.crash+json"

#: The filename under which ``notebook.load_exercises`` compiles a loaded cell
#: (``<05_transformer.ipynb, code cell 12>``), as tracebacks show it.
LOADED_CELL_FILENAME = re.compile(r"^<(?P<notebook>[^<>]+?\.ipynb), code cell (?P<cell>\d+)>$")
#: How Colab and browsers name copies of a notebook: ``Copy of 01_x.ipynb``, ``01_x (1).ipynb``.
_COPY_PREFIX, _COPY_SUFFIX = re.compile(r"^(?:Copy of )+", re.IGNORECASE), re.compile(r" \(\d+\)$")


def lesson_stem(name: str) -> str:
    """The lesson a notebook file stands for: ``Copy of 04_mha (1).ipynb`` -> ``04_mha``."""
    stem = name[: -len(".ipynb")] if name.lower().endswith(".ipynb") else name
    return _COPY_SUFFIX.sub("", _COPY_PREFIX.sub("", stem))


#: The outcomes of a checker, as stored in that JSON ("status"), and the one
#: the progress report adds for an exercise a notebook never reached.
PASSED, FAILED, NOT_ATTEMPTED, ERROR = "passed", "failed", "not attempted", "error"
NOT_REACHED = "not reached"
#: How each outcome is shown: its label, and (border/text, background) colours.
STATUS_LABELS = {PASSED: "PASSED", FAILED: "FAILED", NOT_ATTEMPTED: "NOT ATTEMPTED", ERROR: "ERROR", NOT_REACHED: "NOT REACHED"}
STATUS_COLOURS = {
    PASSED: ("#2e7d32", "#e8f5e9"),
    FAILED: ("#c62828", "#ffebee"),
    NOT_ATTEMPTED: ("#616161", "#f5f5f5"),
    ERROR: ("#e65100", "#fff3e0"),
    NOT_REACHED: ("#4a148c", "#f3e5f5"),
}

#: Notebooks the tools work on: ``NN_topic.ipynb``.
NOTEBOOK_NAME = re.compile(r"^\d\d_[^/\\]*\.ipynb$")

_LOOKS_LIKE_MARKER = re.compile(r"^#+\s*(BEGIN|END)\s*SOLUTION", re.IGNORECASE)
_LOOKS_LIKE_STARTER = re.compile(r"^#+\s*STARTER\b", re.IGNORECASE)


class MarkerError(ValueError):
    """A solution marker is unclosed, nested, stray or misspelt."""


@dataclasses.dataclass(frozen=True)
class Region:
    """One solution region of a cell: line numbers are 0-based indices into ``source.split("\\n")``."""

    begin: int  # the BEGIN line
    end: int  # the END line
    indent: str  # the BEGIN line's indentation
    starter: tuple[str, ...]  # starter lines, without the region's indentation

    @property
    def body_start(self) -> int:
        """The first line of the solution itself (after BEGIN and the STARTER lines)."""
        return self.begin + 1 + len(self.starter)

    def replacement(self) -> list[str]:
        """The lines that stand for this region in the exercise."""
        lines = self.starter or STUB_LINES
        return [self.indent + line if line else "" for line in lines]


def _kind(stripped: str) -> str | None:
    """``"begin"``, ``"end"``, ``"starter"``, ``"bad"`` (misspelt marker) or None."""
    if stripped == BEGIN_SOLUTION:
        return "begin"
    if stripped == END_SOLUTION:
        return "end"
    if stripped.startswith(STARTER_PREFIX):
        return "starter"
    if _LOOKS_LIKE_MARKER.match(stripped) or _LOOKS_LIKE_STARTER.match(stripped):
        return "bad"
    return None


def find_regions(source: str) -> list[Region]:
    """The solution regions of a code cell's source, in order; raises MarkerError (with a line number)."""
    lines = source.split("\n")
    regions: list[Region] = []
    open_at: int | None = None
    indent = ""
    starter: list[str] = []
    in_starter = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        kind = _kind(stripped)
        where = f"line {i + 1}"
        if kind == "bad":
            raise MarkerError(
                f"{where}: {stripped!r} looks like a solution marker but is not one; "
                f"write exactly {BEGIN_SOLUTION!r}, {END_SOLUTION!r} or {STARTER_PREFIX!r} <code>"
            )
        if kind == "begin":
            if open_at is not None:
                raise MarkerError(f"{where}: nested {BEGIN_SOLUTION!r} (the region opened on line {open_at + 1} is not closed)")
            open_at, indent, starter, in_starter = i, line[: len(line) - len(line.lstrip())], [], True
            continue
        if kind == "starter":
            if open_at is None or not in_starter:
                raise MarkerError(f"{where}: {STARTER_PREFIX!r} lines must come right after {BEGIN_SOLUTION!r}")
            text = stripped[len(STARTER_PREFIX):]
            starter.append(text[1:] if text.startswith(" ") else text)
            continue
        in_starter = False
        if kind == "end":
            if open_at is None:
                raise MarkerError(f"{where}: {END_SOLUTION!r} without a {BEGIN_SOLUTION!r} before it")
            regions.append(Region(open_at, i, indent, tuple(t.rstrip() for t in starter)))
            open_at = None
    if open_at is not None:
        raise MarkerError(f"line {open_at + 1}: {BEGIN_SOLUTION!r} is never closed by {END_SOLUTION!r}")
    return regions


def cell_source(cell: dict) -> str:
    """A cell's source as one string (on disk it may be a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def cell_tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


# ---------------------------------------------------------------------------
# Reading code cells as Python.


def strip_magics(source: str) -> str:
    """A cell's source with IPython magics and shell lines (``%...``, ``!...``) blanked, line numbers kept."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def parse_cell(source: str) -> ast.Module | None:
    """A code cell parsed as Python (magics blanked), or None when it is not valid Python."""
    try:
        return ast.parse(strip_magics(source))
    except SyntaxError:
        return None


def names_defined(node: ast.stmt) -> list[str]:
    """The names a top-level statement defines: a def or class, or the names an assignment binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [sub.id for t in targets for sub in ast.walk(t) if isinstance(sub, ast.Name)]
    return []


def loaded_statements(tree: ast.Module, wanted: set[str]) -> list[ast.stmt]:
    """What a later lesson runs of a cell that defines one of ``wanted`` (nothing when it defines none).

    Every top-level function and class, and every assignment of names (the helpers and constants the
    exercise may use), in the cell's order; not the cell's other statements (calls, prints, tests).
    The imports of every cell of the notebook run too (see ``notebook.load_exercises``). The checkers
    simulate the same rule to tell a learner when an exercise uses a name another cell defines.
    """
    kept = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                            ast.Assign, ast.AnnAssign)) and names_defined(node)]
    return kept if any(set(names_defined(node)) & wanted for node in kept) else []

