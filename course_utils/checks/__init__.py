"""Checkers for every exercise of the course.

Each is a plain function ``check_<exercise>(implementation) -> CheckResult``:

    from course_utils.checks import check_scaled_dot_product_attention
    check_scaled_dot_product_attention(scaled_dot_product_attention)

A checker never raises because of a bug in the code it checks, and leaves no
trace on the session (RNG state, default dtype, grad mode, your objects).
Checkers are imported on first use, one topic module at a time.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._core import CheckResult, Status

# checker name -> the topic module (in this package) that defines it
_TOPICS = {
    # lesson 00: data
    "check_build_vocab": "vocab",
    "check_encode": "vocab",
    "check_decode": "vocab",
    "check_pad_batch": "vocab",
    # lesson 01: attention
    "check_scaled_dot_product_attention": "attention",
    # lesson 02: masks
    "check_padding_mask": "masks",
    "check_causal_mask": "masks",
    "check_target_mask": "masks",
    # lesson 03: positional encoding
    "check_positional_encoding": "positional",
    "check_positional_encoding_module": "positional",
    # lesson 04: multi-head attention
    "check_multi_head_attention": "multi_head",
    # lesson 05: the layers and the model
    "check_layer_norm": "norm",
    "check_feed_forward": "layers",
    "check_encoder_layer": "layers",
    "check_decoder_layer": "layers",
    "check_transformer": "model",
    # lesson 06: training and decoding
    "check_noam_lr": "schedule",
    "check_noam_scheduler": "schedule",
    "check_label_smoothing_loss": "loss",
    "check_greedy_decode": "decoding",
    # lesson 07: inference
    "check_beam_search": "beam",
    "check_decode_step": "cache",
    "check_to_torch_transformer": "conversion",
    "check_sample_decode": "sampling",
    # lesson 08: real data
    "check_learn_bpe": "subwords",
    # lesson 09: ablations
    "check_learned_positional_encoding": "ablation",
    "check_pre_ln_encoder_layer": "ablation",
    "check_pre_ln_decoder_layer": "ablation",
    # lesson 10: a real translator
    "check_from_marian": "port",
}

__all__ = ["CheckResult", "Status", *_TOPICS]


def __getattr__(name: str) -> Any:
    if name in _TOPICS:
        module = importlib.import_module(f"{__name__}.{_TOPICS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
