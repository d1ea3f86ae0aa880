"""Repository-wide pytest setup.

Notebooks run by nbval inherit this process's environment, so setting
COURSE_FAST here selects every notebook's fast configuration (the one whose
outputs are committed in solutions/).
"""

import os

import pytest

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


def pytest_collectstart(collector):
    """The exercise notebooks run as under `--nbval-lax`: every cell must run; outputs are not compared.

    (Their stored outputs are empty: a learner has not run them yet.) A cell tagged `nbval-check-output`
    would still be compared, as nbval-lax does.
    """
    if type(collector).__name__ == "IPyNbFile" and collector.path.parent.name == "notebooks":
        collector.compare_outputs = False


#: Solution notebooks that read what another one writes: lesson 07 loads the model lesson 06 saves (and trains
#: one itself, 10 s more of CPU, when it finds none).
READS_FROM = {"07_inference.ipynb": "06_training.ipynb"}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the long files first: notebooks and the tests marked `integration` (kernels,
    venvs, whole lessons). Workers take whole files in this order, so none is left with a long one at the end.
    A notebook that writes what another reads comes first of all, and the reader last among the long files, so
    that the writer has usually finished (measured: lesson 07 then loads lesson 06's model instead of training
    one, and a run from a fresh clone takes 113 s instead of 121 s).

    The sort runs in the workers, whose collection xdist dispatches (the controller collects nothing), and
    pytest_configure turns off xdist's own reordering (the files with most tests first), which would undo it."""
    if getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        def order(item):
            long = type(item).__name__ == "IPyNbCell" or item.get_closest_marker("integration") is not None
            solution = item.path.parent.name == "solutions"
            if solution and item.path.name in READS_FROM.values():
                return 0  # a writer: first of all
            if solution and item.path.name in READS_FROM:
                return 2  # a reader: after every other long file
            return 1 if long else 3

        items.sort(key=order)  # a stable sort: each file's own order is kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core, plus one. The kernels, subprocesses and timed-out sleeps some tests
    wait on would otherwise leave a core idle (measured on 2 cores: 122 s with 3 workers, 132 s with 2)."""
    return (os.cpu_count() or 1) + 1


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
    # `-n N` (pytest-xdist): each worker takes whole files, so that a notebook's cells run in order in one
    # kernel. (Grouping by xdist_group marks would balance better, but the marks do not reach pytest 9's node ids.)
    if getattr(option, "dist", "no") == "load":
        option.dist = "loadfile"
        option.loadscopereorder = False  # keep the order of pytest_collection_modifyitems, not "most tests first"
