"""Repository-wide pytest setup.

Notebooks run by nbval inherit this process's environment, so setting
COURSE_FAST here selects every notebook's fast configuration (the one whose
outputs are committed in solutions/).
"""

import os

os.environ.setdefault("COURSE_FAST", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread in the tests and in the notebook kernels they start: the
# fast configurations are tiny, and on a busy 2-core machine two threads per
# kernel were measured up to ten times slower (a 300 s cell timeout).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser):
    parser.addoption(
        "--all-variants", action="store_true", default=False,
        help="tests/test_downstream.py: run every further variant in its own lesson (by default, the first and the "
             "last further round of each lesson)",
    )


def pytest_configure(config):
    """nbval's options for this repository: compare the solution notebooks' outputs unless told otherwise.

    Set here rather than in pyproject's addopts, so that `pytest -p no:nbval` (the unit tests alone) works.
    """
    if not config.pluginmanager.hasplugin("nbval"):
        return
    option = config.option
    if not (option.nbval or option.nbval_lax):
        option.nbval = True  # `pytest` alone compares the solution notebooks' stored outputs
    option.nbval_current_env = True  # kernels run in this interpreter's environment (the course's venv)
    if option.nbval_cell_timeout == 2000:  # nbval's default: ours is shorter, so that a hang fails in CI
        option.nbval_cell_timeout = 300
    if getattr(option, "dist", "no") == "load":  # `-n N` (pytest-xdist): a notebook's cells stay on one worker
        option.dist = "loadgroup"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, each notebook's cells form one group: they run in order, in one kernel."""
    import pytest

    for item in items:
        if type(item).__name__ == "IPyNbCell":
            item.add_marker(pytest.mark.xdist_group(item.path.name))
