"""Lesson 08's GPU configuration, its mixed-precision code path run on the CPU.

No GPU is lent to CI, so the lesson's fast run trains in 32 bits. Here its own
`train` (loaded by running the lesson's cells up to it, on the fast data) runs the
GPU configuration, shrunk to a tiny model, with autocast in bfloat16 (what the
lesson picks on compute capability 8 and above) and in float16 with the gradient
scaler (what it picks on a T4), on the CPU. What is checked is the plumbing:
finite losses, a checkpoint, and a resume that trains nothing twice.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pytest
import torch

from downstream_harness import SOLUTIONS, run_lesson

LESSON = "08_real_data"


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> dict:
    """The namespace of lesson 08 after the cell that defines `train` (fast data, BPE trained)."""
    import nbformat

    folder = tmp_path_factory.mktemp("real_data")
    for path in SOLUTIONS.glob("*.ipynb"):
        shutil.copy(path, folder)
    nb = nbformat.read(str(SOLUTIONS / f"{LESSON}.ipynb"), as_version=4)
    last = next(i for i, cell in enumerate(nb.cells) if "def train(" in cell.source)
    return run_lesson(LESSON, {}, folder, stop_after=last).namespace


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16+scaler"])
def test_gpu_configuration_trains_in_mixed_precision_on_the_cpu(lesson: dict, dtype, tmp_path: Path) -> None:
    if dtype == torch.float16 and not hasattr(torch.amp, "GradScaler"):
        pytest.skip("PyTorch 2.2 (Intel Macs' last) has a gradient scaler for CUDA only: float16 with a scaler "
                    "on the CPU cannot be run here; test_the_scaler_is_a_disabled_one_off_cuda_on_pytorch_2_2_and_a_real_one_since_2_3 covers the scaler")
    ns = lesson
    assert ns["GPU"].mixed_precision
    config = dataclasses.replace(ns["GPU"], d_model=32, num_heads=2, num_layers=1, d_ff=64, batch_size=16,
                                 num_steps=4, warmup_steps=2, eval_every=2, train_minutes=5.0)
    ns["amp_dtype"], ns["device"], ns["CHECKPOINTS"] = dtype, torch.device("cpu"), tmp_path
    build_model, seen = ns["build_model"], set()

    def build_and_watch(*args):  # records the dtype of the logits in every forward pass
        model = build_model(*args)
        model.generator.register_forward_hook(lambda module, inputs, output: seen.add(output.dtype))
        return model

    ns["build_model"] = build_and_watch
    try:
        model, history = ns["train"](config)
    finally:
        ns["build_model"] = build_model
    assert dtype in seen, f"the forward pass ran in {seen}, not in {dtype}"
    assert history["step"] == [2, 4]
    assert all(math.isfinite(x) for x in history["train"] + history["valid"]), history
    assert all(p.dtype == torch.float32 for p in model.parameters()), "the weights stay in 32 bits"
    saved = torch.load(ns["checkpoint_path"](config), weights_only=False)
    if dtype == torch.float16:  # the loss scale it reached is part of the run
        assert saved["scaler"].get("scale") is not None, saved["scaler"]

    # Run again: found in its checkpoint, nothing trained twice.
    before = {k: v.clone() for k, v in model.state_dict().items()}
    again, history_again = ns["train"](config)
    assert history_again == history
    assert all(torch.equal(before[k], v) for k, v in again.state_dict().items())


def test_a_cpu_gets_bfloat16_only_where_its_products_are_faster(lesson: dict, monkeypatch) -> None:
    ns, cpu = lesson, torch.device("cpu")
    for float32, bfloat16, wanted in [(100e9, 220e9, torch.bfloat16), (100e9, 150e9, torch.bfloat16),
                                      (100e9, 140e9, None), (100e9, 20e9, None)]:  # 20: emulated bfloat16
        rates = {torch.float32: float32, torch.bfloat16: bfloat16}
        monkeypatch.setitem(ns, "matmul_peak_flops", lambda size=None, seconds=2.0, dtype=torch.float32,
                            device="cpu", rates=rates: rates[dtype])
        assert ns["autocast_dtype"](cpu, True) is wanted, (float32, bfloat16)
    assert ns["autocast_dtype"](torch.device("mps"), True) is None


def test_autocast_runs_only_for_a_configuration_that_asks_for_it(lesson: dict, monkeypatch) -> None:
    """amp_dtype is chosen once, for the lesson's configuration; a row without mixed precision stays in 32 bits."""
    ns = lesson
    config = dataclasses.replace(ns["GPU"], d_model=32, num_heads=2, num_layers=1, d_ff=64)
    monkeypatch.setitem(ns, "amp_dtype", torch.bfloat16)
    monkeypatch.setitem(ns, "device", torch.device("cpu"))
    src, tgt = ns["make_batches"](ns["train_src"][:4], ns["train_tgt"][:4], 4, ns["PAD_ID"], shuffle=False)[0]
    for mixed, wanted in [(True, torch.bfloat16), (False, torch.float32)]:
        row = dataclasses.replace(config, mixed_precision=mixed)
        model, seen = ns["build_model"](row, ns["bpe"].vocab_size), set()
        model.generator.register_forward_hook(lambda module, inputs, output: seen.add(output.dtype))
        ns["loss_on"](model, src, tgt, row)
        assert seen == {wanted}, (mixed, seen)
        assert ns["new_optimizer"](model, row)[2].is_enabled() is False, "no gradient scaler for bfloat16"


def test_the_scaler_is_a_disabled_one_off_cuda_on_pytorch_2_2_and_a_real_one_since_2_3() -> None:
    from course_utils.training import grad_scaler

    scaler = grad_scaler(torch.device("cpu"), enabled=True)
    assert scaler.is_enabled() is hasattr(torch.amp, "GradScaler")
    assert grad_scaler("cpu", enabled=False).is_enabled() is False
    loss = torch.tensor(2.0, requires_grad=True)
    scaled = scaler.scale(loss)
    assert float(scaled) == (2.0 * scaler.get_scale() if scaler.is_enabled() else 2.0)
