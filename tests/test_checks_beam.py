"""The catalogue of check_beam_search: correct searches of every style, and wrong ones with their messages."""

from __future__ import annotations

import heapq
import random

import pytest
import torch

from course_utils.checks.beam import check_beam_search
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
# Wrong implementations: the batched search with one mistake each. The known slips of the checker's oracle (its
# SLIPS) are not here: tests/test_slips.py makes each into an answer and requires its own message. These are the
# mistakes it finds otherwise, by what the model was asked (the rows, the prefixes, the calls) and by the answers.


def _batched(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6, *, finished_penalty=_gnmt,
             extend_finished=False, encode_each_step=False, grad=False, tile_memory=False, mix_rows=False,
             early_stop=True, reverse_rows=False, cpu_tensors=False, mask_specials=False, end_power=True,
             batch_bound=False, without_eos=False, one_step_short=False, index_by_k=False, finished_row="beam",
             shared_list=False):
    B, k = src.size(0), beam_size
    device = None if cpu_tensors else src.device  # None: the default device, the CPU
    with torch.set_grad_enabled(grad):
        memory = model.encode(src)
        memory = memory.repeat(k, 1, 1) if tile_memory else memory.repeat_interleave(k, dim=0)
        src_k = src.repeat_interleave(k, dim=0)
        ys = torch.full((B * k, 1), bos_id, dtype=torch.long, device=device)
        scores = torch.full((B, k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        finished = [[]] * B if shared_list else [[] for _ in range(B)]
        done = [False] * B
        offsets = torch.arange(B, device=device).unsqueeze(1) * k
        for t in range(1, max_len - 1 if one_step_short else max_len):
            if encode_each_step:
                memory = model.encode(src).repeat_interleave(k, dim=0)
            logits = model.decode(ys, memory, src_k)[:, -1]
            if mask_specials:  # BOS and padding can never be generated
                logits = logits.index_fill(-1, torch.tensor([bos_id, pad_id], device=logits.device), float("-inf"))
            step = logits.log_softmax(-1)
            V = step.size(-1)
            candidates = (scores.unsqueeze(-1) + step.view(B, k, V)).view(B, k * V)
            top_scores, top_index = candidates.topk(2 * k, dim=-1)
            beam, token = top_index // V, top_index % V
            if index_by_k:  # the flat index split by the beam size instead of the vocabulary size
                beam, token = top_index % k, top_index // k
            is_eos = token == eos_id
            if extend_finished:
                is_eos = torch.zeros_like(is_eos)
            for b, j in is_eos[:, :k].nonzero().tolist():
                if not done[b]:
                    row = {"beam": beam[b, j], "rank": j, "index // k": top_index[b, j] // k % k}[finished_row]
                    seq = ys[b * k + row].tolist() + ([] if without_eos else [eos_id])
                    finished[b].append((top_scores[b, j].item() / finished_penalty(t, length_penalty), seq))
            keep = is_eos.long().argsort(dim=1, stable=True)[:, :k]
            scores = top_scores.gather(1, keep)
            rows = (beam.gather(1, keep) + offsets).view(-1)
            if mix_rows:  # rows counted beam-major, as if the beams of all sentences were stacked beam by beam
                rows = (beam.gather(1, keep) * B + torch.arange(B, device=device).unsqueeze(1)).view(-1)
            ys = torch.cat([ys[rows], token.gather(1, keep).view(-1, 1)], dim=1)
            if early_stop and not extend_finished:
                reach = scores.max(dim=1).values / _gnmt(max_len - 1, length_penalty)
                if batch_bound:  # the best open score of the whole batch, for every sentence
                    reach = scores.max().expand(B) / _gnmt(max_len - 1, length_penalty)
                for b in range(B):
                    if finished[b] and max(f[0] for f in finished[b]) >= reach[b].item():
                        done[b] = True
                if all(done):
                    break
        for b in range(B):
            if not done[b]:
                for j in range(k):
                    n = ys.size(1) - 1
                    penalty = _gnmt(n, length_penalty) if end_power else (5 + n) / 6  # without its power
                    finished[b].append((scores[b, j].item() / penalty, ys[b * k + j].tolist()))
        best = [max(f, key=lambda x: x[0])[1] for f in finished]
        if reverse_rows:
            best = best[::-1]
        out = torch.full((B, max(len(s) for s in best)), pad_id, dtype=torch.long, device=device)
        for b, seq in enumerate(best):
            out[b, : len(seq)] = torch.tensor(seq, device=device)
        return out


def _variant_of(**options):
    def fn(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6):
        return _batched(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty, **options)

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
    (_variant_of(finished_penalty=lambda n, a: _gnmt(n + 1, a)), ["its length n is off by one", "len(tokens) - 1"]),
    (_variant_of(extend_finished=True), ["kept in the beam"]),
    (_variant_of(index_by_k=True), ["not the candidates that topk picked", "`i // v`", "`i % v`"]),
    (_variant_of(tile_memory=True), ["memory and src belong to different sentences"]),
    (_variant_of(mix_rows=True), ["mixed"]),
    (_variant_of(without_eos=True), ["without its eos"]),
    (_variant_of(one_step_short=True), ["one before max_len", "range(1, max_len)"]),
    (_variant_of(batch_bound=True), ["was certain after", "its own best open score"]),
    (_variant_of(reverse_rows=True), ["wrong order"]),
    (_variant_of(encode_each_step=True), ["encoder should run once"]),
    (calls_forward, ["encoder should run once"]),
    (_variant_of(grad=True), ["no_grad"]),
    (_variant_of(early_stop=False), ["no open hypothesis could still beat"]),
    (_variant_of(cpu_tensors=True), ["src.device"]),
    (never_stops, ["does not stop at max_len"]),
    (output_on_cpu, ["returns its output on the cpu"]),
    # the output's layout (issue 17's stop rules, end at max_len and final pick are slips: tests/test_slips.py)
    (drops_bos, ["column 0"]),
    (all_beams, ["only the best of the beam_size hypotheses"]),
    # a second hidden set: the open hypotheses at max_len divided by (5 + n) / 6 without its power (equal to the
    # contract for alpha = 1, and for alpha < 1 on every case tried), and a default penalty other than the paper's
    (_variant_of(end_power=False), ["length_penalty=2.0", "length-normalised score", "** length_penalty"]),
    (lambda model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=1.0: beam_search(
        model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty), ["default of length_penalty is 1.0"]),
    # a sixth hidden set
    (_variant_of(finished_penalty=lambda n, a: _gnmt(n - 1, a)), ["if its length n is off by one", "leaves out eos"]),
    (_variant_of(finished_row="rank"), ["read from another row of ys", "index // v", "rank"]),
    (_variant_of(finished_row="index // k"), ["read from another row of ys", "index // v"]),
    # a seventh hidden set: one list of finished hypotheses for every sentence; a cache that outlives the call
    (_variant_of(shared_list=True), ["every row of your output is the same hypothesis", "[[] for _ in range(b)]"]),
    (lambda model, src, *args, _memo={}, **kwargs: _memo.setdefault(  # noqa: B006  the slip itself
        (id(model), tuple(src.shape)), beam_search(model, src, *args, **kwargs)),
     ["second batch of the same shape", "first batch's translations again", "kept from one call to the next"]),
    # a search that switches the model to training mode: dropout would change every translation
    (lambda model, *args, **kwargs: beam_search(model.train(), *args, **kwargs), ["training mode", "model.train()"]),
    (lambda model, *args, **kwargs: (beam_search(model.eval(), *args, **kwargs), model.train())[0],
     ["hands the model back in training mode"]),
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


def test_a_search_that_reads_more_of_the_model_than_the_contract_is_told_what_it_may_use():
    """Lesson 07 decodes through CachedDecoder, which has no generator: the crash names what the model offers."""
    def reads_the_generator(model, *args, **kwargs):
        model.generator
        return beam_search(model, *args, **kwargs)

    expect(check_beam_search(reads_the_generator), "error", "no attribute `generator`", "cacheddecoder",
           "logits.size(-1)")


def test_the_real_device_pass_runs(monkeypatch):
    """Where cuda or mps exists the search runs there too; here the CPU stands in for it, to run that code."""
    from course_utils.checks.stages import gpu as _gpu

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
