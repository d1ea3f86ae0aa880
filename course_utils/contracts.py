"""What the rest of the course relies on, exercise by exercise: the one list.

Each exercise's contract names everything a later cell, lesson or course tool
uses of the learner's object: its signature, the attributes and methods it
reads, and the behaviour it counts on. The exercise's text states every item
(``tests/test_contracts.py`` checks that each attribute and method is named in
the lesson), its checker verifies every item, and the downstream test runs the
course's own later code on every implementation the checkers accept.

Plain data, no torch: the authoring tools and the tests read it too.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Contract:
    """What one exercise promises to the rest of the course."""

    exercise: str  # the name the learner defines, as in the notebook
    lesson: str  # the notebook that defines it, e.g. "01_attention"
    kind: str  # "function" or "class"
    signature: str  # how the course calls it
    attributes: tuple[str, ...] = ()  # attributes later code reads (classes: of an instance)
    methods: tuple[str, ...] = ()  # methods later code calls, beyond __call__/forward
    submodules: tuple[str, ...] = ()  # submodule names later code and checkpoints rely on
    promises: tuple[str, ...] = ()  # behaviour later code relies on, in words; each verified by the checker
    used_by: tuple[str, ...] = ()  # the later cells, lessons and tools that use it


_ALL = (
    # -- lesson 00 ---------------------------------------------------------------
    Contract("build_vocab", "00_setup_and_data", "function", "build_vocab(token_lists, min_freq, specials) -> dict[str, int]"),
    Contract("encode", "00_setup_and_data", "function", "encode(tokens, vocab) -> list[int]"),
    Contract("decode", "00_setup_and_data", "function", "decode(ids, itos) -> list[str]"),
    Contract("pad_batch", "00_setup_and_data", "function", "pad_batch(sequences, pad_id) -> LongTensor (B, L)"),
    # -- lesson 01 ---------------------------------------------------------------
    Contract("scaled_dot_product_attention", "01_attention", "function",
             "scaled_dot_product_attention(query, key, value, mask=None) -> (output, weights)"),
    # -- lesson 02 ---------------------------------------------------------------
    Contract("make_padding_mask", "02_masks", "function", "make_padding_mask(tokens, pad_id) -> BoolTensor (B, 1, 1, L)"),
    Contract("make_causal_mask", "02_masks", "function", "make_causal_mask(size) -> BoolTensor (1, 1, L, L)"),
    Contract("make_target_mask", "02_masks", "function", "make_target_mask(tokens, pad_id) -> BoolTensor (B, 1, L, L)"),
    # -- lesson 03 ---------------------------------------------------------------
    Contract("sinusoidal_positional_encoding", "03_positional_encoding", "function",
             "sinusoidal_positional_encoding(max_len, d_model) -> Tensor (max_len, d_model)"),
    Contract("PositionalEncoding", "03_positional_encoding", "class", "PositionalEncoding(d_model, max_len, dropout)"),
    # -- lesson 04 ---------------------------------------------------------------
    Contract("MultiHeadAttention", "04_multi_head_attention", "class",
             "MultiHeadAttention(d_model, num_heads, dropout=0.0); forward(query, key, value, mask=None) -> (B, L_q, d_model)",
             attributes=("num_heads", "d_k", "attention_weights"),
             submodules=("W_q", "W_k", "W_v", "W_o"),
             promises=(
                 "num_heads is the head count it was built with, d_k = d_model // num_heads",
                 "attention_weights holds the weights of the last call, shape (B, num_heads, L_q, L_k)",
                 "W_q, W_k, W_v, W_o are four distinct nn.Linear(d_model, d_model)",
                 "a ValueError (or an error with a message) when num_heads does not divide d_model",
                 "in training mode, dropout with rate `dropout` on the attention weights and nowhere else; "
                 "a fresh mask on every call, drawn from the global RNG",
                 "eval mode is deterministic",
                 "any num_heads dividing d_model (1 included), lengths up to lesson 06's max_len",
             ),
             used_by=("04: the heads plot and the nn.MultiheadAttention comparison", "05: EncoderLayer, DecoderLayer",
                      "06: cross_attention_weights (W_q, W_k, forward's (query, key, value, mask))", "07")),
    # -- lesson 05 ---------------------------------------------------------------
    Contract("FeedForward", "05_transformer", "class", "FeedForward(d_model, d_ff, dropout)"),
    Contract("EncoderLayer", "05_transformer", "class", "EncoderLayer(d_model, num_heads, d_ff, dropout)"),
    Contract("DecoderLayer", "05_transformer", "class", "DecoderLayer(d_model, num_heads, d_ff, dropout)"),
    Contract("Transformer", "05_transformer", "class", "Transformer(...)"),
    # -- lesson 06 ---------------------------------------------------------------
    Contract("noam_lr", "06_training", "function", "noam_lr(step, d_model, warmup_steps) -> float"),
    Contract("make_noam_scheduler", "06_training", "function", "make_noam_scheduler(optimizer, d_model, warmup_steps)"),
    Contract("label_smoothing_loss", "06_training", "function", "label_smoothing_loss(logits, target, smoothing, pad_id) -> scalar"),
    Contract("greedy_decode", "06_training", "function", "greedy_decode(model, src, max_len, bos_id, eos_id, pad_id) -> LongTensor (B, T)"),
)

#: exercise name -> its contract
CONTRACTS: dict[str, Contract] = {c.exercise: c for c in _ALL}


def contract(exercise: str) -> Contract:
    """The contract of one exercise (KeyError names the known ones)."""
    try:
        return CONTRACTS[exercise]
    except KeyError:
        raise KeyError(f"no contract for {exercise!r}; known: {', '.join(CONTRACTS)}") from None
