"""What the checkers are made of: declaration, bespoke diagnosis and message text, line by line.

    python benchmarks/checks_anatomy.py

Each non-blank line of ``course_utils/checks/`` is counted once, in this order:

* declaration: module-level assignments (slip tables, ``Exercise`` declarations, cases, constants), the slip
  records in them, and the lines of the toolkit's dataclass fields;
* message: a line at least half of whose characters are inside string literals, outside docstrings: what a
  learner reads;
* documentation: docstrings and comments;
* code: everything else (the bespoke diagnosis in topic modules; the engine and stages in the toolkit).

Topic modules (one per lesson topic) and the toolkit (``_core``, ``slips``, ``exercise``, ``stages/``) are
reported apart.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import Counter
from pathlib import Path

CHECKS = Path(__file__).resolve().parents[1] / "course_utils" / "checks"


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _declaration_lines(tree: ast.Module) -> set[int]:
    lines = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _string_lines(source: str) -> set[int]:
    """Lines at least half of whose characters (spaces aside) are inside string literals."""
    lines = source.splitlines()
    inside = [0] * (len(lines) + 2)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.STRING and "FSTRING" not in tokenize.tok_name.get(token.type, ""):
            continue
        for number in range(token.start[0], token.end[0] + 1):
            text = lines[number - 1]
            start = token.start[1] if number == token.start[0] else 0
            end = token.end[1] if number == token.end[0] else len(text)
            inside[number] += len(text[start:end].replace(" ", ""))
    return {n for n, text in enumerate(lines, start=1) if text.strip() and inside[n] >= len(text.replace(" ", "")) / 2}


def anatomy(path: Path) -> Counter:
    source = path.read_text()
    tree = ast.parse(source)
    docs, declared, strings = _docstring_lines(tree), _declaration_lines(tree), _string_lines(source)
    counts: Counter = Counter()
    for number, line in enumerate(source.splitlines(), start=1):
        text = line.strip()
        if not text:
            continue
        if number in docs or text.startswith("#"):
            counts["documentation"] += 1
        elif number in declared:
            counts["declaration"] += 1
            counts["declared message"] += number in strings
        elif number in strings:
            counts["message"] += 1
        else:
            counts["code"] += 1
    return counts


def main() -> None:
    toolkit = {"_core.py", "slips.py", "exercise.py", "__init__.py"}
    groups: dict[str, Counter] = {"topic modules": Counter(), "toolkit": Counter()}
    rows = []
    for path in sorted(CHECKS.rglob("*.py")):
        counts = anatomy(path)
        in_toolkit = path.name in toolkit or path.parent.name == "stages"
        groups["toolkit" if in_toolkit else "topic modules"].update(counts)
        rows.append((path.relative_to(CHECKS).as_posix(), counts))
    order = ("declaration", "code", "message", "documentation")
    print(f"{'file':<24}{'lines':>7}" + "".join(f"{k:>15}" for k in order))
    for name, counts in rows:
        print(f"{name:<24}{sum(counts[k] for k in order):>7}" + "".join(f"{counts[k]:>15}" for k in order))
    for name, counts in groups.items():
        total = sum(v for k, v in counts.items() if k in order)
        print(f"\n{name}: {total} non-blank lines; " + ", ".join(
            f"{k} {counts[k]} ({100 * counts[k] / total:.0f}%)" for k in order)
            + f"; of the declaration lines, {counts['declared message']} are message text (the slips' diagnoses)")


if __name__ == "__main__":
    main()
