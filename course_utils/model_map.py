"""The map of the model: the encoder-decoder of the paper's Figure 1, drawn the course's own way.

Every box on the map belongs to a *part* (``"multi_head_attention"``,
``"feed_forward_activation"``, ...); a part may appear in several boxes (the
three attentions, the five Add & Norm). A map is plain data first
(:func:`layout`: each box with its part, its state and its mark) and a
picture second (:func:`draw_model_map` draws exactly that data), so tests
check the data and the boxes drawn, not pixels.

    from course_utils.model_map import draw_model_map, lesson_map
    lesson_map("05_transformer")                              # the map at the top of lesson 05
    draw_model_map(built="all", marks={"feed_forward_activation": "SiLU, not ReLU"},
                   labels={"feed_forward_activation": "Linear · SiLU · Linear"})

States: ``"todo"`` (outlined: a later lesson), ``"built"`` (filled),
``"focus"`` (highlighted: this lesson's). ``labels`` writes another text in
every box of a part (a model that departs from the paper). A mark is a numbered note on every
box of its part, listed beside the map. ``shapes`` writes a tensor shape on
the arrow that leaves a box (``trace_shapes`` fills them from a real model).
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Iterable, Mapping

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from . import lessons as _lessons

__all__ = ["PARTS", "BOXES", "MapBox", "layout", "draw_model_map", "lesson_map"]

#: part -> what it is, in words (the legend of the map and of its tests)
PARTS: dict[str, str] = {
    "tokens": "token ids: vocabulary, encode, padded batches",
    "start_token": "the start token <bos> that the decoder's input begins with",
    "embedding": "token embeddings, scaled by sqrt(d_model)",
    "positional_encoding": "the positional encoding, added to the embeddings",
    "padding_mask": "the padding mask (source keys)",
    "target_mask": "the target mask: padding and no peeking at the future",
    "attention": "scaled dot-product attention, softmax(QK^T / sqrt(d_k)) V",
    "multi_head_attention": "multi-head attention: projections, heads, output projection",
    "add_norm": "residual connection, dropout and LayerNorm",
    "feed_forward": "the position-wise feed-forward network",
    "feed_forward_activation": "the feed-forward network's activation (ReLU in the paper)",
    "encoder_layer": "an encoder layer, repeated N times",
    "decoder_layer": "a decoder layer, repeated N times",
    "output_projection": "the output layer: Linear (with its bias) to one logit per target word",
    "loss": "softmax and the label-smoothed loss (training)",
    "decoding": "decoding: greedy or beam search, one token at a time",
    "kv_cache": "the key/value cache of decoding",
}


@dataclasses.dataclass(frozen=True)
class MapBox:
    """One box of the map: ``name`` is unique, ``part`` says what it is (see ``PARTS``)."""

    name: str
    part: str
    text: str
    x: float  # lower left corner, in map units
    y: float
    width: float
    height: float
    kind: str = "box"  # "box", "chip" (a small box inside or beside another), "frame" (a layer around boxes)
    state: str = "todo"
    mark: int | None = None  # the number of its part's mark
    shape: str | None = None  # the shape on the arrow that leaves it

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2

    @property
    def top(self) -> float:
        return self.y + self.height


def _column(side: str, x: float) -> list[MapBox]:
    """The boxes of one side, bottom to top; ``side`` is "encoder" or "decoder"."""
    w = 5.8
    c = x + w / 2
    enc = side == "encoder"
    boxes = [
        MapBox(f"{'source' if enc else 'target'}_tokens", "tokens",
               "source tokens" if enc else "target tokens, shifted right", x, 0.2, w, 0.9),
        MapBox(f"{'source' if enc else 'target'}_embedding", "embedding", "embedding  × √d_model", x, 1.7, w, 0.7),
        MapBox(f"{'source' if enc else 'target'}_positions", "positional_encoding", "+ positional encoding",
               x + 0.6, 3.0, w - 1.2, 0.65),
    ]
    bottom = 4.3
    if enc:
        rows = [("encoder_self_attention", "multi_head_attention", "multi-head self-attention", 1.3),
                ("encoder_norm1", "add_norm", "add & norm", 0.5),
                ("encoder_feed_forward", "feed_forward", "feed-forward", 1.1),
                ("encoder_norm2", "add_norm", "add & norm", 0.5)]
    else:
        rows = [("decoder_self_attention", "multi_head_attention", "masked multi-head self-attention", 1.3),
                ("decoder_norm1", "add_norm", "add & norm", 0.5),
                ("cross_attention", "multi_head_attention", "multi-head cross-attention", 1.3),
                ("decoder_norm2", "add_norm", "add & norm", 0.5),
                ("decoder_feed_forward", "feed_forward", "feed-forward", 1.1),
                ("decoder_norm3", "add_norm", "add & norm", 0.5)]
    y = bottom + 0.5
    inner: list[MapBox] = []
    for name, part, text, height in rows:
        boxes.append(MapBox(name, part, text, x + 0.3, y, w - 0.6, height))
        if part == "multi_head_attention":
            inner.append(MapBox(f"{name}.attention", "attention", "scaled dot-product attention",
                                c - 2.1, y + 0.1, 4.2, 0.45, kind="chip"))
        if part == "feed_forward":
            inner.append(MapBox(f"{name}.activation", "feed_forward_activation", "Linear · ReLU · Linear",
                                c - 2.1, y + 0.1, 4.2, 0.45, kind="chip"))
        y += height + 0.4
    frame = MapBox(f"{side}_layer", f"{side}_layer", f"{side} layer × N", x, bottom, w, y - bottom, kind="frame")
    return [frame, *boxes, *inner]


def _boxes() -> tuple[MapBox, ...]:
    boxes = _column("encoder", 2.1) + _column("decoder", 10.3)
    top = next(b for b in boxes if b.name == "decoder_layer").top
    boxes += [
        MapBox("start_token", "start_token", "<bos>\nstart", 8.45, 0.3, 1.3, 0.7, kind="chip"),
        MapBox("padding_mask", "padding_mask", "padding\nmask", 0.15, 4.9, 1.7, 0.9, kind="chip"),
        MapBox("target_mask", "target_mask", "target\nmask", 16.6, 4.9, 1.7, 0.9, kind="chip"),
        MapBox("kv_cache", "kv_cache", "key/value\ncache", 16.6, 7.05, 1.7, 0.9, kind="chip"),
        MapBox("output_projection", "output_projection", "Linear → logits", 10.45, top + 0.5, 5.5, 0.6),
        MapBox("loss", "loss", "softmax · label-smoothed loss", 10.45, top + 1.5, 5.5, 0.6),
        MapBox("decoding", "decoding", "decoding: greedy · beam search", 10.45, top + 2.5, 5.5, 0.6),
    ]
    return tuple(boxes)


#: every box of the map, frames first (they are drawn under the boxes)
BOXES: tuple[MapBox, ...] = _boxes()


def _as_set(parts: Iterable[str] | str | None, name: str) -> set[str]:
    if parts is None:
        return set()
    if parts == "all":
        return set(PARTS)
    if isinstance(parts, str):
        parts = [parts]
    parts = set(parts)
    unknown = sorted(parts - set(PARTS))
    if unknown:
        raise ValueError(f"{name}: no part named {', '.join(map(repr, unknown))} on the map; "
                         f"the parts are: {', '.join(PARTS)}")
    return parts


def layout(built: Iterable[str] | str | None = None, focus: Iterable[str] | str | None = None,
           marks: Mapping[str, str] | None = None, shapes: Mapping[str, str] | None = None,
           labels: Mapping[str, str] | None = None) -> tuple[MapBox, ...]:
    """The boxes of the map with their states, marks and shapes: the data that ``draw_model_map`` draws.

    ``built`` and ``focus`` are parts (or ``"all"``); a focused part counts as built. ``marks`` maps a part to a
    note; marks are numbered in the order of ``PARTS``. ``shapes`` maps a box name (``BOXES``) to a shape.
    ``labels`` maps a part to the text written in every box of it, in place of the paper's (a model that
    departs from the paper: ``{"feed_forward_activation": "Linear · SiLU · Linear"}``).
    """
    built_parts, focus_parts = _as_set(built, "built"), _as_set(focus, "focus")
    marks = dict(marks or {})
    _as_set(marks, "marks")
    labels = dict(labels or {})
    _as_set(labels, "labels")
    shapes = dict(shapes or {})
    names = {b.name for b in BOXES}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise ValueError(f"shapes: no box named {', '.join(map(repr, unknown))}; the boxes are: {', '.join(sorted(names))}")
    numbers = {part: i for i, part in enumerate((p for p in PARTS if p in marks), start=1)}
    out = []
    for box in BOXES:
        state = "focus" if box.part in focus_parts else "built" if box.part in built_parts else "todo"
        out.append(dataclasses.replace(box, state=state, mark=numbers.get(box.part), shape=shapes.get(box.name),
                                       text=labels.get(box.part, box.text)))
    return tuple(out)


def mark_list(marks: Mapping[str, str] | None) -> list[tuple[int, str, str]]:
    """(number, part, note) for each mark, in the order of the numbers on the map."""
    marks = dict(marks or {})
    return [(i, part, marks[part]) for i, part in enumerate((p for p in PARTS if p in marks), start=1)]


# -- drawing -------------------------------------------------------------------------------------------------------

_FILL = {"todo": "#ffffff", "built": "#dce6f2", "focus": "#f6b26b"}
_EDGE = {"todo": "#b0b0b0", "built": "#5b7ba6", "focus": "#b45309"}
_TEXT = {"todo": "#9a9a9a", "built": "#1f2d3d", "focus": "#3b1d00"}
_FRAME_FILL = {"todo": "#ffffff", "built": "#f3f6fa", "focus": "#fdf0e2"}
_MARK_COLOUR = "#c0392b"
_SHAPE_COLOUR = "#5a3e8a"
_WIDTH, _HEIGHT = 19.1, 15.9  # the map's extent, in map units


def _draw_box(ax: Axes, box: MapBox) -> None:
    frame = box.kind == "frame"
    face = (_FRAME_FILL if frame else _FILL)[box.state]
    edge = _EDGE[box.state]
    patch = FancyBboxPatch((box.x, box.y), box.width, box.height, boxstyle="round,pad=0.02,rounding_size=0.18",
                           facecolor=face, edgecolor=edge, linewidth=2.2 if box.state == "focus" else 1.1,
                           linestyle="--" if box.state == "todo" else "-", zorder=1 if frame else 3 if box.kind == "chip" else 2)
    patch.set_gid(box.name)
    ax.add_patch(patch)
    weight = "bold" if box.state == "focus" else "normal"
    if frame:
        ax.text(box.x + box.width - 0.15, box.y + 0.06, box.text, ha="right", va="bottom", fontsize=8, style="italic",
                color=_TEXT[box.state], weight=weight, zorder=4)
    elif box.part in ("multi_head_attention", "feed_forward"):  # room below for the chip inside
        ax.text(box.centre[0], box.top - 0.32, box.text, ha="center", va="center",
                fontsize=7.5 if box.state == "focus" else 8,
                color=_TEXT[box.state], weight=weight, zorder=4)
    elif box.shape and box.part == "attention":  # the attention weights' shape, in place of the chip's words
        ax.text(*box.centre, box.shape, ha="center", va="center", fontsize=7, family="monospace",
                color=_SHAPE_COLOUR, zorder=4)
    else:
        size = 7 if box.kind == "chip" else 8 if box.state == "focus" else 8.5
        ax.text(*box.centre, box.text, ha="center", va="center", fontsize=size, color=_TEXT[box.state],
                weight=weight, zorder=4, linespacing=1.0)
    if box.mark is not None:
        ax.text(box.x + box.width - 0.05, box.top - 0.02, str(box.mark), ha="center", va="center", fontsize=7.5,
                color="white", weight="bold", zorder=6,
                bbox=dict(boxstyle="circle,pad=0.2", facecolor=_MARK_COLOUR, edgecolor="none"))
    if box.shape and box.kind == "chip" and box.part != "attention":  # beside the model: under the chip
        ax.text(box.centre[0], box.y - 0.08, box.shape.replace(" bool", "\nbool"), ha="center", va="top", fontsize=7, family="monospace",
                color=_SHAPE_COLOUR, zorder=6)
    elif box.shape and box.kind != "chip":
        ax.text(box.centre[0] + 0.12, box.top + 0.08, box.shape, ha="left", va="bottom", fontsize=7,
                family="monospace", color=_SHAPE_COLOUR, zorder=6)


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], dashed: bool = False,
           connection: str = "arc3") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color="#6b6b6b", linewidth=1.0,
                                 linestyle="--" if dashed else "-", connectionstyle=connection, zorder=5,
                                 shrinkA=0, shrinkB=0))


def _draw_arrows(ax: Axes, by_name: dict[str, MapBox]) -> None:
    for side, chain in (("encoder", ["source_tokens", "source_embedding", "source_positions", "encoder_self_attention",
                                     "encoder_norm1", "encoder_feed_forward", "encoder_norm2"]),
                        ("decoder", ["target_tokens", "target_embedding", "target_positions", "decoder_self_attention",
                                     "decoder_norm1", "cross_attention", "decoder_norm2", "decoder_feed_forward",
                                     "decoder_norm3", "output_projection", "loss"])):
        for lower, upper in zip(chain, chain[1:]):
            a, b = by_name[lower], by_name[upper]
            _arrow(ax, (a.centre[0], a.top), (b.centre[0], b.y))
    # the encoder's output, the memory, goes to every decoder layer's cross-attention
    enc, cross = by_name["encoder_norm2"], by_name["cross_attention"]
    enc_x, turn_y, gap_x = enc.centre[0], by_name["encoder_layer"].top + 0.5, 9.6
    _line(ax, [(enc_x, enc.top), (enc_x, turn_y), (gap_x, turn_y), (gap_x, cross.centre[1] + 0.2)])
    _arrow(ax, (gap_x, cross.centre[1] + 0.2), (cross.x, cross.centre[1] + 0.2))
    ax.text(enc_x + 0.15, turn_y + 0.08, "memory", ha="left", va="bottom", fontsize=8, style="italic", color="#555555")
    loss, decoding = by_name["loss"], by_name["decoding"]
    _arrow(ax, (loss.centre[0], loss.top), (decoding.centre[0], decoding.y))
    # decoding feeds each new token back to the decoder's input
    tokens, right = by_name["target_tokens"], 18.9
    _line(ax, [(decoding.x + decoding.width, decoding.centre[1]), (right, decoding.centre[1]),
               (right, tokens.centre[1])], dashed=True)
    _arrow(ax, (right, tokens.centre[1]), (tokens.x + tokens.width, tokens.centre[1]), dashed=True)
    ax.text(right - 0.1, decoding.centre[1] + 0.1, "next token", ha="right", va="bottom", fontsize=8,
            style="italic", color="#555555")
    start = by_name["start_token"]
    _arrow(ax, (start.x + start.width, start.centre[1]), (tokens.x, start.centre[1]))
    pad, self_attn = by_name["padding_mask"], by_name["encoder_self_attention"]
    _arrow(ax, (pad.x + pad.width, pad.centre[1]), (self_attn.x, pad.centre[1]))
    tgt, dec_self = by_name["target_mask"], by_name["decoder_self_attention"]
    _arrow(ax, (tgt.x, tgt.centre[1]), (dec_self.x + dec_self.width, tgt.centre[1]))
    kv = by_name["kv_cache"]
    _arrow(ax, (kv.x, kv.centre[1]), (cross.x + cross.width, kv.centre[1]), dashed=True)


def _line(ax: Axes, points: list[tuple[float, float]], dashed: bool = False) -> None:
    xs, ys = zip(*points)
    ax.plot(xs, ys, color="#6b6b6b", linewidth=1.0, linestyle="--" if dashed else "-", zorder=5)


def _draw_legend(ax: Axes, marks: Mapping[str, str] | None, notes: Iterable[str], states: bool) -> None:
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    y = 0.97
    for state, words in (("focus", "this lesson"), ("built", "built so far"), ("todo", "a later lesson"))[:3 * states]:
        ax.add_patch(FancyBboxPatch((0.02, y - 0.03), 0.12, 0.035, boxstyle="round,pad=0.004", facecolor=_FILL[state],
                                    edgecolor=_EDGE[state], linestyle="--" if state == "todo" else "-",
                                    linewidth=1.8 if state == "focus" else 1.0))
        ax.text(0.18, y - 0.012, words, va="center", fontsize=9)
        y -= 0.06
    y -= 0.03
    for number, _part, note in mark_list(marks):
        ax.text(0.06, y, str(number), ha="center", va="top", fontsize=8, color="white", weight="bold",
                bbox=dict(boxstyle="circle,pad=0.2", facecolor=_MARK_COLOUR, edgecolor="none"))
        lines = textwrap.wrap(note, 38)
        ax.text(0.15, y + 0.004, "\n".join(lines), ha="left", va="top", fontsize=8.5, linespacing=1.2)
        y -= 0.027 * len(lines) + 0.025
    for note in notes:
        ax.text(0.02, y, note, ha="left", va="top", fontsize=8, color="#555555", style="italic")
        y -= 0.05


def draw_model_map(built: Iterable[str] | str | None = "all", focus: Iterable[str] | str | None = None,
                   marks: Mapping[str, str] | None = None, shapes: Mapping[str, str] | None = None,
                   title: str | None = "The Transformer", notes: Iterable[str] = (), key: bool = True,
                   labels: Mapping[str, str] | None = None) -> Figure:
    """Draw the map (see the module's docstring) and return its figure; each box's patch has the box's name as gid.

    ``notes`` are lines written under the legend; ``key=False`` leaves out the key to the states; ``labels``
    relabels parts (see :func:`layout`).
    """
    boxes = layout(built, focus, marks, shapes, labels)
    by_name = {b.name: b for b in boxes}
    side = key or bool(marks)  # a column beside the map for the key and the marks; else notes under the title
    with plt.rc_context({"figure.dpi": 100, "font.size": 9}):
        fig = plt.figure(figsize=(10.5, 7.8) if side else (7.6, 7.8))
        ax = fig.add_axes((0.0, 0.0, 0.7, 0.94) if side else (0.0, 0.0, 1.0, 0.9))
        for box in boxes:
            _draw_box(ax, box)
        _draw_arrows(ax, by_name)
        ax.set_xlim(-0.3, _WIDTH)
        ax.set_ylim(-0.1, _HEIGHT)
        ax.set_aspect("equal")
        ax.set_axis_off()
        if side:
            _draw_legend(fig.add_axes((0.7, 0.0, 0.3, 0.94)), marks, notes, key)
        elif notes:
            fig.text(0.02, 0.935, "; ".join(notes), ha="left", va="top", fontsize=8.5, color="#555555", style="italic")
        if title:
            fig.suptitle(title, x=0.02, y=0.985, ha="left", fontsize=12, weight="bold")
    return fig


def lesson_map(stem: str, show: bool = True) -> Figure | None:
    """The map at the top of lesson ``stem``, from ``course_utils.lessons``: what is built, what is this lesson's.

    With ``show`` (in a notebook) it is shown once, as the course's other plots are (``plt.show()``), and
    nothing is returned; ``show=False`` returns the figure instead.
    """
    entry = _lessons.lesson(stem)
    built = set(_lessons.built_before(entry.stem))
    fig = draw_model_map(built=built, focus=entry.highlighted, marks=entry.marks, labels=entry.labels,
                         title=f"Lesson {entry.number}, {entry.title}: where it sits in the Transformer")
    if not show:
        return fig
    plt.show()
    plt.close(fig)
    return None
