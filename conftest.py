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
