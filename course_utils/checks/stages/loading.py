"""Stages about how later lessons load and call an exercise: from its own cell only (``defined_where_loaded``),
with arguments by position in the contract's order (``parameter_order``). Exercises declare them; the engine
(:mod:`.._core`) knows nothing of them.
"""


from __future__ import annotations

import ast
import builtins
import dis
import inspect
import linecache
import os
import re
import sys
import types
from typing import Any


from ... import contracts
from ..._schema import loaded_statements, names_defined, parse_cell
from .._core import Check
from .contract import _MISSING, _call_items, _code_objects, _split_items, _unwrapped


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
