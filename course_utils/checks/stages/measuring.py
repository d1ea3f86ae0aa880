"""Measuring a dropout: what it did to a tensor, against the same tensor without it.

A dropout of rate p leaves every entry either 0 (dropped) or ``reference / (1 - p)``
(kept). :func:`drop_pattern` reads which entries were kept, the rate and the
scale from an observed tensor and its dropout-free reference;
:func:`dropout_problem` says what is wrong with a measured pattern, and
:func:`mask_problems` what is wrong with the masks of several calls (shared
along an axis, reused between two places, repeated from call to call, not
drawn from torch's global generator). The stage that runs the learner's module
and reports is :func:`.stages.dropout_measured`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, TypeVar

import torch

from .._core import seed_offset

T = TypeVar("T")


@dataclasses.dataclass
class DropPattern:
    """How an observed tensor relates to its dropout-free reference, entry by entry.

    ``exact`` says whether the observed tensor is the reference with some entries
    zeroed and the others scaled by one common ``scale``; ``rate`` is the fraction of
    (non-negligible) entries dropped.
    """

    kept: torch.Tensor  # bool, the shape of the tensor: True where the entry survived
    live: torch.Tensor  # bool: where the reference is clearly not 0 (an entry near 0 anyway tells nothing)
    rate: float
    scale: float
    exact: bool
    count: int  # how many entries were measured


def drop_pattern(observed: torch.Tensor, reference: torch.Tensor, tol: float = 1e-4) -> DropPattern:
    """Measure the dropout that turns ``reference`` into ``observed`` (same shape)."""
    o, r = observed.detach().double(), reference.detach().double()
    # An entry below 2 * tol cannot tell kept from dropped (kept, it is as near zero as a dropped one): left out,
    # else a tiny weight that came through unchanged counts as dropped, and a correct model fails by its seed.
    live = r.abs() > 2 * tol
    dropped = o.abs() <= tol * (1 + r.abs())
    ratios = (o / torch.where(live, r, torch.ones_like(r)))[live & ~dropped]
    scale = float(ratios.median()) if ratios.numel() else float("nan")
    expected = torch.where(dropped, torch.zeros_like(r), r * (scale if ratios.numel() else 1.0))
    exact = bool(((o - expected).abs() <= tol * (1 + expected.abs())).all())
    count = int(live.sum())
    rate = float(dropped[live].double().mean()) if count else 0.0
    return DropPattern(kept=~dropped, live=live, rate=rate, scale=scale, exact=exact, count=count)


def _near(a: float, b: float, rel: float = 0.02) -> bool:
    return abs(a - b) <= rel * max(abs(b), 1e-12)


def dropout_problem(pattern: DropPattern, p: float, where: str, owner: str) -> str:
    """What is wrong with a measured dropout of rate ``p`` on ``where`` ('' when it is right).

    ``pattern`` must be ``exact`` (the caller has ruled out dropout elsewhere).
    """
    keep = 1 - p
    if pattern.rate == 0 and _near(pattern.scale, 1.0, 1e-3):
        return (f"In training mode (built with dropout={p}) your {owner} applies no dropout on {where}: "
                f"every entry arrives unchanged.")
    if _near(pattern.scale, 1 / keep**2) and abs(pattern.rate - (1 - keep**2)) < 0.15:
        return (f"In training mode your {owner} applies dropout twice on {where}: the entries it keeps are "
                f"scaled by {pattern.scale:.3f} = 1 / (1 - p)^2 instead of 1 / (1 - p) = {1 / keep:.3f}, and about "
                f"{round(100 * pattern.rate)}% are dropped instead of {round(100 * p)}%. Apply one nn.Dropout there, once.")
    if _near(pattern.scale, 1.0, 1e-3):
        return (f"In training mode some entries of {where} come out as zeros while the others are not scaled by "
                f"1 / (1 - p). Either no dropout is applied there at all (the zeros then come from inside, such as "
                f"an attention's own dropout on its weights): apply `self.dropout` to it; or your {owner} multiplies "
                f"by a random 0/1 mask without the scaling, which changes the expected value between training and "
                f"evaluation: use nn.Dropout, which scales for you.")
    if not _near(pattern.scale, 1 / keep):
        implied = 1 - 1 / pattern.scale if pattern.scale > 1 else float("nan")
        return (f"In training mode your {owner} scales the entries of {where} it keeps by {pattern.scale:.3f} = "
                f"1 / (1 - {implied:.2f}) instead of 1 / (1 - {p}) = {1 / keep:.3f}: the dropout rate is not the "
                f"`dropout` argument. Create nn.Dropout(dropout) with the argument, not a fixed rate.")
    spread = 4 * (p * keep / max(pattern.count, 1)) ** 0.5 + 0.02
    if abs(pattern.rate - p) > spread:
        return (f"In training mode your {owner} drops {round(100 * pattern.rate)}% of {where}, but it was built "
                f"with dropout={p}: about {round(100 * p)}% should be dropped, each entry on its own.")
    return ""


def shared_axes(pattern: DropPattern, axes: dict[str, int]) -> list[str]:
    """The named axes along which a dropout mask does not vary (on the live entries): one mask reused for all."""
    shared = []
    kept, live = pattern.kept, pattern.live
    for name, dim in axes.items():
        if kept.shape[dim] < 2:
            continue
        any_kept, any_dropped = (kept & live).any(dim), (~kept & live).any(dim)
        groups = live.sum(dim) >= 2  # lines along the axis with two live entries or more
        if bool(groups.any()) and bool((any_dropped & groups).any()) and not bool((any_kept & any_dropped).any()):
            shared.append(name)
    return shared


def _same(a: DropPattern, b: DropPattern) -> bool:
    """Two patterns drop the same live entries."""
    return a.kept.shape == b.kept.shape and bool(((a.kept == b.kept) | ~(a.live & b.live)).all())


def mask_problems(runs: list[list[tuple[DropPattern, dict[str, int], str]]], owner: str) -> str:
    """What is wrong with the dropout masks of three calls ('' when nothing is).

    ``runs[call]`` lists, per place where dropout acts, its measured pattern, its named axes and its name.
    Calls 0 and 2 came right after the same ``torch.manual_seed``; call 1 right after call 0.
    """
    first = runs[0]
    for pattern, axes, _ in first:
        shared = shared_axes(pattern, axes)
        if shared:
            return (f"In training mode your {owner} drops the same entries for every {shared[0]}: one dropout mask "
                    f"is drawn with a smaller shape and broadcast along that axis. nn.Dropout draws one number per "
                    f"entry.")
    for i in range(len(first)):
        for j in range(i + 1, len(first)):
            if _same(first[i][0], first[j][0]):
                return (f"In training mode your {owner} drops the same entries in two places, {first[i][2]} and "
                        f"{first[j][2]}: one dropout mask is drawn once and reused. Call the nn.Dropout module on "
                        f"each tensor: it draws a fresh mask every time.")
    if all(_same(a[0], b[0]) for a, b in zip(runs[0], runs[1])):
        return (f"In training mode your {owner} drops the same entries on every call: the random numbers repeat "
                f"(a torch.manual_seed(...) or a freshly seeded torch.Generator inside forward?). Let nn.Dropout draw "
                f"from torch's global random number generator.")
    if not all(_same(a[0], b[0]) for a, b in zip(runs[0], runs[2])):
        return (f"In training mode the dropout of your {owner} does not follow torch's global random number "
                f"generator: after the same torch.manual_seed(...) it drops other entries. Lesson 06 seeds torch to "
                f"make training reproducible; use nn.Dropout (or F.dropout), which draws from the global generator.")
    return ""


def seeded(seed: int | None, fn: Callable[..., T], *args, **kwargs) -> T:
    """Run ``fn`` right after seeding the global RNG (None: go on from its current state).

    Only inside a checker, whose run restores the learner's RNG afterwards.
    """
    if seed is not None:
        torch.manual_seed(seed + seed_offset())
    return fn(*args, **kwargs)


__all__ = ["DropPattern", "drop_pattern", "dropout_problem", "mask_problems", "seeded", "shared_axes"]
