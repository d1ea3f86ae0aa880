"""Stages about what a learner's object is: a module, the parts and defaults its contract names, the earlier
exercises it uses (blamed first), its submodules called as modules, one tensor returned.
"""


from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
import weakref
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from ... import contracts
from .._core import Check, CheckResult, Raised, Status, describe, fmt_shape


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
                   components: Sequence["Part"] = (), owner: str = "", own_kinds: "OwnKinds | None" = None) -> None:
    """The contract of ``exercise``: the names it gives, then the components' own checkers, then kinds and sizes.

    ``sizes`` maps the constructor's parameter names to the values the checker built ``module`` with;
    ``components`` are the earlier exercises it is made of (see :func:`components_first`); ``own_kinds`` judge a
    part of the learner's own class where a PyTorch kind is asked for (a LayerNorm of their own: its exercise says
    what it must compute); without a judge such a part is taken as it is.
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
        problem = _part_problem(getattr(module, name, None), name, kind, args, sizes, module, owner,
                                own_kinds or {})
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


#: what judges a part of the learner's own class standing where a PyTorch kind is asked for:
#: ``judge(part, shown, first_argument) -> str``, what is wrong ('' when nothing is), e.g. ``{"LayerNorm": ...}``
OwnKinds = Mapping[str, Callable[[nn.Module, str, Any], str]]


def _part_problem(part: Any, name: str, kind: str, text: str, sizes: dict[str, Any], module: nn.Module,
                  owner: str, own_kinds: OwnKinds) -> str:
    """What is wrong with one part ('' when it fits its spec ``kind(text)``, ``text`` read with ``sizes``)."""
    args = _arguments(text, sizes)
    if kind == "buffer":
        return _buffer_problem(module, name, args, owner)
    if kind == "param":
        return _param_problem(part, name, text, args, module, owner)
    if not isinstance(part, nn.Module):
        found = ", ".join(f"`{n}` = {type(m).__name__}" for n, m in module.named_children()) or "none"
        return f"{owner} has no submodule `{name}` (its submodules: {found})."
    shown = f"`{name}` of {owner}"
    named = f"{_qualified(kind)}({text}) = {_qualified(kind)}({', '.join(str(a) for a in args)})"
    if kind in _KIND_PROBLEMS:
        return _KIND_PROBLEMS[kind](part, shown, args, named, own_kinds)
    if kind in contracts.CONTRACTS:  # another exercise: its own parts, with the sizes it was given
        return _exercise_part_problem(part, shown, kind, args, own_kinds)
    return ""


def _buffer_problem(module: nn.Module, name: str, args: list[Any], owner: str) -> str:
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


def _param_problem(part: Any, name: str, text: str, args: list[Any], module: nn.Module, owner: str) -> str:
    if not isinstance(part, nn.Parameter):
        asked = _asked("param", text)
        return (f"{owner} {_no_parameter(part, name, args, module)}. {asked[:1].upper() + asked[1:]} was asked "
                f"for: `self.{name} = nn.Parameter(...)`, so that an optimizer trains it and `.to(device)` moves it.")
    shape, args = tuple(part.shape), tuple(args)
    cause = ("it looks transposed (its axes are swapped)" if len(shape) > 1 and shape == args[::-1] else
             "it has an extra axis of size 1: keep the plain shape, broadcasting adds the others"
             if shape[:1] == (1,) and shape[1:] == args else
             "build it from the constructor's arguments, not from fixed sizes")
    return "" if shape == args else (f"The parameter `{name}` of {owner} has shape {fmt_shape(shape)}, where "
                                     f"({text}) = {fmt_shape(args)} was asked for: {cause}.")


def _linear_problem(part: nn.Module, shown: str, args: list[Any], named: str, own_kinds: OwnKinds) -> str:
    if not isinstance(part, nn.Linear):
        return f"{shown} is {describe(part)}, not an nn.Linear."
    have = (part.in_features, part.out_features)
    if have != tuple(args):
        swapped = " (in and out swapped)" if have == tuple(args)[::-1] else ""
        return f"{shown} is nn.Linear{have}{swapped}, where {named} was asked for."
    return ""


def _embedding_problem(part: nn.Module, shown: str, args: list[Any], named: str, own_kinds: OwnKinds) -> str:
    if not isinstance(part, nn.Embedding):
        return f"{shown} is {describe(part)}, not an nn.Embedding."
    have = (part.num_embeddings, part.embedding_dim)
    return f"{shown} is nn.Embedding{have}, where {named} was asked for." if have != tuple(args) else ""


def _layer_norm_problem(part: nn.Module, shown: str, args: list[Any], named: str, own_kinds: OwnKinds) -> str:
    if isinstance(part, nn.LayerNorm):
        if tuple(part.normalized_shape) != tuple(args):
            return (f"{shown} is nn.LayerNorm({tuple(part.normalized_shape)}): it normalises over the wrong axes; "
                    f"nn.LayerNorm({args[0]}) normalises each position's d_model features on its own.")
        if part.eps != 1e-5:
            return (f"{shown} is nn.LayerNorm({args[0]}, eps={part.eps:g}): the exercise's LayerNorm(d_model) keeps "
                    f"the default eps=1e-5, which lesson 07's nn.Transformer copy of your model uses too "
                    f"(layer_norm_eps). Leave eps at its default.")
        return ""
    if any(tuple(p.shape) != tuple(args) for p in part.parameters()):
        return f"{shown} is {describe(part)}, whose parameters do not have the shape ({args[0]},) of a layer norm's gain and bias."
    judge = own_kinds.get("LayerNorm")
    return judge(part, shown, args[0]) if judge is not None else ""


def _dropout_problem(part: nn.Module, shown: str, args: list[Any], named: str, own_kinds: OwnKinds) -> str:
    if not isinstance(part, nn.Dropout):
        return f"{shown} is {describe(part)}, not an nn.Dropout."
    if args and args[0] is not None and part.p != args[0]:
        return f"{shown} is nn.Dropout(p={part.p}), where it was built with dropout={args[0]}."
    return ""


def _module_list_problem(part: nn.Module, shown: str, args: list[Any], named: str, own_kinds: OwnKinds) -> str:
    if not isinstance(part, nn.ModuleList):
        return f"{shown} is {describe(part)}, not an nn.ModuleList."
    if args and len(part) != args[0]:
        return f"{shown} holds {len(part)} layers, where num_layers = {args[0]} were asked for."
    return ""


_KIND_PROBLEMS = {"Linear": _linear_problem, "Embedding": _embedding_problem, "LayerNorm": _layer_norm_problem,
                  "Dropout": _dropout_problem, "ModuleList": _module_list_problem}


def _exercise_part_problem(part: nn.Module, shown: str, kind: str, args: list[Any], own_kinds: OwnKinds) -> str:
    """A part that is another exercise: the attributes passed on to it, then its own parts, with its sizes."""
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
                                    f"{shown} ({type(part).__name__})", own_kinds)
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


def one_tensor(check: Check, out: Any, what: str, hint: str = "") -> Any:
    """Fail when a module returns several values (``(x, weights)``) where one tensor is the contract."""
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        check.fail(
            f"Your {what}.forward returns {describe(out)} (such as (x, weights)): it should return one tensor, its "
            f"output. The next layer and the model take it as it is; the attention weights stay available in "
            f"`attention_weights` of the attention module, where later cells read them." + (f"\n{hint}" if hint else "")
        )
    return out

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
