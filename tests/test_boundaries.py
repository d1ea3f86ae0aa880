"""The package's two halves stay apart, and every checker is wired in.

* The learner runtime (what notebooks import: the checkers, data, plots,
  notebook helpers, solutions, contracts, the Colab setup) never imports the
  authoring tool ``generate``.
* ``generate``, ``progress`` and ``grading`` (run with ``python -m``, outside any
  kernel), and the otter plugin, never import torch or the checkers: they read notebooks, and ``progress``
  reads checker results as JSON.
* Every ``check_*`` defined in ``course_utils/checks/`` is registered in
  ``_TOPICS`` under its own module, and has a test module that calls it.

Imports are read from the source, including those inside functions (a lazy
import still crosses the boundary when it runs), and confirmed by importing
the modules in a fresh interpreter.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import course_utils
from course_utils import checks

PACKAGE = Path(course_utils.__file__).parent
TESTS = Path(__file__).parent

RUNTIME = (
    "course_utils.checks",
    "course_utils.data",
    "course_utils.plots",
    "course_utils.notebook",
    "course_utils.solutions",
    "course_utils.contracts",
    "course_utils.colab",
    "course_utils.model_map",
    "course_utils.shapes",
    "course_utils.measured",
    "course_utils.autograde",
)
#: plain data that both halves read (the generator stamps each lesson's header from it, the map draws from it)
SHARED_DATA = ("course_utils.lessons",)
TOOLS = ("course_utils.generate", "course_utils.progress", "course_utils.grading")
#: Tools that need the grading extra (otter-grader): read from source only, never imported here.
GRADING_TOOLS = ("course_utils.otter_plugin",)
FORBIDDEN_IN_TOOLS = ("torch", "course_utils.checks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> Path | None:
    base = PACKAGE.parent.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports_of(path: Path) -> set[str]:
    """Every module an import statement anywhere in the file names (``from a import b`` gives ``a`` and ``a.b``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            found |= {f"{origin}.{alias.name}" for alias in node.names}
    return found


def closure(start: str) -> dict[str, set[str]]:
    """The course_utils modules ``start`` reaches through its imports (each with all it imports), read from source."""
    seen: dict[str, set[str]] = {}
    todo = [start]
    while todo:
        name = todo.pop()
        path = module_path(name)
        if name in seen or path is None:
            continue
        seen[name] = imports_of(path)
        todo += [m for m in seen[name] if m.startswith("course_utils")]
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)  # importing a submodule runs its package's __init__
    return seen


def crosses(imported: set[str], forbidden: str) -> list[str]:
    return sorted(m for m in imported if m == forbidden or m.startswith(forbidden + "."))


def runtime_modules() -> list[str]:
    """The runtime's entry points and every checker topic module."""
    topics = {f"course_utils.checks.{topic}" for topic in checks._TOPICS.values()}
    return sorted(set(RUNTIME) | topics)


def test_the_import_reader_sees_relative_and_lazy_imports(tmp_path) -> None:
    assert "course_utils.checks._core" in imports_of(PACKAGE / "notebook.py"), "a lazy relative import inside a function"
    assert "course_utils._schema" in imports_of(PACKAGE / "progress.py")
    assert "course_utils.checks._core" in imports_of(PACKAGE / "checks" / "__init__.py")


@pytest.mark.parametrize("start", runtime_modules())
def test_the_runtime_never_imports_the_authoring_tools(start: str) -> None:
    reached = closure(start)
    assert reached, f"cannot find {start}"
    for module, imported in reached.items():
        assert not crosses(imported, "course_utils.generate"), f"{module} (reached from {start}) imports the authoring tool generate"


@pytest.mark.parametrize("start", TOOLS + GRADING_TOOLS)
def test_the_tools_never_import_torch_or_the_checkers(start: str) -> None:
    for module, imported in closure(start).items():
        for forbidden in FORBIDDEN_IN_TOOLS:
            assert not crosses(imported, forbidden), f"{module} (reached from {start}) imports {forbidden}"


def _modules_after_importing(names) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(names)!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.integration
def test_importing_each_half_in_a_fresh_interpreter() -> None:
    loaded = _modules_after_importing(TOOLS)
    for forbidden in FORBIDDEN_IN_TOOLS:
        assert not crosses(loaded, forbidden), f"importing the tools loads {forbidden}"
    loaded = _modules_after_importing(runtime_modules())
    assert "course_utils.checks._core" in loaded, "the runtime was imported"
    assert not crosses(loaded, "course_utils.generate"), "importing the runtime loads the authoring tool generate"


# ---------------------------------------------------------------------------
# Every checker is registered and tested.


@functools.lru_cache(maxsize=None)
def defined_checkers() -> dict[str, str]:
    """check_* functions defined at the top level of course_utils/checks/*.py -> their module's topic."""
    found = {}
    for path in sorted((PACKAGE / "checks").glob("*.py")):
        if path.name.startswith("_"):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("check_"):
                found[node.name] = path.stem
    return found


def test_every_checker_is_registered_under_its_own_module() -> None:
    defined = defined_checkers()
    assert len(defined) >= 19, "the course's checkers are found"
    unregistered = sorted(set(defined) - set(checks._TOPICS))
    assert not unregistered, f"add these to _TOPICS in course_utils/checks/__init__.py: {unregistered}"
    wrong = {name: (checks._TOPICS[name], topic) for name, topic in defined.items() if checks._TOPICS[name] != topic}
    assert not wrong, f"registered under another module (registered, defined in): {wrong}"
    phantom = sorted(set(checks._TOPICS) - set(defined))
    assert not phantom, f"registered but defined nowhere: {phantom}"
    for name in checks._TOPICS:
        assert callable(getattr(checks, name)), name
        assert name in checks.__all__


@pytest.mark.parametrize("name", sorted(defined_checkers()))
def test_every_checker_has_a_test_module_that_calls_it(name: str) -> None:
    topic = defined_checkers()[name]
    test_module = TESTS / f"test_checks_{topic}.py"
    assert test_module.is_file(), f"{name} is defined in checks/{topic}.py but there is no tests/test_checks_{topic}.py"
    assert name in test_module.read_text(encoding="utf-8"), f"tests/test_checks_{topic}.py never mentions {name}"


def test_the_package_describes_progress_as_a_learners_tool() -> None:
    doc = " ".join((course_utils.__doc__ or "").split())
    assert "progress" in doc and "authoring tools (``generate``)" in doc


@pytest.mark.parametrize("name", SHARED_DATA)
def test_the_shared_lesson_table_is_plain_data(name: str) -> None:
    """The generator imports it: it may import neither torch nor matplotlib nor any other course module."""
    imported = imports_of(module_path(name))
    assert not [m for m in imported if m.split(".")[0] in ("torch", "matplotlib", "numpy", "course_utils")], imported
