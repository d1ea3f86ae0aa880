"""The stage library's notebook-facing stage: later lessons load only the exercise's own cell.

Cells are run as an IPython kernel runs them (each compiled from a file name in
one ``ipykernel_<pid>`` folder, its source in linecache, the code in
``__main__``), so the stage sees the notebook's other cells as it does in
JupyterLab and Colab.
"""

from __future__ import annotations

import itertools
import linecache

import torch

from helpers import expect
from course_utils.checks import check_causal_mask

_FOLDERS = itertools.count()


def run_cells(*sources: str) -> dict:
    """Run ``sources`` as the cells of one notebook, in order; the kernel's namespace."""
    folder = f"/tmp/ipykernel_test{next(_FOLDERS)}"
    namespace = {"__name__": "__main__"}
    for i, source in enumerate(sources):
        filename = f"{folder}/{i}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


IMPORTS = "import torch\nfrom course_utils.data import PAD\n"
EXERCISE = "def make_causal_mask(size):\n    return {body}\n"


def test_a_helper_in_a_cell_of_its_own_is_a_failure_that_says_where_to_move_it():
    cells = run_cells(IMPORTS, "def lower(size):\n    return torch.ones(size, size).tril().bool()\n",
                      EXERCISE.format(body="lower(size)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `lower`, which another cell",
           "Later lessons load your make_causal_mask on its own", "Move `lower` into the cell")


def test_a_constant_assigned_in_another_cell_is_named_too():
    cells = run_cells(IMPORTS, "DIAGONAL = 0\n",
                      EXERCISE.format(body="torch.ones(size, size, dtype=torch.bool).tril(DIAGONAL)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `DIAGONAL`")


def test_imports_and_what_the_exercise_cell_itself_defines_are_fine():
    same_cell = "SHIFT = 0\n\n\ndef lower(size):\n    return torch.ones(size, size).tril(SHIFT).bool()\n\n\n"
    cells = run_cells(IMPORTS, same_cell + EXERCISE.format(body="lower(size) if PAD else None"))
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


def test_code_that_later_lessons_load_from_elsewhere_is_not_the_exercises_concern():
    """Cells compiled under another notebook's name (as load_exercises runs them) are loaded there too."""
    lower = run_cells(IMPORTS)
    exec(compile("def lower(size):\n    return torch.ones(size, size).tril().bool()\n",
                 "<01_other.ipynb, code cell 3>", "exec"), lower)
    cells = run_cells(IMPORTS, EXERCISE.format(body="lower(size)"))
    cells["make_causal_mask"].__globals__["lower"] = lower["lower"]
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


def test_a_decorated_exercise_is_looked_at_through_its_decorator():
    """``@torch.no_grad()`` (as on greedy_decode and beam_search) wraps the function in torch's own code."""
    helper = "def lower(size):\n    return torch.ones(size, size).tril().bool()\n"
    cells = run_cells(IMPORTS, helper, "@torch.no_grad()\n" + EXERCISE.format(body="lower(size)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `lower`, which another cell")
    cells = run_cells(IMPORTS, helper + "\n\n@torch.no_grad()\n" + EXERCISE.format(body="lower(size)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


def test_a_name_read_when_the_def_statement_runs_is_named_too():
    """Default values (and decorators, annotations) run when a later lesson loads the cell, before any call."""
    cells = run_cells(IMPORTS, "SIZE = 4\n", "def make_causal_mask(size=SIZE):\n"
                      "    return torch.ones(size, size, dtype=torch.bool).tril()\n")
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `SIZE`, which another cell")
    cells = run_cells(IMPORTS, "SIZE = 4\n\n\ndef make_causal_mask(size=SIZE):\n"
                      "    return torch.ones(size, size, dtype=torch.bool).tril()\n")
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


# --------------------------------------------------------------------------
# Devices: the pretend GPU answers `is_cuda` as Apple's GPU (mps) does, so code that moves its tensors only
# `if x.is_cuda` is seen to break on a Mac (a seventh hidden set: four checkers passed it).

def _causal(size):
    return torch.ones(size, size, dtype=torch.bool).tril()


def padding_mask_moved_if_cuda(tokens, pad_id):
    mask = (tokens.cpu() != pad_id)[:, None, None, :]
    return mask.cuda() if tokens.is_cuda else mask


def target_mask_moved_if_cuda(tokens, pad_id):
    L = tokens.size(1)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    if tokens.is_cuda:
        causal = causal.cuda()
    return (tokens != pad_id)[:, None, None, :] & causal


def attention_moved_if_cuda(query, key, value, mask=None):
    if mask is None:
        mask = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool)
        if query.is_cuda:
            mask = mask.cuda()
    scores = (query @ key.transpose(-2, -1) / query.size(-1) ** 0.5).masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ value, weights


def test_tensors_moved_only_if_is_cuda_fail_on_the_pretend_gpu_with_a_word_on_mps():
    from course_utils.checks import check_padding_mask, check_scaled_dot_product_attention, check_target_mask

    for check, fn in ((check_padding_mask, padding_mask_moved_if_cuda), (check_target_mask, target_mask_moved_if_cuda),
                      (check_scaled_dot_product_attention, attention_moved_if_cuda)):
        expect(check(fn), "failed", "on the cpu", "`is_cuda` is false", "mps")


def test_a_multi_head_attention_that_moves_its_default_mask_only_if_is_cuda_fails():
    from course_utils.checks import check_multi_head_attention
    from reference_modules import MultiHeadAttention

    class MovedIfCuda(MultiHeadAttention):
        def forward(self, query, key, value, mask=None):
            if mask is None:
                mask = torch.ones(query.size(1), key.size(1), dtype=torch.bool)
                if query.is_cuda:
                    mask = mask.cuda()
            return super().forward(query, key, value, mask)

    expect(check_multi_head_attention(MovedIfCuda), "failed", "creates a tensor on the cpu", "`is_cuda` is false")


# --------------------------------------------------------------------------
# Names: where a later cell passes a parameter by keyword (Contract.by_name), its name is part of the exercise;
# elsewhere a renamed parameter is the learner's business (a seventh hidden set).

def test_a_constructor_parameter_that_a_later_cell_passes_by_name_must_keep_its_name():
    from course_utils.checks import check_multi_head_attention, check_positional_encoding_module
    from reference_modules import MultiHeadAttention
    from test_checks_model import PositionalEncoding

    class RenamedHeads(MultiHeadAttention):
        def __init__(self, d_model, n_heads, dropout=0.0):
            super().__init__(d_model, n_heads, dropout)

    class RenamedLength(PositionalEncoding):
        def __init__(self, d_model, dropout=0.1, max_length=5000):
            super().__init__(d_model, dropout, max_length)

    expect(check_multi_head_attention(RenamedHeads), "failed", "no parameter `num_heads`", "lesson 04",
           "multiheadattention(..., d_model=..., num_heads=...)")
    expect(check_positional_encoding_module(RenamedLength), "failed", "no parameter `max_len`", "lesson 03")


def test_a_renamed_parameter_that_the_course_passes_by_position_is_accepted():
    from course_utils.checks import check_build_vocab
    from course_utils.data import build_vocab

    def build_vocab_threshold(sentences, threshold=1):
        return build_vocab(sentences, threshold)

    expect(check_build_vocab(build_vocab_threshold), "passed")


def test_a_forward_parameter_that_a_later_cell_passes_by_name_must_keep_its_name():
    from course_utils.checks import check_decoder_layer
    from test_checks_layers import DecoderLayer

    class AnnotatedNames(DecoderLayer):  # the Annotated Transformer's name for the target mask
        def forward(self, x, memory, src_mask=None, trg_mask=None):
            return super().forward(x, memory, src_mask, trg_mask)

    expect(check_decoder_layer(AnnotatedNames), "failed", "no parameter `tgt_mask`", "lesson 05")


def test_a_cpu_tensor_kept_from_an_earlier_call_is_named_as_such():
    """No line of the GPU call made the CPU tensor: the message says where else it may come from."""
    from course_utils.checks import check_encoder_layer
    from test_checks_layers import EncoderLayer

    class RemembersItsMask(EncoderLayer):
        def forward(self, x, mask=None):
            if mask is not None:
                self._mask = mask
            return super().forward(x, getattr(self, "_mask", None) if mask is None else mask)

    expect(check_encoder_layer(RemembersItsMask), "failed", "creates a tensor on the cpu",
           "kept from an earlier call")
