"""Devices in checkers: run learner code with its inputs on a GPU, pretended where there is none.

``run_on_gpu`` calls the learner's code with every tensor argument moved to the
pretend GPU of :mod:`._devices` (the data stays in CPU memory; only the device
bookkeeping is pretended, exactly as CUDA would enforce it). A tensor created
on the CPU and mixed with the inputs becomes a named failure, and so does a
result left on the CPU. On a machine with ``cuda`` or ``mps``, ``real_gpu()``
names it, so that a checker can run the same inputs there as well.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import _devices
from ._core import Check, Raised

#: How messages refer to the pretended device.
WHERE = f"(inputs on {_devices.PRETEND}, pretended on this machine)"


def _each(convert: Callable[[torch.Tensor], torch.Tensor], value: Any) -> Any:
    """``value`` with ``convert`` applied to every tensor in it (tuples and lists followed)."""
    if isinstance(value, torch.Tensor):
        return convert(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_each(convert, v) for v in value)
    return value


def _moved(value: Any) -> Any:
    return _each(_devices.on_device, value)


def run_on_gpu(check: Check, fn: Callable, *args: Any, what: str, inputs: str, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with its tensors on the pretend GPU; a :class:`Raised` when the pretence got in the way.

    Fails, naming the operation and the learner's line, when the code mixes a CPU tensor with the inputs.
    ``inputs`` names the inputs in the message ("query, key and value").
    """
    with _devices.elsewhere():
        result = check.attempt(fn, *_moved(args), what=what, **{k: _moved(v) for k, v in kwargs.items()})
    if isinstance(result, Raised) and isinstance(result.exception, _devices.DeviceMismatch):
        line = next((ln.strip() for ln in result.message.splitlines() if ln.strip().startswith("at ")), "")
        operation = str(result.exception.operation).removeprefix("in ")
        check.fail(
            f"Your {what} creates a tensor on the CPU although {inputs} are on a GPU {WHERE}: "
            f"{operation} mixed it with them{' (' + line + ')' if line else ''}.\n"
            f"On Colab's GPU this is the error \"Expected all tensors to be on the same device\". Create every "
            f"new tensor on the device of the inputs: `device=...device` in `torch.zeros`, `torch.ones`, "
            f"`torch.arange`, or `.to(tokens.device)`, or use `torch.zeros_like(...)` / `x.new_zeros(...)`."
        )
    return result


def require_on_gpu(check: Check, what: str, inputs: str, outputs: dict[str, Any]) -> None:
    """Fail when a result of :func:`run_on_gpu` came back on the CPU."""
    cpu = [name for name, value in outputs.items()
           if isinstance(value, torch.Tensor) and not _devices.is_on_device(value)]
    if cpu:
        check.fail(
            f"With {inputs} on a GPU {WHERE}, your {what} returns {' and '.join(cpu)} on the CPU.\n"
            f"The next step would then mix devices. Likely cause: `.cpu()`, `.numpy()`, `torch.from_numpy`, "
            f"`torch.tensor(...)` or a tensor created without `device=` on the way; keep every step on the "
            f"device of the inputs."
        )


def on_gpu(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the pretend GPU (for moving a learner's module's buffers, as ``.to(device)`` would)."""
    return _devices.on_device(tensor)


def plain(value: Any) -> Any:
    """A result of :func:`run_on_gpu` as ordinary CPU tensors."""
    return _each(_devices.plain, value)


def real_gpu() -> str | None:
    """``"cuda"`` or ``"mps"`` when this machine has one, else None."""
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else None


def require_real_gpu(check: Check, fn: Callable, *args: Any, what: str, inputs: str) -> None:
    """On a machine with a GPU, run ``fn`` with ``args`` already there; fail unless its tensors come back there."""
    device = real_gpu()
    if device is None:
        return
    result = check.call(fn, *args, what=what)
    items = result if isinstance(result, (tuple, list)) else (result,)
    away = [str(t.device) for t in items if isinstance(t, torch.Tensor) and t.device.type != device]
    if away:
        check.fail(f"With {inputs} on {device}, your {what} returns a tensor on {away[0]}: keep every step on the "
                   f"device of the inputs.")


__all__ = ["WHERE", "on_gpu", "require_real_gpu", "plain", "real_gpu", "require_on_gpu", "run_on_gpu"]
