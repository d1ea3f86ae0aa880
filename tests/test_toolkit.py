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

#: functions still over the limit, to be split (issue 30); this list only shrinks
OVER_THE_LIMIT: set[str] = {
    "checks/cache.py:_departure_cause",
    "checks/layers.py:_check_ffn_values",
    "checks/layers.py:decoder_layer_stages",
    "checks/model.py:_compare_with_oracle",
    "checks/multi_head.py:_diagnose_value_path",
    "checks/schedule.py:_scheduler_slips",
    "checks/stages/contract.py:_part_problem",
    "checks/vocab.py:_check_decode",
}


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
    long = _long_functions()
    assert sorted(set(long) - OVER_THE_LIMIT) == [], long


def test_the_list_of_long_functions_only_shrinks() -> None:
    assert sorted(OVER_THE_LIMIT - set(_long_functions())) == [], "remove these from OVER_THE_LIMIT: they are short now"
