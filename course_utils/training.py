"""Tools around a training run: checkpoint averaging, the machine's matrix-product peak, honest GPU timing,
and the gradient scaler of float16 training on any PyTorch the course supports.

    from course_utils.training import average_checkpoints, grad_scaler, matmul_peak_flops, synchronize
    model.load_state_dict(average_checkpoints(paths[-5:]))   # section 6.1 of the paper
    peak = matmul_peak_flops()                                # FLOP/s of a large float32 matmul here
    synchronize(device)                                       # before reading a clock: a GPU works asynchronously
    scaler = grad_scaler(device, enabled=True)                # torch.amp.GradScaler(device.type, enabled=True)

None is an exercise of the course: lesson 08 uses them to improve and to
measure its training run, lessons 07 and 09 to time code on a GPU.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

import torch

StateDict = Mapping[str, torch.Tensor]


def _model_state(source: str | os.PathLike | Mapping[str, Any], key: str) -> StateDict:
    """The model's state dict in ``source``: a checkpoint file, a checkpoint dict holding ``key``, or a state dict."""
    if isinstance(source, (str, os.PathLike)):
        source = torch.load(source, map_location="cpu", weights_only=False)
    if key in source and isinstance(source[key], Mapping):
        return source[key]
    if all(isinstance(value, torch.Tensor) for value in source.values()):
        return source
    raise ValueError(f"expected a state dict, or a checkpoint with its state dict under {key!r}; got the keys "
                     f"{', '.join(map(str, list(source)[:8]))}")


def average_checkpoints(sources: Sequence[str | os.PathLike | Mapping[str, Any]], key: str = "model") -> dict[str, torch.Tensor]:
    """The element-wise mean of the parameters of several checkpoints of one model, as a state dict.

    Each source is the path of a file written by ``torch.save``, or an
    already-loaded dict: either a checkpoint holding the model's state dict
    under ``key`` (as lesson 08 writes them) or the state dict itself. All must
    have the same names and shapes. Floating-point tensors (weights, biases,
    running statistics) are averaged in float64 and returned in their own
    dtype; other tensors (counters such as BatchNorm's ``num_batches_tracked``,
    integer or boolean buffers) cannot be averaged and are taken from the last
    source. The result is on the CPU, ready for ``model.load_state_dict``.
    Weights tied under several names are averaged under each, so they stay
    equal.
    """
    if not sources:
        raise ValueError("average_checkpoints needs at least one checkpoint.")
    states = [_model_state(source, key) for source in sources]
    names = list(states[0])
    for i, state in enumerate(states[1:], start=1):
        if set(state) != set(names):
            differ = sorted(set(state) ^ set(names))
            raise ValueError(f"checkpoint {i} does not have the parameters of checkpoint 0: {', '.join(differ[:6])} differ")
    averaged: dict[str, torch.Tensor] = {}
    for name in names:
        tensors = [state[name].detach().cpu() for state in states]
        shapes = {tuple(t.shape) for t in tensors}
        if len(shapes) > 1:
            raise ValueError(f"{name} has different shapes in the checkpoints: {sorted(shapes)}")
        if tensors[0].is_floating_point():
            total = torch.zeros(tensors[0].shape, dtype=torch.float64)
            for tensor in tensors:
                total += tensor.to(torch.float64)
            averaged[name] = (total / len(tensors)).to(tensors[0].dtype)
        else:
            averaged[name] = tensors[-1].clone()
    return averaged


def grad_scaler(device: str | torch.device, enabled: bool = True) -> Any:
    """``torch.amp.GradScaler(device.type, enabled=enabled)``: the gradient scaler of float16 training.

    That device-generic scaler is PyTorch 2.3's. PyTorch 2.2, Intel Macs' last release, has only CUDA's
    (``torch.cuda.amp.GradScaler``); there a scaler for any other device is a disabled one, which passes the loss,
    the gradients and the step through unchanged.
    """
    device = torch.device(device)
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device.type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled and device.type == "cuda")  # pragma: no cover - torch 2.2


def synchronize(device: str | torch.device) -> None:
    """Wait until ``device`` has finished the work queued on it, so that a clock read next measures that work.

    A GPU runs operations asynchronously: a call returns as soon as its kernel is queued, and timing it without
    waiting measures only the queueing. A CPU computes as it goes, so there is nothing to wait for.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@torch.no_grad()
def matmul_peak_flops(size: int | None = None, seconds: float = 2.0, dtype: torch.dtype = torch.float32,
                      device: str | torch.device = "cpu") -> float:
    """The best rate, in FLOP/s, of square ``size x size`` matrix products on ``device``, over about ``seconds``.

    One product of two n x n matrices takes 2 n^3 floating-point operations
    (a multiplication and an addition per term). A large product keeps every
    core busy on arithmetic alone, so its rate is close to the most this
    machine computes with ``torch.matmul`` (its threads as they are set now):
    a practical peak, to compare training steps with. ``size`` defaults to
    2048 on a CPU (about 17 GFLOP a product) and 8192 on a GPU. The first
    product warms up and is not counted.
    """
    device = torch.device(device)
    n = size or (2048 if device.type == "cpu" else 8192)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up: thread pool, kernels, caches
    synchronize(device)
    best = float("inf")
    deadline = time.perf_counter() + seconds
    for _ in range(1000):
        start = time.perf_counter()
        torch.matmul(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
        if time.perf_counter() >= deadline:
            break
    return 2 * n**3 / best


__all__ = ["average_checkpoints", "matmul_peak_flops"]
