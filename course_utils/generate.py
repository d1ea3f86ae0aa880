"""Generate the exercise notebooks from the solution notebooks.

    python -m course_utils.generate            # regenerate notebooks/ from solutions/
    python -m course_utils.generate --check    # change nothing; exit 1 if anything is out of date
    python -m course_utils.generate --force    # also overwrite exercise notebooks edited by hand

For every ``solutions/NN_*.ipynb`` it

* stamps an "Open in Colab" badge cell and a setup cell at the top of the
  solution notebook (tagged ``colab-badge`` / ``colab-setup``; a no-op when
  they are up to date; every other byte of the solution is kept), and, for a
  lesson listed in ``course_utils.lessons``, its "What this lesson needs" box
  and its map cell right after its title (tagged ``lesson-needs`` /
  ``lesson-map``; a notebook that is not listed gets none, and a warning),
  and, right before each exercise's cell, the collapsed box of what later
  lessons rely on, made from its contract in ``course_utils.contracts``
  (tagged ``contract-box``; ``--check`` fails when one is out of step);
* writes ``notebooks/NN_*.ipynb``: the same cells with each solution region
  replaced by its stub (see ``course_utils._schema`` for the marker rules),
  cells tagged ``solution-only`` removed, outputs, execution counts and
  volatile metadata stripped, its own badge and setup cell on top, and the
  hash of its content recorded in ``metadata["course"]`` so that a notebook
  edited since it was generated is never overwritten without ``--force``.

Exit status: 0 done / up to date, 1 out of date (``--check``) or a notebook
was refused, 2 a marker or configuration error (nothing is written then).
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from . import contracts as course_contracts
from . import lessons as course_lessons
from ._schema import (
    META_HASH,
    META_KEY,
    META_SOURCE,
    NOTEBOOK_NAME,
    TAG_COLAB_BADGE,
    TAG_COLAB_SETUP,
    TAG_CONTRACT_BOX,
    TAG_LESSON_MAP,
    TAG_LESSON_NEEDS,
    TAG_RAISES_EXCEPTION,
    TAG_SOLUTION_ONLY,
    MarkerError,
    cell_source,
    cell_tags,
    find_regions,
    parse_cell,
)

try:  # Python >= 3.11
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"
#: Environment variable that replaces the repository the Colab setup cell clones
#: (tests point it at a local git repository).
REPOSITORY_ENV = "COURSE_UTILS_REPOSITORY"
#: Metadata of the setup cell: shown collapsed (Colab's form view; JupyterLab's hidden source).
SETUP_CELL_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True}}

#: Cell metadata that records a run, not the notebook: dropped from exercises.
VOLATILE_CELL_METADATA = {"execution", "ExecuteTime", "collapsed", "scrolled", "colab", "outputId", "id"}


class GenerateError(Exception):
    """A problem with the inputs (markers, configuration) that stops the generator."""


# ---------------------------------------------------------------------------
# Configuration


@dataclasses.dataclass(frozen=True)
class Config:
    """Where the course lives publicly, and what the Colab setup cell installs."""

    repository: str  # https://github.com/<owner>/<repo>
    branch: str
    requirements: tuple[str, ...] = ()  # pip requirement strings from [project] dependencies
    root: Path | None = None  # the repository's folder, for the badge paths

    @property
    def owner_repo(self) -> str:
        match = re.match(r"^https?://github\.com/([^/]+/[^/]+?)(?:\.git)?/?$", self.repository)
        if not match:
            raise GenerateError(f"[tool.course] repository must be a https://github.com/<owner>/<repo> address, not {self.repository!r}")
        return match.group(1)

    def colab_url(self, relative_path: str) -> str:
        return f"https://colab.research.google.com/github/{self.owner_repo}/blob/{self.branch}/{relative_path}"

    @property
    def clone_url(self) -> str:
        return self.repository.rstrip("/").removesuffix(".git")

    @property
    def folder(self) -> str:
        """The folder the Colab setup cell clones the repository into (the repository's name)."""
        return self.owner_repo.split("/")[1]


def find_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd, then this package's repo) with a [tool.course] pyproject."""
    candidates = [Path(start or Path.cwd()).resolve()]
    candidates.append(Path(__file__).resolve().parent.parent)
    for base in candidates:
        for folder in [base, *base.parents]:
            pyproject = folder / "pyproject.toml"
            if pyproject.is_file() and "[tool.course]" in pyproject.read_text(encoding="utf-8"):
                return folder
    return None


def load_config(root: Path, repository: str | None = None, branch: str | None = None) -> Config:
    """Read [tool.course] repository/branch and the [project] dependencies from root/pyproject.toml."""
    path = root / "pyproject.toml"
    data: dict[str, Any] = {}
    if path.is_file():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    course = data.get("tool", {}).get("course", {})
    repository = repository or course.get("repository")
    branch = branch or course.get("branch") or "main"
    if not repository:
        raise GenerateError(f"no [tool.course] repository in {path} (or pass --repository)")
    requirements = tuple(data.get("project", {}).get("dependencies", []))
    return Config(repository=repository, branch=branch, requirements=requirements, root=root)


# ---------------------------------------------------------------------------
# The stamped cells


def badge_source(url: str) -> str:
    return f"[![Open In Colab]({COLAB_BADGE_SVG})]({url})"


def setup_source(config: Config) -> str:
    """The setup cell: on Colab it clones the course next to the notebook; everywhere it imports course_utils.

    The logic lives in ``course_utils.colab.setup`` (installs what Colab
    lacks); locally the cell prints nothing.
    """
    return "\n".join(
        [
            '# @title Setup: run this cell first { display-mode: "form" }',
            "# On Colab it fetches the course (a shallow clone of its repository, next to this",
            "# notebook) and installs what Colab lacks. On your own computer it only imports it.",
            "import sys",
            "",
            'if "google.colab" in sys.modules:',
            "    import os, shutil, subprocess",
            "",
            f'    _course = os.path.abspath("{config.folder}")',
            "    if not os.path.isdir(_course):  # the first time only (a download cut short starts again)",
            '        shutil.rmtree(_course + ".download", ignore_errors=True)',
            f'        _repository = os.environ.get("{REPOSITORY_ENV}", "{config.clone_url}")',
            f'        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "{config.branch}", _repository, _course + ".download"], check=True)',
            '        os.rename(_course + ".download", _course)',
            "    if _course not in sys.path:",
            "        sys.path.insert(0, _course)",
            "",
            "import course_utils.colab",
            "course_utils.colab.setup()",
            "from course_utils.solutions import show_solution  # stuck? show_solution(\"name\") shows the reference code",
        ]
    )


def _with_ids(nb: dict) -> bool:
    return (nb.get("nbformat", 4), nb.get("nbformat_minor", 0)) >= (4, 5)


def _markdown_cell(source: str, tag: str, with_id: bool) -> dict:
    cell: dict[str, Any] = {"cell_type": "markdown", "metadata": {"tags": [tag]}, "source": source}
    if with_id:
        cell["id"] = tag
    return cell


def _code_cell(source: str, tag: str, with_id: bool) -> dict:
    metadata = {**copy.deepcopy(SETUP_CELL_METADATA), "tags": [tag]} if tag == TAG_COLAB_SETUP else {"tags": [tag]}
    cell: dict[str, Any] = {"cell_type": "code", "execution_count": None, "metadata": metadata, "outputs": [], "source": source}
    if with_id:
        cell["id"] = tag
    return cell


_STAMPED_TAGS = (TAG_COLAB_BADGE, TAG_COLAB_SETUP, TAG_LESSON_NEEDS, TAG_LESSON_MAP, TAG_CONTRACT_BOX)


def _is_stamped(cell: dict) -> bool:
    return any(tag in cell_tags(cell) for tag in _STAMPED_TAGS)


def _collapsed_as_wanted(cell: dict) -> bool:
    """A setup cell carries the collapsed-display metadata (other stamped cells need none)."""
    if TAG_COLAB_SETUP not in cell_tags(cell):
        return True
    metadata = cell.get("metadata", {})
    return all(metadata.get(key) == value for key, value in SETUP_CELL_METADATA.items())


def header_cells(stem: str | None) -> list[tuple[str, str, str]]:
    """(tag, kind, source) of the cells stamped after a lesson's title: none for a notebook not in the lessons table."""
    if stem not in course_lessons.BY_STEM:
        return []
    return [(TAG_LESSON_NEEDS, "markdown", course_lessons.needs_markdown(stem)),
            (TAG_LESSON_MAP, "code", course_lessons.map_source(stem))]


def _wanted_cells(wanted: list[tuple[str, str, str]], existing: dict[str, dict], with_id: bool) -> list[dict]:
    """The stamped cells: an existing one whose source is already right is kept as it is (with its outputs)."""
    cells = []
    for tag, kind, source in wanted:
        old = existing.get(tag)
        if old is not None and old.get("cell_type") == kind and cell_source(old) == source and _collapsed_as_wanted(old):
            cells.append(old)
        elif kind == "markdown":
            cells.append(_markdown_cell(source, tag, with_id))
        else:
            cells.append(_code_cell(source, tag, with_id))
    return cells


def _is_title(cell: dict) -> bool:
    return cell.get("cell_type") == "markdown" and cell_source(cell).lstrip().startswith("# ")


def _with_header(rest: list[dict], header: list[dict]) -> list[dict]:
    """``rest`` with the header cells right after its title cell (its first cell, when that is a "# " heading)."""
    if not header:
        return rest
    at = 1 if rest and _is_title(rest[0]) else 0
    return rest[:at] + header + rest[at:]


def exercises_defined(source: str) -> list[str]:
    """The names of the top-level functions and classes of a code cell that hold a solution region."""
    regions = find_regions(source)
    tree = parse_cell(source) if regions else None
    if tree is None:
        return []
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and any(r.begin <= node.end_lineno - 1 and r.end >= node.lineno - 1 for r in regions)]


def contract_boxes(cell: dict, stem: str | None) -> list[tuple[str, str]]:
    """(exercise, box source) for each exercise of lesson ``stem`` that this code cell defines."""
    if cell.get("cell_type") != "code" or stem is None:
        return []
    found = course_contracts.CONTRACTS
    return [(name, course_contracts.box_markdown(name)) for name in exercises_defined(cell_source(cell))
            if name in found and found[name].lesson == stem]


def _with_boxes(rest: list[dict], stem: str | None, old_boxes: list[dict], with_id: bool) -> list[dict]:
    """``rest`` with each exercise's contract box right before its cell (an up-to-date box is kept as it is)."""
    by_source = {cell_source(c): c for c in old_boxes if c.get("cell_type") == "markdown"}
    out: list[dict] = []
    for cell in rest:
        for name, source in contract_boxes(cell, stem):
            box = by_source.get(source)
            if box is None:
                box = _markdown_cell(source, TAG_CONTRACT_BOX, False)
                if with_id:
                    box["id"] = f"contract-{name}"
            out.append(box)
        out.append(cell)
    return out


def stamp(nb: dict, url: str, config: Config, stem: str | None = None) -> dict:
    """``nb`` with an up-to-date badge cell and setup cell on top, and lesson ``stem``'s header after its title.

    Every other cell object is kept as it is. A stamped cell whose source is
    already right is kept too (with its execution count and outputs), so
    stamping an up-to-date notebook returns an equal one.
    """
    with_id = _with_ids(nb)
    existing = {tag: c for c in nb.get("cells", []) for tag in cell_tags(c) if tag in _STAMPED_TAGS}
    old_boxes = [c for c in nb.get("cells", []) if TAG_CONTRACT_BOX in cell_tags(c)]
    top = _wanted_cells([(TAG_COLAB_BADGE, "markdown", badge_source(url)),
                         (TAG_COLAB_SETUP, "code", setup_source(config))], existing, with_id)
    header = _wanted_cells(header_cells(stem), existing, with_id)
    rest = [c for c in nb.get("cells", []) if not _is_stamped(c)]
    out = dict(nb)
    out["cells"] = top + _with_header(_with_boxes(rest, stem, old_boxes, with_id), header)
    return out


# ---------------------------------------------------------------------------
# From solution to exercise


def strip_solutions(source: str) -> str:
    """Replace every solution region of a code cell's source by its stub or starter lines."""
    lines = source.split("\n")
    out: list[str] = []
    done = 0
    for region in find_regions(source):
        out += lines[done : region.begin]
        out += region.replacement()
        done = region.end + 1
    out += lines[done:]
    return "\n".join(out)


def fill_blanks(exercise_source: str, solution_source: str) -> str:
    """The inverse of :func:`strip_solutions`: put each region of the solution cell back into the exercise cell.

    Each region's blank (its stub or starter lines, at its indentation) is
    looked for in order in the exercise; a blank that cannot be found raises
    ValueError.
    """
    solution_lines = solution_source.split("\n")
    lines = exercise_source.split("\n")
    out: list[str] = []
    pos = 0
    for region in find_regions(solution_source):
        blank = region.replacement()
        for start in range(pos, len(lines) - len(blank) + 1):
            if lines[start : start + len(blank)] == blank:
                break
        else:
            raise ValueError(f"cannot find the blank {blank!r} for the region on line {region.begin + 1}")
        out += lines[pos:start]
        out += solution_lines[region.begin : region.end + 1]
        pos = start + len(blank)
    out += lines[pos:]
    return "\n".join(out)


def check_markers(nb: dict, name: str) -> None:
    """Raise GenerateError naming the notebook, cell and line of the first bad marker."""
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        try:
            find_regions(cell_source(cell))
        except MarkerError as exc:
            cell_id = f" (id {cell['id']})" if cell.get("id") else ""
            raise GenerateError(f"{name}, cell {number}{cell_id}, {exc}") from None


def _clean_metadata(metadata: dict) -> dict:
    clean = {k: copy.deepcopy(v) for k, v in metadata.items() if k not in VOLATILE_CELL_METADATA}
    jupyter = clean.get("jupyter")
    if isinstance(jupyter, dict):
        jupyter.pop("outputs_hidden", None)
        if not jupyter:
            del clean["jupyter"]
    return clean


def raises_when_run(source: str) -> bool:
    """True if the cell raises NotImplementedError outside any function (so running the cell raises)."""
    tree = parse_cell(source)
    if tree is None:
        return False
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == "NotImplementedError":
                return True
        pending.extend(ast.iter_child_nodes(node))
    return False


def exercise_cell(cell: dict) -> dict:
    """The exercise version of one solution cell (already known not to be solution-only)."""
    out: dict[str, Any] = {"cell_type": cell["cell_type"]}
    if "id" in cell:
        out["id"] = cell["id"]
    out["metadata"] = _clean_metadata(cell.get("metadata", {}))
    source = cell_source(cell)
    if cell["cell_type"] == "code":
        out["source"] = strip_solutions(source)
        if find_regions(source) and raises_when_run(out["source"]) and TAG_RAISES_EXCEPTION not in cell_tags(out):
            out["metadata"]["tags"] = cell_tags(out) + [TAG_RAISES_EXCEPTION]
        out["execution_count"] = None
        out["outputs"] = []
    else:
        out["source"] = source
        if "attachments" in cell:
            out["attachments"] = copy.deepcopy(cell["attachments"])
    return out


def make_exercise(solution: dict, config: Config, exercise_path: str, solution_path: str) -> dict:
    """The exercise notebook for a (stamped) solution notebook (paths are repository-relative, for the badge and metadata)."""
    with_id = _with_ids(solution)
    cells = [
        _markdown_cell(badge_source(config.colab_url(exercise_path)), TAG_COLAB_BADGE, with_id),
        _code_cell(setup_source(config), TAG_COLAB_SETUP, with_id),
    ]
    for cell in solution.get("cells", []):
        tags = cell_tags(cell)
        if TAG_COLAB_BADGE in tags or TAG_COLAB_SETUP in tags or TAG_SOLUTION_ONLY in tags:
            continue
        cells.append(exercise_cell(cell))
    metadata: dict[str, Any] = {}
    old = solution.get("metadata", {})
    if "kernelspec" in old:
        metadata["kernelspec"] = copy.deepcopy(old["kernelspec"])
    if isinstance(old.get("language_info"), dict) and "name" in old["language_info"]:
        metadata["language_info"] = {"name": old["language_info"]["name"]}
    metadata[META_KEY] = {META_SOURCE: solution_path}
    nb = {
        "cells": cells,
        "metadata": metadata,
        "nbformat": solution.get("nbformat", 4),
        "nbformat_minor": solution.get("nbformat_minor", 5),
    }
    nb["metadata"][META_KEY][META_HASH] = content_hash(nb)
    return nb


# ---------------------------------------------------------------------------
# Reading and writing


def dumps(nb: dict) -> str:
    """Serialise like Jupyter does (nbformat: indent 1, sorted keys), with a trailing newline."""
    import nbformat

    text = nbformat.writes(nbformat.from_dict(copy.deepcopy(nb)), version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def _joined(value: Any) -> Any:
    """Multi-line strings as one string, however they are split on disk."""
    return "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def content_hash(nb: dict) -> str:
    """sha256 of the notebook's content (not its formatting), leaving out the recorded hash itself."""
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).get(META_KEY, {}).pop(META_HASH, None)
    for cell in nb.get("cells", []):
        cell["source"] = _joined(cell.get("source", ""))
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = _joined(output["text"])
            for key, value in output.get("data", {}).items():
                output["data"][key] = _joined(value)
    canonical = json.dumps(nb, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def is_unedited(text: str) -> bool:
    """True if ``text`` is a generated notebook whose content still matches the hash it records."""
    try:
        nb = json.loads(text)
        recorded = nb["metadata"][META_KEY][META_HASH]
    except (ValueError, KeyError, TypeError):
        return False
    try:
        return content_hash(nb) == recorded
    except Exception:  # not even a valid notebook any more
        return False


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise GenerateError(f"{path}: not a valid notebook ({exc})") from None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def _relative(path: Path, root: Path | None) -> str:
    """``path`` relative to the repository root (posix), or folder/name when it lies outside."""
    path = path.resolve()
    if root is not None:
        try:
            return path.relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return f"{path.parent.name}/{path.name}"


def notebook_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and NOTEBOOK_NAME.match(p.name))


# ---------------------------------------------------------------------------
# The command


@dataclasses.dataclass
class Outcome:
    """What a run did (or, with --check, would do)."""

    written: list[str] = dataclasses.field(default_factory=list)
    stamped: list[str] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)  # edited by hand
    orphans: list[str] = dataclasses.field(default_factory=list)  # exercise without solution
    unchanged: int = 0
    unlisted: list[str] = dataclasses.field(default_factory=list)  # solutions with no entry in course_utils.lessons


def generate(solutions_dir: Path, notebooks_dir: Path, config: Config, check: bool = False, force: bool = False) -> Outcome:
    """Stamp the solutions and (re)generate the exercises; with ``check``, only report. Raises GenerateError."""
    solutions = notebook_files(solutions_dir)
    loaded = []
    for path in solutions:  # validate everything before writing anything
        nb = read_json(path)
        check_markers(nb, _relative(path, config.root))
        loaded.append((path, nb))

    outcome = Outcome()
    for path, nb in loaded:
        solution_rel = _relative(path, config.root)
        if path.stem not in course_lessons.BY_STEM:
            outcome.unlisted.append(solution_rel)
        stamped = stamp(nb, config.colab_url(solution_rel), config, path.stem)
        if stamped != nb:
            outcome.stamped.append(solution_rel)
            if not check:
                _write(path, dumps(stamped))
        else:
            outcome.unchanged += 1

        target = notebooks_dir / path.name
        target_rel = _relative(target, config.root)
        text = dumps(make_exercise(stamped, config, target_rel, solution_rel))
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            outcome.unchanged += 1
            continue
        if current is not None and not force and not is_unedited(current):
            outcome.refused.append(target_rel)
            continue
        outcome.written.append(target_rel)
        if not check:
            _write(target, text)

    names = {p.name for p in solutions}
    outcome.orphans = [_relative(p, config.root) for p in notebook_files(notebooks_dir) if p.name not in names]
    return outcome


def _default_dir(root: Path | None, name: str) -> Path:
    return (root or Path.cwd()) / name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.generate",
        description="Generate the exercise notebooks (notebooks/) from the solution notebooks (solutions/).",
    )
    parser.add_argument("--solutions", type=Path, help="folder of solution notebooks (default: <repo>/solutions)")
    parser.add_argument("--notebooks", type=Path, help="folder of exercise notebooks (default: <repo>/notebooks)")
    parser.add_argument("--root", type=Path, help="the repository's folder (default: found from the current folder)")
    parser.add_argument("--repository", help="override [tool.course] repository")
    parser.add_argument("--branch", help="override [tool.course] branch")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is out of date")
    parser.add_argument("--force", action="store_true", help="overwrite exercise notebooks even if edited since generated")
    args = parser.parse_args(argv)

    root = args.root.resolve() if args.root else find_root()
    try:
        if root is None and not args.repository:
            raise GenerateError("cannot find the repository (a pyproject.toml with [tool.course]); pass --root or --repository")
        config = load_config(root, args.repository, args.branch) if root else Config(args.repository, args.branch or "main")
        solutions_dir = args.solutions or _default_dir(root, "solutions")
        notebooks_dir = args.notebooks or _default_dir(root, "notebooks")
        if not solutions_dir.is_dir():
            raise GenerateError(f"no solutions folder at {solutions_dir}")
        outcome = generate(solutions_dir, notebooks_dir, config, check=args.check, force=args.force)
    except GenerateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    for name in outcome.unlisted:
        print(f"warning: {name} has no entry in course_utils/lessons.py, so no \"What this lesson needs\" box and "
              f"no map at its top: add a Lesson(...) for it there", file=sys.stderr)
    if args.check:
        for name in outcome.stamped:
            print(f"out of date: {name} (its Colab badge/setup cells, its needs/map cells, or the contract boxes made "
                  f"from course_utils/contracts.py need refreshing)")
        for name in outcome.written:
            print(f"out of date: {name}")
        for name in outcome.refused:
            print(f"edited by hand: {name} (differs from what it was generated as)")
        for name in outcome.orphans:
            print(f"no solution: {name} (there is no solution notebook of that name)")
        stale = outcome.stamped or outcome.written or outcome.refused or outcome.orphans
        if stale:
            print("run `python -m course_utils.generate` to update", file=sys.stderr)
            return 1
        print(f"up to date ({outcome.unchanged} notebooks checked)")
        return 0

    for name in outcome.stamped:
        print(f"stamped {name}")
    for name in outcome.written:
        print(f"wrote {name}")
    for name in outcome.orphans:
        print(f"warning: {name} has no solution notebook; left as it is", file=sys.stderr)
    if outcome.refused:
        for name in outcome.refused:
            print(
                f"refused: {name} was edited since it was generated (its content no longer matches "
                f"the hash in its metadata); save your changes elsewhere, or rerun with --force to overwrite it",
                file=sys.stderr,
            )
        return 1
    if not outcome.written and not outcome.stamped:
        print(f"up to date ({outcome.unchanged} notebooks checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
