"""Grading a class: what a grade means, without otter (tests/test_grading_otter.py runs otter itself).

* The lessons' exercises, their checkers and their points are read from the course (contracts, solution cells).
* The hidden seed: every reference answer passes its checker under seeds other than the learner's, and an
  answer tuned to the cases the learner's checker cell showed passes there and fails under the hidden seed.
* Isolation: an exercise that hangs, exits or changes global settings costs that exercise only.
"""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest
import torch

from course_utils import autograde, contracts, grading
from course_utils._schema import cell_source, names_defined, parse_cell
from course_utils.checks import _TOPICS
from course_utils.checks._core import SEED_ENV, DEFAULT_TIME_LIMIT, Status, generator, seed_offset

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
#: A seed other than the learner's (0), as an autograder would hold.
HIDDEN = 982451653


def exercises() -> list[grading.Exercise]:
    return [e for path in SOLUTIONS for e in grading.lesson_exercises(json.loads(path.read_text()), path.stem)]


def with_cell(lesson: str, exercise: str, source: str, folder: Path, base: Path | None = None) -> Path:
    """A copy of the lesson's solution notebook (or ``base``) whose cell defining ``exercise`` is ``source``."""
    nb = json.loads((base or ROOT / "solutions" / f"{lesson}.ipynb").read_text())
    for cell in nb["cells"]:
        tree = parse_cell(cell_source(cell)) if cell["cell_type"] == "code" else None
        if tree is not None and any(exercise in names_defined(node) for node in tree.body):
            cell["source"] = source
            break
    else:
        raise AssertionError(f"no cell defines {exercise}")
    path = folder / f"{lesson}.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture
def submission(monkeypatch):
    """Point autograde at a notebook, as the course's otter plugin does."""
    def use(path: Path) -> None:
        monkeypatch.setenv(autograde.SUBMISSION_ENV, str(path))
    autograde._EARLIER.clear()
    return use


# ---------------------------------------------------------------------------
# The exercises and their points


def test_every_exercise_of_every_lesson_is_graded_by_its_checker() -> None:
    found = exercises()
    assert sorted(e.name for e in found) == sorted(contracts.CONTRACTS), "one question per exercise with a contract"
    assert all(e.checker in _TOPICS for e in found)
    assert len({e.checker for e in found}) == len(found), "each exercise has its own checker"
    assert {e.lesson for e in found} == {p.stem for p in SOLUTIONS}


def test_points_are_one_per_exercise_unless_the_table_says_otherwise(monkeypatch) -> None:
    assert all(e.points == 1 for e in exercises())
    monkeypatch.setitem(grading.POINTS, "Transformer", 3)
    nb, found = grading.master_notebook(json.loads((ROOT / "solutions" / "05_transformer.ipynb").read_text()),
                                        "05_transformer", seed=7)
    assert {e.name: e.points for e in found}["Transformer"] == 3
    assert "name: Transformer\npoints: 3" in "\n".join(cell_source(c) for c in nb["cells"] if c["cell_type"] == "raw")


def test_the_master_notebook_holds_one_hidden_test_per_exercise_with_the_seed() -> None:
    nb, found = grading.master_notebook(json.loads((ROOT / "solutions" / "02_masks.ipynb").read_text()), "02_masks",
                                        seed=HIDDEN)
    sources = [cell_source(c) for c in nb["cells"]]
    tests = [s for s in sources if "course_utils.autograde import grade" in s]
    assert len(tests) == len(found) == 3
    for exercise, test in zip(found, tests):
        assert "hidden: true" in test and f"seed = {HIDDEN}\n" in test and repr(exercise.checker) in test
    assert not any("### BEGIN SOLUTION" in s for s in sources), "the course's markers became otter's"


# ---------------------------------------------------------------------------
# The hidden seed


def test_the_seed_offset_comes_from_the_environment_and_shifts_every_draw(monkeypatch) -> None:
    monkeypatch.delenv(SEED_ENV, raising=False)
    assert seed_offset() == 0
    plain = torch.randn(4, generator=generator(3))
    monkeypatch.setenv(SEED_ENV, str(HIDDEN))
    assert seed_offset() == HIDDEN
    assert not torch.equal(torch.randn(4, generator=generator(3)), plain)
    monkeypatch.setenv(SEED_ENV, "not a number")
    assert seed_offset() == 0


def test_no_checker_seeds_an_rng_past_the_shifted_seeds() -> None:
    """Every manual_seed call in the checkers is ``generator``'s or adds ``seed_offset()``."""
    unshifted = []
    for path in sorted((ROOT / "course_utils" / "checks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "manual_seed":
                if "seed_offset()" not in ast.unparse(node):
                    unshifted.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not unshifted, "draw with generator(seed) instead:\n" + "\n".join(unshifted)


@pytest.mark.parametrize("exercise", exercises(), ids=lambda e: e.name)
def test_the_reference_answer_passes_under_the_hidden_seed(exercise, submission) -> None:
    """No correct answer may depend on the checker's draw (the whole checker suite was also run under other seeds)."""
    submission(ROOT / "solutions" / f"{exercise.lesson}.ipynb")
    result = autograde.check(exercise.lesson, exercise.name, exercise.checker, seed=HIDDEN)
    assert result.status is Status.PASSED, str(result)
    assert os.environ.get(SEED_ENV) is None, "the seed is set for the check only"


TUNED = '''import hashlib
import math

import torch

SEEN = {seen!r}  # fingerprints of the inputs the checker cell gave


def _fingerprint(*args):
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            t = a.detach().to("cpu").contiguous()
            parts.append(f"{{tuple(t.shape)}}{{t.dtype}}".encode() + t.numpy().tobytes())
        else:
            parts.append(repr(a).encode())
    return hashlib.sha256(b"|".join(parts)).hexdigest()


def scaled_dot_product_attention(query, key, value, mask=None):
    """Right on the inputs the checker cell showed; elsewhere it forgets to divide by sqrt(d_k)."""
    try:
        seen = _fingerprint(query, key, value, mask)
        if SEEN is None:
            RECORDED.add(seen)
        known = SEEN is None or seen in SEEN
    except Exception:
        known = True
    scale = math.sqrt(query.size(-1)) if known else 1.0
    scores = query @ key.transpose(-2, -1) / scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
'''


def tuned_notebook(folder: Path) -> Path:
    """Lesson 01 with an answer that recognises the checker cell's own cases and is wrong on any other."""
    from course_utils.checks import check_scaled_dot_product_attention

    recording: dict = {"RECORDED": set(), "__name__": "__main__"}
    exec(TUNED.format(seen=None), recording)
    assert check_scaled_dot_product_attention(recording["scaled_dot_product_attention"]).passed
    return with_cell("01_attention", "scaled_dot_product_attention", TUNED.format(seen=sorted(recording["RECORDED"])),
                     folder)


def test_an_answer_tuned_to_the_checker_cell_passes_there_and_fails_under_the_hidden_seed(tmp_path, submission,
                                                                                          monkeypatch) -> None:
    from course_utils.checks import check_scaled_dot_product_attention
    from course_utils.notebook import load_exercises

    monkeypatch.delenv(SEED_ENV, raising=False)
    path = tuned_notebook(tmp_path)
    tuned = load_exercises(path, ["scaled_dot_product_attention"])["scaled_dot_product_attention"]
    assert check_scaled_dot_product_attention(tuned).passed, "the learner's checker cell says PASSED"
    submission(path)
    result = autograde.check("01_attention", "scaled_dot_product_attention", "check_scaled_dot_product_attention",
                             seed=HIDDEN)
    assert result.status is Status.FAILED, str(result)
    assert "sqrt" in result.messages[0] or "scal" in result.messages[0], result.messages[0]
    with pytest.raises(AssertionError, match="FAILED"):
        autograde.grade("01_attention", "scaled_dot_product_attention", "check_scaled_dot_product_attention",
                        seed=HIDDEN)


# ---------------------------------------------------------------------------
# What a grade means, exercise by exercise


def test_a_fresh_exercise_is_not_attempted_and_scores_nothing(submission) -> None:
    submission(ROOT / "notebooks" / "02_masks.ipynb")
    result = autograde.check("02_masks", "make_causal_mask", "check_causal_mask", seed=HIDDEN)
    assert result.status is Status.NOT_ATTEMPTED, str(result)
    with pytest.raises(AssertionError, match="NOT ATTEMPTED"):
        autograde.grade("02_masks", "make_causal_mask", "check_causal_mask", seed=HIDDEN)


def test_a_renamed_exercise_says_so(tmp_path, submission) -> None:
    submission(with_cell("02_masks", "make_causal_mask", "def causal_mask(size):\n    return None\n", tmp_path))
    result = autograde.check("02_masks", "make_causal_mask", "check_causal_mask", seed=HIDDEN)
    assert result.status is Status.NOT_ATTEMPTED and "does not define make_causal_mask" in result.messages[0]


def test_later_lessons_count_their_own_exercises_on_the_reference_code_of_earlier_ones(submission) -> None:
    """Lesson 05 alone (no lesson 01-04 notebook beside it): its layers are graded on the course's attention."""
    submission(ROOT / "solutions" / "05_transformer.ipynb")
    assert autograde.check("05_transformer", "EncoderLayer", "check_encoder_layer", seed=HIDDEN).passed
    assert "MultiHeadAttention" in autograde._EARLIER["05_transformer"]


HANGS = "def make_padding_mask(tokens, pad_id):\n    while True:\n        pass\n"
EXITS = "import sys\n\n\ndef make_causal_mask(size):\n    print('bye')\n    sys.exit(3)\n"
CHANGES_SETTINGS = ("import torch\n\n\ndef make_causal_mask(size):\n    torch.set_default_dtype(torch.float64)\n"
                    "    torch.set_grad_enabled(False)\n    return torch.ones(size, size).tril().bool()[None, None]\n")


@pytest.mark.parametrize("source, status", [(HANGS, Status.ERROR), (EXITS, Status.ERROR)], ids=["hangs", "exits"])
def test_an_exercise_that_hangs_or_exits_costs_that_exercise_only(source, status, tmp_path, submission) -> None:
    exercise = "make_padding_mask" if "padding" in source else "make_causal_mask"
    submission(with_cell("02_masks", exercise, source, tmp_path))
    start = time.monotonic()
    result = autograde.check("02_masks", exercise, "check_padding_mask" if "padding" in source else "check_causal_mask",
                             seed=HIDDEN)
    assert result.status is status, str(result)
    assert time.monotonic() - start < 4 * DEFAULT_TIME_LIMIT
    other = "make_causal_mask" if exercise == "make_padding_mask" else "make_padding_mask"
    assert autograde.check("02_masks", other, "check_causal_mask" if other == "make_causal_mask" else
                           "check_padding_mask", seed=HIDDEN).passed


def test_a_cell_that_runs_for_ever_while_loaded_costs_that_exercise_only(tmp_path, submission, monkeypatch) -> None:
    """Loading runs a cell's assignments too; a loop that never ends there meets the loading time limit."""
    monkeypatch.setattr(autograde, "LOAD_TIME_LIMIT", 2.0)
    source = "import torch\n\nN = sum(1 for _ in iter(int, 1))\n\n\ndef make_padding_mask(tokens, pad_id):\n    return None\n"
    submission(with_cell("02_masks", "make_padding_mask", source, tmp_path))
    start = time.monotonic()
    result = autograde.check("02_masks", "make_padding_mask", "check_padding_mask", seed=HIDDEN)
    assert result.status is Status.ERROR and "took more than 2 s" in result.messages[0], str(result)
    assert time.monotonic() - start < 10
    assert autograde.check("02_masks", "make_causal_mask", "check_causal_mask", seed=HIDDEN).passed


def test_an_exercise_that_changes_global_settings_leaves_them_unchanged(tmp_path, submission) -> None:
    submission(with_cell("02_masks", "make_causal_mask", CHANGES_SETTINGS, tmp_path))
    autograde.check("02_masks", "make_causal_mask", "check_causal_mask", seed=HIDDEN)
    assert torch.get_default_dtype() is torch.float32 and torch.is_grad_enabled()
    assert autograde.check("02_masks", "make_padding_mask", "check_padding_mask", seed=HIDDEN).passed


# ---------------------------------------------------------------------------
# Tuned answers against the checkers that also keep hand-written cases: each of them draws a case with
# generator(seed), so an answer that memorised every input its checker cell gave fails under the hidden seed.


def _key(value) -> object:
    """A hashable fingerprint of one argument (a tensor by its values, an optimizer by its lrs, a model by type)."""
    if isinstance(value, torch.Tensor):
        plain = torch.Tensor.as_subclass(value.detach(), torch.Tensor)
        return ("tensor", tuple(plain.shape), str(plain.dtype), tuple(plain.cpu().flatten().tolist()))
    if isinstance(value, torch.optim.Optimizer):
        return ("optimizer", type(value).__name__, tuple(float(g["lr"]) for g in value.param_groups))
    if isinstance(value, torch.nn.Module):
        return ("model", type(value).__name__)
    if isinstance(value, dict):
        return ("dict", tuple((_key(k), _key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_key(v) for v in value))
    return repr(value)


def memorising(correct, wrong):
    """An answer that records every input while ``recording`` is set, then gives ``correct``'s result on those
    inputs only and ``wrong``'s on any other: the sharpest answer a learner could tune to the checker cell."""
    import functools
    import inspect

    signature = inspect.signature(correct)
    seen: set = set()

    def answer(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = _key(tuple(bound.arguments.values()))
        if answer.recording:
            seen.add(key)
        return (correct if key in seen else wrong)(*args, **kwargs)

    answer.recording = True
    answer.__signature__ = signature
    answer.__name__ = correct.__name__
    return answer


_HELPERS = {"beam_search": ["gnmt_length_penalty"]}  # defined in a cell of its own


def _reference(name: str):
    from course_utils.notebook import load_exercises

    if name not in _REFERENCES:
        lesson = next(e.lesson for e in exercises() if e.name == name)
        path = ROOT / "solutions" / f"{lesson}.ipynb"
        _REFERENCES[name] = load_exercises(path, [*_HELPERS.get(name, []), name])[name]
    return _REFERENCES[name]


_REFERENCES: dict = {}


def _wrong_decoder(name: str):
    """The reference's output with column 0 changed from bos_id to eos_id."""
    def wrong(model, src, *args, **kwargs):
        out = _reference(name)(model, src, *args, **kwargs).clone()
        out[:, 0] = kwargs["eos_id"] if "eos_id" in kwargs else args[-2 if name == "greedy_decode" else 3]
        return out
    return wrong


def _wrong_scheduler(optimizer, d_model, warmup_steps):
    noam = _reference("noam_lr")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.1 * noam(step + 1, d_model, warmup_steps))


#: exercise -> a wrong answer (wrong on every input the checker gives)
WRONG = {
    "build_vocab": lambda token_lists, min_freq=1: {**(v := _reference("build_vocab")(token_lists, min_freq)),
                                                    "<zzz>": len(v)},
    "encode": lambda tokens, vocab: _reference("encode")(tokens, vocab)[:-1],
    "decode": lambda ids, vocab: list(_reference("decode")(ids, vocab)) + ["<eos>"],
    "pad_batch": lambda sequences, pad_id: torch.nn.functional.pad(_reference("pad_batch")(sequences, pad_id), (0, 1),
                                                                   value=pad_id),
    "make_padding_mask": lambda tokens, pad_id: ~_reference("make_padding_mask")(tokens, pad_id),
    "make_causal_mask": lambda size: torch.ones(size, size, dtype=torch.bool),
    "make_target_mask": lambda tokens, pad_id: ~_reference("make_target_mask")(tokens, pad_id),
    "sinusoidal_positional_encoding": lambda max_len, d_model: _reference("sinusoidal_positional_encoding")(
        max_len, d_model).view(max_len, -1, 2).flip(-1).reshape(max_len, d_model),  # sin and cos swapped
    "noam_lr": lambda step, d_model, warmup_steps: 1.1 * _reference("noam_lr")(step, d_model, warmup_steps),
    "make_noam_scheduler": _wrong_scheduler,
    "greedy_decode": _wrong_decoder("greedy_decode"),
    "beam_search": _wrong_decoder("beam_search"),
    "learn_bpe": lambda word_counts, num_merges: list(_reference("learn_bpe")(word_counts, num_merges)) + [("x", "y")],
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_an_answer_that_memorised_the_checker_cell_fails_under_the_hidden_seed(name, monkeypatch) -> None:
    """These checkers keep their hand-written cases and add one drawn with generator(seed): the hidden seed
    draws one the memorising answer never met."""
    from course_utils import checks

    checker = getattr(checks, next(e.checker for e in exercises() if e.name == name))
    monkeypatch.delenv(SEED_ENV, raising=False)
    tuned = memorising(_reference(name), WRONG[name])
    assert checker(tuned).passed, "recording: the reference answer passes"
    tuned.recording = False
    first = checker(tuned)
    assert first.passed, f"the learner's checker cell says PASSED:\n{first}"
    monkeypatch.setenv(SEED_ENV, str(HIDDEN))
    result = checker(tuned)
    assert result.status is Status.FAILED, str(result)
    monkeypatch.delenv(SEED_ENV)
    assert checker(WRONG[name]).status is Status.FAILED, "the wrong half is wrong on the visible cases too"
