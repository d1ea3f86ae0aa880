"""The GPU a checker runs learner code on: a pretended one everywhere, the real one where there is one.

Code such as ``torch.full((B, 1), bos_id)`` (no ``device=``) runs on the CPU and
crashes on Colab's GPU with "Expected all tensors to be on the same device".
A checker that only ever runs on the CPU cannot see the difference, and the
``meta`` device does not help where the learner's code reads values (a loop
that stops when ``finished.all()``).

So the checker hands the learner's code tensors that *say* they live on
``cuda:0`` (an :class:`OnDevice` subclass of ``torch.Tensor`` whose ``.device``
reports it) while their data stays in CPU memory, and runs that code inside
:func:`elsewhere`, a ``TorchFunctionMode`` that:

* turns every tensor asked for on that device (``device=src.device``,
  ``.to(src.device)``, ``.cuda()``, ``src.new_full(...)``,
  ``torch.zeros_like(src)``, results of operations on such tensors) into an
  ``OnDevice`` tensor, and leaves the others plain: a plain tensor stands for
  a CPU tensor;
* raises :class:`DeviceMismatch`, as CUDA would, when an operation mixes the two
  (a plain tensor with at least one dimension: PyTorch, too, lets 0-d CPU
  tensors take part in GPU operations). Indexing, ``copy_``, ``to`` and
  ``type_as`` may mix them, as on a real GPU.

Such a tensor answers ``is_cuda`` with False, as a tensor on Apple's GPU (mps)
does: code that moves its tensors only ``if x.is_cuda`` (or with ``.cuda()``,
which means the first CUDA device whatever the input's device) breaks on a Mac,
and the pretence shows it; code that follows ``x.device`` works everywhere.

Values are computed by PyTorch on the CPU, exactly; only the device bookkeeping
is pretended. Code that asks ``torch.cuda.is_available()`` or hard-codes
``"cuda"`` is caught by a second run, :func:`gpu_present`: the inputs stay on
the CPU while the machine says it has a GPU. The limit: tensors made by NumPy
or by C++ extensions bypass the mode.

:func:`moved` puts every tensor of a value (tuples, lists and dicts followed) on
the pretend GPU, :func:`module_state` a module's parameters and buffers (for
``torch.func.functional_call``, which leaves the learner's module untouched),
and :func:`real_gpu` names the machine's own accelerator, if any. The stages
that use them, with their messages, live in :mod:`.stages`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

#: the device the pretend tensors report
PRETEND = torch.device("cuda", 0)

_DEVICE_GET = torch.Tensor.device.__get__
_IS_CUDA_GET = torch.Tensor.is_cuda.__get__
# operations that accept tensors on different devices on a real GPU too
_MAY_MIX = {torch.Tensor.to, torch.Tensor.type_as, torch.Tensor.copy_, torch.Tensor.__getitem__,
            torch.Tensor.__setitem__}


_FACTORIES = {torch.full, torch.zeros, torch.ones, torch.empty, torch.tensor, torch.as_tensor, torch.arange,
              torch.eye, torch.linspace, torch.rand, torch.randn, torch.randint, torch.triu, torch.tril,
              torch.Tensor.cpu, torch.Tensor.to}
_OURS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.path.abspath(torch.__file__)))
_origins: dict[int, tuple[weakref.ref, str]] = {}  # id of a CPU tensor -> (the tensor, weakly; its line)


class DeviceMismatch(RuntimeError):
    """An operation mixed a tensor on the pretend GPU with a CPU tensor."""

    def __init__(self, operation: str, origin: str = ""):
        super().__init__(
            f"Expected all tensors to be on the same device, but found at least two devices, {PRETEND} and cpu! "
            f"({operation})" + (f"; the CPU tensor was made {origin}" if origin else "")
        )
        self.operation = operation
        self.origin = origin


def _learner_line() -> str:
    """``by `line` (in function)`` for the nearest frame outside this package and torch."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_OURS):
            import linecache

            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return f"by `{line}` (in {frame.f_code.co_name})" if line else f"in {frame.f_code.co_name}"
        frame = frame.f_back
    return ""


def _remember(out: Any) -> Any:
    """Note where a CPU tensor made inside the block comes from."""
    if isinstance(out, torch.Tensor) and not isinstance(out, OnDevice):
        if len(_origins) > 10_000:  # entries of tensors long gone
            _origins.clear()
        _origins[id(out)] = (weakref.ref(out), _learner_line())
    return out


def _origin(tensors: list[torch.Tensor]) -> str:
    for t in tensors:
        ref, line = _origins.get(id(t), (None, ""))
        if ref is not None and ref() is t:
            return line
    return ""


def each(convert, value: Any) -> Any:
    """``value`` with ``convert`` applied to every tensor in it (tuples, lists and dicts followed)."""
    if isinstance(value, torch.Tensor):
        return convert(value)
    if isinstance(value, (tuple, list)):
        return type(value)(each(convert, v) for v in value)
    if isinstance(value, dict):
        return {k: each(convert, v) for k, v in value.items()}
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    owner = "torch.Tensor." if getattr(func, "__qualname__", "").startswith(("Tensor.", "_TensorBase.")) else ""
    return f"`{owner or 'torch.'}{name}`" if not name.startswith("__") else f"the operator {name}"


class OnDevice(torch.Tensor):
    """A CPU tensor that reports the pretend GPU as its device."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == _DEVICE_GET:
            return PRETEND
        if func == _IS_CUDA_GET:  # as on Apple's GPU (mps): code that moves tensors only `if x.is_cuda` shows
            return False
        if func not in _MAY_MIX:
            cpu = [t for t in (*_tensors(args), *_tensors(kwargs)) if not isinstance(t, OnDevice) and t.dim() > 0]
            if cpu:
                raise DeviceMismatch(f"in {_name(func)}", _origin(cpu))
        return super().__torch_function__(func, types, args, kwargs)


def on_device(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s data, as a tensor on the pretend GPU."""
    return tensor.as_subclass(OnDevice)


def plain(tensor: torch.Tensor) -> torch.Tensor:
    """The data of a pretend-GPU tensor as an ordinary CPU tensor (shares memory)."""
    return tensor.as_subclass(torch.Tensor)


def is_on_device(value: Any) -> bool:
    return isinstance(value, OnDevice)


def moved(value: Any) -> Any:
    """Every tensor in ``value`` on the pretend GPU."""
    return each(on_device, value)


def plain_all(value: Any) -> Any:
    """Every pretend-GPU tensor in ``value`` as an ordinary CPU tensor."""
    return each(plain, value)


def module_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's parameters and buffers on the pretend GPU, for ``torch.func.functional_call``."""
    return {name: on_device(t.detach()) for name, t in (*module.named_parameters(), *module.named_buffers())}


def real_gpu() -> str | None:
    """``"cuda"`` or ``"mps"`` when this machine has one, else None."""
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else None


def _pretend(device: Any) -> bool | None:
    """True for the pretend GPU, False for the CPU, None when ``device`` names no device."""
    if isinstance(device, OnDevice):
        return True
    if isinstance(device, torch.Tensor):
        return False
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        return None
    return device.type != "cpu"


class _Elsewhere(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.to:
            out = _to(func, args, kwargs)
        elif func is torch.Tensor.cuda:
            out = on_device(plain(args[0]))
        elif func is torch.Tensor.cpu:
            out = plain(args[0]).clone()
        elif "device" in kwargs and _pretend(kwargs["device"]) is not None:
            away = _pretend(kwargs.pop("device"))
            out = func(*args, **kwargs)
            out = on_device(plain(out)) if away else plain(out) if isinstance(out, torch.Tensor) else out
        else:
            out = func(*args, **kwargs)
        if func in _FACTORIES:
            return _remember(out)
        if isinstance(out, torch.Tensor) and not isinstance(out, OnDevice):  # a CPU tensor made from CPU tensors
            origin = _origin([t for t in (*_tensors(args), *_tensors(kwargs)) if not isinstance(t, OnDevice)])
            if origin:
                _origins[id(out)] = (weakref.ref(out), origin)
        return out


def _to(func, args: tuple, kwargs: dict) -> torch.Tensor:
    """``tensor.to(...)``: the device part is pretended, the rest (dtype, copy) is real."""
    self, rest = args[0], []
    target = _pretend(kwargs.pop("device")) if "device" in kwargs else None
    for arg in args[1:]:
        where = None if isinstance(arg, torch.dtype) else _pretend(arg)
        if where is None:
            rest.append(arg)
        else:
            target = where
            if isinstance(arg, torch.Tensor):
                rest.append(arg.dtype)
    out = func(plain(self), *rest, **kwargs)
    away = is_on_device(self) if target is None else target
    return on_device(out) if away else out


@contextlib.contextmanager
def elsewhere() -> Iterator[None]:
    """Run a block in which :class:`OnDevice` tensors behave like tensors on a GPU."""
    try:
        with _Elsewhere():
            yield
    finally:
        _origins.clear()


@contextlib.contextmanager
def gpu_present() -> Iterator[None]:
    """A block in which ``torch.cuda.is_available()`` answers True, as on a machine with a GPU (Colab's).

    Inside :func:`elsewhere`, with the inputs left on the CPU, code that picks its device by asking
    (``"cuda" if torch.cuda.is_available() else "cpu"``) or writes ``"cuda"`` makes pretend-GPU tensors, and
    mixing them with the inputs raises :class:`DeviceMismatch`, as it would on that machine.
    """
    original = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        yield
    finally:
        torch.cuda.is_available = original


#: How messages refer to the pretended device.
WHERE = f"({PRETEND}, pretended on this machine)"

__all__ = ["PRETEND", "WHERE", "DeviceMismatch", "OnDevice", "each", "elsewhere", "gpu_present", "is_on_device",
           "module_state",
           "moved", "on_device", "plain", "plain_all", "real_gpu"]
