"""Finding, watching and measuring the parts of a learner's module, for the lesson 04-05 checkers.

The submodules' names are part of the exercises (later lessons, checkpoints and
lesson 07 read ``self_attn``, ``cross_attn``, ``feed_forward``, ``norm1``...):
:func:`missing_submodules` says which are absent, and :func:`components_first`
runs each component's own checker on the class the learner's module uses, so
that a failing piece is blamed first. Inside, the pieces are still located by
what they are: attention modules follow the lesson 04 contract (``W_q``,
``W_k``, ``W_v``, ``W_o`` linears), layer norms are ``nn.LayerNorm`` instances
or modules of the learner's own that behave like one, feed-forward linears are
recognised by their sizes; their weights are copied into PyTorch's own layers
(``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``), the oracle.

:class:`Recorder` watches named submodules through forward hooks on the
checker's own instances, and :func:`drop_pattern` / :func:`dropout_problem` /
:func:`shared_axes` measure a dropout: its rate, its scale, where it acts, and
whether its masks are fresh and independent.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import weakref
from typing import Iterator, Sequence

import torch
from torch import nn

from ._core import Check, Raised, generator

_PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def attention_modules(module: nn.Module) -> list[nn.Module]:
    """Submodules following the multi-head attention contract, in registration order."""
    return [
        m
        for m in module.modules()
        if all(isinstance(getattr(m, name, None), nn.Linear) for name in _PROJECTIONS)
    ]


def bias_free_projections(module: nn.Module) -> int:
    """How many W_q/W_k/W_v/W_o projections inside ``module`` have no bias (the paper's are plain matrices)."""
    return sum(getattr(m, name).bias is None for m in attention_modules(module) for name in _PROJECTIONS)


_NORM_LIKE: "weakref.WeakKeyDictionary[nn.Module, bool]" = weakref.WeakKeyDictionary()


def _behaves_like_norm(module: nn.Module, d_model: int) -> bool:
    """A leaf module of the learner's own that normalises each row: scaling and shifting a row changes nothing."""
    if module in _NORM_LIKE:
        return _NORM_LIKE[module]
    verdict = False
    params = list(module.parameters(recurse=False))
    if (
        not type(module).__module__.startswith("torch.")
        and not any(True for _ in module.children())
        and len(params) <= 2
        and all(tuple(p.shape) == (d_model,) for p in params)
    ):
        z = torch.randn(2, 3, d_model, generator=torch.Generator().manual_seed(11))
        try:
            with torch.no_grad():
                a, b = module(z), module(3.0 * z + 2.0)
            verdict = (
                isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == z.shape
                and b.shape == z.shape and bool(torch.isfinite(a).all())
                and bool(torch.allclose(a.double(), b.double(), atol=1e-3, rtol=1e-3))
                and bool((a.double().std(-1) > 0.1).all())
            )
        except Exception:  # not something that takes one (..., d_model) tensor
            verdict = False
    _NORM_LIKE[module] = verdict
    return verdict


def layer_norms(module: nn.Module, d_model: int | None = None) -> list[nn.Module]:
    """The distinct layer norms in registration order: ``nn.LayerNorm``, and (given d_model) modules acting like one."""
    return [
        m for m in module.modules()
        if isinstance(m, nn.LayerNorm) or (d_model is not None and _behaves_like_norm(m, d_model))
    ]


def norm_without_affine(norm: nn.Module) -> bool:
    """True for a layer norm without a learned gain or bias (``elementwise_affine=False``, ``bias=False``)."""
    if isinstance(norm, nn.LayerNorm):
        return norm.weight is None or norm.bias is None
    return len(list(norm.parameters())) < 2


def _prepared_norm(norm: nn.Module, d_model: int) -> nn.Module:
    """A float64 stand-in for a layer norm of the learner's own, to sit in a PyTorch layer's norm slot."""
    z = torch.randn(2, 3, d_model, generator=torch.Generator().manual_seed(12))
    try:
        twin = copy.deepcopy(norm).double()
        with torch.no_grad():
            if torch.allclose(twin(z.double()), norm(z).double(), atol=1e-5, rtol=1e-4):
                return twin
    except Exception:  # cannot be copied or run in float64: borrow it as it is
        pass
    return _Borrowed(norm)


class _Borrowed(nn.Module):
    """Runs a learner's norm in its own dtype and hands back float64."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = next((p.dtype for p in self.norm.parameters()), torch.float32)
        return self.norm(x.to(dtype)).double()


def _inside(modules: list[nn.Module]) -> set[int]:
    return {id(sub) for m in modules for sub in m.modules()}


def linears_outside(module: nn.Module, exclude: list[nn.Module]) -> list[nn.Linear]:
    """``nn.Linear`` submodules that are not part of the modules in ``exclude``."""
    inner = _inside(exclude)
    return [m for m in module.modules() if isinstance(m, nn.Linear) and id(m) not in inner]


def feed_forward_linears(module: nn.Module, d_model: int, d_ff: int, exclude: list[nn.Module]) -> tuple | None:
    """The feed-forward pair (d_model -> d_ff, d_ff -> d_model) outside ``exclude``, if unambiguous."""
    lins = linears_outside(module, exclude)
    first = [m for m in lins if (m.in_features, m.out_features) == (d_model, d_ff)]
    second = [m for m in lins if (m.in_features, m.out_features) == (d_ff, d_model)]
    if len(first) == 1 and len(second) == 1:
        return first[0], second[0]
    return None


def shared_parameter_groups(module: nn.Module) -> list[list[str]]:
    """Names under which one parameter object is registered more than once."""
    by_id: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def count_parameters(module: nn.Module) -> int:
    """Number of distinct trainable scalars (a tied weight counts once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --------------------------------------------------------------------------
# Copying weights into PyTorch's layers.


def _copy(dst: torch.Tensor, src: torch.Tensor | None) -> None:
    with torch.no_grad():
        if src is None:
            dst.zero_()
        else:
            dst.copy_(src.detach().to(dst.dtype).reshape(dst.shape))


def copy_attention(src: nn.Module, dst: nn.MultiheadAttention) -> None:
    """Copy a contract attention module (W_q, W_k, W_v, W_o) into ``nn.MultiheadAttention``."""
    with torch.no_grad():
        dst.in_proj_weight.copy_(torch.cat([getattr(src, n).weight for n in _PROJECTIONS[:3]]).to(dst.in_proj_weight.dtype))
        biases = [getattr(src, n).bias for n in _PROJECTIONS[:3]]
        biases = [torch.zeros(dst.embed_dim) if b is None else b for b in biases]
        dst.in_proj_bias.copy_(torch.cat(biases).to(dst.in_proj_bias.dtype))
    _copy(dst.out_proj.weight, src.W_o.weight)
    _copy(dst.out_proj.bias, src.W_o.bias)


def copy_linear(src: nn.Linear, dst: nn.Linear) -> None:
    _copy(dst.weight, src.weight)
    _copy(dst.bias, src.bias)


def copy_norm(src: nn.LayerNorm, dst: nn.LayerNorm) -> None:
    _copy(dst.weight, src.weight if src.elementwise_affine else torch.ones_like(dst.weight))
    _copy(dst.bias, getattr(src, "bias", None) if src.elementwise_affine else None)
    dst.eps = src.eps


def randomise_norms(norms: list[nn.Module], generator: torch.Generator) -> None:
    """Give each layer norm its own random gain and bias, so that which one is used where shows."""
    with torch.no_grad():
        for norm in norms:
            if isinstance(norm, nn.LayerNorm):
                params = [norm.weight, getattr(norm, "bias", None)]
            else:  # the learner's own: gain first, then bias, by convention
                params = list(norm.parameters())
            for i, p in enumerate(params):
                if p is not None:
                    p.copy_((1.0 if i == 0 else 0.0) + 0.5 * torch.randn(p.shape, generator=generator))


def norm_assignments(norms: list[nn.Module], slots: int) -> Iterator[tuple[nn.Module, ...]]:
    """Every way of putting the learner's LayerNorms into the ``slots`` places of a layer.

    One LayerNorm per place first (in every order), then those that use one twice.
    """
    distinct = list(itertools.permutations(norms, slots)) if len(norms) >= slots else []
    yield from distinct
    for assignment in itertools.product(norms, repeat=slots):
        if len(set(map(id, assignment))) < slots:
            yield assignment


def torch_mask(mask: torch.Tensor | None, batch: int, num_heads: int, len_q: int, len_k: int) -> torch.Tensor | None:
    """Our mask (True = may attend, broadcastable to (B, 1, L_q, L_k)) as PyTorch's (B*H, L_q, L_k), True = blocked."""
    if mask is None:
        return None
    full = mask.bool().expand(batch, 1, len_q, len_k).expand(batch, num_heads, len_q, len_k)
    return ~full.reshape(batch * num_heads, len_q, len_k)


class LayerLayout:
    """Where the parts of one learner layer are, and PyTorch twins built from them."""

    def __init__(self, layer: nn.Module, kind: str, d_model: int, num_heads: int, d_ff: int):
        self.layer = layer
        self.kind = kind  # "encoder" or "decoder"
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.attentions = attention_modules(layer)
        want = 1 if kind == "encoder" else 2
        fits = len(self.attentions) == want
        self.norms = layer_norms(layer, d_model) if fits else []
        self.ffn = feed_forward_linears(layer, d_model, d_ff, self.attentions) if fits else None
        self.slots = 2 if kind == "encoder" else 3
        self.missing = self._missing()

    def _missing(self) -> str:
        """Why the layout cannot be used, or '' when it can."""
        want = 1 if self.kind == "encoder" else 2
        if len(self.attentions) != want:
            return (
                f"found {len(self.attentions)} attention module(s) with W_q, W_k, W_v, W_o "
                f"where {want} {'was' if want == 1 else 'were'} expected"
            )
        if not self.norms:
            return "found no nn.LayerNorm, nor a module of your own that normalises each position"
        if self.ffn is None:
            return f"found no unique pair of nn.Linear({self.d_model}, {self.d_ff}) and nn.Linear({self.d_ff}, {self.d_model})"
        return ""

    def twins(self) -> Iterator[tuple[nn.Module, tuple, tuple]]:
        """PyTorch layers (float64, eval) with the learner's weights, for every plausible wiring.

        Yields ``(twin, attentions, norms)``: which learner attention module went to
        self- / cross-attention and which LayerNorm went to each slot.
        """
        cls = nn.TransformerEncoderLayer if self.kind == "encoder" else nn.TransformerDecoderLayer
        twin = cls(
            self.d_model, self.num_heads, self.d_ff, dropout=0.0, activation="relu",
            batch_first=True, norm_first=False, dtype=torch.float64,
        ).eval()
        copy_linear(self.ffn[0], twin.linear1)
        copy_linear(self.ffn[1], twin.linear2)
        orders = [tuple(self.attentions)]
        if self.kind == "decoder":
            orders.append(tuple(reversed(self.attentions)))
        names = ["norm1", "norm2"] + (["norm3"] if self.kind == "decoder" else [])
        own = [getattr(twin, n) for n in names]
        stand_ins = {id(n): _prepared_norm(n, self.d_model) for n in self.norms if not isinstance(n, nn.LayerNorm)}
        for attentions in orders:
            copy_attention(attentions[0], twin.self_attn)
            if self.kind == "decoder":
                copy_attention(attentions[1], twin.multihead_attn)
            for norms in norm_assignments(self.norms, self.slots):
                for name, slot, norm in zip(names, own, norms):
                    if isinstance(norm, nn.LayerNorm):
                        copy_norm(norm, slot)
                        setattr(twin, name, slot)
                    else:
                        setattr(twin, name, stand_ins[id(norm)])
                yield twin, attentions, norms


def run_twin(twin: nn.Module, x: torch.Tensor, memory: torch.Tensor | None = None,
             src_mask: torch.Tensor | None = None, tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
    """A twin's output (masks in PyTorch's form); an encoder twin with norms of the learner's own
    is run sublayer by sublayer, since PyTorch's fused path would read gains and biases directly."""
    if isinstance(twin, nn.TransformerDecoderLayer):
        return twin(x, memory, tgt_mask=tgt_mask, memory_mask=src_mask)
    if isinstance(twin.norm1, nn.LayerNorm) and isinstance(twin.norm2, nn.LayerNorm):
        return twin(x, src_mask=src_mask)
    y = twin.norm1(x + twin.self_attn(x, x, x, attn_mask=src_mask, need_weights=False)[0])
    return twin.norm2(y + twin.linear2(twin.activation(twin.linear1(y))))


def parameters_without_gradient(check: Check, module: nn.Module, out: torch.Tensor, what: str, seed: int) -> str:
    """The trainable parameters of ``module`` that a random loss on ``out`` does not reach, as text ("" if none)."""
    module.zero_grad(set_to_none=True)
    weights = torch.randn(out.shape, generator=generator(seed))
    check.call(lambda: (out.double() * weights.double()).sum().backward(), what=f"{what} (in the backward pass)")
    missing = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
    module.zero_grad(set_to_none=True)
    if not missing:
        return ""
    shown = ", ".join(f"`{n}`" for n in missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    return f"{len(missing)} parameter{'s' if len(missing) != 1 else ''} of your {what} receive no gradient: {shown}"


# --------------------------------------------------------------------------
# Measuring dropout: what a dropout did to a tensor, against the same tensor without it.


@dataclasses.dataclass
class DropPattern:
    """How an observed tensor relates to its dropout-free reference, entry by entry.

    A dropout with rate p leaves every entry either 0 (dropped) or ``reference / (1 - p)``
    (kept). ``exact`` says whether the observed tensor has that form for one common
    ``scale``; ``rate`` is the fraction of (non-negligible) entries dropped.
    """

    kept: torch.Tensor  # bool, the shape of the tensor: True where the entry survived
    rate: float
    scale: float
    exact: bool
    count: int  # how many entries were measured


def drop_pattern(observed: torch.Tensor, reference: torch.Tensor, tol: float = 1e-4) -> DropPattern:
    """Measure the dropout that turns ``reference`` into ``observed`` (same shape)."""
    o, r = observed.detach().double(), reference.detach().double()
    live = r.abs() > 1e-6
    dropped = o.abs() <= tol * (1 + r.abs())
    ratios = (o / torch.where(live, r, torch.ones_like(r)))[live & ~dropped]
    scale = float(ratios.median()) if ratios.numel() else float("nan")
    expected = torch.where(dropped, torch.zeros_like(r), r * (scale if ratios.numel() else 1.0))
    exact = bool(((o - expected).abs() <= tol * (1 + expected.abs())).all())
    count = int(live.sum())
    rate = float(dropped[live].double().mean()) if count else 0.0
    return DropPattern(kept=~dropped, rate=rate, scale=scale, exact=exact, count=count)


def _near(a: float, b: float, rel: float = 0.02) -> bool:
    return abs(a - b) <= rel * max(abs(b), 1e-12)


def dropout_problem(pattern: DropPattern, p: float, where: str, module: str) -> str:
    """What is wrong with a measured dropout of rate ``p`` on ``where`` ('' when it is right).

    ``pattern`` must be ``exact`` (the caller has ruled out dropout elsewhere).
    """
    keep = 1 - p
    if pattern.rate == 0 and _near(pattern.scale, 1.0, 1e-3):
        return (f"In training mode (built with dropout={p}) your {module} applies no dropout on {where}: "
                f"every entry arrives unchanged.")
    if _near(pattern.scale, 1 / keep**2) and abs(pattern.rate - (1 - keep**2)) < 0.15:
        return (f"In training mode your {module} applies dropout twice on {where}: the entries it keeps are "
                f"scaled by {pattern.scale:.3f} = 1 / (1 - p)^2 instead of 1 / (1 - p) = {1 / keep:.3f}, and about "
                f"{round(100 * pattern.rate)}% are dropped instead of {round(100 * p)}%. Apply one nn.Dropout there, once.")
    if _near(pattern.scale, 1.0, 1e-3):
        return (f"In training mode your {module} zeroes entries of {where} but does not scale the ones it keeps "
                f"by 1 / (1 - p): the expected value changes between training and evaluation. nn.Dropout does the "
                f"scaling for you: use it rather than multiplying by a random 0/1 mask.")
    if not _near(pattern.scale, 1 / keep):
        implied = 1 - 1 / pattern.scale if pattern.scale > 1 else float("nan")
        return (f"In training mode your {module} scales the entries of {where} it keeps by {pattern.scale:.3f} = "
                f"1 / (1 - {implied:.2f}) instead of 1 / (1 - {p}) = {1 / keep:.3f}: the dropout rate is not the "
                f"`dropout` argument. Create nn.Dropout(dropout) with the argument, not a fixed rate.")
    spread = 4 * (p * keep / max(pattern.count, 1)) ** 0.5 + 0.02
    if abs(pattern.rate - p) > spread:
        return (f"In training mode your {module} drops {round(100 * pattern.rate)}% of {where}, but it was built "
                f"with dropout={p}: about {round(100 * p)}% should be dropped, each entry on its own.")
    return ""


def shared_axes(kept: torch.Tensor, axes: dict[str, int]) -> list[str]:
    """The named axes (of size > 1) along which a dropout mask does not vary: one mask reused for all of them."""
    shared = []
    for name, dim in axes.items():
        if kept.shape[dim] > 1:
            first = kept.narrow(dim, 0, 1)
            if bool((kept == first).all()):
                shared.append(name)
    return shared


def seeded(seed: int | None, fn, *args, **kwargs):
    """Run ``fn`` right after seeding the global RNG (None: go on from its current state).

    Only inside a checker, whose run restores the learner's RNG afterwards.
    """
    if seed is not None:
        torch.manual_seed(seed)
    return fn(*args, **kwargs)


# --------------------------------------------------------------------------
# Names are contract: the submodules later lessons read, and the components' own checkers first.


def missing_submodules(check: Check, module: nn.Module, owner: str, wanted: dict[str, str], why: str) -> None:
    """Fail unless ``module`` has each submodule in ``wanted`` (name -> what it should be)."""
    absent = [name for name in wanted if not isinstance(getattr(module, name, None), nn.Module)]
    if not absent:
        return
    found = ", ".join(f"{n} = {type(m).__name__}" for n, m in module.named_children()) or "none"
    listing = "; ".join(f"`{name}`: {what}" for name, what in wanted.items())
    check.fail(
        f"Your {owner} has no submodule{'s' if len(absent) > 1 else ''} {', '.join(f'`{n}`' for n in absent)} "
        f"(its submodules: {found}).\n"
        f"The names are part of the exercise: {why} Name them as the exercise does: {listing}."
    )


_COMPONENT_RESULTS: "weakref.WeakKeyDictionary[type, dict]" = weakref.WeakKeyDictionary()


def component_result(checker, cls: type):
    """The result of a component's own checker on the learner's class (computed once per class object)."""
    results = _COMPONENT_RESULTS.setdefault(cls, {})
    if checker.__name__ not in results:
        results[checker.__name__] = checker(cls)
    return results[checker.__name__]


def components_first(check: Check, module: nn.Module, owner: str, components: dict) -> None:
    """Run each component's own checker on the class the learner's ``module`` uses; blame a failing one first.

    ``components``: submodule name -> (checker, the exercise's name).
    """
    seen: set = set()
    for name, (checker, exercise) in components.items():
        cls = type(getattr(module, name))
        if (cls, checker) in seen:
            continue
        seen.add((cls, checker))
        result = component_result(checker, cls)
        if result.passed:
            continue
        first = result.messages[0] if result.messages else ""
        label = result.status.value.upper()
        text = (f"Your {owner} uses `{name}` = {cls.__name__}, and that class does not pass {checker.__name__} "
                f"({label}): fix that first, then come back.\nWhat check_{'_'.join(checker.__name__.split('_')[1:])} "
                f"says about {cls.__name__}:\n" + "\n".join("  " + line for line in first.splitlines()))
        if result.status.value == "not attempted":
            check.not_attempted(text)
        check.fail(text)
    if components:
        check.ok("its components pass their own checkers (" + ", ".join(
            dict.fromkeys(exercise for _, exercise in components.values())) + ")")


# --------------------------------------------------------------------------
# Watching a module's submodules at work (hooks on the checker's own instances, removed afterwards).


class Recorder:
    """Records the inputs and outputs of named submodules while a block runs: ``with Recorder(m, names) as rec:``."""

    def __init__(self, module: nn.Module, names: Sequence[str]):
        self.module, self.names = module, list(names)
        self.calls: dict[str, list[tuple[tuple, dict, object]]] = {n: [] for n in self.names}
        self._handles: list = []

    def __enter__(self) -> "Recorder":
        for name in self.names:
            sub = self.module.get_submodule(name)

            def hook(_m, args, kwargs, output, _name=name):
                self.calls[_name].append((args, kwargs, output))

            self._handles.append(sub.register_forward_hook(hook, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def only(self, name: str) -> tuple[tuple, dict, object] | None:
        """The one call of ``name`` (None when it was called zero or several times)."""
        calls = self.calls[name]
        return calls[0] if len(calls) == 1 else None

    def first_input(self, name: str) -> torch.Tensor | None:
        call = self.only(name)
        if call is None:
            return None
        args, kwargs, _ = call
        value = args[0] if args else next(iter(kwargs.values()), None)
        return value if isinstance(value, torch.Tensor) else None

    def output(self, name: str) -> torch.Tensor | None:
        call = self.only(name)
        return call[2] if call is not None and isinstance(call[2], torch.Tensor) else None


_FUNCTION_RESULTS: dict = {}


def component_result_of_function(checker, fn) -> "object":
    """Like :func:`component_result`, for a function (kept while the function object lives)."""
    key = (checker.__name__, id(fn))
    entry = _FUNCTION_RESULTS.get(key)
    if entry is None or entry[0]() is not fn:
        try:
            ref = weakref.ref(fn)
        except TypeError:
            return checker(fn)
        entry = (ref, checker(fn))
        _FUNCTION_RESULTS[key] = entry
    return entry[1]


# --------------------------------------------------------------------------
# Devices: a tensor created on the CPU whatever the input's device, caught on a CPU-only machine.


def on_pretend_gpu(check: Check, module: nn.Module, *inputs, what: str):
    """Call ``module`` with its parameters, buffers and tensor inputs on the shared pretend GPU (``_devices``).

    Returns the output or a ``Raised``; a ``_devices.DeviceMismatch`` in it means the learner's code made a
    CPU tensor and mixed it with the GPU ones.
    """
    from . import _devices

    state = {name: _devices.on_device(t.detach()) for name, t in (*module.named_parameters(), *module.named_buffers())}
    moved = tuple(_devices.on_device(t) if isinstance(t, torch.Tensor) else t for t in inputs)

    def run():
        with _devices.elsewhere():
            return torch.func.functional_call(module, state, moved)

    return check.attempt(run, what=what)


def check_device(check: Check, module: nn.Module, owner: str, *inputs) -> None:
    """Fail, naming the line, when ``module`` creates a tensor on the CPU whatever its input's device."""
    from . import _devices

    out = on_pretend_gpu(check, module, *inputs, what=f"{owner}.forward")
    where = f"{_devices.PRETEND}, pretended on this machine"
    if not (isinstance(out, Raised) and isinstance(out.exception, _devices.DeviceMismatch)) and torch.cuda.is_available():
        real = module.to("cuda")
        out = check.attempt(real, *(t.to("cuda") if isinstance(t, torch.Tensor) else t for t in inputs),
                            what=f"{owner}.forward")
        real.to("cpu")
        where = "a real one"
        if not (isinstance(out, Raised) and "cpu" in str(out.exception)):
            out = None
    if isinstance(out, Raised) and (isinstance(out.exception, _devices.DeviceMismatch) or where == "a real one"):
        check.fail(
            f"Your {owner} creates a tensor on the CPU whatever the device of its input: with the model and its "
            f"input on a GPU ({where}; lesson 06 trains on one when there is one) it mixes devices, which PyTorch "
            f"refuses.\nCreate tensors where the input lives: `torch.ones(L, L, dtype=torch.bool, device=x.device)`, "
            f"`torch.arange(L, device=x.device)`, or move them: `make_causal_mask(L).to(x.device)`.\n\n{out.message}"
        )
    check.ok("creates its tensors on the device of its input (tried on a pretend GPU"
             + (" and on the real one)" if torch.cuda.is_available() else ")"))
