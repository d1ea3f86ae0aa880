"""Checker for lesson 10 (a real translator): from_marian, and the port's proof against MarianMTModel.

The learner's classes are the course's reference solutions, loaded from solutions/ with load_exercises as a
lesson loads them. The proof tests run Hugging Face's MarianMTModel itself on tiny random configurations,
including sizes the checker never builds. The catalogue of wrong ports comes in two parts: each weight slip of
the checker's table, made on a copy of Marian that the reference then ports (generated from the table), and
hand-written ports for the slips that live in the learner's code, not in Marian's weights.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import expect
from course_utils.checks import Status
from course_utils.checks.port import SIZES, SLIPS, Size, check_from_marian, marian_logits, tiny_marian
from course_utils.notebook import load_exercises

transformers = pytest.importorskip("transformers")

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
_LOADS = (("01_attention", ["scaled_dot_product_attention"]),
          ("02_masks", ["make_padding_mask", "make_causal_mask", "make_target_mask"]),
          ("03_positional_encoding", ["sinusoidal_positional_encoding", "PositionalEncoding"]),
          ("04_multi_head_attention", ["MultiHeadAttention"]),
          ("05_transformer", ["FeedForward", "EncoderLayer", "DecoderLayer", "Transformer"]),
          ("06_training", ["greedy_decode"]),
          ("10_real_translator", ["from_marian"]))


def _course(**replaced) -> dict:
    """Lessons 01 to 06 and lesson 10's from_marian (with its cell's wrappers), from solutions/, in one namespace."""
    ns: dict = {}
    for lesson, names in _LOADS:
        load_exercises(str(SOLUTIONS / f"{lesson}.ipynb"), names, namespace=ns)
    ns.update(replaced)  # looked up at call time by the loaded code
    return ns


COURSE = _course()
reference = COURSE["from_marian"]
Transformer, SiLUFeedForward, CausalOnly = COURSE["Transformer"], COURSE["SiLUFeedForward"], COURSE["CausalOnly"]
greedy_decode, sinusoidal_positional_encoding = COURSE["greedy_decode"], COURSE["sinusoidal_positional_encoding"]


def _batch(vocab: int, seed: int, batch: int = 4, src_len: int = 9, tgt_len: int = 7):
    """Sources ending in end of sentence (0) then padding (the pad id, vocab - 1); targets starting with it."""
    pad, g = vocab - 1, torch.Generator().manual_seed(seed)
    src = torch.randint(1, pad, (batch, src_len), generator=g)
    tgt = torch.randint(1, pad, (batch, tgt_len), generator=g)
    for row in range(batch):
        real = src_len - 2 * row if src_len - 2 * row > 1 else 2
        src[row, real - 1], src[row, real:] = 0, pad
    tgt[:, 0] = pad
    tgt[-1, tgt_len - 2], tgt[-1, tgt_len - 1:] = 0, pad
    return src, tgt


# ---------------------------------------------------------------------------
# The proof: the reference port gives Marian's logits and greedy tokens


PROOF_SIZES = [*SIZES, Size(61, 20, 2, 5, 36, 48, torch.float32), Size(45, 32, 2, 8, 16, 30, torch.float64)]


@pytest.mark.parametrize("size", PROOF_SIZES, ids=lambda s: s.label)
def test_the_reference_port_gives_marians_logits(size: Size) -> None:
    marian = tiny_marian(size, seed=3)
    model = reference(marian)
    src, tgt = _batch(size.vocab, seed=4)
    with torch.no_grad():
        ours, theirs = model(src, tgt), marian_logits(marian, src, tgt)
        again = model.decode(tgt, model.encode(src), src)
    error = (ours - theirs).abs().max().item()
    assert error < (1e-4 if size.dtype == torch.float32 else 1e-10), error
    assert torch.allclose(again, ours, atol=1e-12, rtol=0)
    assert not any(isinstance(m, transformers.MarianMTModel) for m in model.modules())  # the learner's modules, not Marian's


@pytest.mark.parametrize("size", [Size(73, 24, 3, 6, 52, 40, torch.float32), Size(23, 8, 2, 1, 8, 20, torch.float32),
                                  Size(90, 40, 1, 10, 24, 64, torch.float64)], ids=lambda s: s.label)
def test_configurations_no_other_test_uses(size: Size) -> None:
    """Sizes, seeds and batch shapes the checker and the other tests never build (one head; ten heads; d_k of 4)."""
    marian = tiny_marian(size, seed=41)
    model = reference(marian)
    src, tgt = _batch(size.vocab, seed=42, batch=5, src_len=13, tgt_len=11)
    with torch.no_grad():
        error = (model(src, tgt) - marian_logits(marian, src, tgt)).abs().max().item()
    assert error < (1e-4 if size.dtype == torch.float32 else 1e-10), error


@pytest.mark.parametrize("config", [dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=47),
                                    dict(scale_embedding=False), dict(decoder_start_token_id=1, pad_token_id=38)],
                         ids=["unshared embeddings", "no embedding scale", "start id not the pad id"])
def test_other_marian_configurations(config: dict) -> None:
    """Configurations opus-mt-en-de does not have: the reference port still gives Marian's logits."""
    size = Size(40, 16, 2, 4, 24, 32, torch.float32)
    marian = tiny_marian(size, seed=8, **config)
    sizes = {marian.final_logits_bias.shape[-1], marian.lm_head.out_features, marian.config.decoder_vocab_size}
    if len(sizes) > 1:  # transformers before 5
        pytest.skip(f"transformers {transformers.__version__}'s own MarianMTModel cannot run this configuration: its "
                    f"output layer and final_logits_bias disagree on the target vocabulary's size")
    model = reference(marian)
    src, tgt = _batch(size.vocab, seed=9)
    tgt[:, 0] = marian.config.decoder_start_token_id
    with torch.no_grad():
        error = (model(src, tgt) - marian_logits(marian, src, tgt)).abs().max().item()
    assert error < 1e-4, error


@pytest.mark.parametrize("size", [SIZES[0], SIZES[1], Size(40, 16, 2, 2, 32, 40, torch.float64)],
                         ids=lambda s: s.label)
def test_greedy_decode_picks_marians_tokens(size: Size) -> None:
    """Lesson 06's greedy_decode on the port, the pad token forbidden, equals marian.generate's greedy search."""
    marian = tiny_marian(size, seed=5)
    pad = size.vocab - 1
    model = reference(marian)
    with torch.no_grad():
        model.generator.bias[pad] = float("-inf")
    src, _ = _batch(size.vocab, seed=6)
    plain = transformers.GenerationConfig(decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad,
                                          bad_words_ids=[[pad]], max_length=12, num_beams=1, do_sample=False)
    ours = greedy_decode(model, src, 12, pad, 0, pad)
    theirs = marian.generate(input_ids=src, attention_mask=src.ne(pad), generation_config=plain)
    assert ours.shape == theirs.shape and torch.equal(ours, theirs), (ours, theirs)
    assert not bool((ours[:, 1:] == pad).all())  # it generated something


def test_marians_quirks_are_what_the_lesson_says() -> None:
    """SiLU, the [sin | cos] halves of the paper's frequencies, the bias on the logits, the special ids."""
    marian = tiny_marian(SIZES[0])
    x = torch.linspace(-3, 3, 13)
    assert torch.allclose(marian.model.encoder.layers[0].activation_fn(x), x * torch.sigmoid(x))
    table = marian.model.encoder.embed_positions.weight.detach()
    ours = sinusoidal_positional_encoding(table.size(0), table.size(1))
    assert torch.allclose(torch.cat([ours[:, 0::2], ours[:, 1::2]], dim=1), table, atol=1e-5)
    assert not torch.allclose(ours, table, atol=1e-2)
    assert marian.lm_head.bias is None and marian.final_logits_bias.abs().sum() > 0
    c = marian.config
    assert c.decoder_start_token_id == c.pad_token_id == c.vocab_size - 1 and c.eos_token_id == 0


# ---------------------------------------------------------------------------
# Correct ports, in several styles


def loop_over_named_parameters(marian):
    """Every parameter of the model, its Marian name computed from its own name."""
    c, weight = marian.config, next(marian.parameters())
    model = Transformer(c.vocab_size, c.vocab_size, c.d_model, c.encoder_attention_heads, c.encoder_layers,
                        c.encoder_ffn_dim, c.dropout, c.max_position_embeddings, c.pad_token_id).to(weight)
    theirs = dict(marian.named_parameters())
    words = {"encoder_layers": "model.encoder.layers", "decoder_layers": "model.decoder.layers",
             "W_q": "q_proj", "W_k": "k_proj", "W_v": "v_proj", "W_o": "out_proj", "cross_attn": "encoder_attn",
             "feed_forward.linear1": "fc1", "feed_forward.linear2": "fc2"}
    norms = {"encoder": {"norm1": "self_attn_layer_norm", "norm2": "final_layer_norm"},
             "decoder": {"norm1": "self_attn_layer_norm", "norm2": "encoder_attn_layer_norm",
                         "norm3": "final_layer_norm"}}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("src_embed.weight", "tgt_embed.weight", "generator.weight"):
                p.copy_(marian.model.shared.weight)
                continue
            if name == "generator.bias":
                p.copy_(marian.final_logits_bias.squeeze(0))
                continue
            side = "encoder" if name.startswith("encoder") else "decoder"
            for ours, marians in {**words, **norms[side]}.items():
                name = name.replace(ours, marians)
            p.copy_(theirs[name])
        model.positional_encoding.pe.copy_(marian.model.decoder.embed_positions.weight)
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        layer.feed_forward = SiLUFeedForward(layer.feed_forward)
    for layer in model.decoder_layers:
        layer.self_attn = CausalOnly(layer.self_attn)
    model.eval()
    return model


def load_state_dict_with_a_key_map(marian):
    """Marian's state dict renamed to the model's keys, loaded strictly; the table re-laid from lesson 03's."""
    c = marian.config
    model = Transformer(c.vocab_size, c.vocab_size, c.d_model, c.encoder_attention_heads, c.encoder_layers,
                        c.encoder_ffn_dim, c.dropout, c.max_position_embeddings, c.pad_token_id)
    state = marian.state_dict()
    mapped = {"src_embed.weight": state["model.shared.weight"], "tgt_embed.weight": state["model.shared.weight"],
              "generator.weight": state["lm_head.weight"], "generator.bias": state["final_logits_bias"][0]}
    pe = sinusoidal_positional_encoding(c.max_position_embeddings, c.d_model)
    mapped["positional_encoding.pe"] = torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)  # [sin | cos] halves
    pairs = {"self_attn.W_q": "self_attn.q_proj", "self_attn.W_k": "self_attn.k_proj",
             "self_attn.W_v": "self_attn.v_proj", "self_attn.W_o": "self_attn.out_proj",
             "cross_attn.W_q": "encoder_attn.q_proj", "cross_attn.W_k": "encoder_attn.k_proj",
             "cross_attn.W_v": "encoder_attn.v_proj", "cross_attn.W_o": "encoder_attn.out_proj",
             "feed_forward.linear1": "fc1", "feed_forward.linear2": "fc2", "norm1": "self_attn_layer_norm"}
    for i in range(c.encoder_layers):
        for ours, theirs in {**pairs, "norm2": "final_layer_norm"}.items():
            if ours.startswith("cross_attn"):
                continue
            for kind in ("weight", "bias"):
                mapped[f"encoder_layers.{i}.{ours}.{kind}"] = state[f"model.encoder.layers.{i}.{theirs}.{kind}"]
    for i in range(c.decoder_layers):
        for ours, theirs in {**pairs, "norm2": "encoder_attn_layer_norm", "norm3": "final_layer_norm"}.items():
            for kind in ("weight", "bias"):
                mapped[f"decoder_layers.{i}.{ours}.{kind}"] = state[f"model.decoder.layers.{i}.{theirs}.{kind}"]
    model.load_state_dict({k: v.clone() for k, v in mapped.items()})  # strict: every key of the model
    for layer in model.encoder_layers:
        layer.feed_forward = SiLUFeedForward(layer.feed_forward)
    for layer in model.decoder_layers:
        layer.feed_forward = SiLUFeedForward(layer.feed_forward)
        layer.self_attn = CausalOnly(layer.self_attn)
    weight = next(marian.parameters())
    return model.to(weight.device, weight.dtype).eval()


def explicit_assignments_tied(marian):
    """New nn.Parameters assigned one by one; one matrix of the model's own for both embeddings and the output."""
    c, m = marian.config, marian.model
    model = Transformer(c.vocab_size, c.vocab_size, c.d_model, c.encoder_attention_heads, c.encoder_layers,
                        c.encoder_ffn_dim, c.dropout, c.max_position_embeddings, c.pad_token_id)

    def own(t):
        return nn.Parameter(t.detach().clone())

    shared = own(m.shared.weight)
    model.src_embed.weight = model.tgt_embed.weight = model.generator.weight = shared
    model.generator.bias = own(marian.final_logits_bias[0])
    model.positional_encoding.pe = m.encoder.embed_positions.weight.detach().clone()
    for ours, theirs in zip(model.encoder_layers, m.encoder.layers):
        a, b = ours.self_attn, theirs.self_attn
        a.W_q.weight, a.W_q.bias, a.W_k.weight, a.W_k.bias = own(b.q_proj.weight), own(b.q_proj.bias), \
            own(b.k_proj.weight), own(b.k_proj.bias)
        a.W_v.weight, a.W_v.bias, a.W_o.weight, a.W_o.bias = own(b.v_proj.weight), own(b.v_proj.bias), \
            own(b.out_proj.weight), own(b.out_proj.bias)
        ff = ours.feed_forward
        ff.linear1.weight, ff.linear1.bias = own(theirs.fc1.weight), own(theirs.fc1.bias)
        ff.linear2.weight, ff.linear2.bias = own(theirs.fc2.weight), own(theirs.fc2.bias)
        norm = theirs.self_attn_layer_norm
        ours.norm1.weight, ours.norm1.bias = own(norm.weight), own(norm.bias)
        ours.norm2.weight, ours.norm2.bias = own(theirs.final_layer_norm.weight), own(theirs.final_layer_norm.bias)
        ours.feed_forward = SiLUFeedForward(ff)
    for ours, theirs in zip(model.decoder_layers, m.decoder.layers):
        for mine, marians in ((ours.self_attn, theirs.self_attn), (ours.cross_attn, theirs.encoder_attn)):
            for w, name in (("W_q", "q_proj"), ("W_k", "k_proj"), ("W_v", "v_proj"), ("W_o", "out_proj")):
                getattr(mine, w).weight = own(getattr(marians, name).weight)
                getattr(mine, w).bias = own(getattr(marians, name).bias)
        ff = ours.feed_forward
        ff.linear1.weight, ff.linear1.bias = own(theirs.fc1.weight), own(theirs.fc1.bias)
        ff.linear2.weight, ff.linear2.bias = own(theirs.fc2.weight), own(theirs.fc2.bias)
        for norm, name in (("norm1", "self_attn_layer_norm"), ("norm2", "encoder_attn_layer_norm"),
                           ("norm3", "final_layer_norm")):
            getattr(ours, norm).weight = own(getattr(theirs, name).weight)
            getattr(ours, norm).bias = own(getattr(theirs, name).bias)
        ours.feed_forward = SiLUFeedForward(ff)
        ours.self_attn = CausalOnly(ours.self_attn)
    weight = next(marian.parameters())
    return model.to(weight.device, weight.dtype).eval()


CORRECT = [reference, loop_over_named_parameters, load_state_dict_with_a_key_map, explicit_assignments_tied]


@pytest.mark.parametrize("from_marian", CORRECT, ids=lambda f: f.__name__)
def test_correct_ports_are_accepted(from_marian) -> None:
    expect(check_from_marian(from_marian), Status.PASSED)


# ---------------------------------------------------------------------------
# Wrong ports: the checker's weight slips, made on a copy of Marian that the reference ports (from the table)

#: The slips of the table that live in Marian's weights: porting a mutated Marian makes them.
WEIGHT_SLIPS = [s for s in SLIPS if s.name in ("table", "final bias", "encoder norms", "decoder norms 2 3",
                                               "decoder norms 1 2", "transposed") or s.name.startswith("qkv")]


def _porting_a_mutant(slip):
    def from_marian(marian):
        mutant = copy.deepcopy(marian)
        slip.mutant["mutate"](mutant)
        return reference(mutant)
    return from_marian


@pytest.mark.parametrize("slip", WEIGHT_SLIPS, ids=lambda s: s.name)
def test_each_weight_slip_of_the_table_is_named(slip) -> None:
    expect(check_from_marian(_porting_a_mutant(slip)), Status.FAILED, slip.message[:60])


def test_every_slip_of_the_table_has_a_test() -> None:
    hand_written = {"relu", "scaled twice", "not scaled", "start hidden", "pad id 0", "source padding"}
    assert {s.name for s in SLIPS} == {s.name for s in WEIGHT_SLIPS} | hand_written
    assert set(HAND_WRITTEN_SLIPS) == hand_written


# ---------------------------------------------------------------------------
# Wrong ports: hand-written, each failing with its own message


def _without(kind):
    """The reference port with one of its steps undone, or done wrong."""
    def from_marian(marian):
        model = reference(marian)
        c = marian.config
        with torch.no_grad():
            if kind == "relu":
                for layer in [*model.encoder_layers, *model.decoder_layers]:
                    ff = layer.feed_forward
                    relu = COURSE["FeedForward"](c.d_model, c.encoder_ffn_dim)  # lesson 05's, with its ReLU
                    layer.feed_forward = relu.to(ff.linear1.weight).eval()
                    layer.feed_forward.linear1, layer.feed_forward.linear2 = ff.linear1, ff.linear2
            elif kind in ("scaled twice", "not scaled"):
                factor = math.sqrt(c.d_model) if kind == "scaled twice" else 1 / math.sqrt(c.d_model)
                model.src_embed.weight.mul_(factor)
                model.tgt_embed.weight.mul_(factor)
            elif kind == "start hidden":
                for layer in model.decoder_layers:
                    layer.self_attn = layer.self_attn.attention
            elif kind == "pad id 0":
                model.pad_id = 0
            elif kind == "source padding":
                model.pad_id = c.vocab_size  # the vocabulary's size, where the pad id is its last id
        return model
    from_marian.__name__ = f"port_with_{kind.replace(' ', '_')}"
    return from_marian


HAND_WRITTEN_SLIPS = {name: _without(name) for name in
                      ("relu", "scaled twice", "not scaled", "start hidden", "pad id 0", "source padding")}


@pytest.mark.parametrize("name", HAND_WRITTEN_SLIPS)
def test_each_hand_written_slip_is_named(name: str) -> None:
    slip = next(s for s in SLIPS if s.name == name)
    expect(check_from_marian(HAND_WRITTEN_SLIPS[name]), Status.FAILED, slip.message[:60])


def _finite_fill_attention(query, key, value, mask=None):
    """Lesson 01's attention with hidden scores set to -1e9 instead of -inf (a row with nothing visible is uniform)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


FINITE = _course(scaled_dot_product_attention=_finite_fill_attention)


def start_hidden_with_a_finite_mask_fill(marian):
    model = FINITE["from_marian"](marian)
    for layer in model.decoder_layers:
        layer.self_attn = layer.self_attn.attention
    return model


def test_the_hidden_start_is_named_whatever_the_mask_fill() -> None:
    """-inf gives NaN everywhere (the probe with another start token names it); -1e9 gives finite, wrong values."""
    message = next(s for s in SLIPS if s.name == "start hidden").message[:60]
    expect(check_from_marian(FINITE["from_marian"]), Status.PASSED)
    expect(check_from_marian(start_hidden_with_a_finite_mask_fill), Status.FAILED, message)
    expect(check_from_marian(HAND_WRITTEN_SLIPS["start hidden"]), Status.FAILED, message)


def sharing_marians_embedding(marian):
    model = reference(marian)
    model.src_embed.weight = marian.model.shared.weight
    return model


def changing_marian(marian):
    marian.train()
    return reference(marian)


def left_in_training_mode(marian):
    return reference(marian).train()


def left_in_float32(marian):
    return reference(marian).float()


def forgetting_the_cross_attention_biases(marian):
    model = reference(marian)
    with torch.no_grad():
        for layer in model.decoder_layers:
            for name in ("W_q", "W_k", "W_v", "W_o"):
                getattr(layer.cross_attn, name).bias.zero_()
    return model


def bias_added_outside_the_generator(marian):
    """The right logits, but from a generator without a bias and a hook that adds final_logits_bias after it."""
    model = reference(marian)
    generator = nn.Linear(marian.config.d_model, marian.config.vocab_size, bias=False).to(model.generator.weight)
    with torch.no_grad():
        generator.weight.copy_(model.generator.weight)
    bias = marian.final_logits_bias[0].detach().clone()
    generator.register_forward_hook(lambda module, inputs, out: out + bias)
    model.generator = generator
    return model.eval()


def returning_marian(marian):
    return marian


def one_output_projection_transposed(marian):
    """Not a slip of the table (only one weight): named by the search for Marian's weights in the model."""
    model = reference(marian)
    with torch.no_grad():
        w_o = model.decoder_layers[0].cross_attn.W_o.weight
        w_o.copy_(w_o.t().clone())
    return model


@pytest.mark.parametrize("from_marian, phrases", [
    (sharing_marians_embedding, ("shares storage with Marian", "src_embed.weight")),
    (changing_marian, ("from_marian changed Marian",)),
    (left_in_training_mode, ("training mode", "model.eval()")),
    (left_in_float32, ("float32", "where Marian is float64")),
    (forgetting_the_cross_attention_biases, ("The encoder's output is Marian's",
                                             "model.decoder.layers.0.encoder_attn.k_proj.bias")),
    (returning_marian, ("lesson-05 Transformer",)),
    (one_output_projection_transposed, ("The encoder's output is Marian's", "holds Marian's "
                                        "`model.decoder.layers.0.encoder_attn.out_proj.weight` transposed")),
], ids=lambda v: getattr(v, "__name__", ""))
def test_other_wrong_ports_fail_with_their_cause(from_marian, phrases) -> None:
    expect(check_from_marian(from_marian), Status.FAILED, *phrases)


def the_output_bias_left_as_built(marian):
    """Every step of the reference but the output layer's bias: lesson 05's nn.Linear keeps its random initial one."""
    model = reference(marian)
    c = marian.config
    fresh = Transformer(c.vocab_size, c.vocab_size, c.d_model, c.encoder_attention_heads, c.encoder_layers,
                        c.encoder_ffn_dim, c.dropout, c.max_position_embeddings, c.pad_token_id)
    with torch.no_grad():
        model.generator.bias.copy_(fresh.generator.bias)
    return model


def a_second_bias_after_the_generator(marian):
    """final_logits_bias in generator.bias, and added once more by a hook: one constant too many per column."""
    model = reference(marian)
    extra = marian.final_logits_bias[0].detach().clone()
    model.generator.register_forward_hook(lambda module, inputs, out: out + extra)
    return model


def test_an_output_bias_not_copied_is_named() -> None:
    """The logits are Marian's plus one constant per column: named as the bias, not as 'the decoder or output'."""
    result = check_from_marian(the_output_bias_left_as_built)
    expect(result, Status.FAILED, "one constant per vocabulary column", "final_logits_bias was not copied",
           "model.generator.bias.copy_(marian.final_logits_bias[0])")
    assert "The encoder's output is Marian's" not in str(result)
    expect(check_from_marian(a_second_bias_after_the_generator), Status.FAILED,
           "one constant per vocabulary column", "a second bias is added")


def _copying(transposed: str):
    """The reference port, then one weight copied again in the learner's style, transposed."""
    def inline(marian):
        model = reference(marian)
        with torch.no_grad():
            for ours, marians in zip(model.encoder_layers, marian.model.encoder.layers):
                ours.feed_forward.linear1.weight.copy_(marians.fc1.weight.T)
        return model

    def helper(marian):
        def linear(ours, marians):
            ours.weight.copy_(marians.weight.t())
            ours.bias.copy_(marians.bias)
        model = reference(marian)
        with torch.no_grad():
            linear(model.decoder_layers[0].feed_forward.linear2, marian.model.decoder.layers[0].fc2)
        return model

    def swapped(marian):
        model = reference(marian)
        with torch.no_grad():
            model.encoder_layers[0].feed_forward.linear1.weight.copy_(marian.model.encoder.layers[0].fc2.weight)
        return model

    def loaded(marian):
        model = reference(marian)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        state["encoder_layers.0.feed_forward.linear2.weight"] = marian.model.encoder.layers[0].fc2.weight.T.clone()
        model.load_state_dict(state)
        return model

    return {"inline": inline, "helper": helper, "swapped": swapped, "loaded": loaded}[transposed]


@pytest.mark.parametrize("style, phrases", [
    ("inline", ("copied transposed (`.T`)", "`model.encoder.layers.0.fc1.weight`", "without `.T`")),
    ("helper", ("copied transposed (`.T`)", "`model.decoder.layers.0.fc2.weight`")),
    ("swapped", ("`model.encoder.layers.0.fc2.weight`", "is its transpose", "fc1 goes into linear1")),
    ("loaded", ("`encoder_layers.0.feed_forward.linear2.weight`", "copied transposed (`.T`)")),
])
def test_a_weight_copied_transposed_is_named_not_blamed_on_the_sizes(style: str, phrases) -> None:
    """A non-square weight copied as its transpose makes copy_ (or load_state_dict) raise a size mismatch."""
    result = check_from_marian(_copying(style))
    expect(result, Status.ERROR, *phrases)
    assert "Marian's sizes" not in str(result)


def built_with_the_wrong_d_ff(marian):
    c = marian.config
    model = Transformer(c.vocab_size, c.vocab_size, c.d_model, c.encoder_attention_heads, c.encoder_layers,
                        2 * c.encoder_ffn_dim, c.dropout, c.max_position_embeddings, c.pad_token_id)
    with torch.no_grad():
        model.encoder_layers[0].feed_forward.linear1.weight.copy_(marian.model.encoder.layers[0].fc1.weight)
    return model


def test_a_size_mismatch_that_is_no_transpose_still_points_at_the_sizes() -> None:
    expect(check_from_marian(built_with_the_wrong_d_ff), Status.ERROR, "Marian's sizes", "encoder_ffn_dim")


def test_a_bias_the_lesson_cannot_reach_fails() -> None:
    expect(check_from_marian(bias_added_outside_the_generator), Status.FAILED, "generator.bias")


def test_the_checker_leaves_no_trace_on_the_global_generator() -> None:
    state = torch.random.get_rng_state()
    check_from_marian(reference)
    assert torch.equal(state, torch.random.get_rng_state())
