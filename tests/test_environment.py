"""The setup cell knows when this Python environment cannot run the course, and says what to run.

Versions are faked two ways: a fake ``installed`` function for the decision
itself, and fake ``*.dist-info`` folders placed first on ``sys.path`` for the
setup cell run for real in an IPython shell (what a learner sees: one
sentence, no traceback). The floors are pyproject.toml's: a test reads them
there, so the two cannot drift apart.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import colab
import nbformat

ROOT = Path(__file__).resolve().parents[1]
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def fake(**versions):
    """An ``installed`` function answering from ``versions`` (None: not installed)."""
    return lambda name: versions.get(name)


COURSE = Path("/course")


def problem(python=(3, 11, 7), **versions):
    return colab.environment_problem(fake(**versions), python=python, root=COURSE)


@pytest.fixture(autouse=True)
def _course_is_a_clone(monkeypatch):
    """/course stands for a clone of the course (with its pyproject.toml)."""
    is_file = Path.is_file
    monkeypatch.setattr(Path, "is_file", lambda self: self == COURSE / "pyproject.toml" or is_file(self))


def test_the_command_installs_the_clone_the_package_comes_from():
    assert colab.fix_command(ROOT) == f'%pip install -e "{ROOT}[dev]"'
    assert colab.fix_command(ROOT / "course_utils") == '%pip install -e "PATH-TO-YOUR-CLONE-OF-THE-COURSE[dev]"'


def test_a_supported_pair_has_no_problem():
    assert problem(torch="2.13.0+cpu", numpy="2.4.1") is None
    assert problem(torch="2.3.0+cu121", numpy="2.0.0") is None  # the first torch built for NumPy 2
    assert problem(torch="2.2.2", numpy="1.26.4") is None  # Intel Macs' last torch, with NumPy 1
    assert problem(torch="2.5.0a0+git1234", numpy=None) is None  # a source build; torch needs no NumPy
    assert problem(python=(3, 10, 0), torch="2.4.1", numpy="1.26.0") is None


@pytest.mark.parametrize("torch_version", ["2.1.2", "2.2.2", "2.2.0+cpu"])
def test_an_old_torch_next_to_numpy_2_is_named_with_the_command(torch_version):
    message = problem(torch=torch_version, numpy="2.1.3")
    assert message is not None
    if torch_version.startswith("2.2.2"):
        assert message.startswith(f"PyTorch {torch_version} was built for NumPy 1 and cannot work with the NumPy 2.1.3")
    assert '`%pip install -e "/course[dev]"`' in message and "restart the kernel" in message
    assert message.count(". ") == 0 and message.endswith("."), "one sentence"


def test_a_torch_below_the_floor_is_named_even_with_numpy_1():
    message = problem(torch="2.1.2+cu121", numpy="1.26.4")
    assert message == (
        "PyTorch 2.1.2+cu121 is older than this course supports (2.3 or newer; 2.2.2 on Intel Macs): "
        'run `%pip install -e "/course[dev]"` in a cell, then restart the kernel and run this cell again.'
    )


def test_a_pyarrow_that_needs_numpy_2_next_to_numpy_1_is_named():
    """pyarrow 26 needs NumPy 2 without declaring it, so pip keeps NumPy 1 beside it (on an Intel Mac, say)."""
    message = problem(torch="2.2.2", numpy="1.26.4", pyarrow="26.0.1")
    assert message is not None and message.startswith("pyarrow 26.0.1 (what the datasets library stores data with) "
                                                      "needs NumPy 2, and NumPy 1.26.4 is installed")
    assert problem(torch="2.2.2", numpy="1.26.4", pyarrow="25.0.1") is None
    assert problem(torch="2.13.0", numpy="2.4.1", pyarrow="26.0.1") is None


def test_the_pyarrow_bound_is_pyproject_tomls():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"pyarrow<{colab.PYARROW_NEEDS_NUMPY_2[0]};" in "".join(project["dependencies"]).replace(" ", "")


def test_on_colab_a_missing_requirement_keeps_its_marker_for_pip():
    """pip skips a requirement whose marker does not hold; without the marker it would install it everywhere."""
    line = "no-such-package-xyz<2; sys_platform == 'darwin' and platform_machine == 'x86_64'"
    assert colab.missing_requirements([line, "torch>=2.3", "numpy>=2"]) == [line]


def test_no_torch_and_an_old_python_are_named():
    assert problem(torch=None, numpy="2.0.0").startswith("PyTorch is not installed for this notebook's Python")
    message = problem(python=(3, 9, 18), torch="2.4.0", numpy="2.0.0")
    assert message.startswith("This course needs Python 3.10 or newer, and this notebook runs Python 3.9.18")
    assert 'pip install -e ".[dev]"' in message


def test_the_floors_are_pyproject_tomls():
    """The setup cell's thresholds are the floors pyproject.toml declares (its markers say which is which)."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={'.'.join(map(str, colab.PYTHON_FLOOR))}"
    torch_floors = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if requirement.name == "torch":
            intel_mac = requirement.marker.evaluate({"sys_platform": "darwin", "platform_machine": "x86_64"})
            torch_floors[intel_mac] = next(s.version for s in requirement.specifier if s.operator == ">=")
    assert torch_floors == {True: ".".join(map(str, colab.TORCH_FLOOR)), False: ".".join(map(str, colab.TORCH_FOR_NUMPY_2))}


def test_release_numbers():
    assert colab._release("2.2.2+cu121") == (2, 2, 2)
    assert colab._release("2.4.0rc1") == (2, 4, 0)
    assert colab._release("1.26.4") == (1, 26, 4)
    assert colab._release("2.0.0.dev0") == (2, 0, 0)


def test_here_the_environment_is_fine():
    """Run for real: the environment running the tests (CI's newest and its floors) can run the course."""
    assert colab.environment_problem() is None


def test_the_setup_module_parses_on_older_pythons():
    """The setup cell must be able to *say* that Python is too old: colab.py parses as Python 3.8."""
    source = (ROOT / "course_utils" / "colab.py").read_text()
    ast.parse(source, feature_version=(3, 8))
    ast.parse((ROOT / "course_utils" / "__init__.py").read_text(), feature_version=(3, 8))


def test_the_package_parses_as_the_floor_python():
    """No syntax newer than the declared floor (3.10) anywhere in the package (no Python 3.10 is at hand to run it)."""
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        ast.parse(path.read_text(), filename=str(path), feature_version=colab.PYTHON_FLOOR)


def _fake_dists(folder: Path, **versions: str) -> Path:
    for name, version in versions.items():
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return folder


SHELL = """\
import sys
sys.path.insert(0, sys.argv[1])  # the fake metadata first
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
result = shell.run_cell(open(sys.argv[2]).read())
print("SUCCESS" if result.success else "STOPPED")
print("torch imported" if "torch" in sys.modules else "torch not imported")
"""


@pytest.mark.integration
@pytest.mark.parametrize("versions, expected", [
    ({"torch": "2.2.2", "numpy": "2.1.3"}, "PyTorch 2.2.2 was built for NumPy 1"),
    ({"torch": "2.1.2", "numpy": "1.26.4"}, "PyTorch 2.1.2 is older than this course supports"),
])
def test_the_setup_cell_says_it_in_one_sentence_without_a_traceback(tmp_path, versions, expected):
    """Lesson 01's setup cell, run in an IPython shell with faked torch/NumPy metadata: the message, no traceback."""
    dists = _fake_dists(tmp_path / "dists", **versions)
    cell = tmp_path / "cell.py"
    notebook = nbformat.read(ROOT / "notebooks" / "01_attention.ipynb", as_version=4)
    cell.write_text(next(c.source for c in notebook.cells if "colab-setup" in c.metadata.get("tags", [])))
    done = subprocess.run([sys.executable, "-c", SHELL, str(dists), str(cell)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[-2:] == ["STOPPED", "torch not imported"], done.stdout + done.stderr
    message = lines[:-2]
    assert len(message) == 1 and message[0].startswith(expected), done.stdout
    assert re.search(r"`%pip install -e \".*\[dev\]\"`", message[0])
    assert "Traceback" not in done.stdout + done.stderr and "File " not in done.stdout
