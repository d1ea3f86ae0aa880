"""The course's plots: one small, consistent style for every lesson.

Every function takes tensors or arrays, draws on ``ax`` when one is given (or
on a new figure), sets a title and axis labels, and returns what it drew on
(an ``Axes``, or a ``Figure`` for grids). Nothing here changes matplotlib's
global settings, and nothing needs a display: the functions work the same
under the headless ``Agg`` backend.

    from course_utils.plots import plot_attention
    plot_attention(weights, tokens, tokens, title="Who looks at whom")
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

__all__ = [
    "plot_attention",
    "plot_attention_heads",
    "plot_mask",
    "plot_positional_encoding",
    "plot_curves",
    "plot_bar",
]

# One palette for the whole course.
ATTENTION_CMAP = "Blues"
ENCODING_CMAP = "RdBu_r"
MAY_ATTEND_COLOUR = "#4c72b0"
HIDDEN_COLOUR = "#e5e5e5"

_STYLE = {
    "figure.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

# Annotate heatmap cells with their values only while they stay readable.
_MAX_ANNOTATED_CELLS = 100


@contextlib.contextmanager
def _style() -> Iterator[None]:
    """The course style, for the duration of one plot only."""
    with plt.rc_context(_STYLE):
        yield


def _to_numpy(values: Any, name: str) -> np.ndarray:
    """A tensor, array or nested list as a float numpy array."""
    if hasattr(values, "detach"):  # a torch.Tensor, without importing torch here
        values = values.detach().cpu()
        if str(values.dtype) != "torch.bool":
            values = values.double()  # half precision and integers alike
        values = values.numpy()
    array = np.asarray(values)
    if array.dtype == bool:
        return array
    try:
        return array.astype(float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} should hold numbers, but it holds {array.dtype}") from exc


def _squeeze_to(array: np.ndarray, ndim: int, name: str, expected: str) -> np.ndarray:
    """Drop leading size-1 axes (batch, head) until ``array`` has ``ndim`` axes."""
    while array.ndim > ndim and array.shape[0] == 1:
        array = array[0]
    while array.ndim < ndim:
        array = array[np.newaxis]
    if array.ndim != ndim:
        raise ValueError(
            f"{name} should have shape {expected}, but it has shape {tuple(array.shape)}; "
            f"pick one sentence first, e.g. weights[0]."
        )
    return array


def _labels(tokens: Sequence[Any] | None, n: int, name: str) -> list[str] | bool:
    """Tick labels for ``n`` positions: the tokens if given, else the position numbers."""
    if tokens is None:
        return True
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} tokens, but the plot has {n} positions along that axis.")
    return tokens


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=figsize)
    return ax


def _heatmap_size(rows: int, cols: int) -> tuple[float, float]:
    width = min(max(3.0 + 0.45 * cols, 4.0), 12.0)
    height = min(max(2.0 + 0.4 * rows, 3.0), 10.0)
    return width, height


def _finish(ax: Axes, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def plot_attention(
    weights: Any,
    query_tokens: Sequence[Any] | None = None,
    key_tokens: Sequence[Any] | None = None,
    title: str = "Attention weights",
    ax: Axes | None = None,
    annotate: bool | None = None,
) -> Axes:
    """A heatmap of attention weights ``(L_q, L_k)``: one row per query, one column per key.

    Leading axes of size 1 (a batch of one sentence, one head) are dropped.
    ``annotate`` writes each weight in its cell; by default only for small maps.
    """
    w = _squeeze_to(_to_numpy(weights, "weights"), 2, "weights", "(L_q, L_k)")
    rows, cols = w.shape
    if annotate is None:
        annotate = rows * cols <= _MAX_ANNOTATED_CELLS
    with _style():
        ax = _new_axes(ax, _heatmap_size(rows, cols))
        sns.heatmap(
            w,
            ax=ax,
            cmap=ATTENTION_CMAP,
            vmin=0.0,
            vmax=max(1.0, float(np.nanmax(w)) if w.size else 1.0),
            square=False,
            annot=annotate,
            fmt=".2f",
            annot_kws={"fontsize": 8},
            linewidths=0.5,
            linecolor="white",
            xticklabels=_labels(key_tokens, cols, "key_tokens"),
            yticklabels=_labels(query_tokens, rows, "query_tokens"),
            cbar_kws={"label": "weight"},
        )
        ax.tick_params(axis="x", labelrotation=45 if key_tokens is not None else 0)
        ax.tick_params(axis="y", labelrotation=0)
        _finish(ax, title, "key (the word looked at)", "query (the word looking)")
    return ax


def plot_attention_heads(
    weights: Any,
    query_tokens: Sequence[Any] | None = None,
    key_tokens: Sequence[Any] | None = None,
    title: str = "Attention weights per head",
    ncols: int = 4,
) -> Figure:
    """A grid of heatmaps, one per head, for weights ``(H, L_q, L_k)`` of one sentence."""
    w = _squeeze_to(_to_numpy(weights, "weights"), 3, "weights", "(num_heads, L_q, L_k)")
    num_heads, rows, cols = w.shape
    ncols = max(1, min(ncols, num_heads))
    nrows = math.ceil(num_heads / ncols)
    cell_w, cell_h = _heatmap_size(rows, cols)
    with _style():
        fig, axes = plt.subplots(
            nrows, ncols, figsize=(min(0.8 * cell_w * ncols, 16.0), min(0.8 * cell_h * nrows + 0.6, 14.0)),
            squeeze=False, constrained_layout=True,
        )
        vmax = max(1.0, float(np.nanmax(w)) if w.size else 1.0)
        for h, ax in enumerate(axes.flat):
            if h >= num_heads:
                ax.axis("off")
                continue
            sns.heatmap(
                w[h], ax=ax, cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax, cbar=False,
                linewidths=0.5, linecolor="white",
                xticklabels=_labels(key_tokens, cols, "key_tokens"),
                yticklabels=_labels(query_tokens, rows, "query_tokens") if h % ncols == 0 else False,
            )
            ax.tick_params(axis="x", labelrotation=90 if key_tokens is not None else 0)
            ax.tick_params(axis="y", labelrotation=0)
            _finish(ax, f"head {h}", "key", "query" if h % ncols == 0 else "")
        fig.colorbar(axes.flat[0].collections[0], ax=axes, shrink=0.8, label="weight")
        fig.suptitle(title, fontweight="bold")
    return fig


def plot_mask(
    mask: Any,
    query_tokens: Sequence[Any] | None = None,
    key_tokens: Sequence[Any] | None = None,
    title: str = "Mask",
    ax: Axes | None = None,
) -> Axes:
    """A boolean mask ``(L_q, L_k)`` as an image: True (may attend) coloured, False (hidden) grey.

    Broadcastable masks such as ``(B, 1, 1, L)`` are shown for the first sentence;
    a mask with a single row is drawn as one row.
    """
    m = _to_numpy(mask, "mask")
    while m.ndim > 2:
        m = m[0]  # first sentence, first head
    m = _squeeze_to(m, 2, "mask", "(L_q, L_k)").astype(bool)
    rows, cols = m.shape
    with _style():
        ax = _new_axes(ax, _heatmap_size(rows, cols))
        cmap = ListedColormap([HIDDEN_COLOUR, MAY_ATTEND_COLOUR])
        ax.imshow(m.astype(int), cmap=cmap, vmin=0, vmax=1, aspect="equal")
        ax.set_xticks(range(cols))
        ax.set_yticks(range(rows))
        if key_tokens is not None:
            ax.set_xticklabels(_labels(key_tokens, cols, "key_tokens"), rotation=45, ha="right")
        if query_tokens is not None:
            ax.set_yticklabels(_labels(query_tokens, rows, "query_tokens"))
        elif rows == 1:  # a broadcastable mask: the same row for every query
            ax.set_yticklabels(["every query"])
        # thin white grid between cells
        ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
        ax.legend(
            handles=[
                Patch(facecolor=MAY_ATTEND_COLOUR, label="True: may attend"),
                Patch(facecolor=HIDDEN_COLOUR, edgecolor="#999999", label="False: hidden"),
            ],
            loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
        )
        _finish(ax, title, "key position", "query position")
    return ax


def plot_positional_encoding(
    pe: Any,
    title: str = "Sinusoidal positional encoding",
    ax: Axes | None = None,
) -> Axes:
    """A heatmap of a positional-encoding table ``(max_len, d_model)``: positions down, dimensions across."""
    table = _squeeze_to(_to_numpy(pe, "pe"), 2, "pe", "(max_len, d_model)")
    with _style():
        ax = _new_axes(ax, (8.0, 4.5))
        image = ax.imshow(table, cmap=ENCODING_CMAP, vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
        plt.colorbar(image, ax=ax, label="value")
        _finish(ax, title, "dimension", "position")
    return ax


def plot_curves(
    curves: Mapping[str, tuple[Any, Any]],
    xlabel: str = "step",
    ylabel: str = "value",
    title: str = "",
    logy: bool = False,
    ax: Axes | None = None,
) -> Axes:
    """Line plots of several curves, ``{label: (xs, ys)}``, with a legend (e.g. LR schedules, losses)."""
    with _style():
        ax = _new_axes(ax, (6.5, 4.0))
        for label, (xs, ys) in curves.items():
            ax.plot(_to_numpy(xs, "xs").reshape(-1), _to_numpy(ys, "ys").reshape(-1), label=str(label), linewidth=1.8)
        if logy:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        if len(curves) > 0:
            ax.legend(frameon=False)
        _finish(ax, title, xlabel, ylabel)
    return ax


def plot_bar(
    values: Mapping[str, float],
    title: str = "Parameters by component",
    xlabel: str = "parameters",
    ylabel: str = "",
    ax: Axes | None = None,
    annotate: bool = True,
) -> Axes:
    """Horizontal bars, ``{label: value}``, largest first reading top-down (e.g. parameter counts)."""
    labels = [str(k) for k in values]
    numbers = [float(v) for v in values.values()]
    with _style():
        ax = _new_axes(ax, (6.5, max(2.0, 0.45 * len(labels) + 1.0)))
        positions = np.arange(len(labels))
        ax.barh(positions, numbers, color=MAY_ATTEND_COLOUR)
        ax.set_yticks(positions)
        ax.set_yticklabels(labels)
        ax.invert_yaxis()  # the first item on top
        if annotate and numbers:
            top = max(abs(n) for n in numbers) or 1.0
            for y, n in zip(positions, numbers):
                text = f"{int(n):,}" if float(n).is_integer() else f"{n:.3g}"
                ax.text(n + 0.01 * top, y, text, va="center", fontsize=8)
            ax.set_xlim(0, top * 1.18)
        _finish(ax, title, xlabel, ylabel)
    return ax
