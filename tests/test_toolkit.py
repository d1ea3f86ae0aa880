"""The checkers' toolkit keeps its shape (issue 30).

* The engine, ``_core``, imports nothing from the stage library: every stage a checker runs is declared.
* Topic modules (one per lesson topic) import only public names from the toolkit (``_core``, ``slips``,
  ``exercise``, ``stages`` and its kits): what CONTRIBUTING says a new checker may use is all it needs.
* No function in ``course_utils`` is longer than 80 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import course_utils
from course_utils import checks

PACKAGE = Path(course_utils.__file__).parent
CHECKS = PACKAGE / "checks"
TOOLKIT = {"_core", "slips", "exercise", "stages"}
TOPICS = sorted(set(checks._TOPICS.values()))
LIMIT = 80


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module as written, the names imported from it) for every import in the file, lazy ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found.append((module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def test_the_engine_imports_nothing_from_the_stages() -> None:
    stage_imports = [m for m, names in _imports(CHECKS / "_core.py") if "stages" in m or "stages" in names]
    assert stage_imports == []


@pytest.mark.parametrize("topic", TOPICS)
def test_topic_modules_import_only_public_toolkit_names(topic: str) -> None:
    private = []
    for module, names in _imports(CHECKS / f"{topic}.py"):
        if not module.startswith(".") or module.startswith(".."):
            continue
        parts = module.lstrip(".").split(".")
        private += [f"{module}" for part in parts if part.startswith("_") and part != "_core"]
        private += [f"{module}.{name}" for name in names if name.startswith("_")]
    assert private == [], f"{topic}.py imports private toolkit names: {private}"


def _long_functions() -> dict[str, int]:
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 > LIMIT:
                    long[f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"] = node.end_lineno - first + 1
    return long


def test_no_function_is_over_80_lines() -> None:
    assert _long_functions() == {}


def test_contributings_templates_are_python_and_name_real_toolkit_names() -> None:
    """The recipe's templates parse, and every ``stages.x`` / toolkit name they use exists."""
    import re

    from course_utils.checks import _core, exercise, slips, stages

    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4, "the function, class and decoding templates, and the module's shape"
    used = set()
    for block in blocks:
        ast.parse(block)
        used |= set(re.findall(r"\bstages\.(\w+)", block))
    assert sorted(name for name in used if not hasattr(stages, name)) == []
    for module, names in ((_core, ("Check", "CheckResult", "generator")), (slips, ("Diagnosis", "Slip")),
                          (exercise, ("Exercise",))):
        assert all(hasattr(module, name) for name in names)
    documented = set(re.findall(r"`(\w+)(?:\.py)?`", text[text.index("### The stage library"):text.index("## Templates")]))
    assert sorted(name for name in stages.__all__ if name not in documented) == [], "stages CONTRIBUTING omits"
