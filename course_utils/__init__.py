"""course_utils: what the notebooks of the Transformer course import.

The learner runtime (checkers, data, plots, notebook helpers) lives in
``checks``, ``data``, ``plots`` and ``notebook``; the authoring tools
(``generate``, ``progress``) are run with ``python -m``.
"""

__version__ = "0.1.0"
