"""The otter-grader plugin of the course's autograders: the submission's cells never run as a notebook.

Otter normally executes a submission from top to bottom in one kernel, then runs the tests on what it left
behind. One learner cell that hangs (there is no time limit), prints for ever or kills the kernel would then
cost every exercise, and a lesson's training cells would run for minutes before any test. This plugin hands
otter a notebook of one comment cell instead, and tells the tests where the submission is
(``$COURSE_SUBMISSION``): each test (``course_utils.autograde.grade``) loads its own exercise from the
submission, under a time limit, the way later lessons load it, and runs the exercise's checker.

Listed in every autograder that ``python -m course_utils.grading build`` writes (``plugins`` in its
``otter_config.json``); it needs otter-grader (``pip install -e ".[grading]"``) and no torch.
"""

from __future__ import annotations

import os

import nbformat
from otter.plugins import AbstractOtterPlugin

#: The environment variable through which the tests find the submission (read by course_utils.autograde).
SUBMISSION_ENV = "COURSE_SUBMISSION"

PLACEHOLDER = ("# The course's autograder does not run a submission's cells: each test loads its own exercise\n"
               "# from the submission (course_utils.autograde.grade), under a time limit.")


class ExercisesOnly(AbstractOtterPlugin):
    """Replace the submission by an empty notebook before otter executes it; the tests read the file itself."""

    def before_execution(self, submission):
        if self.submission_path:
            os.environ[SUBMISSION_ENV] = os.path.abspath(self.submission_path)
        if isinstance(submission, str):  # a .py submission: nothing of it runs either
            return f"{PLACEHOLDER}\n"
        kept = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PLACEHOLDER)])
        kept.metadata = submission.get("metadata", {})
        return kept
