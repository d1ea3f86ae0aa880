"""trace_shapes (course_utils.shapes): it works on every correct Transformer the checkers accept, leaves no trace,
and tells where a broken model raised instead of raising itself."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from course_utils.model_map import BOXES  # noqa: E402
from course_utils.shapes import course_model, trace_shapes  # noqa: E402
from downstream_variants import catalogue  # noqa: E402
from test_checks_model import CORRECT, Transformer  # noqa: E402

D_MODEL, HEADS, LAYERS, D_FF, SRC_V, TGT_V = 32, 4, 2, 64, 50, 60
CATALOGUE = catalogue()


@pytest.fixture(autouse=True)
def no_figures_left():
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a test left a figure open"


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, SRC_V, (2, 7), generator=g)
    tgt = torch.randint(4, TGT_V, (2, 5), generator=g)
    src[1, 5:] = 0  # padding
    return src, tgt


def build(cls=Transformer) -> nn.Module:
    torch.manual_seed(0)
    return cls(SRC_V, TGT_V, d_model=D_MODEL, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF, dropout=0.1)


def _with(component: str, variant) -> nn.Module:
    """The reference Transformer with one component replaced by a correct variant, where the contracts let a
    later lesson assign it (layers, attentions, feed-forward networks, norms, the positional encoding, and
    lesson 09's pre-LN layers and learned positions)."""
    model = build()
    if component in ("check_encoder_layer", "check_pre_ln_encoder_layer"):
        model.encoder_layers = nn.ModuleList([variant(D_MODEL, HEADS, D_FF, 0.1) for _ in range(LAYERS)])
    elif component in ("check_decoder_layer", "check_pre_ln_decoder_layer"):
        model.decoder_layers = nn.ModuleList([variant(D_MODEL, HEADS, D_FF, 0.1) for _ in range(LAYERS)])
    elif component in ("check_positional_encoding_module", "check_learned_positional_encoding"):
        model.positional_encoding = variant(D_MODEL, 0.1, 100)
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        if component == "check_multi_head_attention":
            layer.self_attn = variant(D_MODEL, HEADS, 0.1)
            if hasattr(layer, "cross_attn"):
                layer.cross_attn = variant(D_MODEL, HEADS, 0.1)
        elif component == "check_feed_forward":
            layer.feed_forward = variant(D_MODEL, D_FF, 0.1)
        elif component == "check_layer_norm":
            for name in ("norm1", "norm2", "norm3"):
                if hasattr(layer, name):
                    setattr(layer, name, variant(D_MODEL))
    return model


MODELS = [pytest.param(lambda cls=cls: build(cls), id=cls.__name__) for cls in CORRECT]
MODELS += [pytest.param(lambda c=component, v=variant: _with(c, v), id=f"{component[6:]}-{getattr(variant, '__name__', i)}")
           for component in ("check_encoder_layer", "check_decoder_layer", "check_multi_head_attention",
                             "check_feed_forward", "check_layer_norm", "check_positional_encoding_module",
                             # lesson 09 puts these in the same places (a pre-LN stack's final norm aside)
                             "check_pre_ln_encoder_layer", "check_pre_ln_decoder_layer",
                             "check_learned_positional_encoding")
           for i, variant in enumerate(CATALOGUE.get(component, []))]


def _snapshot(model: nn.Module) -> dict:
    return {"state": {k: v.clone() for k, v in model.state_dict().items()},
            "modes": [m.training for m in model.modules()],
            "attributes": [dict(m.__dict__) for m in model.modules()]}


@pytest.mark.parametrize("make", MODELS)
def test_every_correct_transformer_is_traced_and_left_as_it_was(make):
    model = make()
    model.train()
    src, tgt = batch()
    before, rng = _snapshot(model), torch.get_rng_state()
    trace = trace_shapes(model, src, tgt, show=False)
    assert trace.error is None, trace.error
    root = trace.rows[0]
    assert root.name == "(the model)" and root.output == f"(2, 5, {TGT_V})"
    # nothing changed: weights, modes, attributes (a MultiHeadAttention keeps its last weights), the RNG
    after = _snapshot(model)
    assert after["modes"] == before["modes"] and all(after["modes"])
    assert all(torch.equal(before["state"][k], v) for k, v in after["state"].items())
    assert all(a.keys() == b.keys() and all(a[k] is b[k] for k in a) for a, b in zip(before["attributes"], after["attributes"]))
    assert torch.equal(rng, torch.get_rng_state())
    # the map shows the shapes of the boxes it recognises by the contracts' names
    shapes = trace.map_shapes()
    assert set(shapes) <= {b.name for b in BOXES}
    assert shapes["source_tokens"] == "(2, 7)" and shapes["target_tokens"] == "(2, 5)"
    assert shapes["output_projection"] == f"(2, 5, {TGT_V})"
    for box in ("source_embedding", "source_positions", "encoder_self_attention", "encoder_feed_forward",
                "cross_attention", "decoder_norm3"):
        assert shapes.get(box, "").startswith("(2, "), (box, shapes.get(box))
    assert shapes["cross_attention"] == f"(2, 5, {D_MODEL})" and shapes["source_positions"] == f"(2, 7, {D_MODEL})"
    fig = trace.draw()
    plt.close(fig)


def test_the_table_names_each_call_indents_it_and_folds_repeated_layers():
    src, tgt = batch()
    trace = trace_shapes(build(), src, tgt, show=False)
    table = trace.table()
    lines = table.splitlines()
    assert lines[0].split() == ["module", "class", "output", "inputs"]
    assert any(line.split()[:3] == ["src_embed", "Embedding", "(2,"] for line in lines)
    assert "  positional_encoding (call 2)" in table  # the same module, for the target
    inputs = {row.name: row.inputs for row in trace.rows}
    assert inputs["encoder_layers.0.self_attn"] == "query = key = value (2, 7, 32), mask (2, 1, 1, 7) bool"
    assert inputs["decoder_layers.0.cross_attn"] == "query (2, 5, 32), key = value (2, 7, 32), mask (2, 1, 1, 7) bool"
    # long inputs wrap between arguments, never inside a shape, so that the table fits a notebook
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("self_attn"))
    assert lines[at].endswith("query = key = value (2, 7, 32),") and lines[at + 1].strip() == "mask (2, 1, 1, 7) bool"
    assert max(map(len, lines)) <= 110
    assert "encoder_layers.1: the same shapes as encoder_layers.0" in table
    assert "Dropout" not in table  # left out: they leave shapes as they are
    assert "Dropout" in trace_shapes(build(), src, tgt, show=False, skip_dropout=False).table()


class BrokenCross(Transformer):
    """Passes the memory with the wrong width to the decoder layers."""

    def decode(self, tgt, memory, src):
        return super().decode(tgt, memory[..., :-1], src)


def test_a_model_that_raises_gets_its_table_so_far_and_the_module_it_was_in():
    src, tgt = batch()
    model = build(BrokenCross)
    trace = trace_shapes(model, src, tgt, show=False)
    assert trace.error is not None and "Your model raised RuntimeError" in trace.error
    assert "inside decoder_layers.0.cross_attn.W_k (Linear), called with (2, 7, 31)" in trace.error
    assert trace.error in trace.table()
    assert model.training


def test_show_prints_the_table_and_draws_the_map(capsys):
    src, tgt = batch()
    trace_shapes(build(), src, tgt)
    out = capsys.readouterr().out
    assert out.startswith("module") and "generator" in out


def test_bad_input_is_a_clear_type_error():
    src, tgt = batch()
    with pytest.raises(TypeError, match="needs your model"):
        trace_shapes(lambda s, t: s, src, tgt)
    with pytest.raises(TypeError, match=r"src should be a \(batch, length\) tensor of token ids, not \(7\) int64"):
        trace_shapes(build(), src[0], tgt)


@pytest.mark.parametrize("attention", CATALOGUE["check_multi_head_attention"], ids=lambda v: getattr(v, "__name__", "?"))
def test_lesson_04s_attention_in_the_course_model(attention):
    """Lesson 04 traces the course's small model with the learner's attention in its three places."""
    model = course_model(attention=attention)
    assert sum(isinstance(m, attention) for m in model.modules()) == 2 + 2 * 2
    src = torch.tensor([[1, 5, 7, 9, 2], [1, 4, 6, 2, 0]])
    tgt = torch.tensor([[1, 8, 3, 10], [1, 12, 2, 0]])
    trace = trace_shapes(model, src, tgt, show=False)
    assert trace.error is None and trace.rows[0].output == "(2, 4, 13)"
    assert trace.map_shapes()["cross_attention.attention"] == "weights (2, 4, 4, 5)"


def test_an_exercise_not_done_yet_is_left_for_requires_to_name():
    class Stub(nn.Module):
        def __init__(self, d_model, num_heads, dropout=0.0):
            super().__init__()

        def forward(self, query, key, value, mask=None):
            raise NotImplementedError()

    src, tgt = batch()
    with pytest.raises(NotImplementedError):
        trace_shapes(course_model(attention=Stub), src[:, :5] % 11, tgt % 13, show=False)
