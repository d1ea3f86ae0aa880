"""course_utils: what the notebooks of the Transformer course import.

The learner runtime (checkers, data, plots, notebook helpers) lives in
``checks``, ``data``, ``plots`` and ``notebook``. Learners also run
``python -m course_utils.progress`` to see which exercises pass, across all
their notebooks. The authoring tools (``generate``), run with ``python -m``
by instructors, build the exercise notebooks from the solutions; the runtime
never imports them.
"""

__version__ = "0.1.0"
