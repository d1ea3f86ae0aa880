"""Shapes, traced from your own model: every module's input and output shapes for one batch, as a table and on the map.

    from course_utils.shapes import trace_shapes
    trace_shapes(model, src, tgt);   # prints the table, draws the map with the shapes on it

It runs one forward pass of a *copy* of your model, in eval mode and without gradients, with forward hooks on
every module, so your model, its attributes and the random state are exactly as they were. When your model
raises, you get the table up to that point and the module it was inside, not a traceback.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
from typing import Any

import torch
from torch import nn

__all__ = ["ShapeRow", "ShapeTrace", "trace_shapes", "course_model"]


@dataclasses.dataclass
class ShapeRow:
    """One call of one module: its name in the model (``encoder_layers.0.self_attn``), its class, the shapes."""

    name: str
    kind: str
    inputs: str
    output: str = "(did not return)"
    call: int = 1  # the module's first, second, ... call in the pass
    source_tokens: int | None = None  # the length of the sequence it saw (to tell source from target)


@dataclasses.dataclass
class ShapeTrace:
    """What ``trace_shapes`` saw: one row per module call, in the order the calls began."""

    rows: list[ShapeRow]
    src_shape: tuple[int, ...]
    tgt_shape: tuple[int, ...]
    error: str | None = None
    attention_weights: dict[str, str] = dataclasses.field(default_factory=dict)  # module name -> weights' shape
    masks: dict[str, str] = dataclasses.field(default_factory=dict)  # module name -> the mask it was given

    def table(self) -> str:
        """The rows as a fixed-width table, each module indented under the module that called it, its inputs last;
        later layers whose shapes repeat layer 0's are folded into one line."""
        depth: dict[str, int] = {"(the model)": 0}
        lines = []
        for row in _folded(self.rows):
            name = row if isinstance(row, str) else row.name
            parent = max((n for n in depth if n == "(the model)" or name.startswith(n + ".")),
                          key=lambda n: -1 if n == "(the model)" else len(n), default=None)
            level = 0 if name == "(the model)" or parent is None else depth[parent] + 1
            short = name if parent in (None, "(the model)") else name[len(parent) + 1:]
            if isinstance(row, str):
                lines.append(("  " * level + short, None, None, None))
                continue
            depth.setdefault(name, level)
            label = "  " * level + short + (f" (call {row.call})" if row.call > 1 else "")
            lines.append((label, row.kind, row.output, row.inputs))
        header = ("module", "class", "output", "inputs")
        full = [line for line in lines if line[1] is not None]
        widths = [max(len(header[i]), *(len(line[i]) for line in full)) for i in range(3)]
        out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[3],
               "  ".join("-" * w for w in widths) + "  " + "-" * len(header[3])]
        indent = " " * (sum(widths) + 2 * len(widths))
        for line in lines:
            if line[1] is None:
                out.append(line[0])
                continue
            first, *rest = _wrapped(line[3], _INPUTS_WIDTH)
            out.append("  ".join(v.ljust(w) for v, w in zip(line, widths)) + "  " + first)
            out += [indent + more for more in rest]
        if self.error:
            out += ["", self.error]
        return "\n".join(out)

    __str__ = table

    def map_shapes(self) -> dict[str, str]:
        """Box name on the map (``course_utils.model_map.BOXES``) -> the shape leaving it, for the boxes recognised."""
        shapes = {"source_tokens": _fmt(self.src_shape), "target_tokens": _fmt(self.tgt_shape)}
        positions = [r for r in self.rows if r.name == "positional_encoding"]
        for i, row in enumerate(positions[:2]):
            if len(positions) == 2 and self.src_shape[-1] != self.tgt_shape[-1]:
                side = "source" if row.source_tokens == self.src_shape[-1] else "target"
            else:
                side = ("source", "target")[i]
            shapes[f"{side}_positions"] = row.output
        for row in self.rows:
            box = _BOX_OF.get(row.name)
            if box and row.call == 1 and row.output.startswith("("):
                shapes[box] = row.output
        for name, weights in self.attention_weights.items():
            box = _BOX_OF.get(name)
            if box:
                shapes[f"{box}.attention"] = f"weights {weights}"
        for name, mask in self.masks.items():
            box = {"encoder_layers.0.self_attn": "padding_mask", "decoder_layers.0.self_attn": "target_mask"}.get(name)
            if box:
                shapes[box] = mask
        return shapes

    def draw(self, title: str = "Your model's shapes, traced from one batch"):
        """The map with the traced shapes on it (every part drawn as built); returns the figure."""
        from .model_map import draw_model_map

        notes = [f"B = {self.src_shape[0]} sentences, source length {self.src_shape[-1]}, "
                 f"target length {self.tgt_shape[-1]}", "each layer: the shapes of layer 0"]
        return draw_model_map(built="all", shapes=self.map_shapes(), title=title, notes=notes, key=False)


#: the names the course's contracts give the model's submodules -> the box they are on the map
_BOX_OF = {
    "src_embed": "source_embedding",
    "tgt_embed": "target_embedding",
    "encoder_layers.0.self_attn": "encoder_self_attention",
    "encoder_layers.0.norm1": "encoder_norm1",
    "encoder_layers.0.feed_forward": "encoder_feed_forward",
    "encoder_layers.0.norm2": "encoder_norm2",
    "decoder_layers.0.self_attn": "decoder_self_attention",
    "decoder_layers.0.norm1": "decoder_norm1",
    "decoder_layers.0.cross_attn": "cross_attention",
    "decoder_layers.0.norm2": "decoder_norm2",
    "decoder_layers.0.feed_forward": "decoder_feed_forward",
    "decoder_layers.0.norm3": "decoder_norm3",
    "generator": "output_projection",
}


#: the inputs column wraps after this many characters, so that a table fits a notebook's width
_INPUTS_WIDTH = 40


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` cut between its arguments (a comma before a name, not inside a shape) into lines of at most
    ``width`` characters (a longer argument stays whole)."""
    pieces = re.split(r", (?=[A-Za-z_])", text)
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 2 + len(piece) <= width:
            lines[-1] += ", " + piece
        else:
            lines[-1] += ","
            lines.append(piece)
    return lines


def _fmt(shape: Any) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ")"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = "" if value.is_floating_point() else f" {str(value.dtype).removeprefix('torch.')}"
        return _fmt(value.shape) + dtype
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return ", ".join(_describe(v) for v in value)
    if value is None:
        return "None"
    return type(value).__name__


def _named_inputs(module: nn.Module, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(parameter name, value) of a call, the names from forward's signature where it can be bound."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
        pairs = []
        for name, value in bound.arguments.items():
            kind = inspect.signature(module.forward).parameters[name].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                pairs += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            elif kind == inspect.Parameter.VAR_KEYWORD:
                pairs += list(value.items())
            else:
                pairs.append((name, value))
        return pairs
    except (TypeError, ValueError):
        return [(f"arg{i}", v) for i, v in enumerate(args)] + list(kwargs.items())


def _inputs_text(pairs: list[tuple[str, Any]]) -> str:
    """``query = key = value (2, 7, 32), mask (2, 1, 1, 7) bool``: one tensor passed as several arguments once."""
    pairs = [(name, value) for name, value in pairs if value is not None]
    if len(pairs) == 1 and isinstance(pairs[0][1], torch.Tensor):
        return _describe(pairs[0][1])
    groups: list[tuple[list[str], Any]] = []
    for name, value in pairs:
        same = next((g for g in groups if isinstance(value, torch.Tensor) and g[1] is value), None)
        if same is not None:
            same[0].append(name)
        else:
            groups.append(([name], value))
    return ", ".join(f"{' = '.join(names)} {_describe(value)}" for names, value in groups) or "-"


_LAYER = re.compile(r"^(encoder_layers|decoder_layers|layers|.*\.layers)\.(\d+)(\..*)?$")


def _folded(rows: list[ShapeRow]) -> list[ShapeRow | str]:
    """Rows of layers 1, 2, ... that repeat layer 0's shapes exactly, replaced by one line that says so."""
    def key(row: ShapeRow) -> tuple:
        m = _LAYER.match(row.name)
        return (m.group(1), m.group(3) or "", row.kind, row.inputs, row.output, row.call) if m else ()

    layer0: dict[str, list[tuple]] = {}
    by_layer: dict[tuple[str, str], list[ShapeRow]] = {}
    for row in rows:
        m = _LAYER.match(row.name)
        if m:
            by_layer.setdefault((m.group(1), m.group(2)), []).append(row)
    for (stack, index), layer_rows in by_layer.items():
        if index == "0":
            layer0[stack] = [key(r) for r in layer_rows]
    same = {(stack, index) for (stack, index), layer_rows in by_layer.items()
            if index != "0" and [key(r) for r in layer_rows] == layer0.get(stack)}
    out: list[ShapeRow | str] = []
    pending: dict[str, list[str]] = {}
    for row in rows:
        m = _LAYER.match(row.name)
        if m and (m.group(1), m.group(2)) in same:
            indices = pending.setdefault(m.group(1), [])
            if m.group(2) not in indices:
                indices.append(m.group(2))
            continue
        for stack in [s for s in pending if not (m and m.group(1) == s)]:
            out.append(_fold_line(stack, pending.pop(stack)))
        out.append(row)
    for stack, indices in pending.items():
        out.append(_fold_line(stack, indices))
    return out


def _fold_line(stack: str, indices: list[str]) -> str:
    which = indices[0] if len(indices) == 1 else f"{indices[0]} to {indices[-1]}"
    return f"{stack}.{which}: the same shapes as {stack}.0"


def trace_shapes(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, show: bool = True,
                 skip_dropout: bool = True, title: str = "Your model's shapes, traced from one batch") -> ShapeTrace:
    """Run ``model(src, tgt)`` once on a copy, in eval mode, and record every module call's shapes.

    With ``show`` (the default) it prints the table and draws the map with the shapes on it. Dropout modules
    leave shapes as they are and are left out of the table unless ``skip_dropout=False``. Returns the trace.
    """
    from .checks._core import preserved_state

    if not isinstance(model, nn.Module):
        raise TypeError(f"trace_shapes needs your model (an nn.Module), not {type(model).__name__}")
    for name, value in (("src", src), ("tgt", tgt)):
        if not isinstance(value, torch.Tensor) or value.dim() != 2:
            raise TypeError(f"{name} should be a (batch, length) tensor of token ids, not {_describe(value)}")
    trace = ShapeTrace(rows=[], src_shape=tuple(src.shape), tgt_shape=tuple(tgt.shape))
    with preserved_state():
        try:
            twin = copy.deepcopy(model)  # the hooks, eval mode and attributes a forward pass sets stay on the copy
        except Exception:  # pragma: no cover - a model that cannot be copied: trace the original, restore it after
            twin = None
        _run(twin if twin is not None else model, src, tgt, trace, skip_dropout, restore=twin is None)
    if show:
        import matplotlib.pyplot as plt

        print(trace.table())
        fig = trace.draw(title)
        plt.show()
        plt.close(fig)
    return trace


def _run(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, trace: ShapeTrace, skip_dropout: bool,
         restore: bool) -> None:
    names = {module: name or "(the model)" for name, module in model.named_modules()}
    modes = {module: module.training for module in names}
    saved = {module: dict(module.__dict__) for module in names} if restore else {}
    calls: dict[str, int] = {}
    open_rows: list[ShapeRow] = []
    handles = []

    def before(module, args, kwargs):
        name = names[module]
        calls[name] = calls.get(name, 0) + 1
        pairs = _named_inputs(module, args, kwargs)
        first = next((v for _, v in pairs if isinstance(v, torch.Tensor)), None)
        cls = type(module)
        kind = f"{cls.__name__.lstrip('_')} (course's)" if cls.__module__.startswith("course_utils") else cls.__name__
        row = ShapeRow(name, kind, _inputs_text(pairs), call=calls[name],
                       source_tokens=first.shape[1] if first is not None and first.dim() >= 2 else None)
        if name.endswith("self_attn") and calls[name] == 1:
            mask = next((v for k, v in pairs if k == "mask" or k.endswith("mask")), None)
            if mask is None and len(pairs) >= 4 and isinstance(pairs[3][1], torch.Tensor):
                mask = pairs[3][1]
            if isinstance(mask, torch.Tensor):
                trace.masks[name] = _describe(mask)
        if not (skip_dropout and isinstance(module, nn.Dropout)):
            trace.rows.append(row)
        open_rows.append(row)

    def after(module, args, kwargs, output):
        row = open_rows.pop()
        row.output = _describe(output)
        weights = getattr(module, "attention_weights", None)
        if isinstance(weights, torch.Tensor) and row.call == 1:
            trace.attention_weights[row.name] = _fmt(weights.shape)

    try:
        for module in names:
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(module.register_forward_hook(after, with_kwargs=True))
        model.eval()
        with torch.no_grad():
            try:
                model(src, tgt)
            except NotImplementedError:  # an exercise not done yet: `with requires(...)` says which
                raise
            except Exception as exc:  # the learner's bug: say where, do not raise
                inside = open_rows[-1] if open_rows else None
                where = f" inside {inside.name} ({inside.kind}), called with {inside.inputs}" if inside else ""
                trace.error = (f"Your model raised {type(exc).__name__}: {exc}\n"
                               f"It happened{where}. The rows above are the calls that finished or began before it.")
    finally:
        for handle in handles:
            handle.remove()
        for module, training in modes.items():
            module.training = training
        for module, attributes in saved.items():
            module.__dict__.clear()
            module.__dict__.update(attributes)


def course_model(attention: type | None = None, pad_id: int = 0) -> nn.Module:
    """The course's own small Transformer (d_model 24, 4 heads, 2 + 2 layers, vocabularies of 11 and 13 words), in eval
    mode; with ``attention``, a class like lesson 04's ``MultiHeadAttention(d_model, num_heads)``, in every place where
    the model attends (the encoder's self-attention, the decoder's masked self-attention and cross-attention)."""
    from .checks.stages import standins as _standins

    model = _standins.CourseTransformer(seed=0, pad_id=pad_id)
    if attention is not None:
        for layer in [*model.encoder_layers, *model.decoder_layers]:
            layer.self_attn = attention(_standins.D_MODEL, _standins.HEADS)
            if hasattr(layer, "cross_attn"):
                layer.cross_attn = attention(_standins.D_MODEL, _standins.HEADS)
    return model.eval()
