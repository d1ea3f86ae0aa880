"""Stages about devices: the learner's code on a (pretend, then real) GPU, nothing created on the CPU, nothing put on
a fixed device.
"""


from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import torch
from torch import nn

from . import gpu as _gpu
from .._core import Check, Raised


def create_there(source: str) -> str:
    """The advice for code that created a tensor on the CPU: follow the device of ``source``, an input's name."""
    return (f"Create every new tensor on the device of the inputs: `device={source}.device` in `torch.zeros`, "
            f"`torch.ones`, `torch.full`, `torch.arange`, or `.to({source}.device)`, or use `torch.zeros_like(...)` / "
            f"`{source}.new_zeros(...)`.")


def _cuda_idiom(code: Any) -> str:
    """A word on `is_cuda` / `.cuda()` when the learner's code uses them to place tensors ("" otherwise)."""
    try:
        source = inspect.getsource(code) if code is not None else ""
    except (OSError, TypeError):
        source = ""
    if ".is_cuda" not in source and ".cuda(" not in source:
        return ""
    return (" Moving a tensor with `.cuda()`, or only `if x.is_cuda`, is not enough: on Apple's GPU (mps), which "
            "lesson 00's pick_device chooses on a Mac, `is_cuda` is False and `.cuda()` fails, and on a second "
            "GPU `.cuda()` means the first one. The pretend GPU answers `is_cuda` as mps does.")


def mixed_devices(check: Check, result: Any, what: str, inputs: str, advice: str = create_there("x"),
                  code: Any = None) -> None:
    """Fail when a run on the pretend GPU raised because the code mixed a CPU tensor with the inputs."""
    if isinstance(result, Raised) and isinstance(result.exception, _gpu.DeviceMismatch):
        line = next((ln.strip() for ln in result.message.splitlines() if ln.strip().startswith("in ")), "")
        operation = str(result.exception.operation).removeprefix("in ")
        origin = result.exception.origin
        how = operation if operation.startswith("model.") else f"{operation} mixed them"
        check.fail(
            f"Your {what} creates a tensor on the CPU although {inputs} are on a GPU {_gpu.WHERE}, so it mixes CPU "
            f"tensors with GPU ones: {how}{' (' + line + ')' if line else ''}"
            + (f"; the CPU tensor was made {origin}" if origin else "" if operation.startswith("model.") else
               "; the checker saw no line of this call make that CPU tensor, so it was perhaps kept from an earlier "
               "call (an attribute or a cache set in an earlier forward), or is a tensor attribute that is not a "
               "registered "
               "buffer, or came from NumPy") + ".\n"
            f"On Colab's GPU this is the error \"Expected all tensors to be on the same device\". {advice}"
            + _cuda_idiom(code)
        )


def left_on_cpu(check: Check, outputs: dict[str, Any], what: str, inputs: str, device: str = "",
                code: Any = None) -> None:
    """Fail when a result of a run on a GPU came back on the CPU."""
    where = device or _gpu.WHERE
    cpu = [name for name, value in outputs.items() if isinstance(value, torch.Tensor)
           and (not _gpu.is_on_device(value) if not device else value.device.type != device)]
    if cpu:
        check.fail(
            f"With {inputs} on a GPU {where}, your {what} returns {' and '.join(cpu)} on the CPU.\n"
            f"The next step would then mix devices. Likely cause: `.cpu()`, `.tolist()`, `.numpy()`, "
            f"`torch.tensor(...)` or a tensor created without `device=` on the way; keep every step on the device "
            f"of the inputs (the caller decides where the results go)." + _cuda_idiom(code)
        )


def fixed_device(check: Check, run: Callable[[], Any], what: str, inputs: str, advice: str,
                 code: Any = None) -> None:
    """The inputs on the CPU of a machine that has a GPU (``torch.cuda.is_available()`` answers True): the code
    puts nothing on the GPU on its own (a device chosen by asking, or written as ``"cuda"``).

    ``inputs`` empty: a function given no tensor (``make_causal_mask(size)``) returns its result on the CPU.
    """
    with _gpu.elsewhere(), _gpu.gpu_present():
        result = check.attempt(run, what=what)
    mixed = isinstance(result, Raised) and isinstance(result.exception, _gpu.DeviceMismatch)
    away = not isinstance(result, Raised) and any(_gpu.is_on_device(t) for t in _gpu._tensors(result))
    if not (mixed or away):
        if not inputs:
            check.ok("returns its result on the CPU also on a machine with a GPU (the caller moves it)")
        return
    if not inputs:
        check.fail(
            f"Your {what} returns its result on the GPU on a machine that has one (`torch.cuda.is_available()` is "
            f"True, as on Colab): it is given no tensor, so it cannot know where its caller's tensors are, and "
            f"tensors its caller keeps on the CPU (a demonstration cell, a model kept on the CPU) then fail with "
            f"\"Expected all tensors to be on the same device\" (on a machine without a GPU it seems to work).\n"
            f"{advice}" + _cuda_idiom(code))
    if mixed:
        line = next((ln.strip() for ln in result.message.splitlines() if ln.strip().startswith("in ")), "")
        operation = str(result.exception.operation).removeprefix("in ")
        how = (f": {operation}" if operation.startswith("model.") else f": {operation} mixed it with them") + \
            (f" ({line})" if line else "")
    else:
        how = ", and returns its result there"
    check.fail(
        f"Your {what} puts a tensor on the GPU although {inputs} are on the CPU, on a machine that has a GPU "
        f"(`torch.cuda.is_available()` is True, as on Colab){how}. A device chosen by asking "
        f"`torch.cuda.is_available()`, or written as `'cuda'` or `.cuda()`, is not the device of the inputs: "
        f"on such a machine, a model or a batch kept on the CPU then fails with \"Expected all tensors to be on "
        f"the same device\" (on a machine without a GPU it seems to work).\n{advice}" + _cuda_idiom(code))


def on_gpu(check: Check, fn: Callable, *args: Any, what: str, inputs: str, outputs: Sequence[str] = ("the output",),
           source: str = "x", advice: str = "", **kwargs: Any) -> Any:
    """``fn`` with every tensor argument on a GPU: pretended here, then the machine's own if it has one.

    Returns the pretend run's results as plain CPU tensors (a :class:`Raised` when the pretence provoked some
    other error, which says nothing about a real GPU).
    """
    with _gpu.elsewhere():
        result = check.attempt(fn, *_gpu.moved(args), what=what, **_gpu.moved(kwargs))
    mixed_devices(check, result, what, inputs, advice or create_there(source), code=fn)
    if isinstance(result, Raised):
        return result
    items = result if isinstance(result, (tuple, list)) and len(outputs) > 1 else (result,)
    left_on_cpu(check, dict(zip(outputs, items)), what, inputs, code=fn)
    fixed_device(check, lambda: fn(*args, **kwargs), what, inputs, advice or create_there(source), code=fn)
    device = _gpu.real_gpu()
    if device is not None:
        moved = _gpu.each(lambda t: t.to(device), (args, kwargs))
        real = check.call(fn, *moved[0], what=what, **moved[1])
        real_items = real if isinstance(real, (tuple, list)) and len(outputs) > 1 else (real,)
        left_on_cpu(check, dict(zip(outputs, real_items)), what, inputs, device)
    check.ok(f"with {inputs} on a GPU, {' and '.join(outputs)} stay{'s' if len(outputs) == 1 else ''} on that device: "
             f"no tensor is created on the CPU (tried on a pretend GPU" + (" and on the real one)" if device else ")"))
    return _gpu.plain_all(result)


def module_on_gpu(check: Check, module: nn.Module, *inputs: Any, what: str,
                  advice: str = "Create tensors where the input lives: `torch.ones(L, L, dtype=torch.bool, "
                                "device=x.device)`, `torch.arange(L, device=x.device)`, or move them: "
                                "`make_causal_mask(L).to(x.device)`.", also: Sequence[tuple] = ()) -> None:
    """``module`` and its inputs on a GPU (parameters and buffers moved as ``.to(device)`` would): nothing on the CPU.

    ``also``: other argument lists to try the same way first (the masks left out, so that a default built for
    ``mask=None`` is tried too).
    """
    for other in also:
        _module_on_gpu(check, module, other, what, advice)
    _module_on_gpu(check, module, inputs, what, advice)
    device = _gpu.real_gpu()
    check.ok("creates its tensors on the device of its input (tried on a pretend GPU"
             + (" and on the real one)" if device else ")") + (", with and without masks" if also else ""))


def _module_on_gpu(check: Check, module: nn.Module, inputs: tuple, what: str, advice: str) -> None:
    state = _gpu.module_state(module)

    def run() -> Any:
        with _gpu.elsewhere():
            return torch.func.functional_call(module, state, _gpu.moved(inputs))

    result = check.attempt(run, what=f"{what}.forward")
    mixed_devices(check, result, what, "the module and its input", advice, code=type(module))
    if not isinstance(result, Raised):
        left_on_cpu(check, {"its output": result}, what, "the module and its input", code=type(module))
    fixed_device(check, lambda: module(*inputs), what, "the module and its input", advice, code=type(module))
    device = _gpu.real_gpu()
    if device is not None:
        real = check.attempt(module.to(device), *_gpu.each(lambda t: t.to(device), inputs), what=f"{what}.forward")
        module.to("cpu")
        if isinstance(real, Raised) and "device" in str(real.exception):
            check.fail(f"With the module and its input on {device}, your {what} mixes devices:\n{real.message}\n{advice}")


def decoder_on_gpu(check: Check, run: Callable[[torch.device | None], Any], what: str, advice: str,
                   code: Any = None, cpu_run: Callable[[], Any] | None = None) -> None:
    """A decoding function driving a model on a GPU: ``run(None)`` on the pretend one (a probing run), then
    ``run(device)`` on the machine's own where there is one. Nothing is created on the CPU; the output stays.
    ``cpu_run()``: a probing run on the CPU, tried on a machine that says it has a GPU (:func:`fixed_device`)."""
    inputs = "src and the model"
    out = run(None)
    mixed_devices(check, out, what, inputs, advice=advice, code=code)
    if isinstance(out, Raised):
        check.fail(f"{what} fails with src and the model on a GPU {_gpu.WHERE}:\n{out.message}")
    left_on_cpu(check, {"its output": out}, what, inputs, code=code)
    if cpu_run is not None:
        fixed_device(check, cpu_run, what, inputs, advice, code=code)
    device = _gpu.real_gpu()
    if device is not None:
        left_on_cpu(check, {"its output": run(device)}, what, inputs, device)
    check.ok("creates its tensors on src's device, so it runs on a GPU too (tried on a pretend GPU"
             + (" and on the real one)" if device else ")"))
