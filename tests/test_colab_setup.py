"""The Colab path: the setup cell, show_solution there, and finding a learner's notebooks (offline).

On "Colab" the setup cell must make a shallow clone of the repository next to
the notebook, import course_utils from it and make the checkers and
``show_solution`` work; locally it must only import, and print nothing.

Colab is simulated: a throwaway virtual environment in which course_utils is
NOT importable (it sees the test environment's packages, torch included,
through a plain path entry, so the editable install's import hook, itself a
.pth file, is not processed there), a fake ``google.colab`` module, and the
repository served by a local git repository made from the working tree (so
uncommitted files count, and a clean CI clone works the same). The address
comes from ``COURSE_UTILS_REPOSITORY``; pip runs with no index (offline).

``load_exercises`` on Colab is tested in-process with a fake ``google.colab``
in ``sys.modules`` and a fake Drive folder.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_utils import colab
from course_utils.generate import REPOSITORY_ENV, load_config, main
from course_utils.notebook import load_exercises

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "setup.cfg", "setup.py")

RUNNER = """\
import importlib.util, json, os, sys

sys.path.insert(0, sys.argv[2])  # the fake google.colab
import google.colab

found = importlib.util.find_spec("course_utils")
assert found is None, f"course_utils was importable before the setup cell ran: {found.origin}"
cell = open(sys.argv[1]).read()
exec(compile(cell, "setup cell", "exec"), {"__name__": "__main__"})

import course_utils
from course_utils.checks import CheckResult, Status
import course_utils.checks as checks
from course_utils.solutions import find_solution

clone = os.path.abspath(os.path.basename(os.environ["COURSE_UTILS_REPOSITORY"]))
assert course_utils.__file__.startswith(clone), (course_utils.__file__, clone)
solution = find_solution("scaled_dot_product_attention")
assert str(solution.notebook).startswith(clone) and "def scaled_dot_product_attention" in solution.source

resolved = []
for name, module in sorted(checks._TOPICS.items()):
    if os.path.exists(os.path.join(os.path.dirname(checks.__file__), module + ".py")):
        assert callable(getattr(checks, name)), name
        resolved.append(name)

# Run again, as a learner would: already cloned, so git is not called (the address is broken).
os.environ["COURSE_UTILS_REPOSITORY"] = "/nonexistent/course"
exec(compile(cell, "setup cell", "exec"), {"__name__": "__main__"})
print(json.dumps({"file": course_utils.__file__, "checkers": resolved}))
"""


def setup_cell(tmp_path: Path) -> str:
    """The setup cell's source, taken from an exercise notebook generated with the real [tool.course] settings."""
    root = tmp_path / "course"
    (root / "solutions").mkdir(parents=True)
    shutil.copyfile(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    solution = {
        "cells": [{"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# Title"}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (root / "solutions" / "01_x.ipynb").write_text(json.dumps(solution))
    assert main(["--root", str(root)]) == 0
    cells = json.loads((root / "notebooks" / "01_x.ipynb").read_text())["cells"]
    assert cells[1]["metadata"]["tags"] == ["colab-setup"]
    return "".join(cells[1]["source"])


def snapshot_repository(destination: Path, branch: str) -> None:
    """A git repository holding the package as it is in the working tree (tracked and new files)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    for name in listed:
        source = REPO_ROOT / name
        if source.is_file() and (name.startswith(("course_utils/", "solutions/")) or name in TOP_LEVEL):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination / name)
    if not (destination / "README.md").exists():
        (destination / "README.md").write_text("placeholder\n")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", branch], cwd=destination, check=True)
    subprocess.run([*git, "add", "-A"], cwd=destination, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "snapshot"], cwd=destination, check=True)


def colab_like_python(venv: Path) -> Path:
    """A virtual environment that sees this environment's packages (torch...) but not course_utils's import hook."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True, check=True
    ).stdout.strip()
    parents = list(site.getsitepackages()) + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    (Path(purelib) / "_test_environment.pth").write_text("\n".join(parents) + "\n")
    return python


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PIP_TARGET", "PIP_PREFIX")}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_on_colab_the_setup_cell_clones_the_course_and_the_checkers_import(tmp_path: Path) -> None:
    config = load_config(REPO_ROOT)
    cell = tmp_path / "setup_cell.py"
    cell.write_text(setup_cell(tmp_path))
    assert config.clone_url in cell.read_text()

    repository = tmp_path / config.folder
    repository.mkdir()
    snapshot_repository(repository, config.branch)
    python = colab_like_python(tmp_path / "colab")

    fake = tmp_path / "fake"
    (fake / "google" / "colab").mkdir(parents=True)
    (fake / "google" / "__init__.py").write_text("")
    (fake / "google" / "colab" / "__init__.py").write_text('"""Stands in for Colab."""\n')
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    isolated = tmp_path / "cwd"
    isolated.mkdir()
    interrupted = isolated / f"{config.folder}.download"  # what a clone cut short by the learner left
    (interrupted / ".git").mkdir(parents=True)
    (interrupted / ".git" / "HEAD").write_text("ref: refs/heads/main\n")

    env = clean_env(**{REPOSITORY_ENV: repository.as_uri()}, PIP_NO_INDEX="1")  # offline: nothing from an index
    done = subprocess.run(
        [str(python), str(runner), str(cell), str(fake)], cwd=isolated, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).resolve().is_relative_to((isolated / config.folder).resolve()), report["file"]
    assert (isolated / config.folder / ".git" / "shallow").exists(), "a shallow clone"
    assert not interrupted.exists(), "the interrupted clone was cleared away"
    assert "The course is ready in" in done.stdout
    expected = sorted(
        name for name, module in _topics().items() if (repository / "course_utils" / "checks" / f"{module}.py").exists()
    )
    assert report["checkers"] == expected


def _topics() -> dict[str, str]:
    import course_utils.checks as checks

    return dict(checks._TOPICS)


def test_locally_the_setup_cell_only_imports_and_prints_nothing(tmp_path: Path) -> None:
    cell = setup_cell(tmp_path)
    # A broken address proves git is never called outside Colab.
    env = clean_env(**{REPOSITORY_ENV: "/nonexistent/course"})
    script = f"exec(compile({cell!r}, 'setup cell', 'exec'), {{}})\nimport sys\nassert 'course_utils' in sys.modules"
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""


# ---------------------------------------------------------------------------
# load_exercises and show_solution on Colab, in-process: a fake google.colab and a fake Drive.

LESSON = "01_attention.ipynb"


def _lesson_notebook(path: Path, body: str) -> Path:
    """A notebook that defines scaled_dot_product_attention as ``body`` says (and a checker cell that must not run)."""
    cells = [
        {"cell_type": "code", "id": "a", "execution_count": None, "metadata": {}, "outputs": [], "source": "import math"},
        {"cell_type": "code", "id": "b", "execution_count": None, "metadata": {}, "outputs": [],
         "source": f"def scaled_dot_product_attention(q, k, v, mask=None):\n    return {body!r}"},
        {"cell_type": "code", "id": "c", "execution_count": None, "metadata": {}, "outputs": [], "source": "raise RuntimeError('not run')"},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.fixture
def on_colab(tmp_path: Path, monkeypatch):
    """Colab: google.colab importable, cwd an empty /content, Drive mounted at a fake folder (no notebooks yet)."""
    import types

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    content = tmp_path / "content"
    content.mkdir()
    monkeypatch.chdir(content)
    monkeypatch.setattr(colab, "CONTENT", content)
    drive = tmp_path / "drive"
    monkeypatch.setattr(colab, "DRIVE_ROOT", drive)
    return drive / "MyDrive" / "Colab Notebooks"


def test_on_colab_a_notebook_in_the_current_folder_comes_first(on_colab: Path, capsys) -> None:
    _lesson_notebook(Path.cwd() / LESSON, "here")
    _lesson_notebook(on_colab / LESSON, "drive")
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "here" and capsys.readouterr().out == ""


def test_on_colab_drive_copies_are_found_the_latest_first(on_colab: Path, capsys) -> None:
    old = _lesson_notebook(on_colab / LESSON, "saved in Drive")
    os.utime(old, (1_000, 1_000))
    copy = _lesson_notebook(on_colab / f"Copy of {LESSON}", "a copy, saved later")
    os.utime(copy, (2_000, 2_000))
    _lesson_notebook(on_colab / "Copy of 01_attention_notes.ipynb", "another notebook")  # not a copy of the lesson
    os.utime(on_colab / "Copy of 01_attention_notes.ipynb", (3_000, 3_000))
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "a copy, saved later"
    assert capsys.readouterr().out == f"Using your copy of {LESSON} in Google Drive: {copy}\n", "one line says which file"
    assert colab.find_in_drive("01_ATTENTION.ipynb") == copy, "Drive names are matched without regard to case"


def test_on_colab_the_other_drive_folder_name_works_too(on_colab: Path) -> None:
    other = on_colab.parent.parent / "My Drive" / "Colab Notebooks"
    _lesson_notebook(other / f"Copy of Copy of {LESSON}", "my drive")
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "my drive"


def test_without_the_learners_notebook_the_reference_is_used_and_said_loudly_every_time(on_colab: Path, capsys) -> None:
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    out = capsys.readouterr().out
    import torch

    q = torch.randn(1, 2, 4)
    output, weights = fn(q, q, q)
    assert torch.allclose(weights.sum(-1), torch.ones(1, 2)), "the course's reference attention"
    assert "NOTE: your 01_attention.ipynb was not found" in out and "REFERENCE CODE" in out
    assert "for: scaled_dot_product_attention." in out and str(REPO_ROOT / "solutions" / LESSON) in out
    assert "Google Drive (not mounted)" in out and 'drive.mount("/content/drive")' in out and "Copy of 01_attention.ipynb" in out
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    assert capsys.readouterr().out == out, "every call looks again and says again what it used"
    load_exercises("02_masks.ipynb", ["make_causal_mask"])
    assert "make_causal_mask" in capsys.readouterr().out, "another notebook is announced too"


def test_with_drive_mounted_but_without_the_notebook_the_notice_names_the_folder(on_colab: Path, capsys) -> None:
    on_colab.mkdir(parents=True)
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    out = capsys.readouterr().out
    assert str(on_colab) in out and "not mounted" not in out
    assert "drive.mount" not in out and "mount Google Drive" not in out, "it is mounted already"
    assert f"save your {LESSON} in {on_colab} (copies named \"Copy of {LESSON}\" count too)" in out
    assert "or upload it next to this notebook with the Files panel, then run this cell again." in out


def test_locally_the_fallback_says_where_to_put_the_notebook(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    out = capsys.readouterr().out
    assert "REFERENCE CODE" in out and f"put your {LESSON} in the same folder as this notebook" in out
    assert "drive" not in out.lower()


def test_show_solution_works_from_the_colab_content_folder(on_colab: Path, capsys) -> None:
    """On Colab the notebook runs in /content; the clone next to it holds solutions/ and the package."""
    from course_utils.solutions import show_solution

    show_solution("scaled_dot_product_attention")
    out = capsys.readouterr().out
    assert out.startswith("Solution: scaled_dot_product_attention (from 01_attention.ipynb")


def test_setup_does_nothing_locally_and_installs_only_what_is_missing_on_colab(on_colab: Path, monkeypatch, capsys) -> None:
    assert "tokenizers>=" in " ".join(colab.requirements()) or "tokenizers" in colab.requirements(), "read from pyproject.toml"
    calls = []
    monkeypatch.setattr(colab.subprocess, "run", lambda args, **kw: calls.append(args))
    monkeypatch.setattr(colab, "repair_clone", lambda root: None)  # tested below, on a clone of its own
    monkeypatch.delitem(sys.modules, "google.colab")
    colab.setup()
    assert calls == [] and capsys.readouterr().out == ""

    import types

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(colab, "requirements", lambda root=None: ["torch>=2.1", "sacrebleu>=2", "no-such-package-xyz>=1", "jupyterlab"])
    colab.setup()
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "no-such-package-xyz>=1"]]
    out = capsys.readouterr().out
    assert "The course is ready in" in out and "mount Google Drive" in out


def test_after_mounting_drive_the_same_cell_finds_what_it_could_not_before(on_colab: Path, capsys) -> None:
    """Each call looks again: a reference used before Drive was mounted is not kept for the rest of the session."""
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    assert "REFERENCE CODE" in capsys.readouterr().out
    saved = _lesson_notebook(on_colab / LESSON, "mine, in Drive")  # the learner mounts Drive, runs the cell again
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "mine, in Drive"
    assert capsys.readouterr().out == f"Using your copy of {LESSON} in Google Drive: {saved}\n"


def test_drive_mounted_elsewhere_under_content_is_found(on_colab: Path, capsys) -> None:
    """drive.mount("/content/gdrive"): any mounted Drive under /content counts."""
    gdrive = Path.cwd() / "gdrive" / "MyDrive" / "Colab Notebooks"
    saved = _lesson_notebook(gdrive / f"Copy of {LESSON}", "gdrive")
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "gdrive" and str(saved) in capsys.readouterr().out
    assert colab.drive_folders() == [gdrive]
    (gdrive.parent / "Colab Notebooks").rename(gdrive.parent / "Other")  # mounted, without a Colab Notebooks folder
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    out = capsys.readouterr().out
    assert "not mounted" not in out and "drive.mount" not in out
    assert f"{gdrive} (Google Drive is mounted, but has no such folder)" in out


def test_uploaded_copies_next_to_the_notebook_are_found(on_colab: Path, capsys) -> None:
    """Files panel uploads land in /content, named "Copy of ..." or "... (1)": the box looked there, so must the search."""
    old = _lesson_notebook(Path.cwd() / f"Copy of {LESSON}", "first upload")
    os.utime(old, (1_000, 1_000))
    new = _lesson_notebook(Path.cwd() / f"Copy of {Path(LESSON).stem} (1).ipynb", "second upload")
    os.utime(new, (2_000, 2_000))
    _lesson_notebook(on_colab / LESSON, "drive")
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "second upload", "next to the notebook comes before Drive; the latest copy first"
    assert capsys.readouterr().out == f"Using your copy of {LESSON} next to this notebook: {new}\n"


def test_locally_a_copy_in_the_folder_is_found_too(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    copy = _lesson_notebook(tmp_path / f"Copy of {LESSON}", "local copy")
    (fn,) = load_exercises(LESSON, ["scaled_dot_product_attention"]).values()
    assert fn(1, 2, 3) == "local copy" and str(copy) in capsys.readouterr().out


def test_setup_says_drive_is_mounted_wherever_it_is(on_colab: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(colab, "requirements", lambda root=None: [])
    monkeypatch.setattr(colab, "repair_clone", lambda root: None)
    (Path.cwd() / "gdrive" / "MyDrive").mkdir(parents=True)
    colab.setup()
    out = capsys.readouterr().out
    assert "Google Drive is mounted" in out and "mount Google Drive first" not in out


# ---------------------------------------------------------------------------
# What a loading cell used, in one line.


def test_the_summary_says_which_lessons_the_reference_stands_in_for(on_colab: Path, capsys) -> None:
    from course_utils.notebook import loaded, loaded_summary

    loaded.clear()  # loads recorded by earlier tests in this process

    _lesson_notebook(Path.cwd() / LESSON, "mine")
    ns: dict = {}
    load_exercises(LESSON, ["scaled_dot_product_attention"], namespace=ns)
    load_exercises("02_masks.ipynb", ["make_causal_mask"], namespace=ns)  # not saved anywhere: the reference
    load_exercises("03_positional_encoding.ipynb", ["sinusoidal_positional_encoding"], namespace=ns)
    _lesson_notebook(on_colab / "Copy of 04_multi_head_attention.ipynb", "in drive")
    capsys.readouterr()
    with pytest.raises(LookupError):  # found, but it does not define MultiHeadAttention: still counted as found
        load_exercises("04_multi_head_attention.ipynb", ["MultiHeadAttention"], namespace=ns)
    capsys.readouterr()
    loaded_summary()
    assert capsys.readouterr().out == (
        "Loaded lessons 01 to 04: your code for 01 and 04; the course's reference solution for 02 and 03 "
        "(see the notes above).\n"
    )
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    capsys.readouterr()
    loaded_summary()
    assert capsys.readouterr().out == "Loaded your code from lesson 01.\n", "only what was loaded since the last summary"


def test_the_summary_when_everything_or_nothing_is_the_learners(tmp_path: Path, monkeypatch, capsys) -> None:
    from course_utils import notebook

    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("01_attention.ipynb", "02_masks.ipynb", "04_multi_head_attention.ipynb"):
        _lesson_notebook(tmp_path / name, "mine")
        with pytest.raises(LookupError):
            load_exercises(name, ["MultiHeadAttention"])
    notebook.loaded_summary()
    assert capsys.readouterr().out == "Loaded your code from lessons 01, 02 and 04.\n"
    load_exercises("05_transformer.ipynb", ["FeedForward"])
    capsys.readouterr()
    notebook.loaded_summary()
    assert capsys.readouterr().out == (
        "Loaded lesson 05: the course's reference solution stands in for it (see the note above).\n"
    )


def test_in_a_notebook_the_summary_covers_the_cell_that_calls_it(on_colab: Path, monkeypatch, capsys) -> None:
    import IPython

    from course_utils.notebook import loaded_summary

    class Shell:
        execution_count = 7

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell)
    _lesson_notebook(Path.cwd() / LESSON, "mine")
    load_exercises("02_masks.ipynb", ["make_causal_mask"])  # an earlier cell, never summarised
    Shell.execution_count = 8
    load_exercises(LESSON, ["scaled_dot_product_attention"])
    capsys.readouterr()
    loaded_summary()
    assert capsys.readouterr().out == "Loaded your code from lesson 01.\n"


# ---------------------------------------------------------------------------
# Files an earlier lesson saved.


def test_a_file_an_earlier_lesson_saved_is_found_here_or_in_drive(on_colab: Path) -> None:
    from course_utils.notebook import saved_file

    relative = Path("checkpoints") / "06_transformer.pt"
    assert saved_file(relative) == relative and not saved_file(relative).exists(), "nowhere: the path as given"
    in_drive = on_colab / relative
    in_drive.parent.mkdir(parents=True)
    in_drive.write_bytes(b"drive")
    assert saved_file(relative) == in_drive
    assert saved_file(str(relative)) == in_drive
    here = Path.cwd() / relative
    here.parent.mkdir(parents=True)
    here.write_bytes(b"here")
    assert saved_file(relative) == relative, "next to the notebook comes first"


# ---------------------------------------------------------------------------
# An interrupted clone of the course.


def _git(*args: str, cwd: Path) -> str:
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run([*git, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A shallow clone of a small course repository, as the setup cell makes one."""
    origin = tmp_path / "origin"
    for name in ("course_utils/__init__.py", "course_utils/colab.py", "course_utils/notebook.py",
                 "course_utils/checks/__init__.py", "solutions/01_attention.ipynb"):
        (origin / name).parent.mkdir(parents=True, exist_ok=True)
        (origin / name).write_text(f"# {name}\n")
    _git("init", "-q", "-b", "main", cwd=origin)
    _git("add", "-A", cwd=origin)
    _git("commit", "-q", "-m", "course", cwd=origin)
    _git("clone", "-q", "--depth", "1", origin.as_uri(), str(tmp_path / "course"), cwd=tmp_path)
    return tmp_path / "course"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_setup_restores_the_files_an_interrupted_clone_left_out(clone: Path, on_colab: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(colab, "course_root", lambda: clone)
    monkeypatch.setattr(colab, "requirements", lambda root=None: [])
    (clone / "course_utils" / "notebook.py").unlink()
    shutil.rmtree(clone / "solutions")
    (clone / ".git" / "index.lock").write_text("")  # git was killed while it wrote the files
    (clone / "course_utils" / "colab.py").write_text("# the learner's own change\n")
    colab.setup()
    out = capsys.readouterr().out
    assert (clone / "course_utils" / "notebook.py").read_text() == "# course_utils/notebook.py\n"
    assert (clone / "solutions" / "01_attention.ipynb").exists()
    assert (clone / "course_utils" / "colab.py").read_text() == "# the learner's own change\n", "only missing files"
    assert out.startswith(f"The course folder {clone} was incomplete (an interrupted download?): restored 2 missing files.\n")
    assert "The course is ready in" in out
    colab.setup()
    assert "incomplete" not in capsys.readouterr().out, "a complete clone is left alone"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_setup_says_what_to_do_when_the_clone_cannot_be_repaired(clone: Path, on_colab: Path, monkeypatch) -> None:
    monkeypatch.setattr(colab, "course_root", lambda: clone)
    monkeypatch.setattr(colab, "requirements", lambda root=None: [])
    shutil.rmtree(clone / ".git" / "objects")  # the download stopped before the files arrived
    (clone / ".git" / "objects").mkdir()
    (clone / "solutions" / "01_attention.ipynb").unlink()
    with pytest.raises(colab.IncompleteCourse) as raised:
        colab.setup()
    message = str(raised.value)
    assert f"The course folder {clone} is incomplete" in message
    assert f'!rm -rf "{clone}"' in message and "then run this cell again" in message


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_clone_git_cannot_read_but_with_every_file_the_course_needs_is_left_alone(clone: Path, on_colab: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(colab, "course_root", lambda: clone)
    monkeypatch.setattr(colab, "requirements", lambda root=None: [])
    shutil.rmtree(clone / ".git" / "objects")
    (clone / ".git" / "objects").mkdir()
    colab.setup()
    assert "The course is ready in" in capsys.readouterr().out


def test_a_folder_that_is_no_git_clone_is_not_checked(tmp_path: Path, on_colab: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(colab, "course_root", lambda: tmp_path)
    monkeypatch.setattr(colab, "requirements", lambda root=None: [])
    colab.setup()
    assert "incomplete" not in capsys.readouterr().out


def test_the_summary_names_what_the_saved_notebooks_have_not_finished(tmp_path: Path, monkeypatch, capsys) -> None:
    """A saved notebook older than the learner's work still holds the stubs: the summary says so at once."""
    from course_utils import notebook

    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('def make_causal_mask(size):\n    """True on and below the diagonal."""\n'
                                  '    raise NotImplementedError()'),
        nbformat.v4.new_code_cell("def make_padding_mask(tokens, pad_id):\n    return tokens != pad_id"),
    ])
    nbformat.write(nb, str(tmp_path / "02_masks.ipynb"))
    notebook.loaded.clear()
    load_exercises("02_masks.ipynb", ["make_padding_mask", "make_causal_mask"])
    capsys.readouterr()
    notebook.loaded_summary()
    assert capsys.readouterr().out == (
        "Loaded your code from lesson 02.\nNot finished in the saved notebooks yet: `make_causal_mask` (lesson 02). "
        "The cells that use it will say so: finish, run the checker, save, and run this cell again.\n")
