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
