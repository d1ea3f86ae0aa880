"""The checker of lesson 06 for greedy decoding."""

from __future__ import annotations

import itertools
import random
import time

import pytest
import torch

from course_utils.checks.decoding import check_greedy_decode
from helpers import expect


# --------------------------------------------------------------------------
# Correct implementations


@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len and not finished.all():
        logits = model.decode(ys, memory, src)  # (B, T, V)
        next_token = logits[:, -1, :].argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, pad_id)
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, T + 1)
        finished = finished | (next_token == eos_id)
    return ys


@torch.no_grad()
def preallocated(model, src, max_len, bos_id, eos_id, pad_id):
    """Fills a (B, max_len) buffer of padding and trims it at the end."""
    batch = src.shape[0]
    memory = model.encode(src)
    ys = torch.full((batch, max_len), pad_id, dtype=torch.long, device=src.device)
    ys[:, 0] = bos_id
    alive = torch.ones(batch, dtype=torch.bool, device=src.device)
    length = 1
    for t in range(1, max_len):
        logits = model.decode(ys[:, :t], memory, src)
        choice = torch.max(logits[:, t - 1], dim=1).indices
        ys[:, t] = torch.where(alive, choice, torch.full_like(choice, pad_id))
        alive = alive & (choice != eos_id)
        length = t + 1
        if not alive.any():
            break
    return ys[:, :length].clone()


@torch.no_grad()
def column_list(model, src, max_len, bos_id, eos_id, pad_id):
    """Keeps a list of (B,) columns and stacks them."""
    memory = model.encode(src)
    columns = [torch.full((len(src),), bos_id, device=src.device)]
    done = [False] * len(src)
    for _ in range(max_len - 1):
        if all(done):
            break
        prefix = torch.stack(columns, dim=1)
        last = model.decode(prefix, memory, src)[:, -1]
        picked = torch.argmax(last, -1).tolist()
        column = []
        for b, token in enumerate(picked):
            column.append(pad_id if done[b] else token)
            done[b] = done[b] or token == eos_id
        columns.append(torch.tensor(column, device=src.device))
    return torch.stack(columns, dim=1).long()


@torch.no_grad()
def shrinking_batch(model, src, max_len, bos_id, eos_id, pad_id):
    """Decodes only the sentences still running, then scatters the results back."""
    memory = model.encode(src)
    batch = src.size(0)
    out = torch.full((batch, max_len), pad_id, dtype=torch.long, device=src.device)
    out[:, 0] = bos_id
    running = torch.arange(batch, device=src.device)
    t = 1
    while t < max_len and len(running) > 0:
        logits = model.decode(out[running, :t], memory[running], src[running])
        token = logits[:, -1].argmax(-1)
        out[running, t] = token
        running = running[token != eos_id]
        t += 1
    return out[:, :t]


@torch.no_grad()
def via_log_softmax(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = src.new_full((src.shape[0], 1), bos_id)
    ended = src.new_zeros(src.shape[0]).bool()
    for _ in range(max_len - 1):
        log_probs = model.decode(ys, memory, src).log_softmax(-1)[:, -1]
        token = log_probs.argmax(-1, keepdim=True)  # (B, 1)
        token[ended] = pad_id
        ys = torch.cat((ys, token), 1)
        ended |= token.squeeze(1) == eos_id
        if ended.all():
            break
    return ys


# --------------------------------------------------------------------------
# Wrong implementations


def _loop(model, src, max_len, bos_id, eos_id, pad_id, *, position=-1, pad=True, stop=True, limit=None,
          keep_bos=True, encode_each_step=False, last_only=False, dtype=torch.long, stop_on_any=False,
          pad_ends=False):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=dtype)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    steps = max_len - 1 if limit is None else limit
    for _ in range(steps):
        if encode_each_step:
            memory = model.encode(src)
        prefix = ys[:, -1:] if last_only else ys
        logits = model.decode(prefix, memory, src)
        token = logits[:, position, :].argmax(dim=-1)
        if pad:
            token = token.masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None].to(dtype)], dim=1)
        finished = finished | (token == eos_id) | ((token == pad_id) if pad_ends else False)
        if stop and (finished.any() if stop_on_any else finished.all()):
            break
    return ys if keep_bos else ys[:, 1:]


def encodes_every_step(*args):
    return _loop(*args, encode_each_step=True)


def calls_forward(model, src, max_len, bos_id, eos_id, pad_id):
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    while ys.size(1) < max_len and not finished.all():
        token = model(src, ys)[:, -1].argmax(-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
    return ys


def first_position(*args):
    return _loop(*args, position=0)


def wrong_axis(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    while ys.size(1) < max_len and not finished.all():
        token = model.decode(ys, memory, src).argmax(dim=1)[:, -1].masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
    return ys


def last_token_only(*args):
    """The decode loop of seed 001."""
    return _loop(*args, last_only=True)


def never_stops_at_eos(*args):
    return _loop(*args, pad=False, stop=False)


def no_padding(*args):
    return _loop(*args, pad=False)


def drops_bos(*args):
    return _loop(*args, keep_bos=False)


def too_long(*args):
    return _loop(*args, limit=args[2])


def runs_to_max_len(*args):
    return _loop(*args, stop=False)


def stops_at_first_eos(*args):
    return _loop(*args, stop_on_any=True)


def float_tokens(*args):
    return _loop(*args, dtype=torch.float32)


def hard_coded_ids(model, src, max_len, bos_id, eos_id, pad_id):
    return _loop(model, src, max_len, 1, eos_id, 0)


def one_sentence_only(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = [bos_id]
    for _ in range(max_len - 1):
        logits = model.decode(torch.tensor([ys]), memory, src)
        token = logits[0, -1].argmax().item() if src.size(0) == 1 else logits[:, -1].argmax(-1).item()
        ys.append(token)
        if token == eos_id:
            break
    return torch.tensor([ys])


def per_sentence_loop(model, src, max_len, bos_id, eos_id, pad_id):
    """Correct but slow: one greedy decoding per sentence (each sentence is still encoded once)."""
    rows = []
    for b in range(src.size(0)):
        rows.append(greedy_decode(model, src[b : b + 1], max_len, bos_id, eos_id, pad_id)[0])
    width = max(len(r) for r in rows)
    return torch.stack([torch.cat([r, r.new_full((width - len(r),), pad_id)]) for r in rows])


def trims_after_the_fact(model, src, max_len, bos_id, eos_id, pad_id):
    ys = _loop(model, src, max_len, bos_id, eos_id, pad_id, stop=False)
    keep = int((ys != pad_id).any(0).nonzero().max()) + 1
    return ys[:, :keep]


def returns_list(*args):
    return _loop(*args).tolist()


def stub(*args):
    raise NotImplementedError()


@torch.inference_mode()
def inference_mode_and_eval(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    src = src.to(next(model.parameters()).device)
    memory = model.encode(src)
    ys = torch.ones(src.size(0), 1).fill_(bos_id).type_as(src)
    alive = torch.ones(src.size(0), dtype=torch.bool).to(src.device)
    for _ in range(max_len - 1):
        _, token = torch.max(model.decode(ys, memory, src)[:, -1].softmax(-1), dim=1)
        token = token * alive + pad_id * ~alive
        ys = torch.cat([ys, token[:, None]], dim=1)
        alive = alive & (token != eos_id)
        if not alive.any():
            break
    return ys


def restores_the_mode(model, src, max_len, bos_id, eos_id, pad_id):
    """Decodes in eval mode, then gives the model back in the mode it came in (the contract allows .training)."""
    was_training = model.training
    model.eval()
    try:
        return greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)
    finally:
        model.train(was_training)


# inference_mode_and_eval and restores_the_mode come second and third: the downstream test's whole-course rounds,
# which take the first variants, then run lesson 07's cached decoding through a model that offers only what the
# contract allows (and must leave the trained model in eval mode, where lesson 07 compares translations).
@pytest.mark.parametrize(
    "fn", [greedy_decode, inference_mode_and_eval, restores_the_mode, preallocated, column_list, shrinking_batch,
           via_log_softmax]
)
def test_accepts_correct_variants(fn):
    expect(check_greedy_decode(fn), "passed")


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (encodes_every_step, ["called model.encode", "times", "once"]),
        (calls_forward, ["called model.encode", "model(src, ys)"]),
        (first_position, ["first position", "logits[:, -1, :]"]),
        (wrong_axis, ["not the argmax of the logits at the last position", "dim=-1"]),
        (last_token_only, ["single token", "only the last token", "whole prefix"]),
        (never_stops_at_eos, ["emitted eos at position 5", "should be pad_id"]),
        (no_padding, ["every later position should be pad_id", "finished"]),
        (drops_bos, ["column 0", "starts with the first generated token"]),
        (too_long, ["more than max_len", "counts bos"]),
        (runs_to_max_len, ["extra columns hold only padding", "as soon as every sentence has finished"]),
        (trims_after_the_fact, ["model.decode was called", "as soon as all sentences"]),
        (stops_at_first_eos, ["has not emitted eos", "every sentence"]),
        (float_tokens, ["dtype torch.float32", "torch.long"]),
        (hard_coded_ids, ["yours is 1", "bos_id argument"]),
        (one_sentence_only, ["works for one sentence", "batch of 3", ".item()"]),
        (returns_list, ["should be a torch.tensor", "a list"]),
        # issue 17: a pad_id the model produces in mid-sentence does not end the sentence
        (torch.no_grad()(lambda *args: _loop(*args, pad_ends=True)), ["pad_id", "mid-sentence", "only eos_id ends a sentence"]),
        # a decoder that switches the model to training mode: dropout would change every translation
        (lambda model, *args: greedy_decode(model.train(), *args), ["training mode", "model.train()", "eval"]),
        (lambda model, *args: (greedy_decode(model.eval(), *args), model.train())[0],
         ["hands the model back in training mode", "lesson 07"]),
    ],
)
def test_diagnoses_mistakes(fn, phrases):
    expect(check_greedy_decode(fn), "failed", *phrases)


def test_a_decoder_that_reads_more_of_the_model_than_the_contract_is_told_what_it_may_use():
    """Lesson 07 decodes through CachedDecoder, which has no pad_id: the crash names what the model offers."""
    def reads_pad_id(model, src, max_len, bos_id, eos_id, pad_id):
        return greedy_decode(model, src, max_len, bos_id, eos_id, model.pad_id)

    expect(check_greedy_decode(reads_pad_id), "error", "no attribute `pad_id`", "cacheddecoder", "arguments")


def test_outcomes():
    expect(check_greedy_decode(stub), "not attempted", "NotImplementedError")

    def swaps_arguments(model, src, max_len, bos_id, eos_id, pad_id):
        memory = model.encode(src)
        ys = torch.full((src.size(0), 1), bos_id)
        return model.decode(ys, src, memory)

    expect(check_greedy_decode(swaps_arguments), "error", "ValueError", "memory = model.encode(src)")


def test_code_that_draws_random_numbers_still_passes():
    def noisy(*args):
        torch.rand(2)
        random.random()
        return greedy_decode(*args)

    expect(check_greedy_decode(noisy), "passed")


def test_src_is_not_modified():
    def clobbers_src(model, src, max_len, bos_id, eos_id, pad_id):
        out = greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)
        src.zero_()
        return out

    expect(check_greedy_decode(clobbers_src), "failed", "changed its input `src` in place")


# --------------------------------------------------------------------------
# Red-team catalogue: less common mistakes and unusual correct solutions.


def per_sentence_without_padding(model, src, max_len, bos_id, eos_id, pad_id):
    """Decodes each sentence alone, with its source padding cut off (a real model gives the same)."""
    rows = []
    for b in range(src.size(0)):
        sentence = src[b][src[b] != pad_id].unsqueeze(0)  # (1, S_b)
        memory = model.encode(sentence)
        ys = [bos_id]
        while len(ys) < max_len:
            token = int(model.decode(torch.tensor([ys]), memory, sentence)[0, -1].argmax())
            ys.append(token)
            if token == eos_id:
                break
        rows.append(ys)
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows])


@torch.no_grad()
def shared_memory_rows(model, src, max_len, bos_id, eos_id, pad_id):
    """Encodes the batch once, then decodes sentence by sentence with rows of memory."""
    memory = model.encode(src)
    rows = []
    for b in range(src.size(0)):
        ys = torch.tensor([[bos_id]]).to(src.device)
        while ys.size(1) < max_len:
            token = model.decode(ys, memory[b : b + 1], src[b : b + 1])[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, token], dim=1)
            if token.item() == eos_id:
                break
        rows.append(ys[0])
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad_id)


def masks_after_the_loop(model, src, max_len, bos_id, eos_id, pad_id):
    """Lets finished sentences keep generating, stops when all have an EOS, then pads after the first EOS."""
    with torch.no_grad():
        memory = model.encode(src)
    ys = torch.full_like(src[:, :1], bos_id)
    while ys.size(1) < max_len and not (ys == eos_id).any(1).all():
        with torch.no_grad():
            ys = torch.cat([ys, model.decode(ys, memory, src)[:, -1].argmax(-1, keepdim=True)], dim=1)
    is_eos = (ys == eos_id).long()
    after_eos = (is_eos.cumsum(1) - is_eos) > 0
    return ys.masked_fill(after_eos, pad_id)


@pytest.mark.parametrize(
    "fn", [shared_memory_rows, masks_after_the_loop]
)
def test_accepts_unusual_correct_variants(fn):
    expect(check_greedy_decode(fn), "passed")


@pytest.mark.parametrize("fn", [per_sentence_loop, per_sentence_without_padding])
def test_decoding_one_sentence_at_a_time_is_not_batched(fn):
    """Right tokens, but the contract asks for one encoder call for the whole batch."""
    expect(check_greedy_decode(fn), "failed", "one at a time", "batched decoding")


def per_sentence_encoding_every_step(model, src, max_len, bos_id, eos_id, pad_id):
    rows = []
    for b in range(src.size(0)):
        ys = torch.tensor([[bos_id]])
        for _ in range(max_len - 1):
            token = model.decode(ys, model.encode(src[b : b + 1]), src[b : b + 1])[0, -1].argmax().item()
            ys = torch.cat([ys, torch.tensor([[token]])], dim=1)
            if token == eos_id:
                break
        rows.append(ys[0])
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad_id)


def _variant(model, src, max_len, bos_id, eos_id, pad_id, *, pick=None, fill=None, cumulative=True):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        logits = model.decode(ys, memory, src)
        token = pick(logits) if pick else logits[:, -1].argmax(-1)
        token = token.masked_fill(finished, pad_id if fill is None else fill)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished = (finished | (token == eos_id)) if cumulative else token == eos_id
        if finished.all():
            break
    return ys


def pads_with_eos(model, src, max_len, bos_id, eos_id, pad_id):
    return _variant(model, src, max_len, bos_id, eos_id, pad_id, fill=eos_id)


def finished_not_remembered(model, src, max_len, bos_id, eos_id, pad_id):
    return _variant(model, src, max_len, bos_id, eos_id, pad_id, cumulative=False)


def softmax_over_the_batch(model, src, max_len, bos_id, eos_id, pad_id):
    return _variant(model, src, max_len, bos_id, eos_id, pad_id, pick=lambda lg: lg[:, -1].softmax(0).argmax(-1))


def samples(model, src, max_len, bos_id, eos_id, pad_id):
    pick = lambda lg: torch.multinomial(lg[:, -1].softmax(-1), 1).squeeze(1)  # noqa: E731
    return _variant(model, src, max_len, bos_id, eos_id, pad_id, pick=pick)


def eos_overwritten_by_pad(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len - 1):
        token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        finished = finished | (token == eos_id)  # updated before padding: the EOS itself becomes pad
        ys = torch.cat([ys, token.masked_fill(finished, pad_id)[:, None]], dim=1)
        if finished.all():
            break
    return ys


def encodes_a_truncated_source(model, src, max_len, bos_id, eos_id, pad_id):
    return greedy_decode(model, src[:, :-1], max_len, bos_id, eos_id, pad_id)


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (per_sentence_encoding_every_step, ["called model.encode", "should call it once"]),
        (pads_with_eos, ["every later position should be pad_id"]),
        (finished_not_remembered, ["every later position should be pad_id", "forgets the sentence after one step",
                                   "finished |= next_token == eos_id"]),
        (softmax_over_the_batch, ["not the argmax of the logits at the last position", "dim=-1"]),
        (samples, ["the model's choice is", "argmax"]),
        (eos_overwritten_by_pad, ["the model's choice is", "eos itself was overwritten",
                                  "then `finished |= next_token == eos_id`"]),
        (encodes_a_truncated_source, ["model.encode received other sentences", "model.encode(src)"]),
    ],
)
def test_diagnoses_unusual_mistakes(fn, phrases):
    expect(check_greedy_decode(fn), "failed", *phrases)


def test_source_given_as_a_mask_is_an_error():
    def passes_a_mask(model, src, max_len, bos_id, eos_id, pad_id):
        memory = model.encode(src)
        return model.decode(torch.full((src.size(0), 1), bos_id), memory, src != pad_id)

    expect(check_greedy_decode(passes_a_mask), "error", "ValueError", "not a mask")


# --------------------------------------------------------------------------
# Loops that never stop: the scripted model stops answering past max_len (issue 12).


@torch.no_grad()
def forgets_max_len(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while not finished.all():
        token = model.decode(ys, memory, src)[:, -1].argmax(-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
    return ys


@torch.no_grad()
def never_appends(model, src, max_len, bos_id, eos_id, pad_id):
    """ys never grows, so `ys.size(1) < max_len` stays true."""
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, device=src.device)
    out = ys
    while ys.size(1) < max_len:
        token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        out = torch.cat([out, token[:, None]], dim=1)
    return out


@torch.no_grad()
def hides_errors(model, src, max_len, bos_id, eos_id, pad_id):
    """A bare `except Exception` around the step cannot hide the scripted model's refusal."""
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, device=src.device)
    for _ in itertools.count():
        try:
            token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        except Exception:
            break
        ys = torch.cat([ys, token[:, None]], dim=1)
        if (ys == eos_id).any(1).all():
            break
    return ys


@pytest.mark.parametrize("fn", [forgets_max_len, never_appends, hides_errors])
def test_a_loop_that_does_not_stop_fails_quickly(fn):
    start = time.perf_counter()
    result = check_greedy_decode(fn)
    expect(result, "failed", "does not stop", "your loop called model.decode", "times with max_len=",
           "it does not stop at max_len")
    assert time.perf_counter() - start < 5


# --------------------------------------------------------------------------
# Gradients and devices (issue 9, items 4 and 3).


def with_gradients(model, src, max_len, bos_id, eos_id, pad_id):
    return greedy_decode.__wrapped__(model, src, max_len, bos_id, eos_id, pad_id)


@torch.no_grad()
def ys_on_the_cpu(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # no device=: on the CPU whatever src's device
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len and not finished.all():
        token = model.decode(ys, memory, src)[:, -1].argmax(-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
    return ys


@torch.no_grad()
def finished_on_the_cpu(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = src.new_full((src.size(0), 1), bos_id)
    finished = torch.tensor([False] * src.size(0))  # on the CPU
    while ys.size(1) < max_len and not finished.all():
        token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        token = torch.where(finished, pad_id, token)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished = finished | (token == eos_id)
    return ys


@torch.no_grad()
def pads_from_a_cpu_column(model, src, max_len, bos_id, eos_id, pad_id):
    memory = model.encode(src)
    ys = src[:, :1].clone().fill_(bos_id)
    finished = ys[:, 0] != ys[:, 0]
    padding = torch.full((src.size(0),), pad_id)  # on the CPU
    while ys.size(1) < max_len and not finished.all():
        token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        token = torch.where(finished, padding, token)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished = finished | (token == eos_id)
    return ys


def returns_on_the_cpu(*args):
    return greedy_decode(*args).cpu()


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (with_gradients, ["gradients on", "@torch.no_grad()"]),
        (ys_on_the_cpu, ["mixes cpu tensors", "model.decode received a cpu tensor", "device=src.device"]),
        (finished_on_the_cpu, ["mixes cpu tensors", "torch.where(finished, pad_id, token)", "device=src.device"]),
        (pads_from_a_cpu_column, ["mixes cpu tensors", "torch.where(finished, padding, token)"]),
        (returns_on_the_cpu, ["returns its output on the cpu", ".cpu()"]),
    ],
)
def test_gradients_and_devices(fn, phrases):
    expect(check_greedy_decode(fn), "failed", *phrases)


@torch.no_grad()
def device_of_the_parameters(model, src, max_len, bos_id, eos_id, pad_id):
    device = next(model.parameters()).device
    src = src.to(device)
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long).to(device)
    finished = torch.zeros_like(ys[:, 0], dtype=torch.bool)
    for _ in range(max_len - 1):
        token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        token[finished] = pad_id
        ys = torch.cat([ys, token.unsqueeze(1)], dim=1)
        finished = finished.logical_or(token.eq(eos_id))
        if bool(finished.all()):
            break
    return ys


@torch.no_grad()
def cuda_method_when_src_is_on_cuda(model, src, max_len, bos_id, eos_id, pad_id):
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    if src.is_cuda:
        ys, finished = ys.cuda(), finished.cuda()
    memory = model.encode(src)
    while ys.size(1) < max_len and not finished.all():
        token = model.decode(ys, memory, src)[:, -1].argmax(-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
    return ys


def test_accepts_the_device_of_the_parameters():
    expect(check_greedy_decode(device_of_the_parameters), "passed")


def test_a_loop_bound_one_short_is_named():
    def one_short(model, src, max_len, bos_id, eos_id, pad_id):
        return greedy_decode(model, src, max_len - 1, bos_id, eos_id, pad_id) if max_len > 1 else greedy_decode(
            model, src, max_len, bos_id, eos_id, pad_id)

    expect(check_greedy_decode(one_short), "failed", "ends one step early", "while ys.size(1) < max_len")


def test_an_eos_id_written_into_the_code_is_named():
    def stops_at_2(model, src, max_len, bos_id, eos_id, pad_id):
        return greedy_decode(model, src, max_len, bos_id, 2, pad_id)  # the id of <eos> written in

    expect(check_greedy_decode(stops_at_2), "failed", "when it produces the token 2, not eos_id", "`eos_id` argument")


def test_a_cache_that_outlives_the_call_is_named():
    def remembers(model, src, max_len, bos_id, eos_id, pad_id, _memo={}):  # noqa: B006  the slip itself
        return _memo.setdefault((id(model), tuple(src.shape)), greedy_decode(model, src, max_len, bos_id, eos_id, pad_id))

    expect(check_greedy_decode(remembers), "failed", "second batch of the same shape",
           "first batch's translations again", "kept from one call to the next")


def test_tensors_moved_only_if_src_is_cuda_break_on_a_mac():
    """`src.is_cuda` is False on Apple's GPU (mps), which lesson 00's pick_device chooses on a Mac."""
    expect(check_greedy_decode(cuda_method_when_src_is_on_cuda), "failed", "creates a tensor on the cpu",
           "`is_cuda` is false", "mps")



def test_the_real_device_pass_runs(monkeypatch):
    """Where cuda or mps exists the decoding runs there too; here the CPU stands in for it, to run that code."""
    from course_utils.checks.stages import gpu as _gpu

    monkeypatch.setattr(_gpu, "real_gpu", lambda: "cpu")
    expect(check_greedy_decode(greedy_decode), "passed")
    expect(check_greedy_decode(returns_on_the_cpu), "failed", "returns its output on the cpu")


def test_a_property_that_fails_later_is_not_listed_as_working():
    result = check_greedy_decode(wrong_axis)
    expect(result, "failed", "not the argmax")
    assert not any("argmax" in item for item in result.checked), result.checked


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a device chosen by asking whether a GPU exists.


@torch.no_grad()
def greedy_decode_on_the_gpu_when_there_is_one(model, src, max_len, bos_id, eos_id, pad_id):
    device = "cuda" if torch.cuda.is_available() else src.device  # not src's device on a machine with a GPU
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=device)
    while ys.size(1) < max_len and not finished.all():
        next_token = model.decode(ys, memory, src)[:, -1, :].argmax(dim=-1).masked_fill(finished, pad_id)  # (B,)
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, T + 1)
        finished = finished | (next_token == eos_id)
    return ys


def test_a_decoder_that_asks_whether_a_gpu_exists_is_caught_without_one():
    result = check_greedy_decode(greedy_decode_on_the_gpu_when_there_is_one)
    if torch.cuda.is_available():  # a real GPU: the first call already mixes devices, in the learner's own line
        expect(result, "error", "Expected all tensors to be on the same device")
        return
    expect(result, "failed", "although src and the model are on the CPU", "torch.cuda.is_available()")
