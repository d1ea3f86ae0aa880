"""Watching a learner's code at work: forward hooks on the checker's own instances (removed afterwards), and a
torch function mode that sees every use of some weights, however they are applied.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.overrides import TorchFunctionMode


class Recorder:
    """Records the inputs and outputs of named submodules while a block runs: ``with Recorder(m, names) as rec:``."""

    def __init__(self, module: nn.Module, names: Sequence[str]):
        self.module, self.names = module, list(names)
        self.calls: dict[str, list[tuple[tuple, dict, object]]] = {n: [] for n in self.names}
        self._handles: list = []

    def __enter__(self) -> "Recorder":
        for name in self.names:
            sub = self.module.get_submodule(name)

            def hook(_m, args, kwargs, output, _name=name):
                self.calls[_name].append((args, kwargs, output))

            self._handles.append(sub.register_forward_hook(hook, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def only(self, name: str) -> tuple[tuple, dict, object] | None:
        """The one call of ``name`` (None when it was called zero or several times)."""
        calls = self.calls[name]
        return calls[0] if len(calls) == 1 else None

    def first_input(self, name: str) -> torch.Tensor | None:
        call = self.only(name)
        if call is None:
            return None
        args, kwargs, _ = call
        value = args[0] if args else next(iter(kwargs.values()), None)
        return value if isinstance(value, torch.Tensor) else None

    def input(self, name: str, position: int, keyword: str) -> torch.Tensor | None:
        """The argument at ``position`` (or passed as ``keyword``) of the one call of ``name``."""
        call = self.only(name)
        if call is None:
            return None
        args, kwargs, _ = call
        value = args[position] if len(args) > position else kwargs.get(keyword)
        return value if isinstance(value, torch.Tensor) else None

    def output(self, name: str) -> torch.Tensor | None:
        call = self.only(name)
        return call[2] if call is not None and isinstance(call[2], torch.Tensor) else None




_CONSUMERS = {torch.nn.functional.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__,
              torch.Tensor.__rmatmul__, torch.mm, torch.bmm, torch.addmm, torch.einsum}


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


class WeightUses(TorchFunctionMode):
    """Every use of some named weight matrices while a block runs: as a module, through F.linear, or in a matmul.

    ``with WeightUses({"W_q": layer.W_q.weight, ...}) as uses:`` records, per use, the name, the tensor the
    weight was applied to, and the result (a view of the weight, such as ``W.weight.T``, counts as the weight).
    """

    def __init__(self, weights: dict[str, torch.Tensor]):
        super().__init__()
        self.names = {_storage(w): name for name, w in weights.items()}
        self.calls: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _CONSUMERS:
            tensors = _tensors(args) + _tensors(list((kwargs or {}).values()))
            weight = next((t for t in tensors if _storage(t) in self.names), None)
            if weight is not None:
                applied = next((t for t in tensors if t is not weight and t.dim() >= 2 and _storage(t) not in self.names), None)
                if applied is not None and isinstance(out, torch.Tensor):
                    self.calls.append((self.names[_storage(weight)], applied.detach(), out.detach()))
        return out

    def take(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        calls, self.calls = self.calls, []
        return calls


__all__ = ["Recorder", "WeightUses"]
