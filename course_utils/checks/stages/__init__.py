"""The stage library: every general check of the course, written once, with its messages and tolerances.

A checker is an :class:`~..exercise.Exercise`: a short list of stages, its slip table, and the bespoke code
that names the mistakes no slip can. Each stage takes the :class:`~.._core.Check` it records into, calls the
learner's code only through it, and either records what held (``check.ok``) or fails with a message in the
learner's terms, the cause first.

A package by role; every stage is re-exported here (``stages.sweep(...)``):

contract (:mod:`.contract`)
    ``is_module``, ``contract_parts`` (the parts and sizes the contract names), ``contract_defaults``,
    ``components_first`` (an earlier exercise the code uses is blamed first), ``called_as_modules``,
    ``replaced_parts_used``, ``one_tensor``.
loading (:mod:`.loading`)
    ``parameter_order`` and ``defined_where_loaded``: how later lessons call and load an exercise; every
    ``Exercise`` declares them.
values (:mod:`.values`)
    ``sweep`` against the oracle over sizes and dtypes, with the exercise's slips replayed; ``gradients``;
    ``every_parameter_learns``; the ``table_*`` stages of a module that adds a positional table.
devices (:mod:`.devices`)
    ``on_gpu``, ``module_on_gpu``, ``decoder_on_gpu`` (the pretend GPU of :mod:`.gpu`, then the real one),
    ``fixed_device``, ``mixed_devices``, ``left_on_cpu``.
precision (:mod:`.precision`)
    ``follows_dtype``; ``in_16_bits`` and ``in_16_bits_module``: lesson 08's mixed precision.
state (:mod:`.state`)
    ``state_dict_round_trip``, ``fresh_instance_agrees``.
dropout (:mod:`.dropout`)
    ``eval_deterministic``, ``train_random``, ``dropout_measured``, ``dropout_set_through``,
    ``attention_dropout`` (an attention's own dropout, measured on its weights).
layers (:mod:`.wiring`)
    ``encoder_layer_stages`` and ``decoder_layer_stages``: a whole layer, post-LN or pre-LN (a ``Wiring``),
    with its slip tables; ``slipped_layer`` makes a slip into a learner's layer.

The kits they build on, all public: :mod:`.gpu` (the pretend GPU), :mod:`.measuring` (measuring a dropout),
:mod:`.anatomy` (finding the parts of a learner's module), :mod:`.twins` (PyTorch's layers carrying the
learner's weights), :mod:`.hooks` (watching submodules and weights), :mod:`.decoding` (the scripted model
decoding checkers drive, and what greedy decoding, beam search and sampling share) and :mod:`.standins`
(the course-layout model a checker drives).
"""

from __future__ import annotations

from . import anatomy, decoding, gpu, hooks, measuring, standins, twins, wiring
from .contract import (
    called_as_modules, called_parts, component_result, components_first, contract_defaults, contract_parts,
    default_of, is_module, NO_DEFAULT, one_tensor, Part, replaced_parts_used, submodule_parts,
)
from .loading import defined_where_loaded, parameter_order
from .values import (
    added_table_slips, AddedTable, Case, every_parameter_learns, gradients, oracle_gradients, sweep,
    table_defaults, table_dropout, table_forward, table_sizes, table_values,
)
from .devices import (
    create_there, decoder_on_gpu, fixed_device, left_on_cpu, mixed_devices, module_on_gpu, on_gpu,
)
from .precision import attention_of, float16_trial_passes, follows_dtype, in_16_bits, in_16_bits_module
from .state import fresh_instance_agrees, state_dict_round_trip
from .dropout import (
    attention_dropout, attention_weights_oracle, designed_values, dropout_measured, dropout_set_through,
    eval_deterministic, random_attention_weights, read_weights, Site, train_random, weights_read_back,
)
from .wiring import decoder_layer_stages, encoder_layer_stages, Pieces, slipped_layer, Wiring

__all__ = [
    "AddedTable",
    "Case",
    "NO_DEFAULT",
    "Part",
    "Pieces",
    "Site",
    "Wiring",
    "added_table_slips",
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
    "table_defaults",
    "table_dropout",
    "table_forward",
    "table_sizes",
    "table_values",
    "train_random",
    "weights_read_back",
    "anatomy",
    "decoding",
    "gpu",
    "hooks",
    "measuring",
    "standins",
    "twins",
    "wiring",
]
