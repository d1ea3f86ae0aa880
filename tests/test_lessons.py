"""The solution notebooks as an instructor edits them: what nbval compares, and why the rest is not.

nbval compares every stored output of a solution notebook with a fresh run.
An output that follows from trained weights, timings, the device or the CPU's
rounding cannot be stable across machines; such a cell carries the tag
``nbval-ignore-output`` and says why in its metadata, where a learner does not
see it (a ``# NBVAL_IGNORE_OUTPUT`` comment sits in the learner's code).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils._schema import cell_source, cell_tags

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
IGNORED = "nbval-ignore-output"
REASON = "nbval_ignore_reason"


def _code_cells(path: Path) -> list[tuple[int, dict]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(i, cell) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_nbval_comment_in_the_learners_code(path: Path) -> None:
    for i, cell in _code_cells(path):
        markers = [line for line in cell_source(cell).splitlines() if line.strip().startswith("# NBVAL_")]
        assert not markers, f"{path.name}, cell {i}: use the cell tag `{IGNORED}` instead of {markers[0]!r}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_output_left_uncompared_says_why(path: Path) -> None:
    for i, cell in _code_cells(path):
        reason = cell.get("metadata", {}).get(REASON, "")
        if IGNORED in cell_tags(cell):
            assert len(reason.split()) >= 2, f"{path.name}, cell {i}: say in metadata['{REASON}'] why nbval ignores it"
        else:
            assert not reason, f"{path.name}, cell {i}: a reason without the tag `{IGNORED}`"
