"""The stage library: every general check of the course, written once, with its messages and tolerances.

A package by role. The stages: :mod:`.contract`, :mod:`.loading`, :mod:`.values`, :mod:`.devices`,
:mod:`.precision`, :mod:`.state`, :mod:`.dropout`. The kits they and the checkers build on, all public:
:mod:`.gpu` (the pretend GPU), :mod:`.measuring` (measuring a dropout), :mod:`.anatomy` (finding the parts of
a learner's module), :mod:`.twins` (PyTorch's layers carrying the learner's weights), :mod:`.hooks` (watching
submodules and weights), :mod:`.decoding` (the scripted model decoding checkers drive) and :mod:`.standins`
(the course-layout model). Every stage is re-exported here: ``stages.sweep(...)``.

A checker is a short list of stages, plus the bespoke code that names the
mistakes of its own exercise. Each stage takes the :class:`~.._core.Check` it
records into, calls the learner's code only through it, and either records
what held (``check.ok``) or fails with a message in the learner's terms.

Building and the contract
    ``is_module(check, obj, name)``: the learner's class built an ``nn.Module``.
    ``contract_parts(check, module, exercise, sizes)``: the submodules and buffers
    the exercise's contract (``contracts.py``) names exist, with their kinds and
    shapes (``linear1: Linear(d_model, d_ff)``).
    ``components_first(check, owner, parts)``: each earlier exercise the learner's
    code uses passes its own checker, else it is blamed first. ``submodule_parts``
    and ``called_parts`` find those parts in a module or in a function's code.

Values
    ``sweep(check, cases, run, expected, what)``: compare with the oracle over a
    list of sizes and dtypes, called in turn; an output that equals an earlier
    case's answer is named as state kept between calls.

Gradients
    ``gradients(check, run, inputs, expected, what, oracle)``: gradients with
    respect to named inputs and parameters against the oracle's.
    ``every_parameter_learns(check, module, out, what)``: a loss on the output
    reaches every trainable parameter.

Devices
    ``on_gpu(check, fn, *args, what, inputs)``: with its tensors on a GPU (the
    pretend one of :mod:`.gpu`, then the real one where there is one), the code
    creates nothing on the CPU and returns its results there.
    ``module_on_gpu(check, module, *inputs, what)``: the same for a module,
    parameters and buffers moved with it. ``decoder_on_gpu(check, run, what, advice, code)``:
    the same for a decoding function that drives a (scripted) model.

    ``fixed_device(check, run, what, inputs, advice)``: the inputs on the CPU of a machine that says it has a
    GPU: nothing is put on the GPU by asking ``torch.cuda.is_available()`` or writing ``"cuda"`` (run by the
    three above; on its own for a function given no tensor, whose result stays on the CPU).

Precision, checkpoints, state
    ``in_16_bits(check, run, what, float16)`` and ``in_16_bits_module(check, module, inputs, what)``: lesson
    08's mixed precision (``torch.autocast`` in bfloat16; float16 where lesson 08 would use it) runs and stays
    finite. ``state_dict_round_trip(check, build, run, what)``: a checkpoint loads strictly into a fresh
    instance. ``fresh_instance_agrees(check, module, build, inputs, what, cause)``: nothing kept between calls.

Layers
    ``encoder_layer_stages(check, cls, wiring)`` and ``decoder_layer_stages(check, cls, wiring)`` (:mod:`.wiring`):
    a whole encoder or decoder layer checked with a :class:`~.wiring.Wiring` (post-LN in lesson 05, pre-LN in lesson
    09) and its slip tables; ``slipped_layer(wiring, kind, slip)`` makes a slip into a learner's layer.

Dropout
    ``eval_deterministic(check, module, run, what, p)`` and
    ``train_random(check, module, run, what, p)``: dropout off in eval mode, on in
    training mode, where a backward pass must run too.
    ``dropout_measured(check, observe, p, what)``: on each named place where the
    exercise puts a dropout, the rate, the scale, one mask per entry, a fresh
    mask per place and per call, drawn from torch's global generator.
"""

from __future__ import annotations

from . import anatomy, decoding, gpu, hooks, measuring, standins, twins
from .contract import Part, NO_DEFAULT, called_as_modules, called_parts, component_result, components_first, contract_defaults, contract_parts, default_of, is_module, one_tensor, replaced_parts_used, submodule_parts
from .loading import defined_where_loaded, parameter_order
from .values import Case, every_parameter_learns, gradients, oracle_gradients, sweep
from .values import AddedTable, added_table_slips, table_defaults, table_dropout, table_forward, table_sizes, table_values
from .devices import create_there, decoder_on_gpu, fixed_device, left_on_cpu, mixed_devices, module_on_gpu, on_gpu
from .precision import attention_of, float16_trial_passes, follows_dtype, in_16_bits, in_16_bits_module
from .state import fresh_instance_agrees, state_dict_round_trip
from .dropout import Site, dropout_measured, dropout_set_through, eval_deterministic, train_random
from .dropout import attention_dropout, attention_weights_oracle, designed_values, random_attention_weights, read_weights, weights_read_back
from . import wiring
from .wiring import Pieces, Wiring, decoder_layer_stages, encoder_layer_stages, slipped_layer

__all__ = [
    "Case",
    "Pieces",
    "Wiring",
    "NO_DEFAULT",
    "Part",
    "Site",
    "attention_dropout",
    "attention_of",
    "attention_weights_oracle",
    "called_as_modules",
    "called_parts",
    "component_result",
    "components_first",
    "contract_defaults",
    "contract_parts",
    "create_there",
    "decoder_layer_stages",
    "decoder_on_gpu",
    "default_of",
    "defined_where_loaded",
    "designed_values",
    "dropout_measured",
    "dropout_set_through",
    "encoder_layer_stages",
    "eval_deterministic",
    "every_parameter_learns",
    "fixed_device",
    "float16_trial_passes",
    "follows_dtype",
    "fresh_instance_agrees",
    "gradients",
    "in_16_bits",
    "in_16_bits_module",
    "is_module",
    "left_on_cpu",
    "mixed_devices",
    "module_on_gpu",
    "on_gpu",
    "one_tensor",
    "oracle_gradients",
    "parameter_order",
    "random_attention_weights",
    "read_weights",
    "replaced_parts_used",
    "slipped_layer",
    "state_dict_round_trip",
    "submodule_parts",
    "sweep",
    "train_random",
    "weights_read_back",
    "anatomy", "decoding", "gpu", "hooks", "measuring", "standins", "twins", "wiring",
]
__all__ += ["AddedTable", "added_table_slips", "table_defaults", "table_dropout", "table_forward", "table_sizes", "table_values"]
