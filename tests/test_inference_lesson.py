"""Lesson 07's own code (solutions/07_inference.ipynb), where a unit test says more than a run of the lesson."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from course_utils.notebook import load_exercises

LESSON = Path(__file__).resolve().parent.parent / "solutions" / "07_inference.ipynb"


@pytest.fixture(scope="module")
def lesson() -> dict:
    return load_exercises(LESSON, ["reorder_cache", "CachedDecoder"], namespace={})


@pytest.mark.parametrize("training", [False, True])
def test_the_cached_decoder_is_in_the_mode_of_the_model_it_wraps(lesson, training):
    """greedy_decode and beam_search may save .training, call eval() and give the mode back with train(saved):
    through the wrapper, that must leave the trained model in the mode it had (lesson 07 compares translations
    in eval mode; a model put back into training mode translates with dropout)."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).train(training)
    wrapper = lesson["CachedDecoder"](model, decode_step=None)
    assert wrapper.training is training
    saved = wrapper.training
    wrapper.eval()
    wrapper.train(saved)
    assert model.training is training
