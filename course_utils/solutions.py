"""Show the solution of an exercise, only when you ask for it.

    from course_utils.solutions import show_solution
    show_solution("scaled_dot_product_attention")   # or the checker's name: "check_causal_mask"

The solutions live in the course repository's ``solutions/`` folder, next to
``notebooks/``. On Colab, the setup cell at the top of every notebook clones
the repository next to the notebook, so they are there too; without them,
``show_solution`` says where to find them.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

from ._schema import (
    BEGIN_SOLUTION,
    END_SOLUTION,
    NOTEBOOK_NAME,
    STARTER_PREFIX,
    MarkerError,
    Region,
    cell_source,
    find_regions,
    names_defined,
    parse_cell,
)


@dataclasses.dataclass
class Solution:
    """The code that solves one exercise, and where it comes from."""

    name: str  # what defines it (a function, class or variable)
    notebook: Path
    cell: int  # 1-based cell number in the notebook
    source: str  # the definition, without the marker lines

    def markdown(self) -> str:
        return f"**Solution: `{self.name}`** (from `{self.notebook.name}`, cell {self.cell})\n\n```python\n{self.source}\n```"

    def __str__(self) -> str:
        return f"Solution: {self.name} (from {self.notebook.name}, cell {self.cell})\n\n{self.source}"


class SolutionsNotFound(FileNotFoundError):
    """There is no solutions folder to look in."""


def _candidates() -> list[Path]:
    here = Path.cwd()
    package_repo = Path(__file__).resolve().parent.parent
    candidates = [here / "solutions", here.parent / "solutions", package_repo / "solutions"]
    repo = _repository()
    if repo:  # the Colab setup cell's clone, named like the repository, next to the notebook
        candidates.append(here / repo[0].rstrip("/").rsplit("/", 1)[-1] / "solutions")
    return candidates


def find_solutions_dir(solutions_dir: str | Path | None = None) -> Path:
    """The folder of solution notebooks: the one given, else ./solutions, ../solutions or the package's repository."""
    if solutions_dir is not None:
        folder = Path(solutions_dir)
        if folder.is_dir():
            return folder
        raise SolutionsNotFound(_missing_message([folder]))
    for folder in _candidates():
        if folder.is_dir() and any(NOTEBOOK_NAME.match(p.name) for p in folder.iterdir()):
            return folder
    raise SolutionsNotFound(_missing_message(_candidates()))


def _repository() -> tuple[str, str] | None:
    """(repository address, branch) this package was installed from, if known."""
    try:  # pip install git+https://github.com/...@branch records where it came from
        from importlib import metadata

        info = json.loads(metadata.distribution("course-utils").read_text("direct_url.json") or "{}")
        url = info.get("url", "")
        if url.startswith("https://github.com/"):
            return url.removesuffix(".git"), info.get("vcs_info", {}).get("requested_revision") or "main"
    except Exception:
        pass
    try:  # a clone of the repository
        try:
            import tomllib
        except ImportError:  # pragma: no cover
            import tomli as tomllib  # type: ignore[no-redef]
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        course = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["course"]
        return course["repository"], course.get("branch", "main")
    except Exception:
        return None


def _missing_message(looked_in: list[Path]) -> str:
    places = ", ".join(str(p) for p in looked_in)
    repo = _repository()
    if repo:
        address, branch = repo
        where = (
            f"Read them on GitHub: {address}/tree/{branch}/solutions\n"
            f"or get the whole course with `git clone {address}` and call show_solution from a notebook in it."
        )
    else:
        where = "They are in the course repository's solutions/ folder: clone the repository and call show_solution from a notebook in it."
    return (
        f"The solutions folder is not here (looked in: {places}).\n"
        f"On Colab, run the setup cell at the top of the notebook first: it brings the solutions. {where}\n"
        f"If you have the folder somewhere else, pass it: show_solution(name, solutions_dir='path/to/solutions')."
    )


# ---------------------------------------------------------------------------
# Finding the code




def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based first and last line of a statement, decorators included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first - 1, (node.end_lineno or node.lineno) - 1


def _is_marker(line: str) -> bool:
    stripped = line.strip()
    return stripped in (BEGIN_SOLUTION, END_SOLUTION) or stripped.startswith(STARTER_PREFIX)


def _solved_definitions(source: str) -> dict[str, str]:
    """name -> its code (markers removed) for every top-level definition in the cell that holds a solution region."""
    try:
        regions: list[Region] = find_regions(source)
    except MarkerError:
        return {}
    tree = parse_cell(source) if regions else None
    if tree is None:
        return {}
    lines = source.split("\n")
    found: dict[str, str] = {}
    for node in tree.body:
        first, last = _span(node)
        touching = [r for r in regions if r.begin <= last and r.end >= first]
        if not touching:
            continue
        first = min([first] + [r.begin for r in touching])
        last = max([last] + [r.end for r in touching])
        code = "\n".join(line for line in lines[first : last + 1] if not _is_marker(line)).strip("\n")
        for name in names_defined(node):
            found.setdefault(name, code)
    return found


def _checked_names(source: str, checker: str) -> list[str]:
    """The arguments passed by name to ``checker(...)`` in a cell."""
    tree = parse_cell(source)
    if tree is None:
        return re.findall(rf"\b{re.escape(checker)}\(\s*([A-Za-z_]\w*)", source)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == checker:
            names += [a.id for a in node.args[:1] if isinstance(a, ast.Name)]
    return names


def _code_cells(folder: Path) -> list[tuple[Path, int, str]]:
    cells = []
    for path in sorted(p for p in folder.iterdir() if NOTEBOOK_NAME.match(p.name)):
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for number, cell in enumerate(nb.get("cells", []), start=1):
            if cell.get("cell_type") == "code":
                cells.append((path, number, cell_source(cell)))
    return cells


def find_solution(name: str, solutions_dir: str | Path | None = None) -> Solution:
    """The solution that defines ``name``, or that the checker ``check_<name>`` grades.

    Raises SolutionsNotFound when there is no solutions folder and LookupError
    when no solution region defines the name.
    """
    folder = find_solutions_dir(solutions_dir)
    cells = _code_cells(folder)
    solved = [(path, number, _solved_definitions(source)) for path, number, source in cells]
    exercise = name.removeprefix("check_")
    wanted = [name, exercise] if exercise != name else [name]
    checker = f"check_{exercise}"
    for _, _, source in cells:
        if checker in source:
            wanted += [n for n in _checked_names(source, checker) if n not in wanted]
    for target in wanted:
        for path, number, definitions in solved:
            if target in definitions:
                return Solution(target, path, number, definitions[target])
    known = sorted({n for _, _, d in solved for n in d})
    raise LookupError(
        f"No solution in {folder} defines {name!r}."
        + (f" Solutions exist for: {', '.join(known)}." if known else " It holds no solution regions.")
    )


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def show_solution(name: str, solutions_dir: str | Path | None = None) -> None:
    """Display the solution of the exercise ``name`` (highlighted in Jupyter, plain text elsewhere)."""
    try:
        solution = find_solution(name, solutions_dir)
    except (SolutionsNotFound, LookupError) as exc:
        print(exc.args[0] if exc.args else exc)
        return
    if _in_notebook():
        from IPython.display import Markdown, display

        display(Markdown(solution.markdown()))
    else:
        print(solution)


__all__ = ["Solution", "SolutionsNotFound", "find_solution", "find_solutions_dir", "show_solution"]
