"""PASSED means the rest of the course works: the course's own later code runs on every accepted variant.

For each exercise, the correct variants of its checker's test catalogue
(tests/downstream_variants.py) are put in place of the solution, and the
solution notebooks run with them (tests/downstream_harness.py): the
exercise's checker cell must say PASSED, and every later cell of its lesson,
and of the later lessons that load it, must run without an error.

Two kinds of runs keep this under two minutes on two cores:

* **whole-course runs** (:data:`COURSE_ROUNDS` of them): every exercise at once
  gets one of its variants (the round's index into its list), and every
  lesson runs, first to last. After each lesson the progress report reads the
  checker results (each exercise passed, under its own name), and after the
  last the benchmark builds its models from the same code;
* **own-lesson runs**: each further variant runs in its own lesson (with the
  other exercises of that lesson on their further variants too), and, for
  :data:`NEXT_LESSON_ROUNDS` rounds, in the lessons that load it.

Lessons run on the first pairs of each corpus split, and lesson 06 trains a
tiny model for three steps (:func:`shrink_training`). The default run takes the
first and the last own-lesson round of each lesson; ``pytest --all-variants``
runs every round (every variant of every catalogue in its lesson).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from course_utils import progress
from course_utils.contracts import CONTRACTS

from downstream_harness import SOLUTIONS, CellFailure, run_lesson, substituted
from downstream_variants import catalogue, exercise_of

ROOT = SOLUTIONS.parent
#: Rounds in which every lesson runs with a variant of every exercise in place.
COURSE_ROUNDS = 3
#: Further rounds that also run the lessons loading the exercise (beyond its own lesson). Each costs about as
#: much as a whole-course round, which tries a variant of every exercise at once: so none by default.
NEXT_LESSON_ROUNDS = 0

pytestmark = pytest.mark.integration


def shrink_training(ns: dict[str, Any]) -> None:
    """Lesson 06's configuration, made tiny: two training steps of a two-layer model of width 32."""
    config = ns["config"]
    if dataclasses.is_dataclass(config) and hasattr(config, "num_steps"):
        tiny = dict(d_model=32, num_heads=2, num_layers=2, d_ff=64, batch_size=8, num_steps=2, warmup_steps=2,
                    eval_every=2, test_sentences=8, decode_batch_size=8, extra_len=4, beam_size=2)
        fields = {f.name for f in dataclasses.fields(config)}
        ns["config"] = dataclasses.replace(config, **{k: v for k, v in tiny.items() if k in fields})


#: The lessons that run, in order.
LESSONS = ("00_setup_and_data", "01_attention", "02_masks", "03_positional_encoding", "04_multi_head_attention",
           "05_transformer", "06_training", "07_inference", "08_real_data", "09_ablations",
           "10_real_translator")
#: A lesson that reads what an earlier one wrote (07 loads the model lesson 06 saved): in an own-lesson
#: round, that earlier lesson runs first, with the same variants.
PREREQUISITES = {"07_inference": "06_training"}
#: Facts a lesson computes about the learner's objects (a name its cells set to True), and what each promises.
HOLDS = {"07_inference": {"cache_agrees": "greedy decoding and beam search translate the same with the key/value "
                                          "cache as without it (the trained model stays in eval mode)",
                           "model_unchanged": "training the copies (yours, the fused one, the nn.Transformer one) "
                                             "leaves the trained model as it was: copies share no tensor"}}


def lessons() -> tuple[str, ...]:
    return tuple(name for name in LESSONS if (SOLUTIONS / f"{name}.ipynb").is_file())


@functools.lru_cache(maxsize=None)
def loads(lesson: str) -> frozenset[str]:
    """The exercises a lesson loads from earlier lessons (the names in its ``load_exercises`` calls)."""
    import nbformat

    found: set[str] = set()
    for cell in nbformat.read(str(SOLUTIONS / f"{lesson}.ipynb"), as_version=4).cells:
        if cell.cell_type != "code" or "load_exercises" not in cell.source:
            continue
        for node in ast.walk(ast.parse(re.sub(r"(?m)^\s*[%!].*$", "", cell.source))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "load_exercises":
                for arg in node.args[1:2]:
                    if isinstance(arg, (ast.List, ast.Tuple)):
                        found |= {e.value for e in arg.elts if isinstance(e, ast.Constant)}
    return frozenset(found)


@functools.lru_cache(maxsize=None)
def variants() -> dict[str, list[Any]]:
    """exercise -> its correct variants, for the exercises of the lessons in solutions/."""
    found = {}
    for checker, listed in catalogue().items():
        exercise = exercise_of(checker)
        if exercise in CONTRACTS and CONTRACTS[exercise].lesson in lessons():
            found[exercise] = listed
    return found


def lesson_of(exercise: str) -> str:
    return CONTRACTS[exercise].lesson


def pick(round_: int, *, cycle: bool, among: set[str] | None = None) -> dict[str, Any]:
    """One variant per exercise for a round: the round's index into each list (cycled, or only while it lasts)."""
    picked = {}
    for exercise, listed in variants().items():
        if among is not None and exercise not in among:
            continue
        if cycle or round_ < len(listed):
            picked[exercise] = listed[round_ % len(listed)]
    return picked


def describe(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{e}={getattr(v, '__qualname__', repr(v))}" for e, v in sorted(overrides.items()))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Copies of the solution notebooks, where lessons run (and write their checkpoints)."""
    folder = tmp_path_factory.mktemp("downstream")
    for path in SOLUTIONS.glob("*.ipynb"):
        shutil.copy(path, folder)
    return folder


def run(lesson: str, overrides: dict[str, Any], workdir: Path):
    try:
        return run_lesson(lesson, overrides, workdir, shrink=shrink_training)
    except CellFailure as failure:
        problem = f"with {describe(overrides)}:\n{failure}"
    pytest.fail(problem, pytrace=False)


def assert_in_place(lesson: str, overrides: dict[str, Any], outcome) -> None:
    """Every variant the lesson defines or loads was really put in place of the solution; the lesson's HOLDS hold."""
    expected = {e for e in overrides if lesson_of(e) == lesson or e in loads(lesson)}
    assert expected <= outcome.substituted, f"{lesson}: not substituted: {sorted(expected - outcome.substituted)}"
    for exercise in expected & set(outcome.namespace):
        if lesson_of(exercise) == lesson:
            assert outcome.namespace[exercise] is overrides[exercise], f"{lesson} rebinds {exercise}"
    for name, promise in HOLDS.get(lesson, {}).items():
        assert outcome.namespace.get(name) is True, f"{lesson} with {describe(overrides)}: not so that {promise}"


# ---------------------------------------------------------------------------
# The catalogues


def test_every_exercise_has_variants_to_try() -> None:
    found = variants()
    exercises = {e for e, c in CONTRACTS.items() if c.lesson in lessons()}
    missing = sorted(exercises - set(found))
    assert not missing, f"no correct variants found in the test catalogues for {missing}"
    assert all(len(listed) >= 2 for listed in found.values()), {e: len(v) for e, v in found.items()}


# ---------------------------------------------------------------------------
# Whole-course rounds


@pytest.mark.parametrize("round_", range(COURSE_ROUNDS))
def test_the_whole_course_runs_with_variants_in_place(round_: int, workdir: Path) -> None:
    overrides = pick(round_, cycle=True)
    shutil.rmtree(workdir / "checkpoints", ignore_errors=True)  # what lesson 06 saves, lesson 07 reads: this round's
    failures, failed = [], set()
    for lesson in lessons():  # every lesson, even after one failed: each failure is worth knowing
        if PREREQUISITES.get(lesson) in failed:
            failures.append(f"{lesson} did not run: it reads what {PREREQUISITES[lesson]} writes, which failed")
            continue
        try:
            outcome = run_lesson(lesson, overrides, workdir, shrink=shrink_training)
        except CellFailure as failure:
            failures.append(str(failure))
            failed.add(lesson)
            continue
        assert_in_place(lesson, overrides, outcome)
        rows = progress.grade(lesson, outcome.executed())
        expected = [e for e in variants() if lesson_of(e) == lesson]
        assert {r.exercise for r in rows} >= set(expected), f"{lesson}: the progress report names {[r.exercise for r in rows]}"
        assert all(r.status == progress.PASSED for r in rows), [r for r in rows if r.status != progress.PASSED]
    if failures:
        pytest.fail(f"with {describe(overrides)}:\n\n" + "\n\n".join(failures), pytrace=False)
    build_the_benchmarks_models(overrides)


def _bench():
    spec = importlib.util.spec_from_file_location("course_bench_downstream", ROOT / "benchmarks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_the_benchmarks_models(overrides: dict[str, Any]) -> None:
    """The benchmark's models, built from the course's code with the variants in place, each take one step."""
    bench = _bench()
    record: set[str] = set()
    with substituted(overrides, record):
        code = bench.load_course_code()
    config = code["TrainConfig"](d_model=16, num_heads=2, num_layers=1, d_ff=24, max_len=32, dropout=0.1)
    ours = code["build_model"](config, 11, 13)
    theirs = bench.TorchTransformer(code["PositionalEncoding"], 11, 13, config.d_model, config.num_heads,
                                    config.num_layers, config.d_ff, config.dropout, config.max_len, 0)
    src = torch.randint(1, 11, (2, 7))  # (B, L_src)
    tgt = torch.randint(1, 13, (2, 5))  # (B, L_tgt)
    for model in (ours, theirs):
        optimizer = code["make_optimizer"](model)
        scheduler = code["make_noam_scheduler"](optimizer, config.d_model, config.warmup_steps)
        loss = code["train_step"](model, src, tgt, optimizer, scheduler, config)
        assert torch.isfinite(torch.as_tensor(loss)), loss
    assert {"Transformer", "PositionalEncoding", "make_noam_scheduler"} & set(overrides) <= record


# ---------------------------------------------------------------------------
# Own-lesson rounds


def own_lesson_cases() -> list:
    """Every further round of every lesson; all but the first and the last of a lesson need --all-variants."""
    cases = []
    for lesson in lessons():
        mine = [e for e in variants() if lesson_of(e) == lesson]
        deepest = max((len(variants()[e]) for e in mine), default=0)
        rounds = range(COURSE_ROUNDS, deepest)
        cases += [pytest.param(lesson, r, marks=[] if r in (rounds[0], rounds[-1]) else [pytest.mark.all_variants])
                  for r in rounds]
    return cases


@pytest.fixture(autouse=True)
def _sampled(request) -> None:
    if request.node.get_closest_marker("all_variants") and not request.config.getoption("--all-variants"):
        pytest.skip("a middle round: run with --all-variants (the default run takes each lesson's first and last)")


@pytest.mark.parametrize("lesson, round_", own_lesson_cases())
def test_each_further_variant_runs_in_its_lesson(lesson: str, round_: int, workdir: Path) -> None:
    mine = {e for e in variants() if lesson_of(e) == lesson}
    overrides = pick(round_, cycle=False, among=mine)
    assert overrides
    if lesson in PREREQUISITES:
        run(PREREQUISITES[lesson], overrides, workdir)
    outcome = run(lesson, overrides, workdir)
    assert_in_place(lesson, overrides, outcome)
    if round_ < COURSE_ROUNDS + NEXT_LESSON_ROUNDS:
        for later in lessons():
            if later > lesson and set(overrides) & loads(later):
                assert_in_place(later, overrides, run(later, overrides, workdir))
