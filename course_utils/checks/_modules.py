"""Finding the parts of a learner's module by what they are, not by what they are called.

Learners name their submodules freely, so the checkers for lesson 05 locate
the pieces by type and shape: attention modules are the ones that follow the
lesson 04 contract (``W_q``, ``W_k``, ``W_v``, ``W_o`` linears), layer norms are
``nn.LayerNorm`` instances, feed-forward linears are recognised by their sizes.
Once found, the weights are copied into PyTorch's own layers
(``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``), which then
serve as the oracle.
"""

from __future__ import annotations

import itertools
from typing import Iterator

import torch
from torch import nn

_PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def attention_modules(module: nn.Module) -> list[nn.Module]:
    """Submodules following the multi-head attention contract, in registration order."""
    return [
        m
        for m in module.modules()
        if all(isinstance(getattr(m, name, None), nn.Linear) for name in _PROJECTIONS)
    ]


def layer_norms(module: nn.Module) -> list[nn.LayerNorm]:
    """The distinct ``nn.LayerNorm`` submodules, in registration order."""
    return [m for m in module.modules() if isinstance(m, nn.LayerNorm)]


def _inside(modules: list[nn.Module]) -> set[int]:
    return {id(sub) for m in modules for sub in m.modules()}


def linears_outside(module: nn.Module, exclude: list[nn.Module]) -> list[nn.Linear]:
    """``nn.Linear`` submodules that are not part of the modules in ``exclude``."""
    inner = _inside(exclude)
    return [m for m in module.modules() if isinstance(m, nn.Linear) and id(m) not in inner]


def feed_forward_linears(module: nn.Module, d_model: int, d_ff: int, exclude: list[nn.Module]) -> tuple | None:
    """The feed-forward pair (d_model -> d_ff, d_ff -> d_model) outside ``exclude``, if unambiguous."""
    lins = linears_outside(module, exclude)
    first = [m for m in lins if (m.in_features, m.out_features) == (d_model, d_ff)]
    second = [m for m in lins if (m.in_features, m.out_features) == (d_ff, d_model)]
    if len(first) == 1 and len(second) == 1:
        return first[0], second[0]
    return None


def shared_parameter_groups(module: nn.Module) -> list[list[str]]:
    """Names under which one parameter object is registered more than once."""
    by_id: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def count_parameters(module: nn.Module) -> int:
    """Number of distinct trainable scalars (a tied weight counts once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --------------------------------------------------------------------------
# Copying weights into PyTorch's layers.


def _copy(dst: torch.Tensor, src: torch.Tensor | None) -> None:
    with torch.no_grad():
        if src is None:
            dst.zero_()
        else:
            dst.copy_(src.detach().to(dst.dtype).reshape(dst.shape))


def copy_attention(src: nn.Module, dst: nn.MultiheadAttention) -> None:
    """Copy a contract attention module (W_q, W_k, W_v, W_o) into ``nn.MultiheadAttention``."""
    with torch.no_grad():
        dst.in_proj_weight.copy_(torch.cat([getattr(src, n).weight for n in _PROJECTIONS[:3]]).to(dst.in_proj_weight.dtype))
        biases = [getattr(src, n).bias for n in _PROJECTIONS[:3]]
        biases = [torch.zeros(dst.embed_dim) if b is None else b for b in biases]
        dst.in_proj_bias.copy_(torch.cat(biases).to(dst.in_proj_bias.dtype))
    _copy(dst.out_proj.weight, src.W_o.weight)
    _copy(dst.out_proj.bias, src.W_o.bias)


def copy_linear(src: nn.Linear, dst: nn.Linear) -> None:
    _copy(dst.weight, src.weight)
    _copy(dst.bias, src.bias)


def copy_norm(src: nn.LayerNorm, dst: nn.LayerNorm) -> None:
    _copy(dst.weight, src.weight if src.elementwise_affine else torch.ones_like(dst.weight))
    _copy(dst.bias, getattr(src, "bias", None) if src.elementwise_affine else None)
    dst.eps = src.eps


def randomise_norms(norms: list[nn.LayerNorm], generator: torch.Generator) -> None:
    """Give each LayerNorm its own random gain and bias, so that which one is used where shows."""
    with torch.no_grad():
        for norm in norms:
            if norm.weight is not None:
                norm.weight.copy_(1.0 + 0.5 * torch.randn(norm.weight.shape, generator=generator))
            if getattr(norm, "bias", None) is not None:
                norm.bias.copy_(0.5 * torch.randn(norm.bias.shape, generator=generator))


def norm_assignments(norms: list[nn.LayerNorm], slots: int) -> Iterator[tuple[nn.LayerNorm, ...]]:
    """Every way of putting the learner's LayerNorms into the ``slots`` places of a layer.

    One LayerNorm per place first (in every order), then those that use one twice.
    """
    distinct = list(itertools.permutations(norms, slots)) if len(norms) >= slots else []
    yield from distinct
    for assignment in itertools.product(norms, repeat=slots):
        if len(set(map(id, assignment))) < slots:
            yield assignment


def torch_mask(mask: torch.Tensor | None, batch: int, num_heads: int, len_q: int, len_k: int) -> torch.Tensor | None:
    """Our mask (True = may attend, broadcastable to (B, 1, L_q, L_k)) as PyTorch's (B*H, L_q, L_k), True = blocked."""
    if mask is None:
        return None
    full = mask.bool().expand(batch, 1, len_q, len_k).expand(batch, num_heads, len_q, len_k)
    return ~full.reshape(batch * num_heads, len_q, len_k)


class LayerLayout:
    """Where the parts of one learner layer are, and PyTorch twins built from them."""

    def __init__(self, layer: nn.Module, kind: str, d_model: int, num_heads: int, d_ff: int):
        self.layer = layer
        self.kind = kind  # "encoder" or "decoder"
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.attentions = attention_modules(layer)
        self.norms = layer_norms(layer)
        self.ffn = feed_forward_linears(layer, d_model, d_ff, self.attentions)
        self.slots = 2 if kind == "encoder" else 3
        self.missing = self._missing()

    def _missing(self) -> str:
        """Why the layout cannot be used, or '' when it can."""
        want = 1 if self.kind == "encoder" else 2
        if len(self.attentions) != want:
            return (
                f"found {len(self.attentions)} attention module(s) with W_q, W_k, W_v, W_o "
                f"where {want} {'was' if want == 1 else 'were'} expected"
            )
        if not self.norms:
            return "found no nn.LayerNorm"
        if self.ffn is None:
            return f"found no unique pair of nn.Linear({self.d_model}, {self.d_ff}) and nn.Linear({self.d_ff}, {self.d_model})"
        return ""

    def twins(self) -> Iterator[tuple[nn.Module, tuple, tuple]]:
        """PyTorch layers (float64, eval) with the learner's weights, for every plausible wiring.

        Yields ``(twin, attentions, norms)``: which learner attention module went to
        self- / cross-attention and which LayerNorm went to each slot.
        """
        cls = nn.TransformerEncoderLayer if self.kind == "encoder" else nn.TransformerDecoderLayer
        twin = cls(
            self.d_model, self.num_heads, self.d_ff, dropout=0.0, activation="relu",
            batch_first=True, norm_first=False, dtype=torch.float64,
        ).eval()
        copy_linear(self.ffn[0], twin.linear1)
        copy_linear(self.ffn[1], twin.linear2)
        orders = [tuple(self.attentions)]
        if self.kind == "decoder":
            orders.append(tuple(reversed(self.attentions)))
        slots = [twin.norm1, twin.norm2] + ([twin.norm3] if self.kind == "decoder" else [])
        for attentions in orders:
            copy_attention(attentions[0], twin.self_attn)
            if self.kind == "decoder":
                copy_attention(attentions[1], twin.multihead_attn)
            for norms in norm_assignments(self.norms, self.slots):
                for slot, norm in zip(slots, norms):
                    copy_norm(norm, slot)
                yield twin, attentions, norms
