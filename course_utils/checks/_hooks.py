"""Watching a learner's submodules at work: forward hooks on the checker's own instances, removed afterwards."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


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

    def output(self, name: str) -> torch.Tensor | None:
        call = self.only(name)
        return call[2] if call is not None and isinstance(call[2], torch.Tensor) else None


__all__ = ["Recorder"]
