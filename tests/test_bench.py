"""Smoke test of the benchmark's plumbing (benchmarks/bench.py --quick): seconds, not minutes."""

import importlib.util
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_bench():
    spec = importlib.util.spec_from_file_location("course_bench", ROOT / "benchmarks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_one_json_line_per_figure(monkeypatch):
    """Also where lesson 06's pick_device finds an accelerator: the benchmark keeps to the CPU (a GPU machine
    failed this test when it did not). A meta device stands in for the GPU: nothing runs on it."""
    import torch

    import course_utils.notebook

    monkeypatch.setattr(course_utils.notebook, "pick_device", lambda verbose=True: torch.device("meta"))
    bench = _load_bench()
    lines = []
    figures = bench.main(["--quick", "--threads", "1"], emit=lines.append)

    parsed = [json.loads(line) for line in lines]
    assert parsed == figures
    by_name = {f["name"]: f for f in parsed}
    assert len(by_name) == len(parsed), "each figure is printed once"
    for f in parsed:
        assert set(f) == {"name", "value", "unit"}
        assert isinstance(f["value"], (int, float)) and math.isfinite(f["value"]), f
    for name in ("test_bleu", "train_seconds", "step_time_ratio", "sdpa_step_time_ratio", "greedy_bleu", "beam4_bleu",
                 "beam4_time_ratio", "kv_cache_speedup", "kv_cache_speedup_batch1"):
        assert name in by_name
    assert by_name["greedy_bleu"]["value"] == by_name["test_bleu"]["value"]
    assert 0.0 <= by_name["beam4_bleu"]["value"] <= 100.0
    for name in ("beam4_time_ratio", "kv_cache_speedup", "kv_cache_speedup_batch1", "sdpa_step_time_ratio"):
        assert by_name[name]["value"] > 0
    assert by_name["train_tokens_per_second"]["value"] > 100, "the training tokens are counted, not overwritten"
    assert 0.0 <= by_name["test_bleu"]["value"] <= 100.0
    assert by_name["train_seconds"]["value"] > 0
    assert by_name["step_time_ratio"]["value"] > 0
    assert by_name["train_steps"]["value"] == bench.QUICK["num_steps"]
    assert by_name["test_sentences"]["value"] == bench.QUICK["test_sentences"]


def test_reference_model_matches_our_parameter_count():
    """The nn.Transformer wrapper is like for like: same parameters as the course model, no final norms."""
    bench = _load_bench()
    code = bench.load_course_code()
    config = code["TrainConfig"](d_model=16, num_heads=2, num_layers=2, d_ff=24, max_len=32)
    ours = code["build_model"](config, 11, 13)
    theirs = bench.TorchTransformer(code["PositionalEncoding"], 11, 13, config.d_model, config.num_heads,
                                    config.num_layers, config.d_ff, config.dropout, config.max_len, 0)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())


def test_fused_attention_copy_is_the_same_model():
    """Lesson 07's with_fused_attention: same logits in eval mode, dropout on the weights in training, original untouched."""
    import torch

    bench = _load_bench()
    code = bench.load_course_code()
    config = code["TrainConfig"](d_model=16, num_heads=2, num_layers=2, d_ff=24, max_len=32, dropout=0.5)
    ours = code["build_model"](config, 11, 13).eval()
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    fused = code["with_fused_attention"](ours, config.dropout).eval()
    src = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 2, 0, 0]])  # the second sentence is padded
    tgt = torch.tensor([[1, 4, 5, 2], [1, 9, 2, 0]])
    with torch.no_grad():
        assert torch.allclose(ours(src, tgt), fused(src, tgt), atol=1e-5)
    attentions = [m for m in fused.modules() if isinstance(m, code["FusedAttention"])]
    assert len(attentions) == 3 * config.num_layers  # encoder self, decoder self and cross
    assert fused.state_dict().keys() == ours.state_dict().keys(), "checkpoints load either way"
    assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items())
    assert all(a is not b for a, b in zip(ours.parameters(), fused.parameters())), "a copy, not shared weights"

    # Training mode: only the attention weights' dropout differs from eval mode, when the other dropouts are off.
    for module in fused.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    fused.train()
    with torch.no_grad():
        first, second = fused(src, tgt), fused(src, tgt)
        assert not torch.allclose(first, second), "dropout on the attention weights in training mode"
        for attention in attentions:
            attention.dropout_p = 0.0
        assert torch.allclose(fused(src, tgt), ours(src, tgt), atol=1e-5)
    fused(src, tgt).sum().backward()  # self-attention stacks W_q, W_k, W_v into one product: gradients reach all three
    for attention in attentions:
        assert all(w.weight.grad is not None and w.weight.grad.abs().sum() > 0
                   for w in (attention.W_q, attention.W_k, attention.W_v, attention.W_o))
