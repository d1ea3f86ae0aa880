"""The course on Google Colab: the setup cell's logic, and where a learner's notebooks are.

Colab opens each notebook alone, straight from GitHub. The setup cell at the
top of every lesson makes a shallow clone of the course repository next to
the notebook (so ``course_utils``, ``solutions/`` and the lesson files are
there), puts it on ``sys.path`` and calls :func:`setup`, which installs the
few packages Colab lacks. Locally :func:`setup` does nothing and prints
nothing.

Later lessons reuse a learner's own code from earlier notebooks
(``course_utils.notebook.load_exercises``). :func:`locate_learner_notebook`
looks for them first in the current folder (the name itself, then copies:
"Copy of 01_attention.ipynb", "01_attention (1).ipynb", as uploads and Colab
name them), then, on Colab, in the "Colab Notebooks" folder of a mounted
Google Drive (wherever under /content it is mounted), where Colab saves
copies; :func:`announce_found` says in one line which file was used when it
is not the notebook next to this one. When none has it,
:func:`reference_notebook` gives the course's own solution notebook instead,
and :func:`announce_reference` says so loudly. Every call looks again and
says again what it used: mounting Drive and running the cell again works.

Before anything else :func:`setup` checks, everywhere, that this Python and
its torch and NumPy can run the course (:func:`environment_problem`): the
versions are read from the installed packages' metadata, without importing
torch, since an old torch next to NumPy 2 prints a traceback on import. When
they cannot, the cell stops with one sentence and the one command that fixes
it (:class:`EnvironmentProblem`), no traceback.

The setup cell's clone can be cut short (a disconnected runtime, an
interrupted cell): :func:`setup` restores the files it left out, or says how
to start afresh (:func:`repair_clone`). :func:`find_saved_file` finds a file
an earlier lesson saved (lesson 06's checkpoint), here or in Drive.

Only the standard library is imported here: the setup cell imports this
module before the missing packages are installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

#: Where Colab mounts Google Drive (``drive.mount("/content/drive")``); tests point it at a fake folder.
DRIVE_ROOT = Path("/content/drive")
#: Colab's working folder, where uploads land; a Drive mounted in any folder of it is found (``/content/gdrive``).
CONTENT = Path("/content")
#: The top folder of a mounted Drive (its name has changed over the years).
MY_DRIVE = ("MyDrive", "My Drive")
#: The folder of a mounted Drive where Colab saves notebooks ("File > Save a copy in Drive").
DRIVE_NOTEBOOKS = tuple(f"{top}/Colab Notebooks" for top in MY_DRIVE)
#: Requirements never installed on Colab: torch (Colab's build matches its GPU) and the notebook server.
SKIP = {"torch", "jupyterlab", "notebook", "ipykernel", "course-utils"}
#: Distribution name -> module name, where they differ beyond "-" -> "_".
MODULE_NAMES = {"scikit-learn": "sklearn", "pyyaml": "yaml", "pillow": "PIL", "beautifulsoup4": "bs4"}

MOUNT_HINT = 'from google.colab import drive; drive.mount("/content/drive")'
#: Where :func:`locate_learner_notebook` found a notebook.
HERE, COPY_HERE, IN_DRIVE = "here", "a copy next to this notebook", "Google Drive"


def on_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def course_root() -> Path:
    """The folder of the course repository this package was imported from (the clone, on Colab)."""
    return Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# The setup cell


def requirements(root: Path | None = None) -> list[str]:
    """The ``[project] dependencies`` of the course's pyproject.toml (empty when it cannot be read)."""
    path = (root or course_root()) / "pyproject.toml"
    try:
        try:
            import tomllib
        except ImportError:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        return list(tomllib.loads(path.read_text(encoding="utf-8"))["project"]["dependencies"])
    except Exception:
        return []


def missing_requirements(reqs: Iterable[str]) -> list[str]:
    """The requirements whose module cannot be imported here, leaving out those in :data:`SKIP`."""
    missing = []
    for requirement in reqs:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        name = match.group(1).lower() if match else ""
        if not name or name in SKIP:
            continue
        module = MODULE_NAMES.get(name, name.replace("-", "_").replace(".", "_"))
        if importlib.util.find_spec(module) is None:
            # pip itself skips a requirement whose environment marker does not hold here
            # ("numpy<2; sys_platform == 'darwin' and ...").
            missing.append(requirement.strip())
    return missing


# The floors pyproject.toml declares (it says why); CI's lowest environment tests them.
#: The oldest Python the course runs on.
PYTHON_FLOOR = (3, 10)
#: The oldest torch the course runs on anywhere: Intel Macs' last release (elsewhere pip installs 2.3 or newer).
TORCH_FLOOR = (2, 2, 2)
#: The first torch built for NumPy 2 as well as NumPy 1; older ones fail with "Numpy is not available" next to NumPy 2.
TORCH_FOR_NUMPY_2 = (2, 3)
#: The first pyarrow (the datasets library's) that needs NumPy 2; it does not say so to pip.
PYARROW_NEEDS_NUMPY_2 = (26,)


class EnvironmentProblem(RuntimeError):
    """This Python environment cannot run the course; the message says what to run.

    In a notebook IPython shows only the message (``_render_traceback_``), not a traceback.
    """

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: ``"2.2.2+cu121"`` -> ``(2, 2, 2)``, ``"2.4.0rc1"`` -> ``(2, 4, 0)``."""
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(numbers)


def _installed(name: str) -> Optional[str]:
    """The installed version of distribution ``name``, or None (read from its metadata; nothing is imported)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _dotted(numbers: Sequence[int]) -> str:
    return ".".join(str(n) for n in numbers)


def fix_command(root: Optional[Path] = None) -> str:
    """The one command that installs the course's requirements into this notebook's Python, as pyproject.toml declares them."""
    root = root or course_root()
    folder = root if (root / "pyproject.toml").is_file() else "PATH-TO-YOUR-CLONE-OF-THE-COURSE"  # installed, not cloned
    return f'%pip install -e "{folder}[dev]"'


def environment_problem(
    installed: Callable[[str], Optional[str]] = _installed,
    python: Sequence[int] = sys.version_info[:3],
    root: Optional[Path] = None,
) -> Optional[str]:
    """Why this Python environment cannot run the course, in one sentence with the command that fixes it; None if it can.

    ``installed(name)`` gives a distribution's version or None (tests pass fakes); ``python`` is the running
    Python's version. Decided from versions alone: torch and NumPy are not imported.
    """
    restart = "then restart the kernel and run this cell again"
    if tuple(python[:2]) < PYTHON_FLOOR:
        return (
            f"This course needs Python {_dotted(PYTHON_FLOOR)} or newer, and this notebook runs Python {_dotted(python)}: "
            f"in the course's folder run `python3.11 -m venv .venv && .venv/bin/pip install -e \".[dev]\"` "
            f"(any Python from {_dotted(PYTHON_FLOOR)} on will do), then open the course with `.venv/bin/jupyter lab`."
        )
    torch_version, numpy_version = installed("torch"), installed("numpy")
    if torch_version is None:
        return f"PyTorch is not installed for this notebook's Python ({sys.executable}): run `{fix_command(root)}` in a cell, {restart}."
    torch_release = _release(torch_version)
    if torch_release < TORCH_FLOOR:
        return (
            f"PyTorch {torch_version} is older than this course supports ({_dotted(TORCH_FOR_NUMPY_2)} or newer; "
            f"{_dotted(TORCH_FLOOR)} on Intel Macs): "
            f"run `{fix_command(root)}` in a cell, {restart}."
        )
    if numpy_version is not None and torch_release < TORCH_FOR_NUMPY_2 and _release(numpy_version) >= (2,):
        return (
            f"PyTorch {torch_version} was built for NumPy 1 and cannot work with the NumPy {numpy_version} installed "
            f"next to it: run `{fix_command(root)}` in a cell (it installs the versions that work together), {restart}."
        )
    pyarrow_version = installed("pyarrow")
    if (numpy_version is not None and pyarrow_version is not None and _release(numpy_version) < (2,)
            and _release(pyarrow_version) >= PYARROW_NEEDS_NUMPY_2):
        return (
            f"pyarrow {pyarrow_version} (what the datasets library stores data with) needs NumPy 2, and NumPy "
            f"{numpy_version} is installed: run `{fix_command(root)}` in a cell, {restart}."
        )
    return None


def check_environment(root: Optional[Path] = None) -> None:
    """Raise :class:`EnvironmentProblem` (shown without a traceback) when :func:`environment_problem` finds one."""
    problem = environment_problem(root=root)
    if problem is not None:
        raise EnvironmentProblem(problem)


def setup() -> None:
    """Check that this Python environment can run the course (everywhere); on Colab, also install what the course
    needs and Colab lacks, and say where the course is. Locally it prints nothing when all is well."""
    check_environment()
    if not on_colab():
        return
    root = course_root()
    repair_clone(root)
    missing = missing_requirements(requirements(root))
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
        importlib.invalidate_caches()
    mounted = bool(drive_roots())
    print(
        f"The course is ready in {root} (its solutions/ included).\n"
        + ("Google Drive is mounted: your saved notebooks there are used by later lessons."
           if mounted else
           f"Later lessons reuse your earlier notebooks: mount Google Drive first ({MOUNT_HINT}) so they can be found.")
    )


class IncompleteCourse(RuntimeError):
    """The course's clone is missing files and cannot be repaired where it is."""


#: What the lessons need of the course's folder, besides this module.
ESSENTIAL = ("course_utils/notebook.py", "course_utils/checks/__init__.py", "solutions/01_attention.ipynb")


def _looks_complete(root: Path) -> bool:
    return all((root / name).is_file() for name in ESSENTIAL)


def _tracked_files(root: Path) -> list[str] | None:
    """The files of the clone's commit (None when git cannot tell: the download stopped before it had them)."""
    done = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "-z", "--name-only", "HEAD"], capture_output=True, text=True
    )
    return [name for name in done.stdout.split("\0") if name] if done.returncode == 0 else None


def repair_clone(root: Path) -> None:
    """Restore the files an interrupted clone of the course left out; raise :class:`IncompleteCourse` if it cannot.

    Only a git clone is checked (a folder with ``.git``). Files that are there are never touched, changed or not.
    """
    if not (root / ".git").exists() or shutil.which("git") is None:
        return
    tracked = _tracked_files(root)
    missing = [name for name in tracked or [] if not os.path.lexists(root / name)]
    if tracked is not None and not missing:
        return
    if tracked is None and _looks_complete(root):  # git cannot say, but what the course needs is there
        return
    if tracked:
        lock = root / ".git" / "index.lock"  # left by a git that was killed while it wrote the files
        if lock.exists():
            lock.unlink()
        restored = subprocess.run(
            ["git", "-C", str(root), "checkout", "HEAD", "--pathspec-from-file=-", "--pathspec-file-nul"],
            input="\0".join(missing), capture_output=True, text=True,
        )
        if restored.returncode == 0 and all(os.path.lexists(root / name) for name in missing):
            importlib.invalidate_caches()
            print(
                f"The course folder {root} was incomplete (an interrupted download?): restored {len(missing)} missing "
                f"file{'s' if len(missing) != 1 else ''}."
            )
            return
    raise IncompleteCourse(
        f"The course folder {root} is incomplete: its download was interrupted, and it cannot be repaired where it "
        f"is. Delete it (run `!rm -rf \"{root}\"` in a cell, or use the Files panel), then run this cell again: it "
        f"downloads the course afresh."
    )


# ---------------------------------------------------------------------------
# Finding a learner's notebook


def drive_roots() -> list[Path]:
    """Where Google Drive is mounted: :data:`DRIVE_ROOT`, or any folder of :data:`CONTENT` holding "MyDrive" (none outside Colab)."""
    if not on_colab():
        return []
    candidates = [DRIVE_ROOT]
    try:
        candidates += sorted(p for p in CONTENT.iterdir() if p.is_dir())
    except OSError:  # no /content: not quite Colab
        pass
    return [root for root in dict.fromkeys(candidates) if any((root / top).is_dir() for top in MY_DRIVE)]


def drive_folders() -> list[Path]:
    """The mounted Drive's Colab notebook folders that exist (none outside Colab or when Drive is not mounted)."""
    return [root / sub for root in drive_roots() for sub in DRIVE_NOTEBOOKS if (root / sub).is_dir()]


def _copy_pattern(name: str) -> re.Pattern[str]:
    """``01_attention.ipynb``, ``Copy of 01_attention.ipynb``, ``Copy of Copy of ...``, ``01_attention (1).ipynb``."""
    stem = re.escape(Path(name).stem)
    return re.compile(rf"^(?:Copy of )*{stem}(?: \(\d+\))?\.ipynb$", re.IGNORECASE)


def _latest(found: Sequence[Path], name: str) -> Path | None:
    """The most recently saved of ``found`` (the exact name first among equals)."""
    return max(found, key=lambda p: (p.stat().st_mtime, p.name == name)) if found else None


def _copies_in(folder: Path, name: str) -> list[Path]:
    pattern = _copy_pattern(name)
    try:
        return [p for p in folder.iterdir() if p.is_file() and pattern.match(p.name)]
    except OSError:
        return []


def find_in_drive(name: str) -> Path | None:
    """The most recently saved notebook in Drive's Colab folder named ``name`` or a copy of it."""
    return _latest([p for folder in drive_folders() for p in _copies_in(folder, name)], name)


def locate_learner_notebook(notebook: str | os.PathLike) -> tuple[Path, str] | None:
    """The learner's own ``notebook`` and where it was found (:data:`HERE`, :data:`COPY_HERE`, :data:`IN_DRIVE`).

    The path as given (next to the running notebook), else the latest copy of it in that folder ("Copy of ...",
    "... (1)"), else, on Colab, the latest in a mounted Drive's Colab Notebooks folder. Looks afresh every call.
    """
    path = Path(notebook)
    if path.is_file():
        return path, HERE
    copy = _latest(_copies_in(path.parent, path.name), path.name)
    if copy is not None:
        return copy, COPY_HERE
    in_drive = find_in_drive(path.name)
    return (in_drive, IN_DRIVE) if in_drive is not None else None


def find_learner_notebook(notebook: str | os.PathLike) -> Path | None:
    """The learner's own ``notebook`` (see :func:`locate_learner_notebook`), or None."""
    found = locate_learner_notebook(notebook)
    return found[0] if found is not None else None


def find_saved_file(relative: str | os.PathLike) -> Path | None:
    """A file an earlier lesson saved (``checkpoints/06_transformer.pt``): next to this notebook, else in Drive's Colab Notebooks folder."""
    relative = Path(relative)
    for candidate in [relative] + [folder / relative for folder in drive_folders()]:
        if candidate.is_file():
            return candidate
    return None


def reference_notebook(notebook: str | os.PathLike) -> Path | None:
    """The course's solution notebook of the same name, if the course's ``solutions/`` folder is at hand."""
    from .solutions import SolutionsNotFound, find_solutions_dir

    try:
        folder = find_solutions_dir()
    except SolutionsNotFound:
        return None
    path = folder / Path(notebook).name
    return path if path.is_file() else None


def looked_in(notebook: str | os.PathLike) -> str:
    """Where :func:`locate_learner_notebook` looked, in words."""
    path = Path(notebook)
    places = [f"{path.parent.resolve() if str(path.parent) != '.' else Path.cwd()} (this folder)"]
    if on_colab():
        folders, roots = drive_folders(), drive_roots()
        if folders:
            places.append(", ".join(str(f) for f in folders))
        elif roots:
            places.append(f"{roots[0] / DRIVE_NOTEBOOKS[0]} (Google Drive is mounted, but has no such folder)")
        else:
            places.append("Google Drive (not mounted)")
    return "; ".join(places)


def announce_found(notebook: str | os.PathLike, path: Path, where: str) -> None:
    """One line saying which file stands for ``notebook`` when it is not the one next to this notebook."""
    place = "in Google Drive" if where == IN_DRIVE else "next to this notebook"
    print(f"Using your copy of {Path(notebook).name} {place}: {os.path.abspath(path)}")


def announce_reference(notebook: str | os.PathLike, names: Sequence[str], reference: Path) -> None:
    """Say loudly that the course's reference code replaces the learner's (every time: each call looks again)."""
    name = Path(notebook).name
    copies = f'(copies named "Copy of {name}" count too)'
    if not on_colab():
        where = f"put your {name} in the same folder as this notebook"
    elif drive_roots():  # mounted already: say where in it
        folders = drive_folders()
        folder = folders[0] if folders else drive_roots()[0] / DRIVE_NOTEBOOKS[0]
        where = f"save your {name} in {folder} {copies}, or upload it next to this notebook with the Files panel"
    else:
        where = (
            f"mount Google Drive ({MOUNT_HINT}) if you saved {name} there {copies}, "
            f"or upload it next to this notebook with the Files panel"
        )
    line = "=" * 78
    print(
        f"{line}\n"
        f"NOTE: your {name} was not found, so this notebook uses the COURSE'S REFERENCE CODE\n"
        f"(from {reference}) for: {', '.join(names)}.\n"
        f"Looked in: {looked_in(notebook)}.\n"
        f"To use your own code instead, {where}, then run this cell again.\n"
        f"{line}"
    )


__all__ = [
    "CONTENT", "DRIVE_ROOT", "EnvironmentProblem", "IncompleteCourse", "check_environment", "environment_problem", "announce_found", "announce_reference", "course_root", "drive_folders",
    "drive_roots", "find_in_drive", "find_learner_notebook", "find_saved_file", "locate_learner_notebook",
    "missing_requirements", "on_colab", "reference_notebook", "repair_clone", "requirements", "setup",
]
