"""course_utils.training: checkpoint averaging, and the matrix-product peak (lesson 08)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_utils.training import average_checkpoints, matmul_peak_flops


class Tiny(nn.Module):
    """Weights, a tied pair, a BatchNorm (float running statistics and an integer counter) and a bool buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.out = nn.Linear(4, 7)
        self.out.weight = self.embed.weight  # tied, as lesson 08 ties its embeddings
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("flags", torch.tensor([True, False]))


def _trained_copies(n: int) -> list[Tiny]:
    """n models with different parameters and statistics, as checkpoints of one run would have."""
    torch.manual_seed(0)
    models = []
    for step in range(n):
        model = Tiny()
        model.norm.train()
        for _ in range(step + 1):  # running statistics and num_batches_tracked differ between copies
            model.norm(torch.randn(8, 4))
        models.append(model)
    return models


def test_the_average_is_the_mean_of_every_floating_point_tensor():
    models = _trained_copies(3)
    states = [m.state_dict() for m in models]
    mean = average_checkpoints(states)
    assert set(mean) == set(states[0])
    for name, tensor in mean.items():
        if tensor.is_floating_point():
            expected = torch.stack([s[name] for s in states]).mean(dim=0)
            torch.testing.assert_close(tensor, expected, rtol=1e-6, atol=1e-7, msg=name)
    assert not torch.equal(mean["norm.running_mean"], states[-1]["norm.running_mean"]), "statistics are averaged"


def test_counters_and_other_non_float_buffers_come_from_the_last_checkpoint():
    states = [m.state_dict() for m in _trained_copies(3)]
    mean = average_checkpoints(states)
    assert [int(s["norm.num_batches_tracked"]) for s in states] == [1, 2, 3]
    assert mean["norm.num_batches_tracked"].dtype == torch.long and int(mean["norm.num_batches_tracked"]) == 3
    assert torch.equal(mean["flags"], states[-1]["flags"]) and mean["flags"].dtype == torch.bool


def test_tied_weights_stay_tied_and_the_model_loads_the_average():
    models = _trained_copies(2)
    mean = average_checkpoints([m.state_dict() for m in models])
    assert torch.equal(mean["embed.weight"], mean["out.weight"])
    fresh = Tiny()
    fresh.load_state_dict(mean)
    assert fresh.out.weight is fresh.embed.weight, "loading copies values in; the tie is the module's own"
    torch.testing.assert_close(fresh.embed.weight.detach(), (models[0].embed.weight + models[1].embed.weight).detach() / 2)


def test_it_reads_checkpoint_files_as_lesson_08_writes_them(tmp_path):
    """Each file holds the model's state dict under "model", next to the optimizer, the schedule, the step..."""
    models = _trained_copies(5)
    paths = []
    for step, model in enumerate(models, start=1):
        optimizer = torch.optim.Adam(model.parameters())
        path = tmp_path / f"08_real_data-run-step{150 * step:06d}.pt"
        torch.save({"config": {"name": "run"}, "vocab": "{}", "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(), "state": {"step": 150 * step}}, path)
        paths.append(path)
    from_files = average_checkpoints(paths[-3:])
    from_states = average_checkpoints([m.state_dict() for m in models[-3:]])
    assert all(torch.equal(from_files[k], from_states[k]) for k in from_states)
    assert all(t.device.type == "cpu" for t in from_files.values())
    mixed = average_checkpoints([str(paths[0]), {"model": models[1].state_dict()}, models[2].state_dict()])
    assert set(mixed) == set(from_states), "paths as str, checkpoint dicts and bare state dicts mix"


def test_one_checkpoint_averages_to_itself_and_dtypes_are_kept():
    state = Tiny().to(torch.float64).state_dict()
    state["half"] = torch.tensor([0.1, 0.2], dtype=torch.float16)
    mean = average_checkpoints([state])
    assert all(torch.equal(mean[k], state[k]) and mean[k].dtype == state[k].dtype for k in state)
    assert mean["half"] is not state["half"], "a copy: changing the average leaves the checkpoint alone"


def test_checkpoints_of_different_models_are_refused_with_the_name():
    a, b = Tiny().state_dict(), Tiny().state_dict()
    b["out.bias"] = torch.zeros(8)
    with pytest.raises(ValueError, match="out.bias"):
        average_checkpoints([a, b])
    del b["out.bias"]
    with pytest.raises(ValueError, match="out.bias"):
        average_checkpoints([a, b])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])
    with pytest.raises(ValueError, match="state dict"):
        average_checkpoints([{"step": 3, "notes": "no weights here"}])


def test_the_peak_is_a_plausible_rate_measured_in_the_time_given():
    import time

    started = time.perf_counter()
    peak = matmul_peak_flops(size=256, seconds=0.2)
    assert time.perf_counter() - started < 5
    assert math.isfinite(peak) and 1e8 < peak < 1e15, peak  # from an old laptop core to a large GPU
    before = torch.get_rng_state()
    matmul_peak_flops(size=64, seconds=0.0)
    assert torch.equal(torch.get_rng_state(), before), "its own generator: the global RNG is untouched"
