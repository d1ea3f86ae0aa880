"""The stage library: every general check of the course, written once, with its messages and tolerances.

A checker is a short list of stages, plus the bespoke code that names the
mistakes of its own exercise. Each stage takes the :class:`~._core.Check` it
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
    pretend one of :mod:`._gpu`, then the real one where there is one), the code
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

Dropout
    ``eval_deterministic(check, module, run, what, p)`` and
    ``train_random(check, module, run, what, p)``: dropout off in eval mode, on in
    training mode, where a backward pass must run too.
    ``dropout_measured(check, observe, p, what)``: on each named place where the
    exercise puts a dropout, the rate, the scale, one mask per entry, a fresh
    mask per place and per call, drawn from torch's global generator.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import dis
import inspect
import linecache
import math
import os
import re
import sys
import types
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import contracts
from .._schema import loaded_statements, names_defined, parse_cell
from . import _gpu
from ._core import ATOL, RTOL, Check, CheckResult, Raised, Status, close_enough, describe, fmt_shape, generator
from ._dropout import drop_pattern, dropout_problem, mask_problems, seeded

# --------------------------------------------------------------------------
# Building and the contract


def is_module(check: Check, obj: Any, name: str) -> nn.Module:
    """Fail unless the learner's class built an ``nn.Module``."""
    if not isinstance(obj, nn.Module):
        check.fail(
            f"{name}(...) should build an nn.Module, but it built {describe(obj)}.\n"
            f"Make your class inherit from nn.Module (`class {name}(nn.Module):`) and call super().__init__() first."
        )
    return obj


_SPEC = re.compile(r"^\s*(\w+)\s*:\s*(\w+)\s*\((.*)\)\s*$")


def contract_parts(check: Check, module: nn.Module, exercise: str, sizes: dict[str, Any],
                   components: Sequence["Part"] = (), owner: str = "") -> None:
    """The contract of ``exercise``: the names it gives, then the components' own checkers, then kinds and sizes.

    ``sizes`` maps the constructor's parameter names to the values the checker built ``module`` with;
    ``components`` are the earlier exercises it is made of (see :func:`components_first`).
    """
    spec = contracts.contract(exercise)
    parts = [_SPEC.match(part).groups() for part in spec.parts]
    owner = owner or f"your {exercise}({', '.join(f'{k}={v}' for k, v in sizes.items())})"
    uses = "; ".join(re.sub(r"^(\d\d):", r"lesson \1:", use) for use in spec.used_by
                     if not use.startswith("benchmarks/"))  # the lessons, which the learner knows
    listing = "; ".join(f"`{name}` is {_asked(kind, args)}" for name, kind, args in parts)
    why = f"The names are part of the exercise, with these kinds and sizes: {listing}. Later code relies on them ({uses})."
    buffers = dict(module.named_buffers(recurse=False))
    absent = []
    for name, kind, _ in parts:
        if kind == "buffer" and name not in buffers:
            yours = next((f" (yours is `{n}`, of shape {fmt_shape(b.shape)})" for n, b in buffers.items()), "")
            absent.append(f"no buffer named `{name}`{yours}")
    missing = [name for name, kind, _ in parts if kind not in ("buffer", "param")
               and not isinstance(getattr(module, name, None), nn.Module)]
    plain = [n for n in missing if isinstance(getattr(module, n, None), (list, tuple, dict))]
    if plain:
        shown = ", ".join(f"`{n}`" for n in plain)
        check.fail(f"{owner[:1].upper() + owner[1:]} keeps {shown} in a plain Python "
                   f"{type(getattr(module, plain[0])).__name__}: nn.Module does not register modules kept that way, "
                   f"so `.parameters()` (and the optimizer), `.to(device)`, `.eval()` and `state_dict()` never see "
                   f"them. Use `nn.ModuleList([...])` (or `nn.ModuleDict`).\n{why}")
    if missing:
        found = ", ".join(f"`{n}` = {type(m).__name__}" for n, m in module.named_children()) or "none"
        absent.append(f"no submodule{'s' if len(missing) > 1 else ''} {', '.join(f'`{n}`' for n in missing)} "
                      f"(its submodules: {found})")
    if absent:
        check.fail(f"{owner[:1].upper() + owner[1:]} has {' and '.join(absent)}.\n{why}")
    for attribute in (a for a in spec.attributes if a in sizes):  # arguments later code reads back: d_model, pad_id
        value = getattr(module, attribute, _MISSING)
        if type(value) is not type(sizes[attribute]) or value != sizes[attribute]:
            default = default_of(type(module), attribute)
            if default is not NO_DEFAULT and default == value and default != sizes[attribute]:
                check.fail(f"Your {exercise}'s `{attribute}` defaults to {default!r} in `__init__`; the exercise's "
                           f"default is {sizes[attribute]!r}. Later code builds it without that argument ({uses}).")
            has = f"has `{attribute}` = {describe(value)}" if value is not _MISSING else f"has no attribute `{attribute}`"
            check.fail(f"{owner[:1].upper() + owner[1:]} {has}: store the argument, "
                       f"`self.{attribute} = {attribute}`. Later code reads it ({uses}).")
    components_first(check, exercise, components)
    for name, kind, args in parts:
        problem = _part_problem(getattr(module, name, None), name, kind, args, sizes, module, owner)
        if problem:
            check.fail(f"{problem[:1].upper() + problem[1:]}\n{why}")
    if parts:
        check.ok("has " + ", ".join(f"`{name}`" for name, _, _ in parts) + " with the kinds and sizes the exercise gives")


def default_of(cls: type, parameter: str | int) -> Any:
    """The default of ``parameter`` in ``cls.__init__`` (a name, or a position after self), or NO_DEFAULT."""
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return NO_DEFAULT
    if isinstance(parameter, int):
        listed = list(parameters.values())[1:]
        found = listed[parameter] if parameter < len(listed) and listed[parameter].kind in (
            inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) else None
    else:
        found = parameters.get(parameter)
    return NO_DEFAULT if found is None or found.default is inspect.Parameter.empty else found.default


def contract_defaults(check: Check, cls: type, exercise: str) -> None:
    """The constructor's defaults are the exercise's, read by position (the course passes these arguments by
    position, so their names are the learner's own)."""
    spec = contracts.CONTRACTS.get(exercise)
    text = spec.signature.split(";")[0] if spec is not None else ""
    wanted = []
    for position, item in enumerate(_call_items(text, exercise) or []):
        name, eq, literal = item.partition("=")
        if eq:
            wanted.append((position, name.strip(), ast.literal_eval(literal.strip())))
    for position, name, default in wanted:
        theirs = default_of(cls, position)
        if theirs is NO_DEFAULT or theirs != default or type(theirs) is bool:
            shown = "missing" if theirs is NO_DEFAULT else repr(theirs)
            check.fail(f"The default of `{name}` (parameter {position + 1}) in your {exercise} is {shown}; the "
                       f"exercise gives `{text}`. A module built without that argument must behave as the exercise "
                       f"says: put `{name}={default!r}` in the signature.")
    if wanted:
        check.ok("the defaults are " + ", ".join(f"{name}={default!r}" for _, name, default in wanted))


def _split_items(text: str) -> list[str]:
    """The top-level items of a parameter list (commas inside brackets do not split)."""
    depth, items, current = 0, [], ""
    for char in text:
        depth += (char in "([") - (char in ")]")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [item for item in items + [current] if item.strip()]


def _asked(kind: str, args: str) -> str:
    if kind in ("buffer", "param"):
        return f"{'a buffer' if kind == 'buffer' else 'an nn.Parameter'} of shape ({args}{',' * (',' not in args)})"
    return f"{_qualified(kind)}({args})"


def _qualified(kind: str) -> str:
    """``nn.Linear`` for PyTorch's modules, the exercise's own name otherwise."""
    return f"nn.{kind}" if hasattr(nn, kind) and kind not in contracts.CONTRACTS else kind


def _arguments(text: str, sizes: dict[str, Any]) -> list[Any]:
    """The values of a part's arguments (names of the constructor's parameters, or literals); None when unknown."""
    values = []
    for item in filter(None, (a.strip() for a in text.split(","))):
        try:
            values.append(sizes[item] if item in sizes else ast.literal_eval(item))
        except (ValueError, SyntaxError):
            values.append(None)
    return values


def _own_norm_problem(norm: nn.Module, shown: str, d_model: int) -> str:
    """"" if a layer norm of the learner's own class computes nn.LayerNorm's values with its parameters (gain first,
    then bias, as lesson 07 copies them); else what differs."""
    params = list(norm.parameters())
    if len(params) != 2 or not isinstance(d_model, int):
        return ""
    gain, bias = params
    x = torch.randn(2, 3, d_model, generator=generator(4)) * 3 + 1  # (2, 3, d_model)
    eps = getattr(norm, "eps", 1e-5)
    eps = eps if isinstance(eps, float) and 0 < eps < 1e-3 else 1e-5
    try:
        with torch.no_grad():
            got = norm(x.clone())
            want = F.layer_norm(x, (d_model,), gain, bias, eps)
    except Exception:  # noqa: BLE001  (the layer's own stages run it, and report a crash with its line)
        return ""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or torch.allclose(got, want, atol=1e-4, rtol=1e-4):
        return ""
    centred, var = x - x.mean(-1, keepdim=True), x.var(-1, keepdim=True)  # var with Bessel's correction
    bessel = [centred / torch.sqrt(var + eps) * gain + bias, centred / (var.sqrt() + eps) * gain + bias]
    rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain + bias
    over_positions = F.layer_norm(x.transpose(1, 2), (x.shape[1],), eps=eps).transpose(1, 2) * gain + bias
    close = lambda other: torch.allclose(got, other, atol=1e-3, rtol=1e-3)  # noqa: E731
    if any(close(b) for b in bessel):
        cause = ("It divides the variance by d_model - 1: `x.std()` and `x.var()` apply Bessel's correction by "
                 "default. Use `x.var(-1, unbiased=False, keepdim=True)` (or correction=0), as nn.LayerNorm does; "
                 "lesson 07 compares your model with PyTorch's layers, which do.")
    elif close(rms):
        cause = ("It does not subtract the mean: that is RMSNorm. The paper's layers use layer normalisation, "
                 "(x - mean) / sqrt(var + eps), with the mean and variance of each vector's d_model features.")
    elif close(over_positions):
        cause = ("It normalises over the positions (dim 1) instead of each vector's d_model features: take the "
                 "statistics along the last axis, `x.mean(-1, keepdim=True)`.")
    else:
        cause = "Run check_layer_norm on it: it names what differs."
    return (f"{shown} is your {type(norm).__name__}, but it does not compute a layer norm: on inputs of shape "
            f"(2, 3, {d_model}) it differs from nn.LayerNorm with the same gain and bias by up to "
            f"{float((got - want).abs().max()):.2g}. {cause}")


def _part_problem(part: Any, name: str, kind: str, text: str, sizes: dict[str, Any], module: nn.Module,
                  owner: str) -> str:
    """What is wrong with one part ('' when it fits its spec ``kind(text)``, ``text`` read with ``sizes``)."""
    args = _arguments(text, sizes)
    named = f"{_qualified(kind)}({text}) = {_qualified(kind)}({', '.join(str(a) for a in args)})"
    if kind == "buffer":
        buffers = dict(module.named_buffers(recurse=False))
        if isinstance(getattr(module, name, None), nn.Parameter):
            return (f"`{name}` of {owner} is an nn.Parameter, which an optimizer would train: it is fixed, so keep "
                    f"it as a buffer, `self.register_buffer(\"{name}\", ...)`.")
        if name not in buffers:
            others = [f"`{n}`, of shape {fmt_shape(b.shape)}" for n, b in buffers.items()]
            yours = f" (yours is {others[0]})" if others else ""
            return (f"{owner} has no buffer named `{name}`{yours}: register it with "
                    f"`self.register_buffer(\"{name}\", ...)`.")
        shape = tuple(buffers[name].shape)  # read by its first axis: extra axes of size 1 after it are fine
        rows_fit = len(shape) >= 2 and shape[0] == args[0] and math.prod(shape[1:]) == math.prod(args[1:])
        return "" if rows_fit else (f"The buffer `{name}` of {owner} has shape {fmt_shape(shape)}, where "
                                    f"{fmt_shape(args)} was asked for: `{name}[t]` is the row of position t.")
    if kind == "param":
        if not isinstance(part, nn.Parameter):
            asked = _asked(kind, text)
            return (f"{owner} {_no_parameter(part, name, args, module)}. {asked[:1].upper() + asked[1:]} was asked "
                    f"for: `self.{name} = nn.Parameter(...)`, so that an optimizer trains it and `.to(device)` moves it.")
        shape, args = tuple(part.shape), tuple(args)
        cause = ("it looks transposed (its axes are swapped)" if len(shape) > 1 and shape == args[::-1] else
                 "it has an extra axis of size 1: keep the plain shape, broadcasting adds the others"
                 if shape[:1] == (1,) and shape[1:] == args else
                 "build it from the constructor's arguments, not from fixed sizes")
        return "" if shape == args else (f"The parameter `{name}` of {owner} has shape {fmt_shape(shape)}, where "
                                         f"({text}) = {fmt_shape(args)} was asked for: {cause}.")
    if not isinstance(part, nn.Module):
        found = ", ".join(f"`{n}` = {type(m).__name__}" for n, m in module.named_children()) or "none"
        return f"{owner} has no submodule `{name}` (its submodules: {found})."
    shown = f"`{name}` of {owner}"
    if kind == "Linear":
        if not isinstance(part, nn.Linear):
            return f"{shown} is {describe(part)}, not an nn.Linear."
        have = (part.in_features, part.out_features)
        if have != tuple(args):
            swapped = " (in and out swapped)" if have == tuple(args)[::-1] else ""
            return f"{shown} is nn.Linear{have}{swapped}, where {named} was asked for."
    elif kind == "Embedding":
        if not isinstance(part, nn.Embedding):
            return f"{shown} is {describe(part)}, not an nn.Embedding."
        have = (part.num_embeddings, part.embedding_dim)
        if have != tuple(args):
            return f"{shown} is nn.Embedding{have}, where {named} was asked for."
    elif kind == "LayerNorm":
        if isinstance(part, nn.LayerNorm):
            if tuple(part.normalized_shape) != tuple(args):
                return (f"{shown} is nn.LayerNorm({tuple(part.normalized_shape)}): it normalises over the wrong axes; "
                        f"nn.LayerNorm({args[0]}) normalises each position's d_model features on its own.")
            if part.eps != 1e-5:
                return (f"{shown} is nn.LayerNorm({args[0]}, eps={part.eps:g}): the exercise's LayerNorm(d_model) keeps "
                        f"the default eps=1e-5, which lesson 07's nn.Transformer copy of your model uses too "
                        f"(layer_norm_eps). Leave eps at its default.")
        elif any(tuple(p.shape) != tuple(args) for p in part.parameters()):
            return f"{shown} is {describe(part)}, whose parameters do not have the shape ({args[0]},) of a layer norm's gain and bias."
        else:
            return _own_norm_problem(part, shown, args[0])
    elif kind == "Dropout":
        if not isinstance(part, nn.Dropout):
            return f"{shown} is {describe(part)}, not an nn.Dropout."
        if args and args[0] is not None and part.p != args[0]:
            return f"{shown} is nn.Dropout(p={part.p}), where it was built with dropout={args[0]}."
    elif kind == "ModuleList":
        if not isinstance(part, nn.ModuleList):
            return f"{shown} is {describe(part)}, not an nn.ModuleList."
        if args and len(part) != args[0]:
            return f"{shown} holds {len(part)} layers, where num_layers = {args[0]} were asked for."
    elif kind in contracts.CONTRACTS:  # another exercise: its own parts, with the sizes it was given
        inner = contracts.contract(kind)
        params = _parameters_of(inner.signature)
        inner_sizes = {p: v for p, v in zip(params, args) if v is not None}
        for attribute in (a for a in inner.attributes if a in inner_sizes):  # e.g. num_heads, passed on
            value = getattr(part, attribute, None)
            if value != inner_sizes[attribute]:
                return (f"{shown} ({type(part).__name__}) has {attribute} = {describe(value)}, where "
                        f"{attribute}={inner_sizes[attribute]} was passed on: build it with the {attribute} you were given.")
        for spec in inner.parts:
            sub, sub_kind, sub_args = _SPEC.match(spec).groups()
            if all(a.strip() in inner_sizes or not a.strip().isidentifier() for a in sub_args.split(",") if a.strip()):
                problem = _part_problem(getattr(part, sub, None), sub, sub_kind, sub_args, inner_sizes, part,
                                        f"{shown} ({type(part).__name__})")
                if problem:
                    return problem
    return ""


def _no_parameter(part: Any, name: str, args: list[Any], module: nn.Module) -> str:
    """What a module has where the parameter ``name`` was asked for, in the words of the likely cause."""
    if name in dict(module.named_buffers(recurse=False)):
        return (f"keeps `{name}` as a registered buffer, so nothing ever learns it: an optimizer only updates the "
                f"model's parameters, and a buffer is not one")
    if isinstance(part, torch.Tensor):
        return (f"keeps `{name}` as a plain tensor attribute: it is not registered, so `model.parameters()` does not "
                f"list it (no optimizer trains it) and `.to(device)` leaves it behind")
    if isinstance(part, nn.Module):
        holds = f" (as `{name}.weight`)" if isinstance(getattr(part, "weight", None), torch.Tensor) else ""
        return f"has `{name}` = {_qualified(type(part).__name__)}, a module that holds a tensor{holds}, not a tensor"
    size = math.prod(a for a in args if isinstance(a, int))
    others = [f"`{n}`, of shape {fmt_shape(p.shape)}" for n, p in module.named_parameters(recurse=False)
              if p.numel() == size]
    found = (f": its parameter {others[0]} looks like it, under another name" if others else
             f" ({describe(part)} there)" if part is not None else "")
    return f"has no parameter `{name}`{found}"


def _parameters_of(signature: str) -> list[str]:
    """The constructor's parameter names, in order, from a contract's signature ``Name(a, b=1, c=2); ...``."""
    call = ast.parse(signature.split(";")[0].strip(), mode="eval").body
    return [a.id for a in call.args if isinstance(a, ast.Name)] + [k.arg for k in call.keywords]


@dataclasses.dataclass
class Part:
    """An earlier exercise the learner's code uses: how it is used, the object, its checker and exercise name."""

    usage: str  # "`self_attn` = MyAttention", "`make_padding_mask`"
    obj: Any
    checker: Callable[[Any], CheckResult]
    exercise: str


_RESULTS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_UNWEAKABLE: dict[tuple[str, int], tuple[Any, CheckResult]] = {}


def component_result(checker: Callable[[Any], CheckResult], obj: Any) -> CheckResult:
    """The result of a component's own checker on ``obj`` (computed once while the object lives)."""
    try:
        results = _RESULTS.setdefault(obj, {})
    except TypeError:  # not weakly referenceable: keyed by id, checked for identity
        entry = _UNWEAKABLE.get((checker.__name__, id(obj)))
        if entry is None or entry[0] is not obj:
            entry = _UNWEAKABLE[(checker.__name__, id(obj))] = (obj, checker(obj))
        return entry[1]
    if checker.__name__ not in results:
        results[checker.__name__] = checker(obj)
    return results[checker.__name__]


def components_first(check: Check, owner: str, parts: Sequence[Part]) -> None:
    """Run each part's own checker (once per object); blame the first that does not pass."""
    seen: set[tuple[int, str]] = set()
    for part in parts:
        key = (id(part.obj), part.checker.__name__)
        if key in seen:
            continue
        seen.add(key)
        library = getattr(part.obj, "__module__", "") or ""
        if isinstance(part.obj, type) and library.startswith("torch.") and part.obj.__name__ != part.exercise:
            check.fail(f"Your {owner} uses {part.usage}, which is PyTorch's torch.nn.{part.obj.__name__}, not your "
                       f"{part.exercise} from the earlier exercise. Build the part with your own class, as the "
                       f"exercise says: later lessons rely on its names and its call, which PyTorch's class does not "
                       f"have.")
        result = component_result(part.checker, part.obj)
        if result.passed:
            continue
        first = result.messages[0] if result.messages else ""
        text = (f"Your {owner} uses {part.usage}, your {part.exercise}, which fails its own checker (it does not "
                f"pass {part.checker.__name__}: {result.status.value.upper()}). Fix that first, then run this checker "
                f"again.\nWhat {part.checker.__name__} says about it:\n" + "\n".join("  " + ln for ln in first.splitlines()))
        if result.status is Status.NOT_ATTEMPTED:
            check.not_attempted(text)
        check.fail(text)
    if parts:
        names = ", ".join(dict.fromkeys(p.exercise for p in parts))
        check.ok(f"the parts it uses pass their own checkers ({names})")


def submodule_parts(module: nn.Module, wanted: dict[str, tuple[Callable, str]]) -> list[Part]:
    """The classes of the named submodules (dotted names allowed), each with its checker and exercise."""
    found = []
    for name, (checker, exercise) in wanted.items():
        try:
            sub = module.get_submodule(name)
        except AttributeError:
            continue
        found.append(Part(f"`{name}` = {type(sub).__name__}", type(sub), checker, exercise))
    return found


def _unwrapped(function: Any) -> Any:
    """The function a decorator wrapped (``@torch.no_grad()`` keeps it as ``__wrapped__``), else the function."""
    try:
        return inspect.unwrap(function)
    except ValueError:  # a cycle of __wrapped__
        return function


def _code_objects(obj: Any) -> list:
    """The code of a function, or of every method of a class (nested functions included)."""
    if isinstance(obj, type):
        functions = [_unwrapped(v) for k, v in vars(obj).items() if callable(v) and hasattr(v, "__code__")]
    else:
        functions = [_unwrapped(obj)] if hasattr(obj, "__code__") else []
    codes, todo = [], [f.__code__ for f in functions]
    while todo:
        code = todo.pop()
        codes.append(code)
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
    return codes


def called_parts(obj: Any, wanted: dict[str, tuple[Callable, str]]) -> list[Part]:
    """The learner's own functions named in ``wanted`` that ``obj`` (a function or a class) calls by name."""
    functions = [f for f in ([obj] if not isinstance(obj, type) else vars(obj).values()) if hasattr(f, "__globals__")]
    namespace = functions[0].__globals__ if functions else {}
    names = {n for code in _code_objects(obj) for n in code.co_names}
    return [Part(f"`{name}`", namespace[name], checker, exercise) for name, (checker, exercise) in wanted.items()
            if name in names and callable(namespace.get(name))]


_NOTEBOOK_MODULES = ("__main__", "__course_exercises__")  # where a notebook's (or a loaded lesson's) code lives


def _cell_family(filename: str) -> list[str]:
    """The sources of every cell of the notebook whose cell compiled to ``filename``."""
    if filename.startswith("<") and ".ipynb, code cell" in filename:  # a cell run by load_exercises
        prefix = filename.split(", code cell")[0]
        return ["".join(linecache.getlines(name)) for name in list(linecache.cache) if name.startswith(prefix)]
    folder = os.path.dirname(filename)  # an IPython kernel's cells: /tmp/ipykernel_<pid>/<hash>.py
    if not folder or "ipykernel" not in folder:
        return []
    return ["".join(linecache.getlines(name)) for name in list(linecache.cache) if os.path.dirname(name) == folder]


def _definition_time_names(tree: ast.AST, name: str) -> set[str]:
    """The names read when the cell's ``def name`` or ``class name`` statement itself runs (not its body's
    functions): decorators, default values, annotations, base classes, a class body's own statements. A later
    lesson's loading runs that statement, so a name another cell defines fails there, before any call."""
    def reads(nodes: list) -> set[str]:
        return {n.id for node in nodes if node is not None for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

    def of_function(node: ast.AST) -> set[str]:
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        annotations = [node.returns, *[a.annotation for a in every if a is not None]]
        return reads([*node.decorator_list, *args.defaults, *args.kw_defaults,
                      *(annotations if sys.version_info < (3, 14) else [])])  # from 3.14 on, evaluated lazily

    found: set[str] = set()
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found |= of_function(node)
        elif isinstance(node, ast.ClassDef) and node.name == name:
            found |= reads([*node.decorator_list, *node.bases, *[k.value for k in node.keywords]])
            for item in node.body:
                found |= (of_function(item) if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                          else reads([item]))
    return found


def _imported(sources: list[str]) -> set[str]:
    names: set[str] = set()
    for source in sources:
        tree = parse_cell(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _named_parameters(text: str) -> list[str]:
    """The parameter names of ``name(a, b=1, c (B, L))``: the first identifier of each top-level item."""
    names = [re.match(r"\s*\**([A-Za-z_]\w*)", item) for item in _split_items(text)]
    return [m.group(1) for m in names if m]


def _call_items(signature: str, name: str) -> list[str] | None:
    """The parameter list a contract's signature gives ``name(...)``, item by item (``"dropout=0.0"``), or None."""
    start = re.search(rf"(?<![\w.]){re.escape(name)}\(", signature)
    if start is None:
        return None
    depth, i = 1, start.end()
    while i < len(signature) and depth:
        depth += (signature[i] == "(") - (signature[i] == ")")
        i += 1
    return _split_items(signature[start.end(): i - 1])


def _call_parameters(signature: str, name: str) -> list[str] | None:
    """The parameters a contract's signature gives ``name(...)`` (the constructor's or forward's), or None."""
    items = _call_items(signature, name)
    return None if items is None else _named_parameters(", ".join(items))


def _not_by_name(fn: Any, names: list[str]) -> list[str] | None:
    """Which of ``names`` a call of ``fn`` cannot pass by keyword (None when its signature cannot be read)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return []
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [n for n in names if n not in named]


def _positional(fn: Any, skip_self: bool) -> list[str] | None:
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names[1:] if skip_self else names


def parameter_order(check: Check, obj: Any, exercise: str) -> None:
    """The course passes arguments by position: the exercise's parameters, under its names, in its order.

    Only a reordering of the contract's own names is reported (a renamed or extra parameter is not this stage's
    business): a learner who writes ``(d_model, num_layers, num_heads)`` gets every later call's sizes mixed up.
    The exception: the parameters a later cell passes by keyword (``Contract.by_name``) must have their names.
    """
    spec = contracts.CONTRACTS.get(exercise)
    if spec is None or not callable(obj):
        return
    methods = [("__init__", exercise, True), ("forward", "forward", True)] if spec.kind == "class" else \
              [(None, exercise, False)]
    for method, called, skip_self in methods:
        wanted = _call_parameters(spec.signature, called)
        fn = obj if method is None else getattr(obj, method, None)
        theirs = _positional(fn, skip_self) if fn is not None else None
        if not wanted or theirs is None or len(theirs) < len(wanted):
            continue
        first = theirs[: len(wanted)]
        if set(first) == set(wanted) and first != wanted:
            where = f"{exercise}.forward" if method == "forward" else exercise  # the course's name for it
            swapped = [f"`{w}`" for w, t in zip(wanted, first) if w != t]
            check.fail(
                f"Your {where} takes its parameters in the order ({', '.join(first)}); the exercise's order is "
                f"({', '.join(wanted)}). The course passes them by position, as later lessons do, so "
                f"{' and '.join(swapped[:2]) if len(swapped) <= 2 else ', '.join(swapped)} would receive each "
                f"other's values. Put the parameters in the exercise's order: "
                f"{spec.signature.split(';')[0] if method != 'forward' else spec.signature.split(';')[-1].strip()}."
            )
        by_name = [n.removeprefix("forward.") for n in spec.by_name  # what a later cell passes by keyword
                   if n.startswith("forward.") == (method == "forward")]
        missing = _not_by_name(fn, by_name) if fn is not None and by_name else None
        if missing:
            where = f"{exercise}.forward" if method == "forward" else exercise
            shown = ", ".join(theirs) if theirs is not None else "?"
            check.fail(
                f"Your {where} has no parameter {' or '.join(f'`{n}`' for n in missing)} (its parameters: {shown}). "
                f"The course passes {'it' if len(missing) == 1 else 'them'} by name ({spec.by_name_where}: "
                f"`{where}(..., {', '.join(f'{n}=...' for n in by_name)})`), and that call would stop with a "
                f"TypeError. Name the parameters as the exercise does: "
                f"{spec.signature.split(';')[0] if method != 'forward' else spec.signature.split(';')[-1].strip()}."
            )


def defined_where_loaded(check: Check, obj: Any, exercise: str) -> None:
    """Later lessons load the exercise's own cell: every name it uses must be defined there (or imported).

    Simulates ``notebook.load_exercises`` (``_schema.loaded_statements``) on the cell the learner's object
    was defined in; only for code written in a notebook.
    """
    functions = [_unwrapped(getattr(f, "__func__", f))
                 for f in ([obj] if not isinstance(obj, type) else vars(obj).values())]
    functions = [f for f in functions if hasattr(f, "__code__") and hasattr(f, "__globals__")]
    if not functions or getattr(obj, "__module__", None) not in _NOTEBOOK_MODULES:
        return
    filename = functions[0].__code__.co_filename
    tree = parse_cell("".join(linecache.getlines(filename)))
    name = getattr(obj, "__name__", exercise)
    if tree is None:
        return
    loaded = {n for node in loaded_statements(tree, {name}) for n in names_defined(node)}
    if name not in loaded:
        return  # not defined at the top of a cell: nothing to simulate
    family = _cell_family(filename)
    imported = _imported(family) | _imported(["".join(linecache.getlines(filename))])
    assigned = {n for source in family for node in getattr(parse_cell(source), "body", []) for n in names_defined(node)}
    namespace, missing = functions[0].__globals__, []
    used = {ins.argval for code in _code_objects(obj) for ins in dis.get_instructions(code)
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")} | _definition_time_names(tree, name)
    given = set(contracts.CONTRACTS[exercise].loaded_with) if exercise in contracts.CONTRACTS else set()
    for used_name in sorted(used - loaded - imported - given - set(contracts.CONTRACTS)):
        value = namespace.get(used_name, _MISSING)
        if used_name in vars(builtins) or value is _MISSING or isinstance(value, types.ModuleType):
            continue
        if hasattr(value, "__code__") or isinstance(value, type):  # a function or a class: where it was written
            origin = getattr(getattr(value, "__code__", None), "co_filename", "") or value.__module__
            if value.__module__ not in _NOTEBOOK_MODULES or origin.startswith("<"):
                continue  # a library's object, or one another lesson's cell defines (loaded there too)
        elif used_name not in assigned:
            continue  # a constant that no other cell of this notebook assigns (imported, or from a library)
        missing.append(used_name)
    if missing:
        shown = ", ".join(f"`{m}`" for m in missing)
        check.problem(
            f"Your {name} uses {shown}, which another cell of this notebook defines. Later lessons load your "
            f"{name} on its own: the cell that defines it (with every function, class and constant in that cell) "
            f"and the notebook's imports, nothing else, so there {shown} would be missing (a NameError).\n"
            f"Move {shown} into the cell that defines {name}."
        )


_MISSING = object()
NO_DEFAULT = _MISSING  # what default_of returns for a parameter without a default


class _Spy(nn.Module):
    """Stands in for a submodule and counts its calls; everything else (attributes, parameters) is the original's."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)


def called_as_modules(check: Check, module: nn.Module, names: Sequence[str], inputs: tuple, owner: str,
                      why: str) -> None:
    """Each named submodule is called as a module, ``self.name(...)``: a call of ``self.name.forward(...)`` skips
    PyTorch's hooks, which later lessons (and the checkers' own measurements) use to see what a sublayer receives."""
    counts: dict[str, list[int]] = {}
    handles = []
    for name in names:
        sub = getattr(module, name, None)
        if not isinstance(sub, nn.Module) or "forward" in vars(sub):  # a forward of its own instance: left alone
            continue
        counts[name] = [0, 0]  # forward runs, calls through the module (its hooks)

        def counted(*args: Any, _forward=sub.forward, _count=counts[name], **kwargs: Any) -> Any:
            _count[0] += 1
            return _forward(*args, **kwargs)

        sub.forward = counted  # an instance attribute: both ways of calling reach it
        handles.append(sub.register_forward_pre_hook(lambda *_, _count=counts[name]: _count.__setitem__(1, _count[1] + 1)))
    try:
        out = check.attempt(module, *inputs, what=f"{owner}.forward")
    finally:
        for handle in handles:
            handle.remove()
        for name in counts:
            del getattr(module, name).forward
    if isinstance(out, Raised):
        return
    bypassed = [name for name, (runs, hooked) in counts.items() if runs > hooked]
    if bypassed:
        shown = ", ".join(f"`self.{n}.forward(...)`" for n in bypassed)
        check.fail(
            f"Your {owner} calls {shown} directly. Call the module itself, "
            + ", ".join(f"`self.{n}(...)`" for n in bypassed)
            + f": only then do PyTorch's hooks run, and {why}."
        )
    check.ok("calls its sublayers as modules (their hooks run)")


def replaced_parts_used(check: Check, module: nn.Module, names: Sequence[str], inputs: tuple, owner: str,
                        replaced_by: str) -> None:
    """Later lessons replace these submodules by assignment: forward must reach each through its own name.

    Each is swapped, in turn, for a stand-in that counts its calls (and otherwise is the original). A forward
    that computes with the same module under another name, or with a copy, never calls the stand-in; a forward
    that crashes with the stand-in in place proves nothing, and passes.
    """
    for name in names:
        original = getattr(module, name, None)
        if not isinstance(original, nn.Module):
            continue
        spy = _Spy(original)
        setattr(module, name, spy)
        try:
            out = check.attempt(module, *inputs, what=f"{owner}.forward")
        finally:
            setattr(module, name, original)
        if not isinstance(out, Raised) and spy.calls == 0:
            check.fail(
                f"Your {owner}'s forward never calls `self.{name}`: with `self.{name}` replaced by another module, "
                f"the output was computed without it (the same module kept under a second name, a copy, or a list "
                f"made in __init__?). {replaced_by} replaces `{name}` by assignment and must see the change. Call "
                f"it as `self.{name}(...)` in forward, and keep no other reference to it."
            )
    check.ok("calls " + ", ".join(f"`self.{n}`" for n in names) + " by name (later lessons replace "
             + ("it)" if len(names) == 1 else "them)"))


def dropout_set_through(check: Check, build: Callable[[float], nn.Module], paths: Sequence[str], inputs: tuple,
                        owner: str, where: str, sublayers: Sequence[str] = ()) -> None:
    """Built with dropout 0.0, then `.p` set on the named Dropout modules: training must become random, and at
    `.p = 1` what those modules drop must no longer reach the output (``sublayers``: parts, or ``""`` for the
    input itself, whose contribution goes through them alone).

    Lesson 08 applies dropout only where the paper puts it this way (``inner_dropout=False``): it builds the
    model without dropout and sets the rate of the contract's ``dropout`` modules afterwards.
    """
    module = build(0.0)
    targets = [module.get_submodule(path) for path in paths]
    if not all(isinstance(t, nn.Dropout) for t in targets):
        return  # the contract's kinds are checked elsewhere
    shown = ", ".join(f"`{p}`" for p in paths)
    advice = (f"Lesson 08 builds your model without dropout and then sets `{paths[0]}.p`, to put dropout only where "
              f"the paper does. Apply `self.dropout` itself (or read its `.p`).")
    for target in targets:
        target.p = 0.5
    module.train()
    first = check.attempt(module, *inputs, what=f"{owner}.forward")
    second = check.attempt(module, *inputs, what=f"{owner}.forward")
    if isinstance(first, Raised) or isinstance(second, Raised):
        return
    first, second = (o[0] if isinstance(o, tuple) else o for o in (first, second))
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and torch.equal(first, second):
        check.fail(
            f"Your {owner}, built with dropout=0.0, stays deterministic in training mode after the rate of {shown} "
            f"was set to 0.5: the dropout it applies {where} is not {shown if len(paths) == 1 else 'those modules'} "
            f"(another nn.Dropout, built with the rate of 0.0, does the work?). " + advice)
    for target in targets:  # at p = 1 each part's contribution is dropped whole: changing it changes nothing
        target.p = 1.0
    base = check.attempt(module, *inputs, what=f"{owner}.forward")
    base = base[0] if isinstance(base, tuple) else base
    for part in sublayers:
        changed = build(0.0)
        if isinstance(check.attempt(changed.load_state_dict, module.state_dict(), what=f"{owner}.load_state_dict"),
                      Raised):
            return  # a state that does not load back is not this stage's business
        for path in paths:
            changed.get_submodule(path).p = 1.0
        changed.train()
        moved = [x + 1.0 if part == "" and isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            for parameter in (changed.get_submodule(part).parameters() if part else ()):
                parameter.add_(1.0)
        out = check.attempt(changed, *moved, what=f"{owner}.forward")
        out = out[0] if isinstance(out, tuple) else out
        if (isinstance(base, torch.Tensor) and isinstance(out, torch.Tensor) and base.shape == out.shape
                and not torch.allclose(base, out, atol=1e-5, equal_nan=True)):
            check.fail(
                f"Your {owner}, built with dropout=0.0 and then given a rate of 1 in {shown} (every entry dropped), "
                f"still passes " + (f"the output of `{part}`" if part else "its input") + " on in training mode: "
                f"some of the dropout it applies {where} is not {shown} (a second nn.Dropout, built with the rate "
                f"of 0.0, or F.dropout with a rate stored at construction?). " + advice)
    check.ok(f"applies its dropout through {shown}: a rate set there later takes effect (lesson 08 sets "
             f"the rates of lessons 03 and 05's modules so)")


def one_tensor(check: Check, out: Any, what: str, hint: str = "") -> Any:
    """Fail when a module returns several values (``(x, weights)``) where one tensor is the contract."""
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        check.fail(
            f"Your {what}.forward returns {describe(out)} (such as (x, weights)): it should return one tensor, its "
            f"output. The next layer and the model take it as it is; the attention weights stay available in "
            f"`attention_weights` of the attention module, where later cells read them." + (f"\n{hint}" if hint else "")
        )
    return out


# --------------------------------------------------------------------------
# Values


@dataclasses.dataclass
class Case:
    """One input of a sweep: its label in messages, and whatever ``run`` and ``expected`` read from it."""

    label: str
    data: Any
    atol: float | None = None  # this case's own absolute tolerance (float32 inputs far from 0 carry larger errors)


def sweep(check: Check, cases: Sequence[Case], run: Callable[[Case], torch.Tensor],
          expected: Callable[[Case], torch.Tensor], what: str, atol: float = ATOL, rtol: float = RTOL,
          hint: str = "", fresh: Callable[[Case], Any] | None = None,
          slips: Sequence[tuple[Callable[[Case], torch.Tensor], str]] = ()) -> None:
    """Each case in turn against the oracle, on the same function or module.

    A wrong answer that belongs to an earlier case, or that a fresh instance (``fresh(case)``, for a module
    that already ran) gets right, is named as state kept between calls. ``slips`` are the exercise's known
    mistakes, ``(what it would compute for a case, the message that names it)``, tried only once the values
    differ (never to accept).
    """
    kept = ("something is kept between calls (a global, a default argument, a cache or an attribute set in "
            "forward that ignores some argument). Compute everything from each call's own arguments.")
    sweep_atol = atol
    for i, case in enumerate(cases):
        atol = case.atol if case.atol is not None else sweep_atol
        out = run(case)
        want = expected(case)
        if close_enough(out, want, atol, rtol):
            continue
        again = fresh(case) if fresh is not None else None
        if isinstance(again, torch.Tensor) and close_enough(again, want, atol, rtol):
            check.fail(f"For {case.label}, a new instance of your {what} is right but the one that already ran on "
                       f"other inputs is not, so it answers from an earlier call: {kept}")
        for earlier in cases[:i]:
            before = expected(earlier)
            if isinstance(out, torch.Tensor) and out.shape == before.shape and close_enough(out, before, atol, rtol):
                check.fail(f"For {case.label}, your {what} returns the answer for {earlier.label}, an earlier call: {kept}")
        for slip, message in slips:
            wrong = slip(case)
            if isinstance(out, torch.Tensor) and out.shape == wrong.shape and close_enough(out, wrong, atol, rtol):
                check.fail(f"Your {what} is wrong for {case.label}: {message}")
        first = cases[0].label
        check.close(out, want, f"your {what} for {case.label}", atol=atol, rtol=rtol, hint=hint or (
            f"It works for {first}, but not for {case.label}: is a size fixed somewhere, or something kept from "
            f"an earlier call?" if i else ""))


# --------------------------------------------------------------------------
# Gradients

_DETACHED = ("Likely cause: a `.detach()`, `.data` or `torch.no_grad()` on the way, or a tensor rebuilt from "
             "numbers (`.item()`, `torch.tensor(...)`, numpy).")


def gradients(check: Check, run: Callable[..., torch.Tensor], inputs: dict[str, torch.Tensor],
              expected: Callable[[torch.Tensor], dict[str, torch.Tensor]], what: str, oracle: str,
              params: dict[str, torch.Tensor] | None = None, causes: dict[frozenset, str] | None = None,
              atol: float = 1e-4, rtol: float = 1e-3, seed: int = 9) -> None:
    """Gradients of a random linear function of the output, with respect to ``inputs`` and ``params``.

    ``run(*leaves)`` is the learner's output for the inputs, in order, made to require grad; ``expected(r)``
    gives the oracle's gradients of ``(output * r).sum()`` under the same names (the names appear in messages). ``causes`` names a set of wrong
    gradients (``frozenset({"query", "key"})``) with its likely cause.
    """
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in inputs.items()}
    out = run(*leaves.values())
    if not isinstance(out, torch.Tensor) or not out.requires_grad or out.grad_fn is None:
        names = " and ".join(inputs)
        check.fail(
            f"Your {what} does not require grad (its requires_grad is False), although the inputs it was given "
            f"({names}) require grad: it is not connected to {names} through autograd, so nothing before it could "
            f"ever be trained.\n{_DETACHED}"
        )
    r = torch.randn(out.shape, generator=generator(seed), dtype=out.dtype)
    targets = {**leaves, **(params or {})}
    got = torch.autograd.grad((out * r).sum(), list(targets.values()), allow_unused=True)
    want = expected(r.double())
    wrong = [name for name, g in zip(targets, got) if g is None or not close_enough(g, want[name], atol, rtol)]
    if wrong:
        cause = (causes or {}).get(frozenset(wrong)) or (
            f"{_DETACHED.replace('on the way', 'on the way from ' + ' and '.join(wrong) + ' to the output')}")
        check.fail(f"Your {what} is right, but the gradient with respect to {', '.join(wrong)} differs from "
                   f"{oracle}'s.\n{cause}")
    check.ok(f"gradients reach {', '.join(targets)} as with {oracle}")


def oracle_gradients(oracle: Callable[..., torch.Tensor], tensors: dict[str, torch.Tensor],
                     ) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """``expected`` for ``gradients``: the oracle's gradients of ``(oracle(*tensors) * r).sum()``, in float64.

    ``tensors`` are the inputs and parameters, in the oracle's argument order, under the names ``gradients``
    reports; the oracle runs on detached float64 leaves, so the learner's own tensors get no gradient.
    """
    def expected(r: torch.Tensor) -> dict[str, torch.Tensor]:
        leaves = [t.detach().double().requires_grad_(True) for t in tensors.values()]
        return dict(zip(tensors, torch.autograd.grad((oracle(*leaves) * r).sum(), leaves)))
    return expected


def every_parameter_learns(check: Check, module: nn.Module, out: torch.Tensor, what: str, seed: int = 7,
                           why: str = "") -> None:
    """A random loss on ``out`` reaches every trainable parameter of ``module`` (``why``: the likely cause to name
    when some do not, instead of the general one)."""
    if not out.requires_grad:
        check.fail(f"The output of your {what} does not require a gradient: is part of forward run under "
                   f"torch.no_grad() or .detach()ed?")
    module.zero_grad(set_to_none=True)
    weights = torch.randn(out.shape, generator=generator(seed))
    check.call(lambda: (out.double() * weights.double()).sum().backward(), what=f"{what} (in the backward pass)")
    missing = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
    module.zero_grad(set_to_none=True)
    if missing:
        shown = ", ".join(f"`{n}`" for n in missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        for stack, layers in module.named_children():  # every layer of a stack but the last: not chained
            if isinstance(layers, nn.ModuleList) and len(layers) > 1:
                idle = {n for n in missing if n.startswith(f"{stack}.")}
                if idle and idle == {f"{stack}.{n}" for n, p in layers[:-1].named_parameters() if p.requires_grad}:
                    check.fail(
                        f"Only the last of your {what}'s `{stack}` reaches the output: the parameters of the others "
                        f"receive no gradient ({shown}). Each layer must take the previous layer's output, "
                        f"`x = layer(x, ...)` in the loop, not the loop's input each time.")
        check.fail(
            f"{len(missing)} parameter{'s' if len(missing) != 1 else ''} of your {what} receive{'s' if len(missing) == 1 else ''} "
            f"no gradient: {shown}.\n" + (why or "A module created in __init__ but not used in forward (an attention "
            "module used twice while its sibling sits idle, a LayerNorm never applied, a layer skipped in a loop) "
            "never learns.")
        )
    check.ok("every parameter receives a gradient")


# --------------------------------------------------------------------------
# Devices

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


def follows_dtype(check: Check, module: nn.Module, inputs: Sequence[Any], what: str,
                  expected: torch.Tensor | None = None) -> None:
    """After ``.double()`` the module computes in float64 (``expected``: its answer, else float32's within 1e-3)."""
    reference = expected if expected is not None else check.call(module, *inputs, what=f"{what}.forward")
    module.double()
    doubled = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    out = check.attempt(module, *doubled, what=f"{what}.forward")
    fix = ("Some tensor it keeps did not move with it (`.to(dtype)` and `.to(device)` move only parameters and "
           "buffers), or forward converts on its own (`.float()`). Register fixed tensors with "
           "`self.register_buffer(...)`, and create new tensors with the dtype and device of an input.")
    if isinstance(out, Raised) or not isinstance(out, torch.Tensor) or out.dtype != torch.float64:
        got = out.message if isinstance(out, Raised) else f"It returns {describe(out)}."
        check.fail(f"After `.double()` (`.to(torch.float64)`), your {what} no longer computes in float64 for a float64 "
                   f"input: the output's dtype should follow. {fix}\n\n{got}")
    if isinstance(reference, torch.Tensor) and not close_enough(out, reference, atol=1e-3 if expected is None else ATOL):
        check.fail(f"After `.double()` your {what} computes other values than before: {fix}")
    check.ok("after .double() it computes the same values in float64 (everything it keeps moves with it)")


def fresh_instance_agrees(check: Check, module: nn.Module, build: Callable[[], nn.Module], inputs: tuple,
                          what: str, cause: str) -> None:
    """After calls on other inputs, ``module`` (in eval mode) answers ``inputs`` as a freshly built instance
    carrying the same weights does on its first call: nothing computed in an earlier call is kept."""
    fresh = build().eval()
    loaded = check.attempt(fresh.load_state_dict, module.state_dict(), what=f"{what}.load_state_dict")
    if isinstance(loaded, Raised):
        return  # a state_dict that does not load is the checkpoint stage's business
    ours = check.call(module, *inputs, what=f"{what}.forward")
    theirs = check.call(fresh, *inputs, what=f"{what}.forward")
    if isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and ours.shape == theirs.shape and \
            not close_enough(ours, theirs):
        check.fail(f"Your {what} answers an input differently from a freshly built one carrying the same weights: "
                   f"it keeps something from an earlier call. {cause}")
    check.ok("keeps nothing from one call to the next (a fresh instance with the same weights agrees)")


# --------------------------------------------------------------------------
# Sixteen bits (lesson 08's mixed precision)

#: where lesson 08 trains in each 16-bit type (its `autocast_dtype`)
_WHERE_16 = {torch.bfloat16: "on a CPU with bfloat16 units and on recent GPUs (A100, H100, RTX 30 and later)",
             torch.float16: "on older GPUs such as Colab's T4, once your scaled_dot_product_attention has passed "
                            "its float16 trial"}


def _tensors_of(value: Any) -> list[torch.Tensor]:
    return list(_gpu._tensors(value))


def float16_trial_passes(check: Check, attention: Any) -> bool:
    """Lesson 08's trial before it trains in float16: ``attention(q, q, q, mask)`` on float16 inputs with padding
    gives finite values (else lesson 08 trains in 32 bits, so float16 is never asked of the rest)."""
    if not callable(attention):
        return True
    q = torch.randn(2, 4, 5, 8, generator=generator(8)).half()  # (B, heads, L, d_k), as lesson 08's trial
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    out = check.attempt(attention, q, q, q, mask, what="scaled_dot_product_attention in float16")
    if isinstance(out, Raised):
        return False
    return all(bool(torch.isfinite(t.float()).all()) for t in _tensors_of(out) if t.is_floating_point())


def attention_of(cls: Any) -> Any:
    """The ``scaled_dot_product_attention`` a learner's class would meet in lesson 08 (the namespace its methods
    were written in, the class's own first), or None."""
    for owner in getattr(cls, "__mro__", ()):
        for function in vars(owner).values():
            namespace = getattr(_unwrapped(function), "__globals__", None)
            if isinstance(namespace, dict) and callable(namespace.get("scaled_dot_product_attention")):
                return namespace["scaled_dot_product_attention"]
    return None


def in_16_bits(check: Check, run: Callable[[torch.dtype], Any], what: str, float16: bool = True) -> None:
    """Lesson 08's mixed precision: ``run(dtype)`` inside ``torch.autocast(dtype=...)`` runs and stays finite,
    in bfloat16, and in float16 when ``float16`` (lesson 08 trains in float16 only where the learner's attention
    passed its float16 trial)."""
    for dtype in (torch.bfloat16, torch.float16) if float16 else (torch.bfloat16,):
        name = str(dtype).removeprefix("torch.")
        with torch.autocast("cpu", dtype=dtype):
            out = check.attempt(lambda: run(dtype), what=what)
        setting = (f"lesson 08 trains in mixed precision, {_WHERE_16[dtype]}: inside `torch.autocast(device, "
                   f"dtype=torch.{name})` the attention scores are {name}")
        if isinstance(out, Raised):
            text = str(out.exception)
            if "without overflow" in text or "cannot be converted" in text:
                largest = "65504" if dtype is torch.float16 else "about 3.39e38, a little less than float32's"
                check.fail(
                    f"Your {what} fills the masked scores with a value that does not fit in {name}, so it raises "
                    f"in 16 bits: {setting}, and their largest magnitude is {largest}. "
                    f"`torch.finfo(torch.float32).min` does not fit in bfloat16, nor `-1e9` in float16.\n"
                    f"Fill with a value of the scores' own type, `torch.finfo(scores.dtype).min`, or with "
                    f"`float('-inf')`: both fit every type.\n\n{out.message}")
            check.fail(f"Your {what} raises in {name}. {setting[:1].upper() + setting[1:]}, and the step would stop there.\n\n{out.message}")
        if any(t.is_floating_point() and not bool(torch.isfinite(t.float()).all()) for t in _tensors_of(out)):
            check.fail(f"Your {what} returns NaN or infinity in {name} on an input where float32 gives finite "
                       f"values. {setting[:1].upper() + setting[1:]}: a constant that overflows 16 bits (float16's largest magnitude is "
                       f"65504) becomes infinite. Use values of the scores' own type: `torch.finfo(scores.dtype).min`.")
    check.ok("runs in 16 bits as lesson 08's mixed precision does (torch.autocast in bfloat16"
             + (" and float16)" if float16 else ")"))


def in_16_bits_module(check: Check, module: nn.Module, inputs: tuple, what: str) -> None:
    """:func:`in_16_bits` for a module called on ``inputs`` (float16 only where lesson 08 would use it)."""
    in_16_bits(check, lambda dtype: module(*inputs), what,
               float16=float16_trial_passes(check, attention_of(type(module))))


# --------------------------------------------------------------------------
# Checkpoints


def state_dict_round_trip(check: Check, build: Callable[[], nn.Module], run: Callable[[nn.Module], Any],
                          what: str) -> None:
    """A checkpoint of a used instance loads strictly into a freshly built one, which then computes the same.

    Lessons 06 to 08 save ``model.state_dict()`` and load it into a new model (``load_state_dict``, strict):
    a tensor registered during ``forward`` (``register_buffer`` of the attention weights, a cached mask) is
    saved with the weights, and a fresh instance does not have it.
    """
    used, fresh = build().eval(), build().eval()
    before = set(check.call(used.state_dict, what=f"{what}.state_dict()"))
    first = run(used)
    state = check.call(used.state_dict, what=f"{what}.state_dict()")
    added = [k for k in state if k not in before]
    why = (f"Lessons 06, 07 and 08 save a checkpoint (`model.state_dict()`) and load it into a freshly built "
           f"model with `load_state_dict`, which refuses a checkpoint whose names or shapes differ.")
    if added:
        check.fail(f"After a forward call, your {what}'s state_dict() holds {', '.join(f'`{k}`' for k in added)}, "
                   f"which a freshly built one does not have: a tensor kept with `register_buffer` (registered in "
                   f"__init__ or in forward) is saved with the weights. {why}\nKeep such a tensor as a plain attribute "
                   f"(`self.attention_weights = weights`), not a buffer.")
    loaded = check.attempt(fresh.load_state_dict, state, what=f"{what}.load_state_dict(checkpoint)")
    if isinstance(loaded, Raised):
        check.fail(f"A checkpoint of your {what}, taken after a forward call, cannot be loaded into a freshly built "
                   f"one: a buffer or parameter changes its name or shape when the module runs. {why}\n\n"
                   f"{loaded.message}")
    again = run(fresh)
    if isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor) and not close_enough(again, first):
        check.fail(f"A freshly built {what}, given a checkpoint of another one (`load_state_dict`), computes other "
                   f"values than the one saved: something forward uses is not in state_dict() (a tensor kept "
                   f"as a plain attribute, made at random in __init__). {why} Make learned tensors nn.Parameters "
                   f"and fixed ones buffers.")
    check.ok("a checkpoint (state_dict) taken after a forward call loads, strictly, into a freshly built one, "
             "which computes the same")


# --------------------------------------------------------------------------
# Dropout


def eval_deterministic(check: Check, module: nn.Module, run: Callable[[nn.Module], torch.Tensor], what: str,
                       p: float) -> torch.Tensor:
    """In eval mode two calls on the same input agree exactly; returns the output."""
    module.eval()
    first, second = run(module), run(module)
    if not close_enough(first, second, atol=0, rtol=RTOL):
        check.fail(
            f"In eval mode your {what} gives different outputs for the same input (built with dropout={p}): "
            f"dropout is still active, or something else random runs inside.\nDropout must switch off in eval "
            f"mode. Likely cause: `F.dropout(x, p)` without `training=self.training`, or a fixed rate; use an "
            f"nn.Dropout(dropout) module created in __init__ with the constructor's `dropout` argument."
        )
    check.ok("is deterministic in eval mode")
    return first


def train_random(check: Check, module: nn.Module, run: Callable[[nn.Module], torch.Tensor], what: str, p: float,
                 fix: str = "Create nn.Dropout(dropout) in __init__ and apply it where the exercise says.") -> torch.Tensor:
    """In training mode two calls on the same input differ (dropout acts); returns the first output."""
    module.train()
    first, second = run(module), run(module)
    if close_enough(first, second, atol=0, rtol=RTOL):
        check.fail(f"In training mode your {what} gives the same output twice for the same input, although it was "
                   f"built with dropout={p}: dropout is not applied.\n{fix}")
    _backward_runs(check, module, first, what)
    check.ok("applies dropout in training mode, and a training step's backward pass runs through it")
    return first


def _backward_runs(check: Check, module: nn.Module, out: Any, what: str) -> None:
    """A loss on a training-mode output can be backpropagated (an in-place dropout or ReLU breaks autograd)."""
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return
    done = check.attempt(lambda: out.sum().backward(), what=f"the backward pass through your {what}")
    module.zero_grad(set_to_none=True)
    if isinstance(done, Raised):
        text = str(done.exception).strip().splitlines()
        inplace = any(word in str(done.exception) for word in ("inplace", "in-place"))
        check.fail(f"In training mode, a loss on the output of your {what} cannot be backpropagated: "
                   f"{type(done.exception).__name__}: {text[0] if text else ''}\n"
                   + ("Likely cause: an in-place operation on a tensor that autograd keeps for the backward pass: "
                      "`nn.Dropout(..., inplace=True)` or `nn.ReLU(inplace=True)`, `.relu_()`, `x += ...` or "
                      "`x[...] = ...` on an intermediate result. Use the ordinary, out-of-place versions."
                      if inplace else "Training would stop at its first step: it must run in training mode too."))


@dataclasses.dataclass
class Site:
    """A place where the exercise applies dropout, observed in one training-mode call."""

    where: str  # "the attention weights"
    observed: torch.Tensor  # the tensor as it came out of the dropout
    reference: torch.Tensor  # the same tensor without dropout
    axes: dict[str, int] = dataclasses.field(default_factory=dict)  # named axes, for a mask shared along one


def dropout_measured(check: Check, observe: Callable[[], list[Site] | None], p: float, what: str, fix: str = "",
                     not_exact: str | Callable[[list[Site]], None] = "") -> bool:
    """Measure the dropout at each site over three calls (seeded, unseeded, seeded again); fail on what is wrong.

    ``observe()`` runs the learner's module once in training mode and returns its sites (None: the layout
    could not be observed, nothing is judged, and the PASSED list says so). A site whose observed tensor is not its reference with
    entries zeroed and the rest rescaled fails with ``not_exact`` when it is a message; a callable gets the
    sites to name the cause; else the stage ends silently (the values were judged elsewhere). Returns whether
    the dropout was measured.
    """
    runs = [seeded(seed, observe) for seed in (21, None, 21)]
    if any(r is None for r in runs):  # said, not dropped silently: a PASSED list shows what was not measured
        check.ok(f"(the dropout of {what} could not be followed place by place in a traced call, so it was not "
                 f"measured there; the other dropout checks judged it as a whole)")
        return False
    measured = []
    for sites in runs:
        patterns = [drop_pattern(site.observed, site.reference) for site in sites]
        if not all(pattern.exact for pattern in patterns):
            if callable(not_exact):
                not_exact(sites)
            elif not_exact:
                check.fail(not_exact)
            return False
        measured.append([(pattern, site.axes, site.where) for pattern, site in zip(patterns, sites)])
        for pattern, site in zip(patterns, sites):
            problem = dropout_problem(pattern, p, site.where, what)
            if problem:
                check.fail(problem + (f"\n{fix}" if fix else ""))
    problem = mask_problems(measured, what)
    if problem:
        check.fail(problem)
    places = " and ".join(dict.fromkeys(site.where for site in runs[0]))
    check.ok(f"in training mode drops about {round(100 * p)}% of {places} (measured) and rescales the rest by "
             f"1 / (1 - p), with a fresh mask for every entry and every call, drawn from torch's global generator")
    return True


__all__ = [
    "Case", "Part", "Site", "called_as_modules", "called_parts", "component_result", "components_first", "contract_parts", "create_there",
    "NO_DEFAULT", "contract_defaults", "default_of", "defined_where_loaded", "one_tensor",
    "dropout_measured", "eval_deterministic", "every_parameter_learns", "follows_dtype", "gradients", "is_module", "left_on_cpu",
    "decoder_on_gpu", "mixed_devices", "module_on_gpu", "on_gpu", "submodule_parts", "sweep", "train_random",
    "attention_of", "fixed_device", "fresh_instance_agrees", "float16_trial_passes", "in_16_bits", "in_16_bits_module", "state_dict_round_trip",
]
