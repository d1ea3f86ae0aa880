"""The course's plots run headless on small inputs, label what they draw, and leave no figure open."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_utils import plots  # noqa: E402

TOKENS = ["the", "cat", "sat", "down"]


@pytest.fixture(autouse=True)
def no_figures_left():
    """Every test starts with no figure and must close what it opened."""
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a test left a figure open"


def _close(obj: Axes | Figure) -> None:
    plt.close(obj if isinstance(obj, Figure) else obj.figure)


def _weights(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def test_plot_attention_labels_tokens_and_axes():
    ax = plots.plot_attention(_weights(4, 4), TOKENS, TOKENS, title="Who looks at whom")
    assert isinstance(ax, Axes)
    assert ax.get_title() == "Who looks at whom"
    assert ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    _close(ax)


def test_plot_attention_accepts_batch_of_one_and_non_square_and_numpy():
    ax = plots.plot_attention(_weights(1, 1, 3, 5))  # (B=1, H=1, L_q, L_k)
    assert ax.get_title() == "Attention weights"
    _close(ax)
    ax = plots.plot_attention(_weights(3, 5).numpy(), ["a", "b", "c"], list("vwxyz"))
    assert [t.get_text() for t in ax.get_xticklabels()] == list("vwxyz")
    _close(ax)


def test_plot_attention_draws_on_the_given_axes():
    fig, ax = plt.subplots()
    out = plots.plot_attention(_weights(2, 3), ax=ax, title="here")
    assert out is ax and plt.get_fignums() == [fig.number]
    plt.close(fig)


def test_plot_attention_rejects_wrong_token_count_and_batches():
    with pytest.raises(ValueError, match="tokens"):
        plots.plot_attention(_weights(4, 4), TOKENS[:3], TOKENS)
    plt.close("all")
    with pytest.raises(ValueError, match="weights"):
        plots.plot_attention(_weights(2, 4, 4))
    plt.close("all")


def test_plot_attention_heads_one_panel_per_head():
    fig = plots.plot_attention_heads(_weights(1, 3, 4, 4), TOKENS, TOKENS, title="Heads", ncols=2)
    assert isinstance(fig, Figure)
    assert fig._suptitle is not None and fig._suptitle.get_text() == "Heads"
    titled = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titled == ["head 0", "head 1", "head 2"]
    assert all(ax.get_xlabel() == "key" for ax in fig.axes if ax.get_title().startswith("head"))
    _close(fig)


def test_plot_mask_has_legend_for_both_meanings():
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    ax = plots.plot_mask(causal, TOKENS, TOKENS, title="Causal mask")
    assert ax.get_title() == "Causal mask"
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("may attend" in t for t in legend) and any("hidden" in t for t in legend)
    _close(ax)


def test_plot_mask_accepts_broadcastable_padding_mask():
    padding = torch.tensor([[True, True, True, False, False]]).view(1, 1, 1, 5)
    ax = plots.plot_mask(padding, key_tokens=list("abcde"))
    image = ax.get_images()[0].get_array()
    assert image.shape == (1, 5)
    assert list(np.asarray(image[0])) == [1, 1, 1, 0, 0]
    _close(ax)


def test_plot_positional_encoding_heatmap():
    pe = torch.sin(torch.arange(20.0).view(-1, 1) * torch.linspace(0.01, 1, 8))
    ax = plots.plot_positional_encoding(pe, title="PE")
    assert ax.get_title() == "PE"
    assert ax.get_xlabel() == "dimension" and ax.get_ylabel() == "position"
    assert ax.get_images()[0].get_array().shape == (20, 8)
    _close(ax)


def test_plot_curves_one_line_per_label_and_log_scale():
    xs = np.arange(1, 11)
    ax = plots.plot_curves(
        {"a": (xs, 1.0 / xs), "b": (torch.tensor(xs), torch.tensor(2.0 / xs))},
        xlabel="step", ylabel="learning rate", title="Schedules", logy=True,
    )
    assert ax.get_title() == "Schedules"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "learning rate")
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert ax.get_yscale() == "log"
    _close(ax)


def test_plot_bar_one_bar_per_component_with_counts():
    counts = {"embeddings": 1_000_000, "encoder": 2_500_000, "decoder": 3_000_000}
    ax = plots.plot_bar(counts, title="Parameters", xlabel="parameters")
    assert ax.get_title() == "Parameters" and ax.get_xlabel() == "parameters"
    assert [t.get_text() for t in ax.get_yticklabels()] == list(counts)
    assert len(ax.patches) == 3
    assert "2,500,000" in [t.get_text() for t in ax.texts]
    _close(ax)


def test_plots_change_no_global_style():
    before = dict(matplotlib.rcParams)
    _close(plots.plot_attention(_weights(2, 2)))
    _close(plots.plot_curves({"x": ([0, 1], [1, 0])}))
    assert dict(matplotlib.rcParams) == before
