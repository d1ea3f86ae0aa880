"""The catalogue of check_decode_step: correct key/value caches of every style, and wrong ones with their messages."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import expect

from course_utils.checks.cache import check_decode_step

def _heads(x, attn):
    B, L, _ = x.shape
    return x.view(B, L, attn.num_heads, attn.d_k).transpose(1, 2)  # (B, H, L, d_k)


def _merge(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, d_model)


def _attend(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _kv_step(model, y_last, memory, src, cache, *, cross_every_step=False, recompute_prefix=False,
             cache_on_model=False, heads_first=False, keep_length_dim=False, cross_from_self=False, self_excluded=False,
             empty_on_the_cpu=False, no_embedding_dropout=False, no_self_dropout=False, no_self_wo=False, cat_dim=2,
             memory_once=False, one_dict=False, pe_column=False, values_lost=False, pad_zero=False):
    """A decode_step of the learner's style; the flags make mistakes that are not slips of the checker's table (its
    slips are made into answers and tried by tests/test_slips.py)."""
    state = model.__dict__.setdefault("_my_cache", {}) if cache_on_model else cache
    t = state.get("length", 0)
    src_mask = (src != (0 if pad_zero else model.pad_id))[:, None, None, :]  # (B, 1, 1, L_src)
    pe = model.positional_encoding.pe
    x = model.tgt_embed(y_last) * math.sqrt(model.d_model) + (pe[:, t] if pe_column else pe[t])  # (B, 1, d_model)
    x = x if no_embedding_dropout else model.positional_encoding.dropout(x)
    if recompute_prefix:  # caches the decoder's input tokens and reruns every layer on the whole prefix
        state["tokens"] = torch.cat([state["tokens"], y_last], 1) if "tokens" in state else y_last
        logits = model.decode(state["tokens"], memory, src)
        state["length"] = t + 1
        return logits[:, -1], cache
    layers = state.setdefault("layers", [dict() for _ in model.decoder_layers])
    layers = [layers[0]] * len(layers) if one_dict else layers  # one dict for every layer: self and memory both
    for layer, kv in zip(model.decoder_layers, layers):
        a, c = layer.self_attn, layer.cross_attn
        q, k, v = _heads(a.W_q(x), a), _heads(a.W_k(x), a), _heads(a.W_v(x), a)  # (B, H, 1, d_k)
        if heads_first:
            k, v = k.transpose(0, 1), v.transpose(0, 1)  # (H, B, 1, d_k): rows not first
        if empty_on_the_cpu and "k" not in kv:  # torch.empty(...) without device=: on the CPU
            kv["k"] = kv["v"] = torch.empty(k.size(0), k.size(1), 0, k.size(3))
        if "k" in kv:
            cached_v = torch.zeros_like(kv["v"]) if values_lost else kv["v"]  # the earlier values lost
            k, v = torch.cat([kv["k"], k], dim=cat_dim), torch.cat([cached_v, v], dim=cat_dim)
        kv["k"], kv["v"] = k, v
        if heads_first:
            k, v = k.transpose(0, 1), v.transpose(0, 1)
        mask = None
        if self_excluded and k.size(2) > 1:  # the newest token attends to the cached ones, not to itself
            mask = (torch.arange(k.size(2)) < k.size(2) - 1)[None, :]  # (1, t + 1)
        attended = _merge(_attend(q, k, v, mask))
        attended = attended if no_self_wo else a.W_o(attended)
        attended = attended if no_self_dropout else layer.dropout(attended)
        x = layer.norm1(x + attended)
        if memory_once:  # memory's keys and values computed once for the whole cache, in the first layer's entry
            if "memory_done" not in state:
                kv["mk"], kv["mv"] = _heads(c.W_k(memory), c), _heads(c.W_v(memory), c)
                state["memory_done"] = True
        elif "mk" not in kv or cross_every_step:
            source = x if cross_from_self else memory
            kv["mk"], kv["mv"] = _heads(c.W_k(source), c), _heads(c.W_v(source), c)  # (B, H, L_src, d_k)
        cross = layer.dropout(c.W_o(_merge(_attend(_heads(c.W_q(x), c), kv["mk"], kv["mv"],
                                                   None if cross_from_self else src_mask))))
        x = layer.norm2(x + cross)
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
        x = layer.norm1(x + layer.dropout(a.W_o(_merge(scores.softmax(-1) @ v))))
        mk, mv = (old[2], old[3]) if old is not None else (_heads(c.W_k(memory), c), _heads(c.W_v(memory), c))
        scores = (_heads(c.W_q(x), c) @ mk.transpose(-2, -1) / math.sqrt(c.d_k)).masked_fill(~mask, float("-inf"))
        x = layer.norm2(x + layer.dropout(c.W_o(_merge(scores.softmax(-1) @ mv))))
        x = layer.norm3(x + layer.dropout(layer.feed_forward(x)))
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
    x = F.dropout(x, model.positional_encoding.dropout.p, model.training)  # the module's rate, applied functionally
    keep = (src != model.pad_id)[:, None, None, :]
    keys, values = cache.get("keys", [[] for _ in run]), cache.get("values", [[] for _ in run])
    memory_kv = cache.get("memory") or [(_heads(project(memory, getattr(l, kv_from).W_k), l.cross_attn),
                                         _heads(project(memory, getattr(l, kv_from).W_v), l.cross_attn)) for l in run]
    for i, layer in enumerate(run):
        a, c = layer.self_attn, layer.cross_attn
        keys[i] = keys[i] + [_heads(project(x, a.W_k), a)]
        values[i] = values[i] + [_heads(project(x, a.W_v), a)]
        out = _attend(_heads(project(x, a.W_q), a), torch.cat(keys[i], 2), torch.cat(values[i], 2))
        x = layer.norm1(x + layer.dropout(project(_merge(out), a.W_o)))
        out = _attend(_heads(project(x, c.W_q), c), *memory_kv[i], keep)
        x = layer.norm2(x + layer.dropout(project(_merge(out), c.W_o)))
        x = layer.norm3(x + layer.dropout(layer.feed_forward(x)))
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


def norm1_left_out_in_the_first_layer(model, y_last, memory, src, cache):
    """Only layer 0 skips norm1: no slip of the table gives these logits, but the input of the first map that
    departs (layer 0's cross-attention query) is the slip's."""
    first = model.decoder_layers[0]
    norm, first.norm1 = first.norm1, torch.nn.Identity()
    try:
        return decode_step(model, y_last, memory, src, cache)
    finally:
        first.norm1 = norm


CORRECT = [decode_step, decode_step_tuples, decode_step_preallocated, decode_step_stacked, decode_step_functional]
WRONG = [
    (_kv_variant(cross_every_step=True), ["recomputed at every step"]),
    (_kv_variant(pad_zero=True), ["does not hide the source padding", "a fixed 0?"]),
    (_kv_variant(recompute_prefix=True), ["should see exactly one"]),
    (_kv_variant(cache_on_model=True), ["reordered"]),
    (_kv_variant(heads_first=True), ["first dimension"]),
    (_kv_variant(keep_length_dim=True), ["(b, v)"]),
    (lambda model, y_last, memory, src, cache: model.decode(y_last, memory, src)[:, -1], ["should return 2 values"]),
    (lambda model, y_last, memory, src, cache: (model.decode(y_last, memory, src)[:, -1], cache),
     ["differ from those of model.decode"]),
    # issue 17: one diagnosis per slip
    (_kv_variant(cross_from_self=True), ["cross-attention", "memory"]),
    (_kv_variant(self_excluded=True), ["self-attention", "itself"]),
    (_kv_variant(empty_on_the_cpu=True), ["creates a tensor on the cpu", "device=y_last.device"]),
    (steps_as_a_scalar_tensor, ["cache['steps']", "shape ()", "rows first", "python int"]),
    (steps_counted_on_the_model, ["two decodings at once", "step counter on the model"]),
    (memory_projected_again_for_a_new_tensor, ["projected memory again", "first step only"]),
    (lambda *a: decode_step_functional(*a, layers=lambda m: [m.decoder_layers[0]] * len(m.decoder_layers)),
     ["`decoder_layers[1].self_attn.w_q` was never called", "its own weights"]),
    (lambda *a: decode_step_functional(*a, layers=lambda m: m.decoder_layers[:-1]), ["`decoder_layers[1]` never ran"]),
    (lambda *a: decode_step_functional(*a, kv_from="self_attn"), ["cross_attn.w_k` was never called", "its own w_k"]),
    (_kv_variant(no_self_wo=True), ["`decoder_layers[0].self_attn.w_o` was never called", "attn.w_o(...)"]),
    # a sixth hidden set
    (_kv_variant(one_dict=True), ["`decoder_layers[1].cross_attn.w_k` was never called at step 0", "layer 0's",
                                  "one cache entry per layer"]),
    (_kv_variant(values_lost=True), ["query, key and value are right", "the earlier positions' own"]),
    (_kv_variant(no_embedding_dropout=True), ["training mode", "`model.positional_encoding.dropout`"]),
    (_kv_variant(no_self_dropout=True), ["training mode", "`model.decoder_layers.0.dropout`", "norm1(x + dropout("]),
    # issue 30: a slip of the table in one layer only, named where the step departs
    (norm1_left_out_in_the_first_layer, ["Likely cause: the first sublayer's LayerNorm is missing"]),
]


@pytest.mark.parametrize("fn", CORRECT, ids=[fn.__name__ for fn in CORRECT])
def test_decode_step_accepts_correct_variants(fn):
    result = check_decode_step(fn)
    assert result.passed, f"{fn.__name__}:\n{result}"


@pytest.mark.parametrize("fn, phrases", WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_decode_step_diagnoses_mistakes(fn, phrases):
    result = check_decode_step(fn)
    expect(result, "failed", *phrases)


CRASHES = [
    (_kv_variant(cat_dim=1), ["the cache grows along the positions", "dim=2"]),
    (_kv_variant(pe_column=True), ["length of the positional table", "`pe[t]`", "`pe[:, t]` is a column"]),
    (_kv_variant(memory_once=True), ["read 'mk' from a dict that does not hold it",
                                     "each decoder layer needs entries of its own"]),
]


@pytest.mark.parametrize("fn, phrases", CRASHES, ids=["cat on the heads", "pe[:, t]", "memory once for all layers"])
def test_a_decode_step_that_crashes_is_told_why_before_its_inputs(fn, phrases):
    result = check_decode_step(fn)
    expect(result, "error", *phrases)
    message = result.messages[0]
    assert message.index(phrases[-1]) < message.index("It was called with"), "the diagnosis comes first"


def stub(*args, **kwargs):
    raise NotImplementedError()


def test_decode_step_stub_is_not_attempted():
    expect(check_decode_step(stub), "not attempted")
