"""Batches by tokens: sentence pairs grouped by length, as many per batch as a token budget allows.

    from course_utils.data.batching import padding_fraction, token_batches
    batches = token_batches(src_ids, tgt_ids, max_tokens=3000, pad_id=PAD_ID, seed=epoch)
    padding_fraction(batches, PAD_ID)        # e.g. 0.03: the share of the tensors that is padding

Section 5.1 of the paper: "sentence pairs were batched together by approximate
sequence length. Each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens." A batch
of a fixed number of sentences holds a few tokens when its sentences are short
and many when they are long, and pads every sentence to the longest one. A
token budget keeps the work of every step about the same, and sorting by length
first leaves little padding.

The budget counts the positions of the padded tensors, padding included: a
batch of ``B`` pairs whose longest source has ``L_src`` ids and longest target
``L_tgt`` ids (``<bos>`` and ``<eos>`` included) satisfies
``B * L_src <= max_tokens`` and ``B * L_tgt <= max_tokens``. That is what the
computation costs, and what fits in memory.
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

import torch

from . import pad_batch


def token_batch_indices(src_lengths: Sequence[int], tgt_lengths: Sequence[int], max_tokens: int,
                        shuffle: bool = True, seed: int = 0) -> list[list[int]]:
    """The pairs of each batch, as lists of indices: every index in exactly one batch.

    The pairs are sorted by target length, then source length (ties in a
    random order seeded by ``seed`` when ``shuffle``, else in the given order),
    and cut into the longest runs that respect ``max_tokens`` on both sides;
    then, when ``shuffle``, the batches are shuffled (seeded). A pair too long
    for the budget on its own gets a batch of its own. The global RNGs are not
    used: the same arguments always give the same batches.
    """
    if len(src_lengths) != len(tgt_lengths):
        raise ValueError(f"{len(src_lengths)} source lengths but {len(tgt_lengths)} target lengths.")
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1.")
    rng = random.Random(seed)
    order = list(range(len(src_lengths)))
    if shuffle:
        rng.shuffle(order)  # random ties below: the batches change from one seed (epoch) to the next
    order.sort(key=lambda i: (tgt_lengths[i], src_lengths[i]))  # stable: ties keep the shuffled order
    batches: list[list[int]] = []
    batch: list[int] = []
    longest_src = longest_tgt = 0
    for i in order:
        src_len, tgt_len = max(src_lengths[i], longest_src), max(tgt_lengths[i], longest_tgt)
        if batch and (len(batch) + 1) * max(src_len, tgt_len) > max_tokens:
            batches.append(batch)
            batch, src_len, tgt_len = [], src_lengths[i], tgt_lengths[i]
        batch.append(i)
        longest_src, longest_tgt = src_len, tgt_len
    if batch:
        batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    return batches


def token_batches(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], max_tokens: int,
                  pad_id: int, shuffle: bool = True, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Padded ``(src, tgt)`` LongTensor batches of at most ``max_tokens`` positions per side (see the module).

    The counterpart of :func:`course_utils.data.make_batches` with a token
    budget in place of a number of sentences; the batches come from
    :func:`token_batch_indices`.
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"src_ids has {len(src_ids)} sentences but tgt_ids has {len(tgt_ids)}.")
    groups = token_batch_indices([len(s) for s in src_ids], [len(t) for t in tgt_ids], max_tokens, shuffle, seed)
    return [
        (pad_batch([src_ids[i] for i in group], pad_id), pad_batch([tgt_ids[i] for i in group], pad_id))
        for group in groups
    ]


def padding_fraction(batches: Iterable[tuple[torch.Tensor, torch.Tensor]], pad_id: int) -> float:
    """The share of all positions of the ``(src, tgt)`` batches, both sides together, that hold ``pad_id``."""
    total = padding = 0
    for src, tgt in batches:
        for side in (src, tgt):
            total += side.numel()
            padding += int((side == pad_id).sum())
    return padding / total if total else 0.0


__all__ = ["padding_fraction", "token_batch_indices", "token_batches"]
