"""check_scaled_dot_product_attention: correct variants pass, each known mistake gets its diagnosis."""

import math
import pytest
import torch
import torch.nn.functional as F

from helpers import expect
from course_utils.checks import check_scaled_dot_product_attention as check

# --------------------------------------------------------------------------
# Correct implementations, in different styles.


def reference(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value), weights


def with_minus_1e9(query, key, value, mask=None):
    scores = query @ key.mT / query.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = F.softmax(scores, dim=-1)
    return weights @ value, weights


def with_einsum_and_where(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) * query.size(-1) ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


def with_additive_mask(query, key, value, mask=None):
    query = query / math.sqrt(query.size(-1))  # scale first (out of place)
    scores = query @ key.transpose(-1, -2)
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        bias = bias.masked_fill(mask.logical_not(), float("-inf"))
        scores = scores + bias
    weights = torch.softmax(scores, dim=scores.dim() - 1)
    return weights @ value, weights


def with_fused_kernel(query, key, value, mask=None):
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    scores = query @ key.transpose(-2, -1) / math.sqrt(key.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -1e4)
    return output, torch.softmax(scores, dim=-1)


def by_hand_stable(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ value, weights


def mask_then_renormalise(query, key, value, mask=None):
    # softmax, zero the masked entries, renormalise: equal to a masked softmax
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    if mask is not None:
        weights = weights * mask
        weights = weights / weights.sum(-1, keepdim=True)
    return weights @ value, weights


def returns_list(query, key, value, mask=None):
    return list(reference(query, key, value, mask))


def in_float64_cast_back(query, key, value, mask=None):
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1, dtype=torch.float64)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


def with_baddbmm(query, key, value, mask=None):
    lead, L_q, L_k = query.shape[:-2], query.size(-2), key.size(-2)
    q = query.reshape(-1, L_q, query.size(-1))  # (N, L_q, d_k)
    k = key.reshape(-1, L_k, key.size(-1))
    v = value.reshape(-1, L_k, value.size(-1))
    bias = q.new_zeros(q.size(0), L_q, L_k)  # on query's device, in its dtype
    if mask is not None:
        bias = bias.masked_fill(~mask.expand(*lead, L_q, L_k).reshape(-1, L_q, L_k), float("-inf"))
    scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=1 / math.sqrt(q.size(-1)))
    weights = scores.softmax(-1)
    return torch.bmm(weights, v).reshape(*lead, L_q, -1), weights.reshape(*lead, L_q, L_k)


def log_sum_exp(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
    return weights @ value, weights


def additive_minus_1e9(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + (1 - mask.float()) * -1e9  # 0 where allowed, -1e9 where hidden
    weights = scores.softmax(-1)
    return weights @ value, weights


def einsum_per_head_loop(query, key, value, mask=None):
    # one (batch, head) pair at a time, over whatever leading dimensions there are
    lead = query.shape[:-2]
    q = query.reshape(-1, *query.shape[-2:])  # (N, L_q, d_k)
    k = key.reshape(-1, *key.shape[-2:])
    v = value.reshape(-1, *value.shape[-2:])
    m = None if mask is None else mask.expand(*lead, query.size(-2), key.size(-2)).reshape(-1, q.size(1), k.size(1))
    outs, ws = [], []
    for n in range(q.size(0)):
        s = torch.einsum("qd,kd->qk", q[n], k[n]) / math.sqrt(q.size(-1))
        if m is not None:
            s = s.masked_fill(~m[n], float("-inf"))
        w = s.softmax(-1)
        outs.append(w @ v[n])
        ws.append(w)
    return torch.stack(outs).reshape(*lead, q.size(1), -1), torch.stack(ws).reshape(*lead, q.size(1), k.size(1))


def fill_with_finfo_min_of_dtype(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) * (1.0 / math.sqrt(query.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def scalar_tensor_fill(query, key, value, mask=None):
    # a 0-d CPU tensor may take part in GPU operations: this is fine on every device
    scores = query @ key.transpose(-2, -1) / torch.tensor(query.size(-1)).sqrt()
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


CORRECT = [einsum_per_head_loop, fill_with_finfo_min_of_dtype, scalar_tensor_fill, additive_minus_1e9, reference, with_minus_1e9, with_einsum_and_where, with_additive_mask, with_fused_kernel,
           by_hand_stable, mask_then_renormalise, returns_list, in_float64_cast_back, with_baddbmm, log_sum_exp]


@pytest.mark.parametrize("impl", CORRECT, ids=lambda f: f.__name__)
def test_correct_implementations_pass(impl):
    expect(check(impl), "passed")


def test_stub_is_not_attempted():
    def stub(query, key, value, mask=None):
        # YOUR CODE HERE
        raise NotImplementedError()

    expect(check(stub), "not attempted", "NotImplementedError")


# --------------------------------------------------------------------------
# Wrong implementations, each with the words of its diagnosis.


def _sdpa(scale=None, fill=float("-inf"), dim=-1, invert=False, after=False, key_fn=None, out_value=True,
          return_scores=False, stable=True):
    """Build a variant of the reference with one knob turned."""

    def impl(query, key, value, mask=None):
        d_k = query.size(-1)
        k_t = key_fn(key) if key_fn else key.transpose(-2, -1)
        scores = query @ k_t * (scale(query, key, value) if scale else 1 / math.sqrt(d_k))
        m = None if mask is None else (mask if not invert else ~mask)
        if m is not None and not after:
            scores = scores.masked_fill(~m, fill)
        if stable:
            weights = torch.softmax(scores, dim=dim)
        else:
            weights = scores.exp() / scores.exp().sum(dim, keepdim=True)
        if m is not None and after:
            weights = weights.masked_fill(~m, fill)
        out = weights @ (value if out_value else key)
        return out, (scores if return_scores else weights)

    return impl


def only_output(query, key, value, mask=None):
    return reference(query, key, value, mask)[0]


def detached_weights(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    return out, w.detach()  # "the weights are only for plotting": lesson 04 trains through them


def swapped_order(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    return w, out


def forgot_to_assign(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores.masked_fill(mask == 0, -1e9)  # result discarded
    w = torch.softmax(scores, dim=-1)
    return w @ value, w


def multiplies_by_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores * mask
    w = torch.softmax(scores, dim=-1)
    return w @ value, w


def unsqueezes_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
    w = torch.softmax(scores, dim=-1)
    return w @ value, w


def output_ignores_mask(query, key, value, mask=None):
    _, w = reference(query, key, value, mask)
    return F.scaled_dot_product_attention(query, key, value), w


def kv_mixed_in_scores(query, key, value, mask=None):
    scores = query @ value.transpose(-2, -1) / math.sqrt(query.size(-1))
    w = torch.softmax(scores, dim=-1)
    return w @ key, w


def in_place_scale(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    w = torch.softmax(query @ key.transpose(-2, -1), dim=-1)
    return w @ value, w


def with_dropout(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    w = F.dropout(w, p=0.5, training=True)
    return w @ value, w


def returns_nan(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    return out / 0 * 0, w


def four_d_only(query, key, value, mask=None):
    scores = query @ key.permute(0, 1, 3, 2) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ value, w


def mask_named_differently(query, key, value, attn_mask=None):
    return reference(query, key, value, attn_mask)


def weights_detached(query, key, value, mask=None):
    _, w = reference(query, key, value, mask)
    w = w.detach()
    return w @ value, w


def under_no_grad(query, key, value, mask=None):
    with torch.no_grad():
        return reference(query, key, value, mask)


def returns_float64(query, key, value, mask=None):
    return reference(query.double(), key.double(), value.double(), mask)


def half_precision_inside(query, key, value, mask=None):
    out, w = reference(query.half(), key.half(), value.half(), mask)
    return out.float(), w.float()


def log_softmax_weights(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = F.log_softmax(scores, dim=-1)
    return w.exp() @ value, w


def precedence_scale(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / (d_k ** 1 / 2)  # (d_k ** 1) / 2, not sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    return w @ value, w


def weights_before_mask(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    unmasked = scores.softmax(-1)
    out, _ = reference(query, key, value, mask)
    return out, unmasked


def first_batch_mask(query, key, value, mask=None):
    if mask is not None and mask.dim() >= 3:
        mask = mask[:1]  # right only when the batch has one element
    return reference(query, key, value, mask)


def causal_when_square(query, key, value, mask=None):
    L_q, L_k = query.size(-2), key.size(-2)
    if mask is None and L_q == L_k:
        mask = torch.ones(L_q, L_k, dtype=torch.bool).tril()
    return reference(query, key, value, mask)


def transposed_when_square(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    return out, (w.transpose(-2, -1) if w.size(-1) == w.size(-2) else w)


def output_divided_by_sqrt_dk(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    return out / math.sqrt(query.size(-1)), w


# -- issue 9: fresh mistakes (fill values, caches, devices, sizes, dtypes) -----------------



def float64_weights_returned(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1, dtype=torch.float64)  # kept in float64: lesson 04 then mixes dtypes
    return weights.to(value.dtype) @ value, weights

def cpu_additive_bias(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # created on the CPU
        scores = scores + bias
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def cpu_baddbmm(query, key, value, mask=None):
    lead, L_q, L_k = query.shape[:-2], query.size(-2), key.size(-2)
    q = query.reshape(-1, L_q, query.size(-1))  # (N, L_q, d_k)
    k = key.reshape(-1, L_k, key.size(-1))
    v = value.reshape(-1, L_k, value.size(-1))
    bias = torch.zeros(q.size(0), L_q, L_k, dtype=q.dtype)  # always on the CPU
    if mask is not None:
        bias = bias.masked_fill(~mask.expand(*lead, L_q, L_k).reshape(-1, L_q, L_k), float("-inf"))
    weights = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=1 / math.sqrt(q.size(-1))).softmax(-1)
    return torch.bmm(weights, v).reshape(*lead, L_q, -1), weights.reshape(*lead, L_q, L_k)


def returns_cpu_tensors(query, key, value, mask=None):
    out, w = reference(query, key, value, mask)
    return out.cpu(), w.cpu()


_SCALE = {}


def cached_scale(query, key, value, mask=None):
    if "scale" not in _SCALE:
        _SCALE["scale"] = 1 / math.sqrt(query.size(-1))  # computed once, for the first d_k seen
    scores = query @ key.transpose(-2, -1) * _SCALE["scale"]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ value, weights


_TABLE = torch.zeros(50, 50)  # an additive bias table for up to 50 positions


def fixed_size_bias(query, key, value, mask=None):
    L_q, L_k = query.size(-2), key.size(-2)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)) + _TABLE[..., :L_q, :L_k]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ value, weights


def bias_in_default_dtype(query, key, value, mask=None):
    bias = torch.zeros(query.shape[:-2] + (query.size(-2), key.size(-2)), device=query.device)  # always float32
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    scores = torch.baddbmm(bias.flatten(0, -3), query.flatten(0, -3), key.flatten(0, -3).transpose(1, 2),
                           alpha=query.size(-1) ** -0.5)
    weights = scores.softmax(-1).reshape(bias.shape)
    return weights @ value, weights


def casts_to_float32(query, key, value, mask=None):
    out, w = reference(query.float(), key.float(), value.float(), mask)
    return out, w


def softmax_in_float32_cast_back(query, key, value, mask=None):
    """Returns float64 for float64 inputs, but its softmax ran in float32: wrong by about 1e-8."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).type_as(scores)
    return weights @ value, weights


def mask_times_minus_inf(query, key, value, mask=None):
    """(~mask) * -inf: 0 * -inf is NaN where the mask is True."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + (~mask) * float("-inf")
    weights = scores.softmax(-1)
    return weights @ value, weights


def weights_in_float32(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1)
    return (weights @ value.float()).to(query.dtype), weights


def wrong_arity(query, key):
    return reference(query, key, key)


def returns_generator(query, key, value, mask=None):
    return (t for t in reference(query, key, value, mask))


# the crash hints: these mistakes make the learner's code raise, so the result is an "error" with a hint
CRASH_HINTS = ("works on 2-D inputs", "works on 3-D inputs", "works when L_q == L_k", "expected shapes", "worked on 4-d inputs", "positionally",
               "works for short sequences", "typeerror",
               "works with float32 inputs")

WRONG = [
    ("only output", only_output, ["should return 2 values", "(output, weights)"]),
    ("swapped", swapped_order, ["wrong order", "return output, weights"]),
    ("no softmax", _sdpa(return_scores=True), ["softmax is missing"]),
    ("softmax over queries", _sdpa(dim=-2), ["do not sum to 1", "dim -2", "query axis"]),
    ("softmax over heads", _sdpa(dim=1), ["do not sum to 1", "dim -3", "dim=1: the head axis", "wrong dimension"]),
    ("no scale", _sdpa(scale=lambda q, k, v: 1.0), ["without any scaling"]),
    ("divide by d_k", _sdpa(scale=lambda q, k, v: 1 / q.size(-1)), ["divided by d_k instead of sqrt(d_k)"]),
    ("multiply by sqrt d_k", _sdpa(scale=lambda q, k, v: math.sqrt(q.size(-1))), ["multiplied by sqrt(d_k)"]),
    ("sqrt d_v", _sdpa(scale=lambda q, k, v: 1 / math.sqrt(v.size(-1))), ["sqrt(d_v)"]),
    ("sqrt L_k", _sdpa(scale=lambda q, k, v: 1 / math.sqrt(k.size(-2))), ["sqrt(L_k)"]),
    ("hard-coded sqrt 64", _sdpa(scale=lambda q, k, v: 1 / 8), ["multiplied by 0.1250", "1/sqrt(d_k) = 0.4082"]),
    ("inverted mask", _sdpa(invert=True), ["polarity", "inverted", "True means 'may attend'"]),
    ("inverted mask -1e9", _sdpa(invert=True, fill=-1e9), ["polarity", "inverted"]),
    ("mask after softmax (0)", _sdpa(after=True, fill=0.0), ["after the softmax"]),
    ("mask after softmax (-inf)", _sdpa(after=True), ["after the softmax"]),
    ("mask after softmax (-1e9)", _sdpa(after=True, fill=-1e9), ["after the softmax"]),
    ("fill with 0", _sdpa(fill=0.0), ["not 0", "large negative number"]),
    ("multiply by mask", multiplies_by_mask, ["not 0", "multiplied by the mask"]),
    ("masked_fill not assigned", forgot_to_assign, ["mask is ignored", "assign it back"]),
    ("mask unsqueezed", unsqueezes_mask, ["more axes", "unsqueeze"]),
    ("output without mask", output_ignores_mask, ["output", "without the mask"]),
    ("weights @ key", _sdpa(out_value=False), ["the output has the wrong shape", "instead of `value`"]),
    ("key and value swapped", kv_mixed_in_scores, ["works when L_q == L_k", "`key` and `value`"]),
    ("key.T", _sdpa(key_fn=lambda k: k.T), ["works on 2-D inputs", "key.transpose(-2, -1)"]),
    ("key.transpose(0, 1)", _sdpa(key_fn=lambda k: k.transpose(0, 1)), ["works on 2-D inputs", "wrong axes of `key`"]),
    ("key not transposed", _sdpa(key_fn=lambda k: k), ["works when L_q == L_k", "`key` not transposed"]),
    ("key.transpose(1, 2)", _sdpa(key_fn=lambda k: k.transpose(1, 2)), ["works on 3-D inputs", "Count from the end"]),
    ("4-D only", four_d_only, ["worked on 4-d inputs", "crashed on 3-d"]),
    ("unstable softmax", _sdpa(stable=False), ["large", "numerically unstable", "maximum"]),
    ("in-place scale", in_place_scale, ["changed its input `query` in place"]),
    ("dropout", with_dropout, ["different results for the same inputs", "dropout"]),
    ("NaN output", returns_nan, ["output contains", "nan"]),
    ("mask parameter name", mask_named_differently, ["positionally", "`mask`"]),
    ("weights detached", weights_detached, ["no gradient", "`query` and `key`", "detach"]),
    ("under no_grad", under_no_grad, ["does not require grad", "no_grad"]),
    ("returns float64", returns_float64, ["dtype torch.float64", "inputs are torch.float32"]),
    ("half precision inside", half_precision_inside, ["not within float32 precision", "half"]),
    ("log_softmax", log_softmax_weights, ["logarithms", "log_softmax"]),
    ("d_k ** 1 / 2", precedence_scale, ["d_k / 2", "precedence"]),
    ("fill -100", _sdpa(fill=-100.0), ["large scores", "not negative enough"]),
    ("weights before mask", weights_before_mask, ["output is right", "before the mask"]),
    ("first batch's mask", first_batch_mask, ["mask of the first batch element"]),
    ("causal when square", causal_when_square, ["same length", "causal mask on its own"]),
    ("transposed when square", transposed_when_square, ["do not sum to 1", "transposed"]),
    ("output scaled too", output_divided_by_sqrt_dk, ["output", "divided by sqrt(d_k)", "scores"]),
    ("scaled twice", _sdpa(scale=lambda q, k, v: 1 / q.size(-1)), ["sqrt(d_k) twice"]),
    ("additive mask inverted", _sdpa(invert=True, fill=-1e4), ["polarity is inverted"]),
    ("sqrt d_v, 3-D", _sdpa(scale=lambda q, k, v: 1 / math.sqrt(v.size(-1))), ["sqrt(d_v)", "d_k = 6"]),
    # issue 9
    ("fill +1e9", _sdpa(fill=1e9), ["large positive", "-1e9"]),
    ("fill +inf", _sdpa(fill=float("inf")), ["positive", "float('-inf')"]),
    ("fill 1e-9 (minus sign lost)", _sdpa(fill=1e-9), ["1e-9", "-1e9"]),
    ("fill finfo.max", _sdpa(fill=torch.finfo(torch.float32).max), ["large positive"]),
    ("CPU additive bias", cpu_additive_bias, ["cpu", "device=", "gpu"]),
    ("CPU bias in baddbmm", cpu_baddbmm, ["cpu", "device="]),
    ("returns CPU tensors", returns_cpu_tensors, ["cpu", "device"]),
    ("cached scale", cached_scale, ["earlier call", "d_k = 6"]),
    ("fixed-size bias table", fixed_size_bias, ["works for short sequences", "L_q = 64"]),
    ("float64 weights returned", float64_weights_returned, ["weights have dtype torch.float64", "lesson 04"]),
    ("bias in the default dtype", bias_in_default_dtype, ["works with float32 inputs", "dtype=query.dtype"]),
    ("casts to float32", casts_to_float32, ["float64", "keep the dtype"]),
    ("the mask times -inf", mask_times_minus_inf, ["mask that hides nothing", "0 * -inf", "masked_fill"]),
    ("softmax in float32, cast back", softmax_in_float32_cast_back, ["some step computes in float32", "gradcheck"]),
    ("wrong arity", wrong_arity, ["typeerror", "query, key, value, mask=None"]),
    ("returns a generator", returns_generator, ["should return 2 values", "generator"]),
    ("weights detached", detached_weights, ["cut off from autograd", "self.dropout(weights) @ v", "lesson 04"]),
]


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize("impl, phrases", [(f, p) for _, f, p in WRONG], ids=[n for n, _, _ in WRONG])
def test_wrong_implementations_are_diagnosed(impl, phrases):
    status = "error" if phrases[0] in CRASH_HINTS else "failed"
    expect(check(impl), status, *phrases)


def test_crash_is_an_error_with_the_inputs():
    def crashes(query, key, value, mask=None):
        return torch.cat([query, key], dim=0), None

    expect(check(crashes), "error", "RuntimeError", "query = tensor of shape (2, 3, 5, 6)")


def test_not_a_function():
    expect(check(reference(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2))), "failed", "expected a function")


def test_messages_are_deterministic():
    assert str(check(_sdpa(dim=-2))) == str(check(_sdpa(dim=-2)))



def test_the_real_device_pass_runs(monkeypatch):
    """Where a GPU exists the checker also runs there; the CPU stands in for it here."""
    from course_utils.checks.stages import gpu as _gpu

    monkeypatch.setattr(_gpu, "real_gpu", lambda: "cpu")
    expect(check(reference), "passed")


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a fill value that does not fit in 16 bits.


def fill_with_float32_min(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)  # not the scores' own dtype
    weights = scores.softmax(-1)
    return weights @ value, weights


def test_a_fill_that_does_not_fit_bfloat16_is_caught_before_lesson_08_trains():
    expect(check(fill_with_float32_min), "failed", "does not fit in bfloat16", "torch.finfo(scores.dtype).min")


def test_minus_1e9_passes_since_lesson_08_tries_float16_first_and_falls_back():
    assert check(with_minus_1e9).passed  # lesson 08 trains in bfloat16 (it fits) or, after a failed trial, float32
