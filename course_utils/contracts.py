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
    parts: tuple[str, ...] = ()  # "name: Kind(args)": the kind and sizes of each submodule or buffer, args named
    # after the constructor's parameters; Kind is Linear, Embedding, LayerNorm, Dropout, ModuleList, buffer, param or
    # another exercise (whose own parts then apply)
    promises: tuple[str, ...] = ()  # what the code must do for later code, in words; each verified by the checker
    checked_by: tuple[str, ...] = ()  # one per promise: the checker functions or stages that verify it, ", "-separated:
    # "check_x" or another name defined in the exercise's checker module, "stages.name" (the stage library) or
    # "topic.name" (a name defined in checks/topic.py); tests/test_statements.py resolves every one. (The order of
    # the parameters and the names in by_name are checked for every exercise by stages.parameter_order.)
    may: tuple[str, ...] = ()  # what the learner may choose freely (the checker accepts either), in words
    used_by: tuple[str, ...] = ()  # the later cells, lessons and tools that use it
    loaded_with: tuple[str, ...] = ()  # the lesson's own code in other cells that later lessons load with it
    by_name: tuple[str, ...] = ()  # parameters a later cell passes by keyword (a class's constructor's, or
    # "forward.name" for forward's)
    by_name_where: str = ""  # which cell does, in words


#: the parameters of DecoderLayer.forward a later cell passes by keyword; lesson 09's pre-LN layer inherits them
_DECODER_BY_NAME = ("forward.tgt_mask",)

_ALL = (
    # -- lesson 00 ---------------------------------------------------------------
    Contract("build_vocab", "00_setup_and_data", "function", "build_vocab(token_lists, min_freq=1) -> dict[str, int]",
             promises=(
                 "<pad>, <bos>, <eos>, <unk> have ids 0, 1, 2, 3, also when one of them occurs in the data as a word",
                 "every token seen at least min_freq times, ids 0..len(vocab) - 1 without gaps",
                 "a new dict on every call, the sentences unchanged",
             ),
             checked_by=('check_build_vocab', 'check_build_vocab', 'check_build_vocab'),
             may=('give the ordinary tokens ids 4, 5, 6, ... in any order',),
             used_by=("00: the vocabulary sizes, encode/decode/pad_batch demonstrations, padding statistics",)),
    Contract("encode", "00_setup_and_data", "function", "encode(tokens, vocab) -> list[int]",
             promises=("[vocab['<bos>']] + the id of every token (<unk> if unknown) + [vocab['<eos>']], as a list",
                       "any sentence length; tokens and vocab unchanged"),
             checked_by=('check_encode', 'check_encode'),
             used_by=("00: the encode/decode demonstrations and the batches",)),
    Contract("decode", "00_setup_and_data", "function", "decode(ids, vocab) -> list[str]",
             promises=("drops <bos> and <pad> wherever they are, stops at the first <eos>, keeps <unk>",
                       "uses the vocab it is given; ids and vocab unchanged"),
             checked_by=('check_decode', 'check_decode'),
             used_by=("00: the decode demonstration",)),
    Contract("pad_batch", "00_setup_and_data", "function", "pad_batch(sequences, pad_id) -> LongTensor (B, L_max)",
             promises=("row i is sequence i followed by pad_id (right padding), as wide as the longest sequence",
                       "torch.long, any pad_id, empty sequences and lesson 06's lengths; the lists unchanged"),
             checked_by=('check_pad_batch', 'check_pad_batch'),
             used_by=("00: the padded batch and the padding statistics",)),
    # -- lesson 01 ---------------------------------------------------------------
    Contract("scaled_dot_product_attention", "01_attention", "function",
             "scaled_dot_product_attention(query, key, value, mask=None) -> (output, weights)",
             promises=(
                 "returns (output, weights): output (..., L_q, d_v) and weights (..., L_q, L_k), for any number "
                 "of leading dimensions (none, B, or B and H)",
                 "mask is optional (mask=None), may be passed by keyword as `mask`, is boolean with True = may "
                 "attend, and is used as given: (B, 1, 1, L_k), (B, 1, L_q, L_k) and (L_q, L_k) all broadcast",
                 "the weights are exactly 0 where the mask is False and every row sums to 1",
                 "output and weights keep the inputs' dtype (float32, float64) and device",
                 "deterministic (no dropout inside), inputs unchanged, gradients reach query, key and value",
                 "long sequences (L >= 64), a single head (H = 1), d_k not a power of two",
                 "runs under lesson 08's bfloat16 autocast: the hidden scores are filled with a value that fits "
                 "16 bits",
             ),
             checked_by=('check_scaled_dot_product_attention', 'check_scaled_dot_product_attention',
                         'check_scaled_dot_product_attention', 'check_scaled_dot_product_attention, stages.on_gpu',
                         'check_scaled_dot_product_attention, stages.gradients', 'check_scaled_dot_product_attention',
                         'stages.in_16_bits'),
             may=("fill the hidden scores with float('-inf') or torch.finfo(scores.dtype).min",),
             used_by=("02, 03: the demonstration cells", "04: MultiHeadAttention calls it on (B, H, L, d_k) and "
                      "keeps the weights as attention_weights", "05: the layers, through MultiHeadAttention",
                      "06: the cross-attention plot (mask may be None)", "benchmarks/bench.py")),
    # -- lesson 02 ---------------------------------------------------------------
    Contract("make_padding_mask", "02_masks", "function", "make_padding_mask(tokens, pad_id) -> BoolTensor (B, 1, 1, L)",
             promises=(
                 "True at real tokens, False where tokens == pad_id, for any pad_id (real tokens may equal 0) "
                 "and padding anywhere in the sentence",
                 "on the tokens' device, tokens unchanged",
                 "any batch size and length (L >= 64 included); nothing kept between calls",
             ),
             checked_by=('check_padding_mask', 'check_padding_mask, stages.on_gpu', 'check_padding_mask'),
             used_by=("02: the padding demonstrations", "02: make_target_mask", "05: Transformer.encode and decode",
                      "06: training and greedy decoding (on the GPU when there is one)")),
    Contract("make_causal_mask", "02_masks", "function", "make_causal_mask(size) -> BoolTensor (size, size)",
             promises=(
                 "True on and below the diagonal, False above it, on the CPU (the caller moves it)",
                 "any size, 1 and lesson 06's max_len and more included; nothing kept between calls that could "
                 "give the mask of an earlier size",
             ),
             checked_by=('check_causal_mask, stages.fixed_device', 'check_causal_mask'),
             used_by=("02: the causal demonstration", "02: make_target_mask")),
    Contract("make_target_mask", "02_masks", "function", "make_target_mask(tokens, pad_id) -> BoolTensor (B, 1, L, L)",
             promises=(
                 "the padding mask (on the key axis) AND the causal mask; rows of padded positions are not hidden",
                 "on the tokens' device, tokens unchanged",
                 "any batch size and length (L >= 64 included), any pad_id",
             ),
             checked_by=('check_target_mask', 'check_target_mask, stages.on_gpu', 'check_target_mask'),
             used_by=("02: the target-mask plot", "05: Transformer.decode", "06: training and greedy decoding")),
    # -- lesson 03 ---------------------------------------------------------------
    Contract("sinusoidal_positional_encoding", "03_positional_encoding", "function",
             "sinusoidal_positional_encoding(max_len, d_model) -> Tensor (max_len, d_model)",
             promises=(
                 "the table of section 3.5: column 2i holds sin(pos / 10000^(2i / d_model)), column 2i + 1 the cos "
                 "of the same angle, positions counted from 0",
                 "a float32 tensor (PyTorch's default dtype), accurate up to position 5000 (the model's default "
                 "max_len)",
                 "any even d_model (not only powers of two); nothing kept between calls",
                 "made on the CPU (no device of its own choosing): the module that keeps it moves it",
             ),
             checked_by=('check_positional_encoding', 'check_positional_encoding', 'check_positional_encoding',
                         'stages.fixed_device'),
             used_by=("03: the heatmap, similarity and rotation cells", "03: PositionalEncoding")),
    Contract("PositionalEncoding", "03_positional_encoding", "class",
             "PositionalEncoding(d_model, dropout=0.1, max_len=5000); forward(x (B, L, d_model)) -> (B, L, d_model)",
             attributes=("pe",),
             submodules=("dropout",),
             parts=("pe: buffer(max_len, d_model)", "dropout: Dropout(dropout)"),
             promises=(
                 "built with positional arguments in this order: PositionalEncoding(d_model, dropout, max_len)",
                 "pe is the table as a buffer, pe[t] the row of position t (shape (max_len, d_model)); dropout is "
                 "the nn.Dropout(dropout) that forward applies",
                 "forward(x) = dropout(x + PE[:L]) for any L <= max_len (L >= 64 included)",
                 "no parameters; the table is a registered buffer, so .to(device) and .to(dtype) move it",
                 "in training mode, dropout with rate `dropout` on the sum, a fresh mask for every entry and every "
                 "call, drawn from the global RNG (torch.manual_seed makes it reproducible); eval mode is deterministic",
                 "keeps the input's dtype and device; x unchanged, gradients reach x",
             ),
             checked_by=('stages.parameter_order', 'stages.contract_parts', 'stages.sweep',
                         'check_positional_encoding_module, stages.follows_dtype, stages.module_on_gpu',
                         'stages.dropout_measured, stages.eval_deterministic',
                         'stages.follows_dtype, stages.module_on_gpu, stages.gradients'),
             may=('register the table with persistent=False (it can always be computed again)',),
             by_name=("d_model", "dropout", "max_len"), by_name_where="lesson 03, the cell after the checker",
             used_by=("03: the buffer and dropout demonstration", "05: Transformer (one module for source and "
                      "target, moved to the GPU with the model in 06)", "07: decode_step adds pe[t] and calls "
                      "dropout itself", "benchmarks/bench.py")),
    # -- lesson 04 ---------------------------------------------------------------
    Contract("MultiHeadAttention", "04_multi_head_attention", "class",
             "MultiHeadAttention(d_model, num_heads, dropout=0.0); forward(query, key, value, mask=None) -> (B, L_q, d_model)",
             attributes=("num_heads", "d_k", "attention_weights"),
             submodules=("W_q", "W_k", "W_v", "W_o"),
             parts=("W_q: Linear(d_model, d_model)", "W_k: Linear(d_model, d_model)", "W_v: Linear(d_model, d_model)",
                    "W_o: Linear(d_model, d_model)"),
             promises=(
                 "num_heads is the head count it was built with, d_k = d_model // num_heads",
                 "attention_weights holds the weights of the last call, shape (B, num_heads, L_q, L_k), as a plain "
                 "attribute (not a buffer: a checkpoint loads into a freshly built instance); nothing else a call "
                 "computes feeds the next",
                 "runs under lesson 08's autocast (bfloat16; float16 where lesson 08's float16 trial passes)",
                 "W_q, W_k, W_v, W_o are four distinct nn.Linear(d_model, d_model)",
                 "a ValueError with a message when num_heads does not divide d_model (lesson 04 catches ValueError)",
                 "in training mode, dropout with rate `dropout` on the attention weights and nowhere else; "
                 "a fresh mask on every call, drawn from the global RNG",
                 "eval mode is deterministic",
                 "any num_heads dividing d_model (1 included), lengths up to lesson 06's max_len",
                 "keeps its input's dtype (float64 after .double(): lesson 05's checker runs the model so) and device: "
                 "any tensor it creates takes an input's dtype and device",
                 "forward's parameters are named query, key, value and mask: lesson 06's attention plot and the "
                 "layers lesson 07 swaps in pass them by name",
             ),
             checked_by=('check_multi_head_attention',
                         'check_multi_head_attention, stages.state_dict_round_trip, stages.fresh_instance_agrees',
                         'stages.in_16_bits_module', 'check_multi_head_attention', 'check_multi_head_attention',
                         'stages.dropout_measured', 'stages.eval_deterministic', 'check_multi_head_attention',
                         'stages.follows_dtype, stages.module_on_gpu', 'check_multi_head_attention'),
             may=("keep attention_weights before or after the dropout (the course reads them in eval mode, where "
                  "dropout is off)",
                  "store attention_weights detached, as we suggest (a stored graph stays in memory, and "
                  "copy.deepcopy fails after a training step), or not: the course copies a model only after an "
                  "evaluation",
                  "name the attention's dropout module as you like: no later code reads it"),
             by_name=("d_model", "num_heads"), by_name_where="lesson 04, the cell after the checker",
             used_by=("04: the heads plot and the nn.MultiheadAttention comparison", "05: EncoderLayer, DecoderLayer",
                      "06: cross_attention_weights (W_q, W_k, forward's (query, key, value, mask))",
                      "07: decode_step, the nn.Transformer copy, with_fused_attention (W_q to W_o, num_heads, d_k)")),
    # -- lesson 05 ---------------------------------------------------------------
    Contract("LayerNorm", "05_transformer", "class",
             "LayerNorm(d_model, eps=1e-5); forward(x (..., d_model)) -> the same shape",
             attributes=("eps",),
             parts=("weight: param(d_model)", "bias: param(d_model)"),
             promises=(
                 "weight (the gain) and bias are nn.Parameters of shape (d_model,), starting at ones and zeros, "
                 "registered in that order",
                 "each vector along the last axis becomes (x - mean) / sqrt(var + eps) * weight + bias, with the "
                 "variance divided by d_model (not d_model - 1) and eps inside the square root, as nn.LayerNorm",
                 "any number of leading axes; float64 after .double(), the device of its input; input unchanged",
             ),
             checked_by=('stages.contract_parts, check_layer_norm', 'stages.sweep',
                         'stages.follows_dtype, stages.module_on_gpu'),
             used_by=("05: the comparison with nn.LayerNorm; the layers may use it in place of nn.LayerNorm",
                      "07: copying the weights into nn.Transformer reads a norm's parameters in order, weight first")),
    Contract("FeedForward", "05_transformer", "class",
             "FeedForward(d_model, d_ff, dropout=0.0); forward(x (B, L, d_model)) -> (B, L, d_model)",
             submodules=("linear1", "linear2"),
             parts=("linear1: Linear(d_model, d_ff)", "linear2: Linear(d_ff, d_model)"),
             promises=(
                 "linear1 = nn.Linear(d_model, d_ff) and linear2 = nn.Linear(d_ff, d_model), with biases",
                 "computes linear2(dropout(relu(linear1(x)))), position by position",
                 "in training mode, dropout with rate `dropout` on the hidden activations only; eval deterministic",
             ),
             checked_by=('stages.contract_parts', 'check_feed_forward',
                         'stages.dropout_measured, stages.eval_deterministic'),
             used_by=("05: EncoderLayer, DecoderLayer", "07: copying the weights into nn.Transformer")),
    Contract("EncoderLayer", "05_transformer", "class",
             "EncoderLayer(d_model, num_heads, d_ff, dropout=0.0); forward(x, mask=None) -> (B, L, d_model)",
             submodules=("self_attn", "feed_forward", "norm1", "norm2", "dropout"),
             parts=("self_attn: MultiHeadAttention(d_model, num_heads)", "feed_forward: FeedForward(d_model, d_ff)",
                    "norm1: LayerNorm(d_model)", "norm2: LayerNorm(d_model)", "dropout: Dropout(dropout)"),
             promises=(
                 "self_attn is a MultiHeadAttention and feed_forward a FeedForward, each passing its own checker, "
                 "each called as a module (self.self_attn(...), not .forward(...)): hooks see them",
                 "norm1 and norm2 are LayerNorm(d_model) (over the last axis, with gain and bias); norm1 ends the "
                 "first sublayer, norm2 the second",
                 "post-LN: x = norm1(x + dropout(self_attn(x, x, x, mask))); x = norm2(x + dropout(feed_forward(x)))",
                 "in training mode, dropout with rate `dropout` on each sublayer's output before the residual "
                 "addition (plus the sublayers' own), nowhere else, a fresh mask each time; eval deterministic",
                 "no causal mask: every position sees every unmasked position",
                 "forward calls self_attn and applies dropout through these very attributes: a module assigned to "
                 "self_attn is used, and a rate set on dropout.p takes effect",
             ),
             checked_by=('stages.called_as_modules, check_encoder_layer', 'check_encoder_layer',
                         'check_encoder_layer', 'stages.dropout_measured, stages.eval_deterministic',
                         'check_encoder_layer', 'stages.replaced_parts_used, stages.dropout_set_through'),
             may=('use nn.LayerNorm or your own LayerNorm for norm1 and norm2',),
             used_by=("05: Transformer", "06: training", "07: copying the weights into nn.Transformer",
                      "07: with_fused_attention replaces self_attn", "08: build_model sets dropout.p")),
    Contract("DecoderLayer", "05_transformer", "class",
             "DecoderLayer(d_model, num_heads, d_ff, dropout=0.0); forward(x, memory, src_mask=None, tgt_mask=None) "
             "-> (B, L_tgt, d_model)",
             submodules=("self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3", "dropout"),
             parts=("self_attn: MultiHeadAttention(d_model, num_heads)", "cross_attn: MultiHeadAttention(d_model, num_heads)",
                    "feed_forward: FeedForward(d_model, d_ff)", "norm1: LayerNorm(d_model)", "norm2: LayerNorm(d_model)",
                    "norm3: LayerNorm(d_model)", "dropout: Dropout(dropout)"),
             promises=(
                 "self_attn and cross_attn are two MultiHeadAttentions, feed_forward a FeedForward, each passing "
                 "its own checker, each called as a module (self.cross_attn(...), not .forward(...)): lesson 06's "
                 "cross-attention plot hooks cross_attn",
                 "norm1, norm2, norm3 are LayerNorm(d_model), one per sublayer, in that order",
                 "post-LN: masked self-attention with tgt_mask, cross-attention (query x, key and value memory) "
                 "with src_mask, feed-forward",
                 "in training mode, dropout with rate `dropout` on each sublayer's output before the residual "
                 "addition, nowhere else, a fresh mask each time; eval deterministic",
                 "forward calls self_attn and cross_attn and applies dropout through these very attributes: modules "
                 "assigned to them are used, and a rate set on dropout.p takes effect",
             ),
             checked_by=('stages.called_as_modules, check_decoder_layer', 'check_decoder_layer',
                         'check_decoder_layer', 'stages.dropout_measured, stages.eval_deterministic',
                         'stages.replaced_parts_used, stages.dropout_set_through'),
             may=('use nn.LayerNorm or your own LayerNorm for norm1, norm2 and norm3',),
             by_name=_DECODER_BY_NAME, by_name_where="lesson 05, the cell after the checker",
             used_by=("05: Transformer", "06: cross_attention_weights reads decoder_layers[-1].cross_attn",
                      "07: decode_step applies each layer's dropout", "07: copying the weights into nn.Transformer",
                      "07: with_fused_attention replaces self_attn and cross_attn", "08: build_model sets dropout.p")),
    Contract("Transformer", "05_transformer", "class",
             "Transformer(src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048, "
             "dropout=0.1, max_len=5000, pad_id=0); forward(src, tgt) -> logits (B, L_tgt, tgt_vocab_size)",
             attributes=("d_model", "pad_id"),
             methods=("encode", "decode"),
             submodules=("src_embed", "tgt_embed", "positional_encoding", "encoder_layers", "decoder_layers",
                         "generator"),
             parts=("src_embed: Embedding(src_vocab_size, d_model)", "tgt_embed: Embedding(tgt_vocab_size, d_model)",
                    "positional_encoding: PositionalEncoding(d_model, dropout, max_len)",
                    "encoder_layers: ModuleList(num_layers)", "decoder_layers: ModuleList(num_layers)",
                    "generator: Linear(d_model, tgt_vocab_size)"),
             promises=(
                 "encode(src) -> memory (B, L_src, d_model); decode(tgt, memory, src) -> logits; "
                 "forward(src, tgt) == decode(tgt, encode(src), src)",
                 "src_embed and tgt_embed are nn.Embedding, positional_encoding your PositionalEncoding, "
                 "encoder_layers and decoder_layers nn.ModuleLists of num_layers EncoderLayer / DecoderLayer, "
                 "generator nn.Linear(d_model, tgt_vocab_size); each component passes its own checker",
                 "every weight matrix and embedding table (every parameter with 2 or more dimensions) is initialised "
                 "with Xavier/Glorot",
                 "embeddings scaled by sqrt(d_model) on both sides, then the positional encoding; masks built from pad_id",
                 "in training mode, dropout with rate `dropout` on the embeddings plus positional encoding of both "
                 "sides and inside the layers, nowhere else; eval deterministic",
                 "raw logits (no softmax); sentences up to max_len; .to(dtype) and .to(device) move every tensor",
                 "runs under lesson 08's autocast; state_dict() after a forward call loads strictly into a freshly "
                 "built model (lessons 06 to 08's checkpoints)",
                 "encode and decode call positional_encoding through that attribute (a module assigned to it is "
                 "used), and a rate set on positional_encoding.dropout.p takes effect",
             ),
             checked_by=('check_transformer', 'stages.contract_parts, check_transformer', 'check_transformer',
                         'check_transformer', 'stages.dropout_measured, stages.eval_deterministic',
                         'check_transformer, stages.follows_dtype, stages.module_on_gpu',
                         'stages.in_16_bits_module, stages.state_dict_round_trip',
                         'stages.replaced_parts_used, stages.dropout_set_through'),
             may=('initialise with Xavier uniform or Xavier normal',
                  "tie generator.weight to tgt_embed.weight; lesson 06's figures are for an untied model (tied, "
                  "it scored a little lower there in our runs: 88.9 BLEU against above 90), and lesson 08 shows how "
                  "a tied matrix wants its own initialisation"),
             by_name=("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len",
                      "pad_id"), by_name_where="lessons 05 and 09 build it so",
             used_by=("05: the parameter breakdown (src_embed, tgt_embed, encoder_layers, decoder_layers, generator)",
                      "06: build_model, training, checkpoints, greedy decoding, the cross-attention plot",
                      "benchmarks/bench.py", "07: the key/value cache and nn.Transformer copy",
                      "08: build_model sets positional_encoding.dropout.p",
                      "09: the ablations assign learned positions to positional_encoding")),
    # -- lesson 06 ---------------------------------------------------------------
    Contract("noam_lr", "06_training", "function", "noam_lr(step, d_model, warmup_steps) -> float",
             promises=("the paper's d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), as a plain number",
                       "step 0 gives the value of step 1 (LambdaLR asks for step 0)"),
             checked_by=('check_noam_lr', 'check_noam_lr'),
             used_by=("06: the schedule plots", "06: make_noam_scheduler")),
    Contract("make_noam_scheduler", "06_training", "function",
             "make_noam_scheduler(optimizer, d_model, warmup_steps) -> scheduler (normally a LambdaLR)",
             methods=("step", "get_last_lr", "state_dict", "load_state_dict"),
             promises=(
                 "after n calls of step() every param group's lr is its initial lr * noam_lr(n + 1), n = 0 included",
                 "get_last_lr() returns the current lr of every param group, as a list",
                 "state_dict() is plain data that torch.load(..., weights_only=True) reads back",
                 "load_state_dict() into a scheduler built the same way (its optimizer restored too) resumes "
                 "the schedule exactly",
                 "each scheduler counts its own steps: nothing is shared between calls",
             ),
             checked_by=('check_noam_scheduler', 'check_noam_scheduler', 'check_noam_scheduler',
                         'check_noam_scheduler', 'check_noam_scheduler'),
             may=('return a LambdaLR, or any scheduler with these methods',),
             used_by=("06: the training loop (step, get_last_lr)", "06: the checkpoint cell (state_dict, load_state_dict)",
                      "benchmarks/bench.py")),
    Contract("label_smoothing_loss", "06_training", "function",
             "label_smoothing_loss(logits (N, V), target (N,), smoothing, pad_id) -> 0-d tensor",
             promises=(
                 "equals F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id)",
                 "differentiable: backward() gives the gradient of that loss w.r.t. the logits",
                 "exact for logits far apart (log_softmax, not log of softmax)",
                 "any vocabulary size and pad_id, on the logits' device, inputs unchanged",
             ),
             checked_by=('check_label_smoothing_loss', 'stages.gradients', 'check_label_smoothing_loss',
                         'check_label_smoothing_loss, stages.on_gpu'),
             used_by=("06: train_step and evaluate_loss", "benchmarks/bench.py")),
    Contract("greedy_decode", "06_training", "function",
             "greedy_decode(model, src, max_len, bos_id, eos_id, pad_id) -> LongTensor (B, T)",
             promises=(
                 "calls model.encode(src) once and model.decode(ys, memory, src) on the whole prefix at each step",
                 "column 0 is bos_id, T <= max_len, pad_id after each sentence's eos_id, "
                 "and it stops once every sentence has finished",
                 "runs under torch.no_grad()",
                 "creates its tensors on src's device and returns the output there",
                 "of the model, uses encode and decode, and at most parameters(), eval(), train() and training "
                 "besides (lesson 07's CachedDecoder offers exactly these)",
                 "nothing kept between calls: lessons 06 to 08 translate their test sets in chunks of equal shape, "
                 "one call each",
             ),
             checked_by=('check_greedy_decode', 'check_greedy_decode', 'check_greedy_decode', 'stages.decoder_on_gpu',
                         'stages.decoding', 'check_greedy_decode'),
             may=('let finished sentences stay in the batch, or leave it',),
             used_by=("06: translate and the BLEU score", "06: the cross-attention plot",
                      "07: greedy decoding with the cache (CachedDecoder)")),
    # -- lesson 07 ---------------------------------------------------------------
    Contract("beam_search", "07_inference", "function",
             "beam_search(model, src, beam_size, max_len, bos_id, eos_id, pad_id, length_penalty=0.6) -> LongTensor (B, T)",
             promises=(
                 "model.encode once per sentence, memory and src repeated per beam, B * beam_size rows per step",
                 "scores are sums of log-probabilities; EOS candidates within the beam_size best finish (never "
                 "extended); the beam_size best others stay open; GNMT penalty ((5 + n) / 6) ** length_penalty",
                 "a sentence stops when its best finished score >= best open score / lp(max_len - 1)",
                 "the best hypothesis per sentence, bos_id first, pad_id after eos_id, T = the longest; "
                 "no_grad; on src's device",
                 "of the model, uses encode and decode, and at most parameters(), eval(), train() and training "
                 "besides (lesson 07's CachedDecoder offers exactly these)",
                 "nothing kept between calls: lessons 06 to 08 translate their test sets in chunks of equal shape, "
                 "one call each",
             ),
             checked_by=('check_beam_search', 'check_beam_search', 'check_beam_search',
                         'check_beam_search, stages.decoder_on_gpu', 'stages.decoding', 'check_beam_search'),
             may=('keep the finished hypotheses in plain Python (a list per sentence)',
                  "let a stopped sentence's rows leave the batch, or keep them and ignore their results"),
             by_name=("length_penalty",), by_name_where="lessons 07 and 08",
             used_by=("07: BLEU against beam size, the length penalty plot, the cached search",
                      "08: translate, with length_penalty passed by keyword (section 8.7 chooses it)",
                      "benchmarks/bench.py (beam4_bleu)"),
             loaded_with=("gnmt_length_penalty",)),
    Contract("sample_decode", "07_inference", "function",
             "sample_decode(model, src, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None, "
             "generator=None) -> LongTensor (B, T)",
             promises=(
                 "each next token is drawn from softmax(logits / temperature) over the top_k most likely tokens "
                 "(all of them when top_k is None), independently for every sentence; never a token outside them",
                 "draws its random numbers from `generator`, and from nothing else, or from the global generator "
                 "when it is None: the same seed gives the same tokens",
                 "temperature <= 0 raises ValueError",
                 "with top_k=1 it is greedy_decode: encode once, the whole prefix each step, column 0 is bos_id, "
                 "T <= max_len, pad_id after eos_id, stops once every sentence has finished, no_grad, on src's "
                 "device, nothing kept between calls",
             ),
             checked_by=('check_sample_decode', 'check_sample_decode', 'check_sample_decode',
                         'check_sample_decode, stages.decoding'),
             may=('draw with torch.multinomial, the Gumbel-max trick or a uniform number against the cumulative '
                   'probabilities',
                  'leave the top-k probabilities unnormalised where the drawing function normalises them '
                   '(torch.multinomial does)'),
             by_name=("temperature", "top_k", "generator"), by_name_where="lesson 07's sampling section",
             used_by=("07: translations at several temperatures and top_k",)),
    Contract("decode_step", "07_inference", "function",
             "decode_step(model, y_last (B, 1), memory, src, cache) -> (logits (B, V), cache)",
             promises=(
                 "logits equal model.decode(prefix, memory, src)[:, -1] for the whole prefix fed so far (1e-5)",
                 "each projection sees one new position per step; cross-attention keys and values computed once",
                 "everything a step needs is in the cache, every tensor in it with the rows first (reorder_cache)",
             ),
             checked_by=('check_decode_step', 'check_decode_step', 'check_decode_step'),
             may=('shape the cache as you like (a dict, a list of layers, ...), as long as every tensor has the rows '
                   'first',),
             used_by=("07: CachedDecoder (greedy_decode and beam_search with the cache), the time-per-token plot",
                      "benchmarks/bench.py (kv_cache_speedup)")),
    Contract("to_torch_transformer", "07_inference", "function", "to_torch_transformer(model) -> nn.Module",
             promises=("the returned module runs nn.Transformer's layers (no final norms) between copies of the "
                       "model's embeddings, positional encoding and generator, with PyTorch's mask polarity",
                       "its logits equal model(src, tgt) to 1e-5 in eval mode",
                       "PyTorch's layers have the model's dropout rate, model.positional_encoding.dropout.p",
                       "PyTorch's layers hold copies of the model's weights; the model is unchanged",
                       "the copy can be trained: its parameters require gradients and its forward records them",
                       "in training mode its layers drop at that rate: forward leaves the mode to the caller"),
             checked_by=('check_to_torch_transformer', 'check_to_torch_transformer', 'check_to_torch_transformer',
                         'check_to_torch_transformer', 'check_to_torch_transformer', 'check_to_torch_transformer'),
             used_by=("07: the trained model compared with its nn.Transformer copy",
                      "07: training steps of the copy, timed against the model's")),
    # -- lesson 08 ---------------------------------------------------------------
    Contract("learn_bpe", "08_real_data", "function", "learn_bpe(word_counts, num_merges) -> list[tuple[str, str]]",
             promises=(
                 "each merge is the most frequent pair of adjacent symbols at its point, counted with the words' "
                 "counts; ties go to the smallest pair; every occurrence is merged, left to right",
                 "num_merges merges, fewer only when no pair is left; word_counts unchanged",
             ),
             checked_by=('check_learn_bpe', 'check_learn_bpe'),
             used_by=("08: apply_merges spells words with the merges",)),
    # -- lesson 09 ---------------------------------------------------------------
    Contract("LearnedPositionalEncoding", "09_ablations", "class",
             "LearnedPositionalEncoding(d_model, dropout=0.1, max_len=5000); forward(x (B, L, d_model)) -> (B, L, d_model)",
             attributes=("pe",),
             submodules=("dropout",),
             parts=("pe: param(max_len, d_model)", "dropout: Dropout(dropout)"),
             promises=(
                 "built with positional arguments in this order, like PositionalEncoding, so that it takes the place "
                 "of model.positional_encoding: LearnedPositionalEncoding(d_model, dropout, max_len)",
                 "pe is the learned table, an nn.Parameter of shape (max_len, d_model) that requires grad, pe[t] the "
                 "row of position t; its own (not shared with another instance), float32, with finite initial "
                 "values; dropout is the nn.Dropout(dropout) that forward applies",
                 "forward(x) = dropout(x + pe[:L]) for any L <= max_len (L >= 64 included), with the table's current "
                 "values",
                 "gradients reach x and pe (row t receives the gradient of position t summed over the batch; rows "
                 "from L on receive none)",
                 "in training mode, dropout with rate `dropout` on the sum, a fresh mask for every entry and every "
                 "call, drawn from the global RNG; eval mode is deterministic",
                 "keeps the input's dtype and device; .to(dtype) and .to(device) move the table; x unchanged",
             ),
             checked_by=('stages.parameter_order',
                         'stages.contract_parts, check_learned_positional_encoding',
                         'check_learned_positional_encoding', 'stages.gradients', 'stages.table_dropout',
                         'stages.follows_dtype, stages.module_on_gpu'),
             may=('start the table with small random values, or with zeros',),
             used_by=("09: row (E) of the ablation table puts it in place of model.positional_encoding",
                      "09: the plot of the learned table reads pe")),
    Contract("PreLNEncoderLayer", "09_ablations", "class",
             "PreLNEncoderLayer(d_model, num_heads, d_ff, dropout=0.0); forward(x, mask=None) -> (B, L, d_model)",
             submodules=("self_attn", "feed_forward", "norm1", "norm2", "dropout"),
             parts=("self_attn: MultiHeadAttention(d_model, num_heads)", "feed_forward: FeedForward(d_model, d_ff)",
                    "norm1: LayerNorm(d_model)", "norm2: LayerNorm(d_model)", "dropout: Dropout(dropout)"),
             promises=(
                 "the signature and submodule names of lesson 05's EncoderLayer, so that it takes an EncoderLayer's "
                 "place in model.encoder_layers; self_attn and feed_forward pass their own checkers",
                 "pre-LN: x = x + dropout(self_attn(h, h, h, mask)) with h = norm1(x); then "
                 "x = x + dropout(feed_forward(norm2(x))); norm1 opens the first sublayer, norm2 the second",
                 "no LayerNorm on the layer's output: the stack's final LayerNorm is added by the lesson, after the "
                 "last layer",
                 "in training mode, dropout with rate `dropout` on each sublayer's output before the residual "
                 "addition (plus the sublayers' own), nowhere else, a fresh mask each time; eval deterministic",
                 "no causal mask: every position sees every unmasked position",
                 "forward calls self_attn and applies dropout through these very attributes: a module assigned to "
                 "self_attn is used, and a rate set on dropout.p takes effect",
             ),
             checked_by=('stages.encoder_layer_stages', 'check_pre_ln_encoder_layer', 'check_pre_ln_encoder_layer',
                         'stages.encoder_layer_stages', 'stages.encoder_layer_stages', 'stages.encoder_layer_stages'),
             may=('use nn.LayerNorm or your own LayerNorm',),
             used_by=("09: the pre-LN rows put one in place of every EncoderLayer of model.encoder_layers",)),
    Contract("PreLNDecoderLayer", "09_ablations", "class",
             "PreLNDecoderLayer(d_model, num_heads, d_ff, dropout=0.0); forward(x, memory, src_mask=None, "
             "tgt_mask=None) -> (B, L_tgt, d_model)",
             submodules=("self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3", "dropout"),
             parts=("self_attn: MultiHeadAttention(d_model, num_heads)", "cross_attn: MultiHeadAttention(d_model, num_heads)",
                    "feed_forward: FeedForward(d_model, d_ff)", "norm1: LayerNorm(d_model)", "norm2: LayerNorm(d_model)",
                    "norm3: LayerNorm(d_model)", "dropout: Dropout(dropout)"),
             promises=(
                 "the signature and submodule names of lesson 05's DecoderLayer, so that it takes a DecoderLayer's "
                 "place in model.decoder_layers; self_attn, cross_attn and feed_forward pass their own checkers",
                 "pre-LN: masked self-attention on norm1(x) with tgt_mask, cross-attention with query norm2(x) and "
                 "memory as given (keys and values) with src_mask, feed-forward on norm3(x), each added to x",
                 "no LayerNorm on the layer's output, and none on memory (the encoder stack's final LayerNorm "
                 "normalised it)",
                 "in training mode, dropout with rate `dropout` on each sublayer's output before the residual "
                 "addition, nowhere else, a fresh mask each time; eval deterministic",
                 "forward calls self_attn and cross_attn and applies dropout through these very attributes: modules "
                 "assigned to them are used, and a rate set on dropout.p takes effect",
             ),
             checked_by=('stages.decoder_layer_stages', 'check_pre_ln_decoder_layer', 'check_pre_ln_decoder_layer',
                         'stages.decoder_layer_stages', 'stages.decoder_layer_stages'),
             may=('use nn.LayerNorm or your own LayerNorm',),
             by_name=_DECODER_BY_NAME,  # what lesson 05's DecoderLayer may not rename, nor may its stand-in
             by_name_where="lesson 05 passes it so, and your Transformer may too: lesson 09 puts this layer in a "
                           "DecoderLayer's place",
             used_by=("09: the pre-LN rows put one in place of every DecoderLayer of model.decoder_layers",)),
    # -- lesson 10 ---------------------------------------------------------------
    Contract("from_marian", "10_real_translator", "function", "from_marian(marian) -> Transformer",
             promises=(
                 "returns your lesson-05 Transformer, built with Marian's sizes (vocab_size on both sides, d_model, "
                 "heads, layers, d_ff, max_position_embeddings, pad_token_id), in eval mode, on Marian's device and "
                 "in its dtype",
                 "model(src, tgt) and model.decode(tgt, model.encode(src), src) give Marian's logits at every target "
                 "position (1e-4 in float32), src padded with Marian's pad id, tgt starting with its decoder start "
                 "token (the pad id too)",
                 "generator.bias holds final_logits_bias, so that setting its pad entry to -inf forbids the pad token "
                 "and changes no other logit",
                 "shares no storage with Marian, and leaves Marian as it was",
             ),
             checked_by=('check_from_marian', 'check_from_marian', 'check_from_marian', 'check_from_marian'),
             may=('tie src_embed, tgt_embed and generator.weight to one tensor of your own, or keep three copies',
                  "lay out your own positional table instead of copying Marian's"),
             used_by=("10: the logits and greedy decoding compared with Marian's; beam_search and BLEU with the "
                      "real weights",)),
)

#: exercise name -> its contract
CONTRACTS: dict[str, Contract] = {c.exercise: c for c in _ALL}


def contract(exercise: str) -> Contract:
    """The contract of one exercise (KeyError names the known ones)."""
    try:
        return CONTRACTS[exercise]
    except KeyError:
        raise KeyError(f"no contract for {exercise!r}; known: {', '.join(CONTRACTS)}") from None


# ---------------------------------------------------------------------------
# The learner's contract box: made from the contract by ``python -m course_utils.generate``, which stamps it into
# the lesson right before the exercise's cell (tagged ``contract-box``); ``--check`` fails when it is out of step.

LATER_LESSONS = "What later lessons rely on"
REST_OF_NOTEBOOK = "What the rest of this notebook relies on"


def box_title(found: Contract) -> str:
    """"What later lessons rely on", or, when only the exercise's own lesson uses it, "What the rest of this notebook ..."."""
    own = found.lesson[:2]
    later = [use for use in found.used_by if not use.startswith(f"{own}:")]
    return LATER_LESSONS if later else REST_OF_NOTEBOOK


def _plain(text: str) -> str:
    """Contract text as Markdown that shows it as written (``<pad>`` is not an HTML tag, ``*`` is no emphasis)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")


def _names(found: Contract) -> list[str]:
    parts = dict(part.split(": ", 1) for part in found.parts)
    rows = []
    for what, names in (("attributes", found.attributes), ("methods", found.methods), ("submodules", found.submodules)):
        if names:
            shown = [f"`{n}`" + (f" (`{parts[n]}`)" if n in parts else "") for n in names]
            rows.append(f"- {what}: " + ", ".join(shown))
    listed = set(found.attributes) | set(found.submodules)
    others = [f"`{name}` (`{kind}`)" for name, kind in parts.items() if name not in listed]
    if others:
        rows.append("- parts: " + ", ".join(others))
    return rows


def box_markdown(exercise: str) -> str:
    """The collapsed box of what later code relies on, for the exercise's statement (Markdown)."""
    found = contract(exercise)
    lines = [f"<details><summary><b>{box_title(found)}</b>: your <code>{exercise}</code>'s contract</summary>", "",
             f"Called as `{found.signature}`.", ""]
    names = _names(found)
    if names:
        lines += ["The names the course reads:", "", *names, ""]
    lines += [f"Your `{exercise}` **must** (the checker verifies each):", ""]
    lines += [f"- {_plain(promise)}" for promise in found.promises]
    lines.append("- take its parameters in the order of the call above: the course passes them by position")
    if found.by_name:
        shown = ", ".join(f"`{name.removeprefix('forward.')}`" + (" (of forward)" if name.startswith("forward.") else "")
                          for name in found.by_name)
        lines.append(f"- keep the parameter names {shown}, passed by keyword ({_plain(found.by_name_where)})")
    if found.may:
        lines += ["", "You **may** (the checker accepts either):", ""]
        lines += [f"- {_plain(choice)}" for choice in found.may]
    lines += ["", "Used by: " + "; ".join(_plain(use) for use in found.used_by) + ".", "", "</details>"]
    return "\n".join(lines)
