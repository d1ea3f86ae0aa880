"""PyTorch's own layers carrying the learner's weights: the oracles of lessons 05, 07 and 09.

:class:`LayerLayout` finds the parts of one learner layer (:mod:`.anatomy`) and
yields ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` twins in
float64, one per plausible wiring (which attention is self- and which
cross-attention, which LayerNorm closes, or with ``norm_first=True`` opens, which
sublayer). :func:`torch_mask` turns our masks (True = may attend) into PyTorch's
(True = blocked).
"""

from __future__ import annotations

import copy
import itertools
from typing import Iterator

import torch
from torch import nn

from .._core import generator
from .anatomy import attention_modules, feed_forward_linears, layer_norms

_PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def prepared_norm(norm: nn.Module, d_model: int) -> nn.Module:
    """A float64 stand-in for a layer norm of the learner's own, to sit in a PyTorch layer's norm slot."""
    z = torch.randn(2, 3, d_model, generator=generator(12))
    try:
        twin = copy.deepcopy(norm).double()
        with torch.no_grad():
            if torch.allclose(twin(z.double()), norm(z).double(), atol=1e-5, rtol=1e-4):
                return twin
    except Exception:  # cannot be copied or run in float64: borrow it as it is
        pass
    return _Borrowed(norm)


class _Borrowed(nn.Module):
    """Runs a learner's norm in its own dtype and hands back float64."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = next((p.dtype for p in self.norm.parameters()), torch.float32)
        return self.norm(x.to(dtype)).double()


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


def randomise_norms(norms: list[nn.Module], generator: torch.Generator) -> None:
    """Give each layer norm its own random gain and bias, so that which one is used where shows."""
    with torch.no_grad():
        for norm in norms:
            if isinstance(norm, nn.LayerNorm):
                params = [norm.weight, getattr(norm, "bias", None)]
            else:  # the learner's own: gain first, then bias, by convention
                params = list(norm.parameters())
            for i, p in enumerate(params):
                if p is not None:
                    p.copy_((1.0 if i == 0 else 0.0) + 0.5 * torch.randn(p.shape, generator=generator))


def norm_assignments(norms: list[nn.Module], slots: int) -> Iterator[tuple[nn.Module, ...]]:
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

    def __init__(self, layer: nn.Module, kind: str, d_model: int, num_heads: int, d_ff: int, norm_first: bool = False):
        self.layer = layer
        self.kind = kind  # "encoder" or "decoder"
        self.norm_first = norm_first  # pre-LN twins (lesson 09): each LayerNorm opens its sublayer
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.attentions = attention_modules(layer)
        want = 1 if kind == "encoder" else 2
        fits = len(self.attentions) == want
        self.norms = layer_norms(layer, d_model) if fits else []
        self.ffn = feed_forward_linears(layer, d_model, d_ff, self.attentions) if fits else None
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
            return "found no nn.LayerNorm, nor a module of your own that normalises each position"
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
            batch_first=True, norm_first=self.norm_first, dtype=torch.float64,
        ).eval()
        copy_linear(self.ffn[0], twin.linear1)
        copy_linear(self.ffn[1], twin.linear2)
        orders = [tuple(self.attentions)]
        if self.kind == "decoder":
            orders.append(tuple(reversed(self.attentions)))
        names = ["norm1", "norm2"] + (["norm3"] if self.kind == "decoder" else [])
        own = [getattr(twin, n) for n in names]
        stand_ins = {id(n): prepared_norm(n, self.d_model) for n in self.norms if not isinstance(n, nn.LayerNorm)}
        for attentions in orders:
            copy_attention(attentions[0], twin.self_attn)
            if self.kind == "decoder":
                copy_attention(attentions[1], twin.multihead_attn)
            for norms in norm_assignments(self.norms, self.slots):
                for name, slot, norm in zip(names, own, norms):
                    if isinstance(norm, nn.LayerNorm):
                        copy_norm(norm, slot)
                        setattr(twin, name, slot)
                    else:
                        setattr(twin, name, stand_ins[id(norm)])
                yield twin, attentions, norms


def run_twin(twin: nn.Module, x: torch.Tensor, memory: torch.Tensor | None = None,
             src_mask: torch.Tensor | None = None, tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
    """A twin's output (masks in PyTorch's form); an encoder twin with norms of the learner's own
    is run sublayer by sublayer, since PyTorch's fused path would read gains and biases directly."""
    if isinstance(twin, nn.TransformerDecoderLayer):
        return twin(x, memory, tgt_mask=tgt_mask, memory_mask=src_mask)
    if isinstance(twin.norm1, nn.LayerNorm) and isinstance(twin.norm2, nn.LayerNorm):
        return twin(x, src_mask=src_mask)
    if twin.norm_first:  # pre-LN: x + sublayer(norm(x))
        h = twin.norm1(x)
        y = x + twin.self_attn(h, h, h, attn_mask=src_mask, need_weights=False)[0]
        return y + twin.linear2(twin.activation(twin.linear1(twin.norm2(y))))
    y = twin.norm1(x + twin.self_attn(x, x, x, attn_mask=src_mask, need_weights=False)[0])
    return twin.norm2(y + twin.linear2(twin.activation(twin.linear1(y))))


__all__ = ["LayerLayout", "copy_attention", "copy_linear", "copy_norm", "norm_assignments", "prepared_norm", "randomise_norms",
           "run_twin", "torch_mask"]
