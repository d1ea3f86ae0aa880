"""The correct variants of every exercise, as the checkers' test catalogues list them.

Read from tests/test_checks_<topic>.py: the argument lists of each test named
``...correct...`` or ``...accept...`` that is parametrized over one argument
(the implementation), and a module-level ``CORRECT`` list. Each test's checker
is the one ``check_*`` its code names (or its module's only checker). The
exercise a checker checks is the name it reports in its result.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

from course_utils import checks

TESTS = Path(__file__).resolve().parent
_ACCEPTING = re.compile(r"correct|accept")


def _module(topic: str) -> Any:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(f"test_checks_{topic}")


def _checkers_of(topic: str) -> list[str]:
    return sorted(name for name, module in checks._TOPICS.items() if module == topic)


def _values(argvalues) -> list[Any]:
    out = []
    for value in argvalues:
        values = getattr(value, "values", None)  # pytest.param(...)
        out.append(values[0] if values is not None else value)
    return out


def exercise_of(checker: str) -> str:
    """The exercise a checker checks: the name its result gives (a checker answers None with a failure)."""
    return getattr(checks, checker)(None).exercise


def catalogue() -> dict[str, list[Any]]:
    """checker name -> the correct variants its catalogue lists (each once, in order)."""
    found: dict[str, list[Any]] = {}
    for topic in sorted(set(checks._TOPICS.values())):
        try:
            module = _module(topic)
        except ImportError:
            continue
        own = _checkers_of(topic)
        for name, test in vars(module).items():
            if not (name.startswith("test_") and callable(test) and _ACCEPTING.search(name)):
                continue
            for mark in getattr(test, "pytestmark", []):
                if mark.name != "parametrize" or "," in mark.args[0]:
                    continue
                named = [n for n in getattr(getattr(test, "__code__", None), "co_names", ()) if n in own]
                checker = named[0] if len(set(named)) == 1 else own[0] if len(own) == 1 else None
                if checker is not None:
                    found.setdefault(checker, []).extend(_values(mark.args[1]))
        if isinstance(getattr(module, "CORRECT", None), (list, tuple)) and len(own) == 1:
            found.setdefault(own[0], []).extend(module.CORRECT)
    return {checker: list({id(v): v for v in variants}.values()) for checker, variants in found.items()}
