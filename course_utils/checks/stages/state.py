"""Stages about state: nothing kept between calls, a checkpoint that loads strictly into a fresh instance.
"""


from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .._core import Check, Raised, close_enough


def fresh_instance_agrees(check: Check, module: nn.Module, build: Callable[[], nn.Module], inputs: tuple,
                          what: str, cause: str) -> None:
    """After calls on other inputs, ``module`` (in eval mode) answers ``inputs`` as a freshly built instance
    carrying the same weights does on its first call: nothing computed in an earlier call is kept."""
    fresh = build().eval()
    loaded = check.attempt(fresh.load_state_dict, module.state_dict(), what=f"{what}.load_state_dict")
    if isinstance(loaded, Raised):
        return  # a state_dict that does not load is the checkpoint stage's business
    ours = check.call(module, *inputs, what=f"{what}.forward")
    theirs = check.call(fresh, *inputs, what=f"{what}.forward")
    if isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and ours.shape == theirs.shape and \
            not close_enough(ours, theirs):
        check.fail(f"Your {what} answers an input differently from a freshly built one carrying the same weights: "
                   f"it keeps something from an earlier call. {cause}")
    check.ok("keeps nothing from one call to the next (a fresh instance with the same weights agrees)")


def state_dict_round_trip(check: Check, build: Callable[[], nn.Module], run: Callable[[nn.Module], Any],
                          what: str) -> None:
    """A checkpoint of a used instance loads strictly into a freshly built one, which then computes the same.

    Lessons 06 to 08 save ``model.state_dict()`` and load it into a new model (``load_state_dict``, strict):
    a tensor registered during ``forward`` (``register_buffer`` of the attention weights, a cached mask) is
    saved with the weights, and a fresh instance does not have it.
    """
    used, fresh = build().eval(), build().eval()
    before = set(check.call(used.state_dict, what=f"{what}.state_dict()"))
    first = run(used)
    state = check.call(used.state_dict, what=f"{what}.state_dict()")
    added = [k for k in state if k not in before]
    why = (f"Lessons 06, 07 and 08 save a checkpoint (`model.state_dict()`) and load it into a freshly built "
           f"model with `load_state_dict`, which refuses a checkpoint whose names or shapes differ.")
    if added:
        check.fail(f"After a forward call, your {what}'s state_dict() holds {', '.join(f'`{k}`' for k in added)}, "
                   f"which a freshly built one does not have: a tensor kept with `register_buffer` (registered in "
                   f"__init__ or in forward) is saved with the weights. {why}\nKeep such a tensor as a plain attribute "
                   f"(`self.attention_weights = weights`), not a buffer.")
    loaded = check.attempt(fresh.load_state_dict, state, what=f"{what}.load_state_dict(checkpoint)")
    if isinstance(loaded, Raised):
        check.fail(f"A checkpoint of your {what}, taken after a forward call, cannot be loaded into a freshly built "
                   f"one: a buffer or parameter changes its name or shape when the module runs. {why}\n\n"
                   f"{loaded.message}")
    again = run(fresh)
    if isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor) and not close_enough(again, first):
        check.fail(f"A freshly built {what}, given a checkpoint of another one (`load_state_dict`), computes other "
                   f"values than the one saved: something forward uses is not in state_dict() (a tensor kept "
                   f"as a plain attribute, made at random in __init__). {why} Make learned tensors nn.Parameters "
                   f"and fixed ones buffers.")
    check.ok("a checkpoint (state_dict) taken after a forward call loads, strictly, into a freshly built one, "
             "which computes the same")
