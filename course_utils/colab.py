"""The course on Google Colab: the setup cell's logic, and where a learner's notebooks are.

Colab opens each notebook alone, straight from GitHub. The setup cell at the
top of every lesson makes a shallow clone of the course repository next to
the notebook (so ``course_utils``, ``solutions/`` and the lesson files are
there), puts it on ``sys.path`` and calls :func:`setup`, which installs the
few packages Colab lacks. Locally :func:`setup` does nothing and prints
nothing.

Later lessons reuse a learner's own code from earlier notebooks
(``course_utils.notebook.load_exercises``). :func:`find_learner_notebook`
looks for them first in the current folder, then, on Colab, in the mounted
Google Drive's "Colab Notebooks" folder, where Colab saves copies (also named
"Copy of 01_attention.ipynb"). When neither has it, :func:`reference_notebook`
gives the course's own solution notebook instead, and
:func:`announce_reference` says so loudly, once per exercise.

Only the standard library is imported here: the setup cell imports this
module before the missing packages are installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence

#: Where Colab mounts Google Drive (``drive.mount("/content/drive")``); tests point it at a fake folder.
DRIVE_ROOT = Path("/content/drive")
#: The folder of a mounted Drive where Colab saves notebooks ("File > Save a copy in Drive").
DRIVE_NOTEBOOKS = ("MyDrive/Colab Notebooks", "My Drive/Colab Notebooks")
#: Requirements never installed on Colab: torch (Colab's build matches its GPU) and the notebook server.
SKIP = {"torch", "jupyterlab", "notebook", "ipykernel", "course-utils"}
#: Distribution name -> module name, where they differ beyond "-" -> "_".
MODULE_NAMES = {"scikit-learn": "sklearn", "pyyaml": "yaml", "pillow": "PIL", "beautifulsoup4": "bs4"}

MOUNT_HINT = 'from google.colab import drive; drive.mount("/content/drive")'

_announced: set[tuple[str, str]] = set()  # (notebook name, exercise) already replaced loudly


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
            missing.append(requirement.split(";")[0].strip().replace(" ", ""))
    return missing


def setup() -> None:
    """On Colab, install what the course needs and Colab lacks, and say where the course is. Elsewhere: nothing."""
    if not on_colab():
        return
    root = course_root()
    missing = missing_requirements(requirements(root))
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
        importlib.invalidate_caches()
    mounted = any(drive_folders())
    print(
        f"The course is ready in {root} (its solutions/ included).\n"
        + ("Google Drive is mounted: your saved notebooks there are used by later lessons."
           if mounted else
           f"Later lessons reuse your earlier notebooks: mount Google Drive first ({MOUNT_HINT}) so they can be found.")
    )


# ---------------------------------------------------------------------------
# Finding a learner's notebook


def drive_folders() -> list[Path]:
    """The mounted Drive's Colab notebook folders that exist (none outside Colab or when Drive is not mounted)."""
    if not on_colab():
        return []
    return [DRIVE_ROOT / sub for sub in DRIVE_NOTEBOOKS if (DRIVE_ROOT / sub).is_dir()]


def _copy_pattern(name: str) -> re.Pattern[str]:
    """``01_attention.ipynb``, ``Copy of 01_attention.ipynb``, ``Copy of Copy of ...``, ``01_attention (1).ipynb``."""
    stem = re.escape(Path(name).stem)
    return re.compile(rf"^(?:Copy of )*{stem}(?: \(\d+\))?\.ipynb$", re.IGNORECASE)


def find_in_drive(name: str) -> Path | None:
    """The most recently saved notebook in Drive's Colab folder named ``name`` or a copy of it."""
    pattern = _copy_pattern(name)
    found = [p for folder in drive_folders() for p in folder.iterdir() if p.is_file() and pattern.match(p.name)]
    if not found:
        return None
    return max(found, key=lambda p: (p.stat().st_mtime, p.name == name))


def find_learner_notebook(notebook: str | os.PathLike) -> Path | None:
    """The learner's own ``notebook``: the path as given (the current folder), else in Google Drive on Colab."""
    path = Path(notebook)
    if path.is_file():
        return path
    return find_in_drive(path.name)


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
    """Where :func:`find_learner_notebook` looked, in words."""
    path = Path(notebook)
    places = [f"{path.parent.resolve() if str(path.parent) != '.' else Path.cwd()} (this folder)"]
    if on_colab():
        folders = drive_folders()
        places.append(", ".join(str(f) for f in folders) if folders else "Google Drive (not mounted)")
    return "; ".join(places)


def announce_reference(notebook: str | os.PathLike, names: Sequence[str], reference: Path) -> None:
    """Say loudly, once per exercise, that the course's reference code replaces the learner's."""
    name = Path(notebook).name
    new = [n for n in names if (name, n) not in _announced]
    if not new:
        return
    _announced.update((name, n) for n in new)
    where = (
        f"mount Google Drive ({MOUNT_HINT}) if you saved {name} there (copies named \"Copy of {name}\" count too), "
        f"or upload it next to this notebook with the Files panel"
        if on_colab()
        else f"put your {name} in the same folder as this notebook"
    )
    line = "=" * 78
    print(
        f"{line}\n"
        f"NOTE: your {name} was not found, so this notebook uses the COURSE'S REFERENCE CODE\n"
        f"(from {reference}) for: {', '.join(new)}.\n"
        f"Looked in: {looked_in(notebook)}.\n"
        f"To use your own code instead, {where}, then run this cell again.\n"
        f"{line}"
    )


__all__ = [
    "DRIVE_ROOT", "announce_reference", "course_root", "drive_folders", "find_in_drive", "find_learner_notebook",
    "missing_requirements", "on_colab", "reference_notebook", "requirements", "setup",
]
