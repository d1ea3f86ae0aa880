"""The checkers of lesson 07: beam search, the key/value cache (decode_step) and to_torch_transformer."""

from __future__ import annotations

import heapq
import random

import pytest
import torch

from course_utils.checks.inference import check_beam_search
from helpers import expect


# --------------------------------------------------------------------------
# Correct implementations


def _gnmt(n, alpha):
    return ((5 + n) / 6) ** alpha


@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """Batched over sentences and beams: B * beam_size rows through the decoder."""
    B, k, device = src.size(0), beam_size, src.device
    memory = model.encode(src).repeat_interleave(k, dim=0)  # (B * k, S, d)
    src_k = src.repeat_interleave(k, dim=0)  # (B * k, S)
    ys = torch.full((B * k, 1), bos_id, dtype=torch.long, device=device)  # (B * k, 1)
    scores = torch.full((B, k), float("-inf"), device=device)  # (B, k)
    scores[:, 0] = 0.0
    finished = [[] for _ in range(B)]
    done = [False] * B
    offsets = torch.arange(B, device=device).unsqueeze(1) * k  # (B, 1)
    for t in range(1, max_len):
        log_probs = model.decode(ys, memory, src_k)[:, -1].log_softmax(dim=-1)  # (B * k, V)
        V = log_probs.size(-1)
        candidates = (scores.unsqueeze(-1) + log_probs.view(B, k, V)).view(B, k * V)  # (B, k * V)
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (B, 2k)
        beam, token = top_index // V, top_index % V  # (B, 2k)
        is_eos = token == eos_id
        for b, j in is_eos[:, :k].nonzero().tolist():
            if not done[b]:
                seq = ys[b * k + beam[b, j]].tolist() + [eos_id]
                finished[b].append((top_scores[b, j].item() / _gnmt(t, length_penalty), seq))
        keep = is_eos.long().argsort(dim=1, stable=True)[:, :k]  # (B, k): the k best that are not EOS
        scores = top_scores.gather(1, keep)  # (B, k)
        rows = (beam.gather(1, keep) + offsets).view(-1)  # (B * k,)
        ys = torch.cat([ys[rows], token.gather(1, keep).view(-1, 1)], dim=1)  # (B * k, t + 1)
        reach = scores.max(dim=1).values / _gnmt(max_len - 1, length_penalty)  # (B,)
        for b in range(B):
            if finished[b] and max(f[0] for f in finished[b]) >= reach[b].item():
                done[b] = True
        if all(done):
            break
    for b in range(B):
        if not done[b]:
            for j in range(k):
                finished[b].append((scores[b, j].item() / _gnmt(ys.size(1) - 1, length_penalty), ys[b * k + j].tolist()))
    best = [max(f, key=lambda x: x[0])[1] for f in finished]
    out = torch.full((B, max(len(s) for s in best)), pad_id, dtype=torch.long, device=device)
    for b, seq in enumerate(best):
        out[b, : len(seq)] = torch.tensor(seq, device=device)
    return out


@torch.no_grad()
def per_sentence(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """The batched API, one sentence at a time inside."""
    rows = [beam_search(model, src[b : b + 1], beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)[0]
            for b in range(src.size(0))]
    width = max(len(r) for r in rows)
    return torch.stack([torch.cat([r, r.new_full((width - len(r),), pad_id)]) for r in rows])


@torch.no_grad()
def heap_based(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """Plain Python lists and heapq.nlargest, one sentence's beams decoded together."""
    memory = model.encode(src)
    answers = []
    for b in range(src.size(0)):
        beams = [(0.0, [bos_id])]
        done = []
        for t in range(1, max_len):
            ys = torch.tensor([seq for _, seq in beams], device=src.device)
            n = len(beams)
            logits = model.decode(ys, memory[b : b + 1].expand(n, -1, -1), src[b : b + 1].expand(n, -1))
            log_probs = torch.log_softmax(logits[:, -1].double(), dim=-1).tolist()
            candidates = [(s + lp, i, w) for i, (s, _) in enumerate(beams) for w, lp in enumerate(log_probs[i])]
            top = heapq.nlargest(2 * beam_size, candidates)
            for rank, (s, i, w) in enumerate(top):
                if w == eos_id and rank < beam_size:
                    heapq.heappush(done, (s / _gnmt(t, length_penalty), beams[i][1] + [w]))
            beams = [(s, beams[i][1] + [w]) for s, i, w in top if w != eos_id][:beam_size]
            if done and heapq.nlargest(1, done)[0][0] >= beams[0][0] / _gnmt(max_len - 1, length_penalty):
                break
        else:
            for s, seq in beams:
                heapq.heappush(done, (s / _gnmt(len(seq) - 1, length_penalty), seq))
        answers.append(heapq.nlargest(1, done)[0][1])
    width = max(map(len, answers))
    return torch.tensor([a + [pad_id] * (width - len(a)) for a in answers], device=src.device)


def shrinking_batch(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """Drops the sentences that are done from the batch; no decorator, a no_grad block instead."""
    with torch.no_grad():
        B, k = src.size(0), beam_size
        memory = model.encode(src)
        live = list(range(B))
        hyps = {b: [(0.0, [bos_id])] for b in range(B)}
        finished = {b: [] for b in range(B)}
        for t in range(1, max_len):
            rows, owners = [], []
            for b in live:
                for s, seq in hyps[b]:
                    rows.append(seq)
                    owners.append(b)
            index = torch.tensor(owners, device=src.device)
            logits = model.decode(torch.tensor(rows, device=src.device), memory[index], src[index])
            log_probs = logits[:, -1].log_softmax(-1)
            still = []
            for b in live:
                mine = [i for i, o in enumerate(owners) if o == b]
                scores = torch.tensor([hyps[b][j][0] for j in range(len(mine))], dtype=torch.float64, device=src.device)
                cand = (scores[:, None] + log_probs[mine].double()).flatten()
                V = log_probs.size(-1)
                values, flat = cand.sort(descending=True)
                new = []
                for rank, (v, f) in enumerate(zip(values.tolist(), flat.tolist())):
                    j, w = divmod(f, V)
                    if w == eos_id:
                        if rank < k:
                            finished[b].append((v / _gnmt(t, length_penalty), hyps[b][j][1] + [w]))
                    elif len(new) < k:
                        new.append((v, hyps[b][j][1] + [w]))
                    if len(new) == k and rank >= k:
                        break
                hyps[b] = new
                best = max((f[0] for f in finished[b]), default=float("-inf"))
                if best < new[0][0] / _gnmt(max_len - 1, length_penalty):
                    still.append(b)
            live = still
            if not live:
                break
        for b in live:
            for s, seq in hyps[b]:
                finished[b].append((s / _gnmt(len(seq) - 1, length_penalty), seq))
        best = [max(finished[b])[1] for b in range(B)]
        width = max(map(len, best))
        return torch.tensor([s + [pad_id] * (width - len(s)) for s in best], device=src.device)


# --------------------------------------------------------------------------
# Wrong implementations: the batched search with one mistake each.


def _variant(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6, *, probs=False,
             penalty=_gnmt, every_step=False, drop_finished=False, duplicates=False, extend_finished=False,
             worst=False, encode_each_step=False, grad=False, tile_memory=False, mix_rows=False, early_stop=True,
             reverse_rows=False, cpu_tensors=False, eos_from_2k=False, mask_specials=False, stop="bound",
             at_max_len="compete", pick="normalised"):
    B, k = src.size(0), beam_size
    device = None if cpu_tensors else src.device  # None: the default device, the CPU
    with torch.set_grad_enabled(grad):
        memory = model.encode(src)
        memory = memory.repeat(k, 1, 1) if tile_memory else memory.repeat_interleave(k, dim=0)
        src_k = src.repeat_interleave(k, dim=0)
        ys = torch.full((B * k, 1), bos_id, dtype=torch.long, device=device)
        scores = torch.full((B, k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        if duplicates:
            scores[:] = 0.0
        finished = [[] for _ in range(B)]
        done = [False] * B
        offsets = torch.arange(B, device=device).unsqueeze(1) * k
        for t in range(1, max_len):
            if encode_each_step:
                memory = model.encode(src).repeat_interleave(k, dim=0)
            logits = model.decode(ys, memory, src_k)[:, -1]
            if mask_specials:  # BOS and padding can never be generated
                logits = logits.index_fill(-1, torch.tensor([bos_id, pad_id], device=logits.device), float("-inf"))
            step = logits.softmax(-1) if probs else logits.log_softmax(-1)
            V = step.size(-1)
            candidates = (scores.unsqueeze(-1) + step.view(B, k, V)).view(B, k * V)
            if every_step:
                candidates = candidates / penalty(t, length_penalty)
            top_scores, top_index = candidates.topk(2 * k, dim=-1)
            beam, token = top_index // V, top_index % V
            is_eos = token == eos_id
            if extend_finished:
                is_eos = torch.zeros_like(is_eos)
            for b, j in is_eos[:, : (2 * k if eos_from_2k else k)].nonzero().tolist():
                if not done[b] and not drop_finished:
                    seq = ys[b * k + beam[b, j]].tolist() + [eos_id]
                    value = top_scores[b, j].item() if every_step else top_scores[b, j].item() / penalty(t, length_penalty)
                    finished[b].append((value, seq))
            keep = is_eos.long().argsort(dim=1, stable=True)[:, :k]
            scores = top_scores.gather(1, keep)
            rows = (beam.gather(1, keep) + offsets).view(-1)
            if mix_rows:  # rows counted beam-major, as if the beams of all sentences were stacked beam by beam
                rows = (beam.gather(1, keep) * B + torch.arange(B, device=device).unsqueeze(1)).view(-1)
            ys = torch.cat([ys[rows], token.gather(1, keep).view(-1, 1)], dim=1)
            if early_stop and not extend_finished:
                bound = {"bound": max_len - 1, "current": t, "raw": None}.get(stop, max_len - 1)
                divisor = 1 if every_step or bound is None else penalty(bound, length_penalty)
                reach = scores.max(dim=1).values / divisor
                for b in range(B):
                    if stop == "first" and finished[b]:
                        done[b] = True
                    elif stop == "k_finished":
                        done[b] = done[b] or len(finished[b]) >= k
                    elif stop not in ("first", "k_finished") and finished[b] and max(f[0] for f in finished[b]) >= reach[b].item():
                        done[b] = True
                if all(done):
                    break
        for b in range(B):
            if not done[b] and not (at_max_len == "finished only" and finished[b]):
                for j in range(k):
                    n = ys.size(1) - 1
                    raw = at_max_len == "raw" or every_step
                    end_penalty = (lambda n_, a: (5 + n_) / 6) if at_max_len == "no power" else penalty
                    value = scores[b, j].item() if raw else scores[b, j].item() / end_penalty(n, length_penalty)
                    finished[b].append((value, ys[b * k + j].tolist()))
        if pick == "raw":  # the raw sum: the normalised score times the penalty
            best = [max(f, key=lambda x: x[0] * penalty(len(x[1]) - 1, length_penalty))[1] for f in finished]
        else:
            best = [(min if worst else max)(f, key=lambda x: x[0])[1] for f in finished]
        if reverse_rows:
            best = best[::-1]
        out = torch.full((B, max(len(s) for s in best)), pad_id, dtype=torch.long, device=device)
        for b, seq in enumerate(best):
            out[b, : len(seq)] = torch.tensor(seq, device=device)
        return out


def _variant_of(**options):
    def fn(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
        return _variant(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty, **options)

    fn.__name__ = "_".join(options) or "plain"
    return fn


@torch.no_grad()
def greedy_in_disguise(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """Keeps the best extension of each beam, not the best of all: greedy with extra steps."""
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len and not finished.all():
        token = model.decode(ys, memory, src)[:, -1].argmax(-1).masked_fill(finished, pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == eos_id
    return ys


@torch.no_grad()
def never_stops(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    while True:
        token = model.decode(ys, memory, src)[:, -1].argmax(-1)
        ys = torch.cat([ys, token[:, None]], dim=1)


def calls_forward(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """Runs model(src, ys), so the encoder runs at every step."""

    class Wrapped:
        def encode(self, s):
            return model.encode(s)

        def decode(self, ys, memory, s):
            return model(s, ys)

    return beam_search(Wrapped(), src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)


def output_on_cpu(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """The heap-based search, but its output built without a device."""
    out = heap_based(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)
    return torch.tensor(out.tolist())


def drops_bos(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    return beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)[:, 1:]


def all_beams(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
    """Returns beam_size rows per sentence."""
    out = beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty)
    return out.repeat_interleave(beam_size, dim=0)


def stub(*args, **kwargs):
    raise NotImplementedError()


def in_eval_mode(model, src, *args, **kwargs):
    """Puts the model in eval mode and follows its parameters' device first, as many learners do."""
    model.eval()
    return beam_search(model, src.to(next(model.parameters()).device), *args, **kwargs)


# in_eval_mode comes second: the downstream test's whole-course rounds, which take the first variants, then run
# lesson 07's cached decoding through a model that offers only what the contract allows.
CORRECT = [beam_search, in_eval_mode, per_sentence, heap_based, shrinking_batch, _variant_of(mask_specials=True)]

WRONG = [
    (greedy_in_disguise, ["greedy decoding finds"]),
    (_variant_of(probs=True), ["adding probabilities"]),
    (_variant_of(penalty=lambda n, a: 1.0), ["length penalty is missing"]),
    (_variant_of(every_step=True), ["compounds"]),
    (_variant_of(penalty=lambda n, a: max(n, 1) ** a), ["n ** length_penalty"]),
    (_variant_of(penalty=lambda n, a: ((6 + n) / 6) ** a), ["counts bos"]),
    (_variant_of(drop_finished=True), ["drops the hypotheses that end in eos"]),
    (_variant_of(extend_finished=True), ["kept in the beam"]),
    (_variant_of(duplicates=True), ["duplicate beams"]),
    (_variant_of(tile_memory=True), ["memory and src belong to different sentences"]),
    (_variant_of(mix_rows=True), ["mixed"]),
    (_variant_of(worst=True), ["worst finished hypothesis"]),
    (_variant_of(reverse_rows=True), ["wrong order"]),
    (_variant_of(encode_each_step=True), ["encoder should run once"]),
    (calls_forward, ["encoder should run once"]),
    (_variant_of(grad=True), ["no_grad"]),
    (_variant_of(early_stop=False), ["no open hypothesis could still beat"]),
    (_variant_of(cpu_tensors=True), ["src.device"]),
    (_variant_of(eos_from_2k=True), ["outside the beam_size best"]),
    (never_stops, ["does not stop at max_len"]),
    (output_on_cpu, ["returns its output on the cpu"]),
    # issue 17: the stop rule, the end at max_len, the final pick
    (_variant_of(at_max_len="finished only"), ["reaches max_len", "open"]),
    (_variant_of(at_max_len="raw"), ["reaches max_len", "raw sums", "open"]),
    (_variant_of(stop="first"), ["as soon as one hypothesis has finished"]),
    (_variant_of(stop="k_finished"), ["beam_size hypotheses have finished"]),
    (_variant_of(stop="raw"), ["stopping test", "without dividing"]),
    (_variant_of(stop="current"), ["stopping test", "current length"]),
    (_variant_of(penalty=lambda n, a: ((4 + n) / 6) ** a), ["does not count eos"]),
    (_variant_of(pick="raw"), ["picks the answer by the raw sum"]),
    (drops_bos, ["column 0"]),
    (all_beams, ["only the best of the beam_size hypotheses"]),
    # a second hidden set: the open hypotheses at max_len divided by (5 + n) / 6 without its power (equal to the
    # contract for alpha = 1, and for alpha < 1 on every case tried), and a default penalty other than the paper's
    (_variant_of(at_max_len="no power"), ["length_penalty=2.0", "length-normalised score", "** length_penalty"]),
    (lambda model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=1.0: beam_search(
        model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty), ["default of length_penalty is 1.0"]),
]


@pytest.mark.parametrize("fn", CORRECT, ids=[fn.__name__ for fn in CORRECT])
def test_accepts_the_correct_variants(fn):
    result = check_beam_search(fn)
    assert result.passed, f"{fn.__name__}:\n{result}"


@pytest.mark.parametrize("fn, phrases", WRONG, ids=[fn.__name__ + str(i) for i, (fn, _) in enumerate(WRONG)])
def test_diagnoses_mistakes(fn, phrases):
    result = check_beam_search(fn)
    expect(result, "failed", *phrases)


def test_stub_is_not_attempted():
    expect(check_beam_search(stub), "not attempted")


def test_the_real_device_pass_runs(monkeypatch):
    """Where cuda or mps exists the search runs there too; here the CPU stands in for it, to run that code."""
    from course_utils.checks import _gpu

    monkeypatch.setattr(_gpu, "real_gpu", lambda: "cpu")
    result = check_beam_search(beam_search)
    expect(result, "passed")
    assert any("and on the real one" in item for item in result.checked), result.checked


def test_leaves_rng_untouched():
    torch.manual_seed(3)
    random.seed(3)
    before = torch.get_rng_state(), random.getstate()
    assert check_beam_search(beam_search).passed
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]


# ==========================================================================
# decode_step: incremental decoding with a key/value cache

import math

import torch.nn.functional as F

from course_utils.checks.inference import check_decode_step


def _heads(x, attn):
    B, L, _ = x.shape
    return x.view(B, L, attn.num_heads, attn.d_k).transpose(1, 2)  # (B, H, L, d_k)


def _merge(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, d_model)


def _attend(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _kv_step(model, y_last, memory, src, cache, *, position_zero=False, use_cache=True, first_only=False,
             cross_every_step=False, src_mask_off=False, recompute_prefix=False, cache_on_model=False,
             heads_first=False, keep_length_dim=False, unscaled=False, no_pe=False, next_position=False,
             skip_norm1=False, no_residual2=False, cross_from_self=False, self_excluded=False, scale_d_model=False):
    state = model.__dict__.setdefault("_my_cache", {}) if cache_on_model else cache
    t = state.get("length", 0)
    src_mask = None if src_mask_off else (src != model.pad_id)[:, None, None, :]  # (B, 1, 1, L_src)
    pe = model.positional_encoding.pe
    scale = 1.0 if unscaled else math.sqrt(model.d_model)
    position = 0 if position_zero else t + 1 if next_position else t
    x = model.tgt_embed(y_last) * scale + (0 if no_pe else pe[position])  # (B, 1, d_model)
    if recompute_prefix:  # caches the decoder's input tokens and reruns every layer on the whole prefix
        state["tokens"] = torch.cat([state["tokens"], y_last], 1) if "tokens" in state else y_last
        logits = model.decode(state["tokens"], memory, src)
        state["length"] = t + 1
        return logits[:, -1], cache
    layers = state.setdefault("layers", [dict() for _ in model.decoder_layers])
    for layer, kv in zip(model.decoder_layers, layers):
        a, c = layer.self_attn, layer.cross_attn
        q, k, v = _heads(a.W_q(x), a), _heads(a.W_k(x), a), _heads(a.W_v(x), a)  # (B, H, 1, d_k)
        if heads_first:
            k, v = k.transpose(0, 1), v.transpose(0, 1)  # (H, B, 1, d_k): rows not first
        if "k" in kv and use_cache:
            k, v = torch.cat([kv["k"], k], dim=2), torch.cat([kv["v"], v], dim=2)
        kv["k"], kv["v"] = k, v
        if heads_first:
            k, v = k.transpose(0, 1), v.transpose(0, 1)
        mask = None
        if first_only and k.size(2) > 1:
            mask = torch.ones(k.size(2), k.size(2), dtype=torch.bool).tril()[:1]  # the FIRST row of the causal mask
        if self_excluded and k.size(2) > 1:  # the newest token attends to the cached ones, not to itself
            mask = (torch.arange(k.size(2)) < k.size(2) - 1)[None, :]  # (1, t + 1)
        if scale_d_model:
            q = q * math.sqrt(a.d_k) / math.sqrt(model.d_model)
        attended = layer.dropout(a.W_o(_merge(_attend(q, k, v, mask))))
        x = x + attended if skip_norm1 else layer.norm1(x + attended)
        if "mk" not in kv or cross_every_step:
            source = x if cross_from_self else memory
            kv["mk"], kv["mv"] = _heads(c.W_k(source), c), _heads(c.W_v(source), c)  # (B, H, L_src, d_k)
        cross = layer.dropout(c.W_o(_merge(_attend(_heads(c.W_q(x), c), kv["mk"], kv["mv"],
                                                   None if cross_from_self else src_mask))))
        x = layer.norm2(cross if no_residual2 else x + cross)
        x = layer.norm3(x + layer.dropout(layer.feed_forward(x)))
    state["length"] = t + 1
    logits = model.generator(x)  # (B, 1, V)
    return (logits if keep_length_dim else logits[:, -1]), cache


def decode_step(model, y_last, memory, src, cache):
    return _kv_step(model, y_last, memory, src, cache)


def decode_step_tuples(model, y_last, memory, src, cache):
    """The cache as a dict holding a list of (k, v, memory_k, memory_v) tuples, one per layer."""
    t = cache.get("t", 0)
    x = model.positional_encoding.dropout(model.tgt_embed(y_last) * model.d_model ** 0.5
                                          + model.positional_encoding.pe[t : t + 1])
    mask = (src != model.pad_id).view(src.size(0), 1, 1, -1)
    new = []
    for i, layer in enumerate(model.decoder_layers):
        a, c = layer.self_attn, layer.cross_attn
        old = cache["layers"][i] if "layers" in cache else None
        k, v = _heads(a.W_k(x), a), _heads(a.W_v(x), a)
        if old is not None:
            k, v = torch.cat((old[0], k), 2), torch.cat((old[1], v), 2)
        scores = _heads(a.W_q(x), a) @ k.transpose(-2, -1) / math.sqrt(a.d_k)  # (B, H, 1, t + 1)
        x = layer.norm1(x + a.W_o(_merge(scores.softmax(-1) @ v)))
        mk, mv = (old[2], old[3]) if old is not None else (_heads(c.W_k(memory), c), _heads(c.W_v(memory), c))
        scores = (_heads(c.W_q(x), c) @ mk.transpose(-2, -1) / math.sqrt(c.d_k)).masked_fill(~mask, float("-inf"))
        x = layer.norm2(x + c.W_o(_merge(scores.softmax(-1) @ mv)))
        x = layer.norm3(x + layer.feed_forward(x))
        new.append((k, v, mk, mv))
    return model.generator(x).squeeze(1), {"t": t + 1, "layers": new}


def decode_step_preallocated(model, y_last, memory, src, cache):
    """Keys and values written into buffers sized for max_len at the first step, then sliced; einsum attention."""
    t = cache.get("t", 0)
    B, L_max = y_last.size(0), model.positional_encoding.pe.size(0)
    x = model.tgt_embed(y_last) * math.sqrt(model.d_model) + model.positional_encoding.pe[t]  # (B, 1, d_model)
    x = model.positional_encoding.dropout(x)
    keep = (src != model.pad_id)[:, None, None, :]  # (B, 1, 1, L_src)
    for i, layer in enumerate(model.decoder_layers):
        a, c = layer.self_attn, layer.cross_attn
        if f"k{i}" not in cache:
            cache[f"k{i}"] = x.new_zeros(B, a.num_heads, L_max, a.d_k)  # (B, H, L_max, d_k)
            cache[f"v{i}"] = x.new_zeros(B, a.num_heads, L_max, a.d_k)
            cache[f"mk{i}"], cache[f"mv{i}"] = _heads(c.W_k(memory), c), _heads(c.W_v(memory), c)
        cache[f"k{i}"][:, :, t] = _heads(a.W_k(x), a)[:, :, 0]
        cache[f"v{i}"][:, :, t] = _heads(a.W_v(x), a)[:, :, 0]
        k, v = cache[f"k{i}"][:, :, : t + 1], cache[f"v{i}"][:, :, : t + 1]  # (B, H, t + 1, d_k)
        w = torch.einsum("bhqd,bhkd->bhqk", _heads(a.W_q(x), a), k).div(math.sqrt(a.d_k)).softmax(-1)
        x = layer.norm1(x + layer.dropout(a.W_o(_merge(torch.einsum("bhqk,bhkd->bhqd", w, v)))))
        scores = torch.einsum("bhqd,bhkd->bhqk", _heads(c.W_q(x), c), cache[f"mk{i}"]) / math.sqrt(c.d_k)
        w = scores.masked_fill(~keep, torch.finfo(scores.dtype).min).softmax(-1)
        x = layer.norm2(x + layer.dropout(c.W_o(_merge(torch.einsum("bhqk,bhkd->bhqd", w, cache[f"mv{i}"])))))
        x = layer.norm3(x + layer.dropout(layer.feed_forward(x)))
    cache["t"] = t + 1
    return model.generator(x)[:, 0], cache


def decode_step_stacked(model, y_last, memory, src, cache):
    """Every layer's keys in one tensor (B, N, H, t, d_k), values likewise; a fresh dict returned at every step."""
    t = 0 if not cache else cache["keys"].size(3)  # the length is the cache's own shape
    x = model.positional_encoding.dropout(model.tgt_embed(y_last) * math.sqrt(model.d_model)
                                          + model.positional_encoding.pe[t].unsqueeze(0))
    mask = (src != model.pad_id).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, L_src)
    new_k, new_v, mem_k, mem_v = [], [], [], []
    for i, layer in enumerate(model.decoder_layers):
        a, c = layer.self_attn, layer.cross_attn
        k_new, v_new = _heads(a.W_k(x), a), _heads(a.W_v(x), a)  # (B, H, 1, d_k)
        new_k.append(k_new)
        new_v.append(v_new)
        k = torch.cat([cache["keys"][:, i], k_new], 2) if cache else k_new  # (B, H, t + 1, d_k)
        v = torch.cat([cache["values"][:, i], v_new], 2) if cache else v_new
        x = layer.norm1(x + layer.dropout(a.W_o(_merge(_attend(_heads(a.W_q(x), a), k, v)))))
        mk = cache["memory_keys"][:, i] if cache else _heads(c.W_k(memory), c)  # (B, H, L_src, d_k)
        mv = cache["memory_values"][:, i] if cache else _heads(c.W_v(memory), c)
        mem_k.append(mk)
        mem_v.append(mv)
        x = layer.norm2(x + layer.dropout(c.W_o(_merge(_attend(_heads(c.W_q(x), c), mk, mv, mask)))))
        x = layer.norm3(x + layer.dropout(layer.feed_forward(x)))
    step_k, step_v = torch.stack(new_k, 1), torch.stack(new_v, 1)  # (B, N, H, 1, d_k)
    return model.generator(x).squeeze(1), {
        "keys": torch.cat([cache["keys"], step_k], 3) if cache else step_k,
        "values": torch.cat([cache["values"], step_v], 3) if cache else step_v,
        "memory_keys": torch.stack(mem_k, 1), "memory_values": torch.stack(mem_v, 1),  # (B, N, H, L_src, d_k)
    }


def _kv_variant(**options):
    def fn(model, y_last, memory, src, cache):
        return _kv_step(model, y_last, memory, src, cache, **options)

    fn.__name__ = "_".join(options)
    return fn


def decode_step_functional(model, y_last, memory, src, cache, position=None, layers=None, kv_from="cross_attn"):
    """Every projection applied as F.linear(x, W.weight, W.bias), keys and values per layer in a list.

    For the wrong variants: ``position(model, cache)`` replaces the count of cached tokens, ``layers(model)`` the
    decoder layers run, ``kv_from`` the attention whose W_k and W_v project memory."""
    def project(x, linear):
        return F.linear(x, linear.weight, linear.bias)

    run = list(layers(model) if layers else model.decoder_layers)
    t = position(model, cache) if position else len(cache.get("keys", [[]])[0]) if cache else 0
    x = model.tgt_embed(y_last) * math.sqrt(model.d_model) + model.positional_encoding.pe[t]  # (B, 1, d_model)
    keep = (src != model.pad_id)[:, None, None, :]
    keys, values = cache.get("keys", [[] for _ in run]), cache.get("values", [[] for _ in run])
    memory_kv = cache.get("memory") or [(_heads(project(memory, getattr(l, kv_from).W_k), l.cross_attn),
                                         _heads(project(memory, getattr(l, kv_from).W_v), l.cross_attn)) for l in run]
    for i, layer in enumerate(run):
        a, c = layer.self_attn, layer.cross_attn
        keys[i] = keys[i] + [_heads(project(x, a.W_k), a)]
        values[i] = values[i] + [_heads(project(x, a.W_v), a)]
        out = _attend(_heads(project(x, a.W_q), a), torch.cat(keys[i], 2), torch.cat(values[i], 2))
        x = layer.norm1(x + project(_merge(out), a.W_o))
        out = _attend(_heads(project(x, c.W_q), c), *memory_kv[i], keep)
        x = layer.norm2(x + project(_merge(out), c.W_o))
        x = layer.norm3(x + layer.feed_forward(x))
    return model.generator(x)[:, -1], {"keys": keys, "values": values, "memory": memory_kv}


def steps_counted_on_the_model(model, y_last, memory, src, cache):
    """The position read from a counter on the model, reset by an empty cache: two decodings at once share it."""
    def counter(m, c):
        m._steps = (getattr(m, "_steps", 0) if c else 0) + 1
        return m._steps - 1

    return decode_step_functional(model, y_last, memory, src, cache, position=counter)


def memory_projected_again_for_a_new_tensor(model, y_last, memory, src, cache):
    """Keeps the cross-attention's keys and values only while memory is the same tensor object."""
    if cache and cache.get("of") is not memory:
        cache = {key: value for key, value in cache.items() if key != "memory"}
    logits, cache = decode_step_functional(model, y_last, memory, src, cache)
    cache["of"] = memory
    return logits, cache


def steps_as_a_scalar_tensor(model, y_last, memory, src, cache):
    """Counts its steps in a 0-d tensor kept in the cache, which beam search cannot reorder."""
    logits, cache = decode_step(model, y_last, memory, src, cache)
    cache["steps"] = cache.get("steps", torch.tensor(0)) + 1
    return logits, cache


KV_CORRECT = [decode_step, decode_step_tuples, decode_step_preallocated, decode_step_stacked, decode_step_functional]
KV_WRONG = [
    (_kv_variant(position_zero=True), ["position 0"]),
    (_kv_variant(use_cache=False), ["cache grows, but its keys and values are not used"]),
    (_kv_variant(first_only=True), ["wrong orientation"]),
    (_kv_variant(cross_every_step=True), ["recomputed at every step"]),
    (_kv_variant(src_mask_off=True), ["ignores the source padding"]),
    (_kv_variant(recompute_prefix=True), ["should see exactly one"]),
    (_kv_variant(cache_on_model=True), ["reordered"]),
    (_kv_variant(heads_first=True), ["first dimension"]),
    (_kv_variant(keep_length_dim=True), ["(b, v)"]),
    (lambda model, y_last, memory, src, cache: model.decode(y_last, memory, src)[:, -1], ["should return 2 values"]),
    (lambda model, y_last, memory, src, cache: (model.decode(y_last, memory, src)[:, -1], cache),
     ["differ from those of model.decode"]),
    # issue 17: one diagnosis per slip
    (_kv_variant(unscaled=True), ["not multiplied by sqrt(d_model)"]),
    (_kv_variant(no_pe=True), ["positional encoding", "pe[t]"]),
    (_kv_variant(next_position=True), ["position t + 1", "pe[t]"]),
    (_kv_variant(skip_norm1=True), ["norm1"]),
    (_kv_variant(no_residual2=True), ["cross-attention", "residual"]),
    (_kv_variant(cross_from_self=True), ["cross-attention", "memory"]),
    (_kv_variant(self_excluded=True), ["self-attention", "itself"]),
    (_kv_variant(scale_d_model=True), ["self-attention", "sqrt(d_k)"]),
    (steps_as_a_scalar_tensor, ["cache['steps']", "shape ()", "rows first", "python int"]),
    (steps_counted_on_the_model, ["two decodings at once", "step counter on the model"]),
    (memory_projected_again_for_a_new_tensor, ["projected memory again", "first step only"]),
    (lambda *a: decode_step_functional(*a, layers=lambda m: [m.decoder_layers[0]] * len(m.decoder_layers)),
     ["`decoder_layers[1].self_attn.w_q` was never called", "its own weights"]),
    (lambda *a: decode_step_functional(*a, layers=lambda m: m.decoder_layers[:-1]), ["`decoder_layers[1]` never ran"]),
    (lambda *a: decode_step_functional(*a, kv_from="self_attn"), ["cross_attn.w_k` was never called", "its own w_k"]),
]


@pytest.mark.parametrize("fn", KV_CORRECT, ids=[fn.__name__ for fn in KV_CORRECT])
def test_decode_step_accepts_correct_variants(fn):
    result = check_decode_step(fn)
    assert result.passed, f"{fn.__name__}:\n{result}"


@pytest.mark.parametrize("fn, phrases", KV_WRONG, ids=[str(i) for i in range(len(KV_WRONG))])
def test_decode_step_diagnoses_mistakes(fn, phrases):
    result = check_decode_step(fn)
    expect(result, "failed", *phrases)


def test_decode_step_stub_is_not_attempted():
    expect(check_decode_step(stub), "not attempted")


# ==========================================================================
# to_torch_transformer: the model's weights in nn.Transformer

import copy

from torch import nn

from course_utils.checks.inference import check_to_torch_transformer


class _Translator(nn.Module):
    def __init__(self, model, core, *, scale=True, flip_masks=False, no_causal=False):
        super().__init__()
        self.d_model, self.pad_id = model.d_model, model.pad_id
        self.src_embed, self.tgt_embed = copy.deepcopy(model.src_embed), copy.deepcopy(model.tgt_embed)
        self.positional_encoding = copy.deepcopy(model.positional_encoding)
        self.generator = copy.deepcopy(model.generator)
        self.core = core
        self.scale, self.flip_masks, self.no_causal = scale, flip_masks, no_causal

    def forward(self, src, tgt):
        factor = math.sqrt(self.d_model) if self.scale else 1.0
        x = self.positional_encoding(self.src_embed(src) * factor)  # (B, L_src, d_model)
        y = self.positional_encoding(self.tgt_embed(tgt) * factor)  # (B, L_tgt, d_model)
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id  # True = hidden
        if self.flip_masks:
            src_pad, tgt_pad = ~src_pad, ~tgt_pad
        L = tgt.size(1)
        causal = None if self.no_causal else torch.ones(L, L, dtype=torch.bool).triu(1)  # True = hidden (the future)
        out = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                        memory_key_padding_mask=src_pad, tgt_is_causal=not self.no_causal)
        return self.generator(out)


def _bias(linear):
    return linear.bias if linear.bias is not None else torch.zeros(linear.out_features)


def _copy_linear(src, dst):
    dst.weight.copy_(src.weight)
    dst.bias.copy_(_bias(src))


def _copy_norm(src, dst):
    """Scale then shift, whatever the learner's LayerNorm calls them."""
    for mine, theirs in zip(dst.parameters(), src.parameters()):
        mine.copy_(theirs)


def _copy_attention(dst, src, order=("W_q", "W_k", "W_v"), transpose=False):
    weights = [getattr(src, n).weight for n in order]
    dst.in_proj_weight.copy_(torch.cat([w.t() if transpose else w for w in weights]))
    dst.in_proj_bias.copy_(torch.cat([_bias(getattr(src, n)) for n in order]))
    _copy_linear(src.W_o, dst.out_proj)


def _convert(model, *, order=("W_q", "W_k", "W_v"), transpose=False, keep_final_norms=False, norm_first=False,
             activation="relu", swap_norms=False, separate_stacks=False, heads_from="num_heads", dropout=None,
             **forward_options):
    layer = model.encoder_layers[0]
    d_model, heads = model.d_model, getattr(layer.self_attn, heads_from)
    d_ff = layer.feed_forward.linear1.out_features
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    rate = model.positional_encoding.dropout.p if dropout is None else dropout  # the model's rate, by contract
    core = nn.Transformer(d_model, heads, n_enc, n_dec, d_ff, dropout=rate, activation=activation,
                          batch_first=True, norm_first=norm_first)
    if not keep_final_norms:
        core.encoder.norm, core.decoder.norm = None, None
    with torch.no_grad():
        for ours, theirs in zip(model.encoder_layers, core.encoder.layers):
            _copy_attention(theirs.self_attn, ours.self_attn, order, transpose)
            for lin in ("linear1", "linear2"):
                _copy_linear(getattr(ours.feed_forward, lin), getattr(theirs, lin))
            _copy_norm(ours.norm1, theirs.norm1)
            _copy_norm(ours.norm2, theirs.norm2)
        for ours, theirs in zip(model.decoder_layers, core.decoder.layers):
            _copy_attention(theirs.self_attn, ours.self_attn, order, transpose)
            _copy_attention(theirs.multihead_attn, ours.cross_attn, order, transpose)
            for lin in ("linear1", "linear2"):
                _copy_linear(getattr(ours.feed_forward, lin), getattr(theirs, lin))
            names = ("norm2", "norm1", "norm3") if swap_norms else ("norm1", "norm2", "norm3")
            for mine, yours in zip(("norm1", "norm2", "norm3"), names):
                _copy_norm(getattr(ours, yours), getattr(theirs, mine))
    return _Translator(model, core, **forward_options)


def to_torch_transformer(model):
    return _convert(model)


def _conversion(**options):
    def fn(model):
        return _convert(model, **options)

    fn.__name__ = "_".join(options)
    return fn


def modifies_the_model(model):
    with torch.no_grad():
        model.generator.weight.mul_(1.0)
        model.generator.bias.add_(1.0)
    return _convert(model)


def float_causal_mask(model):
    """PyTorch's own causal mask (floats, -inf above the diagonal) and the stacks' final norms as nn.Identity."""
    converted = _convert(model, keep_final_norms=True)
    converted.core.encoder.norm, converted.core.decoder.norm = nn.Identity(), nn.Identity()

    def forward(src, tgt):
        x = converted.positional_encoding(converted.src_embed(src) * math.sqrt(converted.d_model))
        y = converted.positional_encoding(converted.tgt_embed(tgt) * math.sqrt(converted.d_model))
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))  # (L, L) floats
        src_pad = (src == converted.pad_id).float().masked_fill(src == converted.pad_id, float("-inf"))
        tgt_pad = (tgt == converted.pad_id).float().masked_fill(tgt == converted.pad_id, float("-inf"))
        return converted.generator(converted.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad,
                                                  tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad))

    converted.forward = forward
    return converted


def separate_stacks(model):
    """nn.TransformerEncoder and nn.TransformerDecoder without nn.Transformer, filled with load_state_dict."""
    reference = _convert(model)  # only to borrow a state dict with PyTorch's names

    class Stacks(nn.Module):
        def __init__(self):
            super().__init__()
            layer = model.encoder_layers[0]
            d, h = model.d_model, layer.self_attn.num_heads
            d_ff = layer.feed_forward.linear1.out_features
            self.translator = copy.deepcopy(reference)
            rate = model.positional_encoding.dropout.p
            enc = nn.TransformerEncoderLayer(d, h, d_ff, dropout=rate, batch_first=True)
            dec = nn.TransformerDecoderLayer(d, h, d_ff, dropout=rate, batch_first=True)
            self.encoder = nn.TransformerEncoder(enc, len(model.encoder_layers), enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(dec, len(model.decoder_layers))
            self.encoder.load_state_dict({k[len("encoder."):]: v for k, v in reference.core.state_dict().items()
                                          if k.startswith("encoder.")})
            self.decoder.load_state_dict({k[len("decoder."):]: v for k, v in reference.core.state_dict().items()
                                          if k.startswith("decoder.")})
            del self.translator.core  # only the embeddings, positional encoding and generator stay

        def forward(self, src, tgt):
            t = self.translator
            x = t.positional_encoding(t.src_embed(src) * math.sqrt(t.d_model))
            y = t.positional_encoding(t.tgt_embed(tgt) * math.sqrt(t.d_model))
            src_pad = src == t.pad_id
            causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1)).isinf()  # True above the diagonal
            memory = self.encoder(x, src_key_padding_mask=src_pad)
            out = self.decoder(y, memory, tgt_mask=causal, tgt_key_padding_mask=tgt == t.pad_id,
                               memory_key_padding_mask=src_pad)
            return t.generator(out)

    return Stacks()


def no_memory_padding_mask(model):
    """Forgets memory_key_padding_mask: the cross-attention reads the padded source positions."""
    converted = _convert(model)

    def forward(src, tgt):
        x = converted.positional_encoding(converted.src_embed(src) * math.sqrt(converted.d_model))
        y = converted.positional_encoding(converted.tgt_embed(tgt) * math.sqrt(converted.d_model))
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).triu(1)
        out = converted.core(x, y, tgt_mask=causal, src_key_padding_mask=src == converted.pad_id,
                             tgt_key_padding_mask=tgt == converted.pad_id)
        return converted.generator(out)

    converted.forward = forward
    return converted


def subclassed(model):
    """A subclass of nn.Transformer that carries the embeddings itself; the causal mask from PyTorch's helper."""

    class Full(nn.Transformer):
        def forward(self, src, tgt):
            x = self.pe(self.src_embed(src) * math.sqrt(self.d_model))
            y = self.pe(self.tgt_embed(tgt) * math.sqrt(self.d_model))
            causal = self.generate_square_subsequent_mask(tgt.size(1), dtype=torch.float32)  # floats, -inf above
            out = super().forward(x, y, tgt_mask=causal, src_key_padding_mask=src == self.pad_id,
                                  tgt_key_padding_mask=tgt == self.pad_id, memory_key_padding_mask=src == self.pad_id)
            return self.generator(out)

    layer = model.encoder_layers[0]
    full = Full(model.d_model, layer.self_attn.num_heads, len(model.encoder_layers), len(model.decoder_layers),
                layer.feed_forward.linear1.out_features, dropout=model.positional_encoding.dropout.p, batch_first=True)
    full.encoder.norm, full.decoder.norm = None, None
    full.pad_id = model.pad_id
    full.src_embed, full.tgt_embed = copy.deepcopy(model.src_embed), copy.deepcopy(model.tgt_embed)
    full.pe, full.generator = copy.deepcopy(model.positional_encoding), copy.deepcopy(model.generator)
    reference = _convert(model)
    full.load_state_dict(reference.core.state_dict(), strict=False)
    return full


def shares_the_embeddings(model):
    """Keeps the model's own embedding modules: one optimizer step on the copy would change the model."""
    converted = _convert(model)
    converted.src_embed, converted.tgt_embed = model.src_embed, model.tgt_embed
    return converted


def relu_as_a_lambda(model):
    """A ReLU given as a function of its own: what it computes is what counts."""
    converted = _convert(model)
    for layer in [*converted.core.encoder.layers, *converted.core.decoder.layers]:
        layer.activation = lambda x: F.relu(x)
    return converted


def positions_without_dropout(model):
    """The positional encoding's dropout left out of the copy (as when pe is added by hand)."""
    converted = _convert(model)
    converted.positional_encoding.dropout = nn.Identity()
    return converted


def positions_with_a_new_dropout(model):
    converted = _convert(model)
    converted.positional_encoding.dropout = nn.Dropout(0.1)  # the usual rate, not the model's
    return converted


def norms_with_a_large_eps(model):
    converted = _convert(model)
    for layer in [*converted.core.encoder.layers, *converted.core.decoder.layers]:
        for norm in (m for m in layer.modules() if isinstance(m, nn.LayerNorm)):
            norm.eps = 1e-3
    return converted


def puts_the_model_in_training_mode(model):
    model.train()
    return _convert(model)


def delegates_to_a_copy(model):
    """Fills nn.Transformer, then computes with a copy of the learner's model: nn.Transformer never runs."""
    converted = _convert(model)
    twin = copy.deepcopy(model)
    converted.forward = lambda src, tgt: twin(src, tgt)
    return converted


TT_CORRECT = [to_torch_transformer, float_causal_mask, separate_stacks, subclassed, relu_as_a_lambda]
TT_WRONG = [
    (_conversion(order=("W_k", "W_q", "W_v")), ["wrong order"]),
    (_conversion(transpose=True), ["transposed"]),
    (_conversion(keep_final_norms=True), ["final layernorm", "encoder.norm = none"]),
    (_conversion(norm_first=True), ["norm_first"]),
    (_conversion(activation="gelu"), ["activation"]),
    (_conversion(swap_norms=True), ["norm1 should hold your norm1 (it holds your norm2)"]),
    (_conversion(flip_masks=True), ["opposite of ours"]),
    (_conversion(no_causal=True), ["opposite of ours"]),
    (_conversion(scale=False), ["input of the first encoder layer", "sqrt(d_model)"]),
    (modifies_the_model, ["changed the weights of your model"]),
    (lambda model: model, ["nn.transformerencoderlayer"]),
    (no_memory_padding_mask, ["memory_key_padding_mask"]),
    # issue 17
    (shares_the_embeddings, ["shares", "src_embed.weight", "copy"]),
    (_conversion(heads_from="d_k"), ["num_heads", "6", "4"]),
    (_conversion(dropout=0.1), ["dropout", "0.25"]),
    # a second hidden set
    (positions_without_dropout, ["training mode", "applies no dropout on the embeddings plus positions",
                                 "positional encoding's dropout"]),
    (positions_with_a_new_dropout, ["1 / (1 - 0.10)", "1 / (1 - 0.25)", "new nn.Dropout"]),
    (delegates_to_a_copy, ["ran 0 times", "not a copy of your model"]),
    (norms_with_a_large_eps, ["eps = 0.001", "layer_norm_eps"]),
    (puts_the_model_in_training_mode, ["changed the mode of your model"]),
]


@pytest.mark.parametrize("fn", TT_CORRECT, ids=[fn.__name__ for fn in TT_CORRECT])
def test_to_torch_transformer_accepts_correct_variants(fn):
    result = check_to_torch_transformer(fn)
    assert result.passed, f"{fn.__name__}:\n{result}"


@pytest.mark.parametrize("fn, phrases", TT_WRONG, ids=[str(i) for i in range(len(TT_WRONG))])
def test_to_torch_transformer_diagnoses_mistakes(fn, phrases):
    result = check_to_torch_transformer(fn)
    expect(result, "failed", *phrases)


def test_to_torch_transformer_stub_is_not_attempted():
    expect(check_to_torch_transformer(stub), "not attempted")
