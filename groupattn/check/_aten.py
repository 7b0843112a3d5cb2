"""Rules for ATen operations (the canonical, functional operator set of ``torch.export``).

Each rule receives an :class:`OpCall` whose arguments are bound to the operator's
schema by name, and returns the output value(s). Every argument is read: after the
rule runs, an argument that was given a non-default value and that the rule did not
read makes the call unverifiable (deny by default). Operators without a rule are
unverifiable; operators tagged pointwise by PyTorch use :func:`pointwise`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ._maps import coordinates, flat_index, value_classes
from ._semantics import contract, movement, normalize, pointwise, reduce
from ._values import Breaks, Constant, FrameValue, Moving, Unverifiable

__all__ = ["MOVEMENT_OPS", "RANDOM_OPS_WITH_RULES", "RULES", "OpCall", "Poison", "rule_for"]

IGNORED_ARGS = frozenset({"memory_format", "layout", "device", "pin_memory", "non_blocking"})

#: Operators tagged random whose rule reads the argument that switches the randomness on.
RANDOM_OPS_WITH_RULES = frozenset(
    {"aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::scaled_dot_product_attention"}
)


@dataclass(eq=False)
class Poison:
    """An output the checker cannot type (e.g. arg-max positions); using it is unverifiable."""

    reason: str

    def describe(self) -> str:
        return "untracked"


class Args:
    """An operator's arguments bound by schema name; records which were read."""

    def __init__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        schema = target._schema
        self.values: dict[str, Any] = {}
        self.given: set[str] = set()
        self.defaults: dict[str, Any] = {}
        self.read: set[str] = set()
        positional = list(args)
        for i, a in enumerate(schema.arguments):
            if a.has_default_value():
                self.defaults[a.name] = a.default_value
            if i < len(positional) and not a.kwarg_only:
                self.values[a.name] = positional[i]
                self.given.add(a.name)
            elif a.name in kwargs:
                self.values[a.name] = kwargs[a.name]
                self.given.add(a.name)
            elif a.has_default_value():
                self.values[a.name] = a.default_value
            else:
                self.values[a.name] = None

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        return self.values.get(name, default)

    def touch(self, *names: str) -> None:
        """Mark arguments as read (their value does not change the rule's claim)."""
        self.read.update(names)

    def touch_all(self) -> None:
        self.read.update(self.values)

    def unread(self) -> list[str]:
        """Given, non-default arguments the rule did not read."""
        out = []
        for name in self.given:
            if name in self.read or name in IGNORED_ARGS:
                continue
            default = self.defaults.get(name, object())
            value = self.values[name]
            try:
                same = value == default
                same = bool(same) if not isinstance(same, torch.Tensor) else False
            except Exception:
                same = False
            if not same:
                out.append(name)
        return out


@dataclass(eq=False)
class OpCall:
    """One operator call: its node name, target, bound arguments and output metadata."""

    name: str
    target: Any
    args: Args
    raw_args: tuple[Any, ...]
    raw_kwargs: dict[str, Any]
    out_meta: Any
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.target.name()})"

    def out_shape(self, index: int | None = None) -> tuple[int, ...]:
        meta = self.out_meta if index is None else self.out_meta[index]
        return tuple(int(s) for s in meta.shape)

    def out_dtype(self, index: int | None = None) -> torch.dtype:
        meta = self.out_meta if index is None else self.out_meta[index]
        return meta.dtype

    def replay(self, replace: dict[int, Any]) -> Callable[[list[torch.Tensor]], Any]:
        """A function of the data operands that re-runs this exact call.

        ``replace`` maps ``id(value)`` of each data operand to its position in the list
        the function receives; other checker values are replaced by their first draw.
        """

        def fill(v: Any, data: list[torch.Tensor]) -> Any:
            if id(v) in replace and isinstance(v, Moving | Constant):
                return data[replace[id(v)]]
            if isinstance(v, Constant):
                return v.first
            if isinstance(v, list):
                return [fill(x, data) for x in v]
            if isinstance(v, tuple):
                return tuple(fill(x, data) for x in v)
            if isinstance(v, Moving | FrameValue | Poison):
                raise Unverifiable(f"{self.label}: an input-dependent argument is not data of this operation")
            return v

        def run(data: list[torch.Tensor]) -> Any:
            args = fill(self.raw_args, data)
            kwargs = {k: fill(v, data) for k, v in self.raw_kwargs.items()}
            with torch.no_grad():
                return self.target(*args, **kwargs)

        return run


Rule = Callable[[OpCall], Any]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn

    return deco


def rule_for(target: Any) -> Rule | None:
    """The rule for an ATen overload: by ``"aten::name.overload"`` (``.default`` for the
    default overload), then by ``"aten::name"``, then by PyTorch's pointwise tag."""
    schema = target._schema
    exact = f"{schema.name}.{schema.overload_name or 'default'}"
    if exact in RULES:
        return RULES[exact]
    if schema.name in RULES:
        return RULES[schema.name]
    tags = getattr(target, "tags", ())
    if torch.Tag.pointwise in tags and torch.Tag.nondeterministic_seeded not in tags:
        return _pointwise_rule
    return None


# ----------------------------------------------------------------------------- helpers


def _tensor_values(v: Any) -> list[Any]:
    if isinstance(v, Moving) or (isinstance(v, Constant) and isinstance(v.first, torch.Tensor)):
        return [v]
    if isinstance(v, list | tuple):
        return [x for item in v for x in _tensor_values(item)]
    return []


def _structural(call: OpCall, v: Any, what: str) -> Any:
    """A non-data tensor argument (indices, masks, shapes): must be a parameter-free constant."""
    if isinstance(v, Moving | FrameValue | Poison):
        raise Unverifiable(f"{call.label}: its {what} depends on the input (data-dependent indexing)")
    if isinstance(v, Constant):
        if not v.structural:
            raise Unverifiable(f"{call.label}: its {what} depends on the parameters")
        return v.first
    if isinstance(v, list | tuple):
        return type(v)(_structural(call, x, what) for x in v)
    return v


def _moving_input(call: OpCall, name: str = "self") -> Moving:
    v = call.args[name]
    if not isinstance(v, Moving):
        raise Unverifiable(f"{call.label}: expected an input-dependent tensor as {name!r}")
    return v


def _dims(dim: Any, ndim: int) -> list[int]:
    if dim is None:
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    dims = [int(d) % ndim if ndim else 0 for d in dim]
    return dims if dims else list(range(ndim))


# ----------------------------------------------------------------------------- pointwise


def _pointwise_rule(call: OpCall) -> Any:
    call.args.touch_all()
    operands = [v for v in call.args.values.values() for v in _tensor_values(v)]
    for v in call.args.values.values():
        if isinstance(v, FrameValue | Poison):
            raise Unverifiable(f"{call.label}: uses an untracked value (a canonicalizer's frame or positions) as data")
    return pointwise(operands, call.out_shape(), call.out_dtype(), call.label)


@rule("aten::_to_copy", "aten::to", "aten::_conj", "aten::resolve_conj", "aten::resolve_neg", "aten::positive")
def _cast(call: OpCall) -> Any:
    return _pointwise_rule(call)


@rule("aten::type_as")
def _type_as(call: OpCall) -> Any:
    call.args.touch("other")  # only its dtype is read
    x = call.args["self"]
    if isinstance(x, Moving):
        return pointwise([x], call.out_shape(), call.out_dtype(), call.label)
    raise Unverifiable(f"{call.label}: expected an input-dependent tensor")


@rule("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout")
def _dropout(call: OpCall) -> Any:
    x = call.args["input"]
    if not call.args["train"] or float(call.args["p"]) == 0.0:
        return x
    raise Unverifiable(f"{call.label}: draws random numbers (dropout in training mode)")


@rule("aten::native_dropout")
def _native_dropout(call: OpCall) -> Any:
    x = call.args["input"]
    train = call.args["train"]
    p = float(call.args["p"])
    if train is False or p == 0.0:
        return (x, Poison("dropout mask"))
    raise Unverifiable(f"{call.label}: draws random numbers (dropout in training mode)")


# ----------------------------------------------------------------------------- movement

_DATA_ARGS: dict[str, tuple[str, ...]] = {
    "aten::cat": ("tensors",),
    "aten::concat": ("tensors",),
    "aten::concatenate": ("tensors",),
    "aten::stack": ("tensors",),
    "aten::hstack": ("tensors",),
    "aten::vstack": ("tensors",),
    "aten::slice_scatter": ("self", "src"),
    "aten::select_scatter": ("self", "src"),
    "aten::diagonal_scatter": ("self", "src"),
    "aten::index_put": ("self", "values"),
    "aten::scatter": ("self", "src"),
    "aten::copy": ("self", "src"),
    "aten::masked_scatter": ("self", "source"),
}

_MOVEMENT = (
    "aten::view", "aten::reshape", "aten::_unsafe_view", "aten::view_as", "aten::reshape_as",
    "aten::expand", "aten::expand_as", "aten::broadcast_to", "aten::permute", "aten::transpose",
    "aten::swapaxes", "aten::swapdims", "aten::t", "aten::mT", "aten::unsqueeze", "aten::squeeze", "aten::slice",
    "aten::select", "aten::narrow", "aten::flip", "aten::fliplr", "aten::flipud", "aten::roll",
    "aten::rot90", "aten::repeat", "aten::tile", "aten::alias", "aten::detach", "aten::clone",
    "aten::contiguous", "aten::lift_fresh_copy", "aten::movedim", "aten::moveaxis", "aten::flatten",
    "aten::unflatten", "aten::diagonal", "aten::tril", "aten::triu", "aten::pixel_shuffle",
    "aten::pixel_unshuffle", "aten::constant_pad_nd", "aten::pad", "aten::reflection_pad1d",
    "aten::reflection_pad2d", "aten::reflection_pad3d", "aten::replication_pad1d",
    "aten::replication_pad2d", "aten::replication_pad3d", "aten::circular_pad1d", "aten::circular_pad2d",
    "aten::_pad_circular", "aten::im2col", "aten::unfold", "aten::index_select", "aten::gather",
    "aten::take_along_dim", "aten::index", "aten::split", "aten::split_with_sizes", "aten::chunk",
    "aten::tensor_split", "aten::unbind", "aten::cat", "aten::concat", "aten::concatenate", "aten::stack",
    "aten::hstack", "aten::vstack", "aten::slice_scatter", "aten::select_scatter",
    "aten::diagonal_scatter", "aten::index_put", "aten::scatter", "aten::copy", "aten::masked_scatter",
    "aten::fill", "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::new_zeros",
    "aten::new_ones", "aten::new_full", "aten::upsample_nearest1d", "aten::upsample_nearest2d",
    "aten::_upsample_nearest_exact2d", "aten::channel_shuffle", "aten::native_channel_shuffle",
    "aten::squeeze_copy", "aten::unsqueeze_copy", "aten::view_copy", "aten::permute_copy",
    "aten::expand_copy", "aten::slice_copy", "aten::select_copy", "aten::transpose_copy", "aten::t_copy",
    "aten::alias_copy", "aten::detach_copy", "aten::as_strided_copy", "aten::unfold_copy", "aten::zero",
    "aten::index_fill", "aten::masked_fill_", "aten::diag_embed",
)


#: Operators that only copy entries (and fill constants).
MOVEMENT_OPS = frozenset(_MOVEMENT)

#: Arguments that only give a shape.
_SHAPE_ONLY = frozenset({("aten::view_as", "other"), ("aten::reshape_as", "other"), ("aten::expand_as", "other")})


def _replace_value(args: tuple[Any, ...], kwargs: dict[str, Any], old: Any, new: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    def swap(v: Any) -> Any:
        if v is old:
            return new
        if isinstance(v, list):
            return [swap(x) for x in v]
        if isinstance(v, tuple):
            return tuple(swap(x) for x in v)
        return v

    return tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}


#: Views and copies that rearrange all entries of their one operand exactly once.
_BIJECTIVE = frozenset(
    {
        "aten::view", "aten::reshape", "aten::_unsafe_view", "aten::permute", "aten::transpose", "aten::t",
        "aten::mT", "aten::unsqueeze", "aten::squeeze", "aten::alias", "aten::detach", "aten::clone",
        "aten::contiguous", "aten::movedim", "aten::flatten", "aten::unflatten", "aten::unbind",
        "aten::swapaxes", "aten::swapdims",
    }
)


def _permutation_of_one(call: OpCall, data: list[Any], replace: dict[int, int]) -> list[Any] | None:
    """Maps of a rearrangement of one moving operand, read off one exact (long) index probe.

    The outputs together must hold every entry of the operand exactly once (a bijection);
    then an output entry that copies entry ``s`` moves to the entry that copies ``m[s]``.
    Anything else (copies, fills, an invariant operand with value classes) goes to the
    general :func:`movement`.
    """
    if len(data) != 1 or not isinstance(data[0], Moving) or data[0].invariant or data[0].source is not None:
        return None
    x = data[0]
    probe = torch.arange(x.numel).reshape(x.shape)
    try:
        out = call.replay(replace)([probe])
    except Exception:
        return None
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    if not outs or any(not isinstance(o, torch.Tensor) or o.dtype != torch.long for o in outs):
        return None
    flat = torch.cat([o.reshape(-1) for o in outs])
    if flat.numel() != x.numel or not torch.equal(torch.sort(flat).values, torch.arange(x.numel)):
        return None
    where = torch.empty_like(flat)
    where[flat] = torch.arange(flat.numel())  # position in the outputs of each operand entry
    offset = 0
    results = []
    for o in outs:
        src = o.reshape(-1)
        n = src.numel()
        maps = []
        for m in x.moves:  # type: ignore[union-attr]
            target = where[m[src]] - offset
            if bool(((target < 0) | (target >= n)).any()):
                raise Breaks(f"{call.label}: the group moves entries between its outputs")
            maps.append(target)
        results.append(Moving(tuple(o.shape), x.dtype, x.frame, maps).normalised())
        offset += n
    return results


@rule(*_MOVEMENT)
def _movement_rule(call: OpCall) -> Any:
    packet = call.target._schema.name
    data_names = _DATA_ARGS.get(packet, ("self", "input"))
    call.args.touch_all()
    data: list[Any] = []
    for name in call.args.values:
        v = call.args.values[name]
        if name in data_names:
            data.extend(_tensor_values(v))
        elif (packet, name) in _SHAPE_ONLY and isinstance(v, Moving):
            call.raw_args, call.raw_kwargs = _replace_value(call.raw_args, call.raw_kwargs, v, Constant(torch.empty(v.shape), torch.empty(v.shape)))
        else:
            _structural(call, v, f"argument {name!r}")
    if not data:
        raise Unverifiable(f"{call.label}: no data operand")
    replace = {id(v): i for i, v in enumerate(data)}
    fast = _permutation_of_one(call, data, replace) if packet in _BIJECTIVE else None
    results = fast if fast is not None else movement(call.replay(replace), data, call.label)
    meta = call.out_meta
    if isinstance(meta, list | tuple):
        return list(results)
    if len(results) != 1:
        raise Unverifiable(f"{call.label}: unexpected number of outputs")
    return results[0]


@rule("aten::empty_like", "aten::new_empty", "aten::empty_strided")
def _uninitialised(call: OpCall) -> Any:
    call.args.touch_all()
    raise Unverifiable(f"{call.label}: uninitialised memory")


# ----------------------------------------------------------------------------- reductions


def _reduction(call: OpCall, dims: Any, positional: bool = False, out_index: int | None = None) -> Moving:
    x = _moving_input(call, "self" if "self" in call.args.values else "input")
    call.args.touch("self", "input", "keepdim", "dtype", "out_dtype")
    ds = _dims(dims, len(x.shape))
    return reduce(x, ds, call.out_shape(out_index), call.out_dtype(out_index), call.label, positional)


@rule(
    "aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::prod", "aten::logsumexp", "aten::nansum",
    "aten::nanmean", "aten::all", "aten::any", "aten::count_nonzero",
)
def _sum_like(call: OpCall) -> Any:
    dim = call.args.get("dim") if "dim" in call.args.values else None
    return _reduction(call, dim)


@rule("aten::var", "aten::std")
def _var(call: OpCall) -> Any:
    call.args.touch("unbiased", "correction")
    return _reduction(call, call.args.get("dim") if "dim" in call.args.values else None)


@rule("aten::var_mean", "aten::std_mean")
def _var_mean(call: OpCall) -> Any:
    call.args.touch("unbiased", "correction")
    dim = call.args.get("dim") if "dim" in call.args.values else None
    return (_reduction(call, dim, out_index=0), _reduction(call, dim, out_index=1))


@rule("aten::linalg_vector_norm", "aten::norm", "aten::frobenius_norm")
def _norm(call: OpCall) -> Any:
    call.args.touch("ord", "p")
    dim = call.args.get("dim") if "dim" in call.args.values else None
    return _reduction(call, dim)


@rule("aten::max", "aten::min", "aten::median", "aten::nanmedian", "aten::mode")
def _max_min(call: OpCall) -> Any:
    if isinstance(call.out_meta, list | tuple):
        dim = call.args["dim"]
        values = _reduction(call, dim, out_index=0)
        x = _moving_input(call)
        try:
            indices: Any = reduce(x, _dims(dim, len(x.shape)), call.out_shape(1), call.out_dtype(1), call.label, True)
        except Unverifiable as err:
            indices = Poison(str(err))
        return (values, indices)
    if "other" in call.args.values:  # binary maximum / minimum
        return _pointwise_rule(call)
    return _reduction(call, None)


@rule("aten::argmax", "aten::argmin")
def _argmax(call: OpCall) -> Any:
    return _reduction(call, call.args["dim"], positional=True)


@rule("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax", "aten::special_softmax")
def _softmax(call: OpCall) -> Any:
    x = _moving_input(call)
    call.args.touch("half_to_float", "dtype")
    return normalize(x, _dims(call.args["dim"], len(x.shape)), call.out_dtype(), call.label)


@rule("aten::cumsum", "aten::cumprod", "aten::logcumsumexp", "aten::cummax", "aten::cummin")
def _cumulative(call: OpCall) -> Any:
    x = _moving_input(call)
    call.args.touch("dtype")
    out = normalize(x, _dims(call.args["dim"], len(x.shape)), x.dtype, call.label, positional=True)
    if isinstance(call.out_meta, list | tuple):
        return (out, Poison("cumulative arg-max positions"))
    return out


@rule("aten::sort", "aten::topk", "aten::kthvalue", "aten::msort")
def _sort(call: OpCall) -> Any:
    x = _moving_input(call)
    call.args.touch("descending", "stable", "k", "largest", "keepdim")
    packet = call.target._schema.name
    dim = 0 if packet == "aten::msort" else call.args.get("dim", -1)
    if packet == "aten::topk" and not call.args["sorted"]:
        # the order of the k values returned then depends on where they were: only rows
        # that the group does not permute inside are safe
        reduce(x, _dims(dim, len(x.shape)), tuple(s for i, s in enumerate(x.shape) if i not in _dims(dim, len(x.shape))), x.dtype, call.label, positional=True)
    if packet == "aten::kthvalue":
        values = reduce(x, _dims(dim, len(x.shape)), call.out_shape(0), call.out_dtype(0), call.label)
        return (values, Poison("kth-value positions"))
    ds = _dims(dim, len(x.shape))
    if len(ds) != 1:
        raise Unverifiable(f"{call.label}: sorts along several dims")
    d = ds[0]
    kept_shape = tuple(s for i, s in enumerate(x.shape) if i != d)
    rows = reduce(x, [d], kept_shape, x.dtype, call.label)
    out_shape = call.out_shape(0) if isinstance(call.out_meta, list | tuple) else call.out_shape()
    maps = None
    if rows.moves is not None:
        coords = coordinates(torch.arange(math.prod(out_shape)), out_shape)
        kept_coords = [c for i, c in enumerate(coords) if i != d]
        r = flat_index(kept_coords, kept_shape) if kept_coords else torch.zeros_like(coords[0])
        maps = []
        for rho in rows.moves:
            moved = coordinates(rho[r], kept_shape) if kept_shape else []
            full = list(moved)
            full.insert(d, coords[d])
            maps.append(flat_index(full, out_shape))
    values = Moving(out_shape, x.dtype, x.frame, maps).normalised()
    if isinstance(call.out_meta, list | tuple):
        return (values, Poison("sort / top-k positions"))
    return values


# ----------------------------------------------------------------------------- linear algebra

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _fresh(n: int, used: str = "") -> str:
    pool = [c for c in _LETTERS + _LETTERS.upper() if c not in used]
    return "".join(pool[:n])


def _matmul(call: OpCall, a: Any, b: Any) -> Moving:
    sa, sb = _value_shape(a), _value_shape(b)
    if len(sa) == 0 or len(sb) == 0:
        raise Unverifiable(f"{call.label}: matmul of a 0-d tensor")
    da, db = len(sa), len(sb)
    if da == 1 and db == 1:
        return contract(a, "k", b, "k", "", call.out_dtype(), call.label)
    if da == 1:
        a = _reshape(call, a, (1, sa[0]))
        out = _matmul_nd(call, a, b, squeeze_a=True)
        return out
    if db == 1:
        b = _reshape(call, b, (sb[0], 1))
        return _matmul_nd(call, a, b, squeeze_b=True)
    return _matmul_nd(call, a, b)


def _matmul_nd(call: OpCall, a: Any, b: Any, squeeze_a: bool = False, squeeze_b: bool = False) -> Moving:
    sa, sb = _value_shape(a), _value_shape(b)
    ba, bb = sa[:-2], sb[:-2]
    nb = max(len(ba), len(bb))
    batch_letters = _fresh(nb, "ijk")
    la_batch = ""
    lb_batch = ""
    ba_p = (1,) * (nb - len(ba)) + tuple(ba)
    bb_p = (1,) * (nb - len(bb)) + tuple(bb)
    keep_a, keep_b = [], []
    for i, (x, y) in enumerate(zip(ba_p, bb_p)):
        ch = batch_letters[i]
        if i >= nb - len(ba):
            keep_a.append((ch, x))
        if i >= nb - len(bb):
            keep_b.append((ch, y))
    # drop size-1 broadcast dims from an operand whose partner has size > 1
    sizes = {ch: max(x, y) for ch, x, y in zip(batch_letters, ba_p, bb_p)}
    a_dims = [ch for ch, s in keep_a if not (s == 1 and sizes[ch] > 1)]
    b_dims = [ch for ch, s in keep_b if not (s == 1 and sizes[ch] > 1)]
    a = _reshape(call, a, tuple(sizes[c] for c in a_dims) + tuple(sa[-2:]))
    b = _reshape(call, b, tuple(sizes[c] for c in b_dims) + tuple(sb[-2:]))
    la_batch, lb_batch = "".join(a_dims), "".join(b_dims)
    out_batch = "".join(c for c in batch_letters if sizes[c] > 1 or c in a_dims or c in b_dims)
    out_batch = "".join(c for c in batch_letters if c in a_dims or c in b_dims)
    lo = out_batch + ("" if squeeze_a else "i") + ("" if squeeze_b else "j")
    la = la_batch + "ik"
    lb = lb_batch + "kj"
    if squeeze_a:
        a = _reshape(call, a, (*_value_shape(a)[:-2], _value_shape(a)[-1]))
        la = la_batch + "k"
    if squeeze_b:
        b = _reshape(call, b, (*_value_shape(b)[:-2], _value_shape(b)[-2]))
        lb = lb_batch + "k"
    out = contract(a, la, b, lb, lo, call.out_dtype(), call.label)
    return _reshape(call, out, call.out_shape())


def _value_shape(v: Any) -> tuple[int, ...]:
    if isinstance(v, Moving):
        return v.shape
    if isinstance(v, Constant) and isinstance(v.first, torch.Tensor):
        return tuple(v.first.shape)
    raise Unverifiable("expected a tensor operand")


def _reshape(call: OpCall, v: Any, shape: tuple[int, ...]) -> Any:
    if _value_shape(v) == tuple(shape):
        return v
    return movement(lambda d: d[0].reshape(shape), [v], call.label)[0]


def _permute(call: OpCall, v: Any, perm: list[int]) -> Any:
    if perm == list(range(len(perm))):
        return v
    return movement(lambda d: d[0].permute(perm), [v], call.label)[0]


@rule("aten::inner")
def _inner(call: OpCall) -> Any:
    a, b = call.args["self"], call.args["other"]
    sa, sb = _value_shape(a), _value_shape(b)
    if not sa or not sb:
        raise Unverifiable(f"{call.label}: inner product with a 0-d tensor")
    la = _fresh(len(sa) - 1, "k")
    lb = _fresh(len(sa) - 1 + len(sb) - 1, "k")[len(sa) - 1 :]
    return contract(a, la + "k", b, lb + "k", la + lb, call.out_dtype(), call.label)


@rule("aten::matmul")
def _matmul_rule(call: OpCall) -> Any:
    return _matmul(call, call.args["self"], call.args["other"])


@rule("aten::mm", "aten::bmm", "aten::mv", "aten::dot", "aten::vdot")
def _mm(call: OpCall) -> Any:
    other = "mat2" if "mat2" in call.args.values else ("vec" if "vec" in call.args.values else ("tensor" if "tensor" in call.args.values else "other"))
    return _matmul(call, call.args["self"], call.args[other])


@rule("aten::addmm", "aten::baddbmm", "aten::addmv", "aten::addbmm")
def _addmm(call: OpCall) -> Any:
    packet = call.target._schema.name
    call.args.touch("beta", "alpha")
    if packet == "aten::addbmm":
        raise Unverifiable(f"{call.label}: addbmm is not supported")
    first, second = ("mat", "vec") if packet == "aten::addmv" else (("batch1", "batch2") if packet == "aten::baddbmm" else ("mat1", "mat2"))
    prod = _matmul(call, call.args[first], call.args[second])
    return pointwise([prod, call.args["self"]], call.out_shape(), call.out_dtype(), call.label)

# ----------------------------------------------------------------------------- row maps (fast paths)


def _row_maps(x: Moving, n: int) -> list[torch.Tensor] | None:
    """Per generator, the map of the rows of ``x`` viewed as ``(-1, n)`` when the group only
    permutes whole rows (the last ``n`` entries of each row stay in order); else ``None``.

    Token layouts moved by translations or by a canonicalizer's per-sample element move
    tokens, never channels: layers that act row by row (linear maps, layer norms,
    attention over rows) then move by the same row map, which is far cheaper to derive
    than the general contraction rule.
    """
    if n <= 0 or x.numel % n:
        return None
    rows = x.numel // n
    if x.moves is None:
        return [torch.arange(rows) for _ in x.frame.generators]
    out = []
    offsets = torch.arange(n)
    for m in x.moves:
        m2 = m.reshape(rows, n)
        base = m2[:, 0]
        if bool((base % n != 0).any()) or not torch.equal(m2, base[:, None] + offsets):
            return None
        out.append(base // n)
    return out


def _with_rows(rows: list[torch.Tensor], n: int, shape: tuple[int, ...], dtype: torch.dtype, frame: Any) -> Moving:
    """The value of ``shape`` whose rows of ``n`` entries move by ``rows``."""
    offsets = torch.arange(n)
    maps = [(r[:, None] * n + offsets).reshape(-1) for r in rows]
    return Moving(tuple(shape), dtype, frame, maps).normalised()



@rule("aten::linear")
def _linear(call: OpCall) -> Any:
    x, w, bias = call.args["input"], call.args["weight"], call.args["bias"]
    sx = _value_shape(x)
    if isinstance(x, Moving) and isinstance(w, Constant) and not isinstance(bias, Moving) and len(_value_shape(w)) == 2 and sx:
        rows = _row_maps(x, sx[-1])
        if rows is not None:  # the same affine map on every row
            return _with_rows(rows, call.out_shape()[-1], call.out_shape(), call.out_dtype(), x.frame)
    lead = _fresh(len(sx) - 1, "kn")
    if len(_value_shape(w)) == 1:
        out = contract(x, lead + "k", w, "k", lead, call.out_dtype(), call.label)
    else:
        out = contract(x, lead + "k", w, "nk", lead + "n", call.out_dtype(), call.label)
    if bias is not None:
        out = pointwise([out, bias], call.out_shape(), call.out_dtype(), call.label)
    return out


@rule("aten::einsum")
def _einsum(call: OpCall) -> Any:
    equation = str(call.args["equation"]).replace(" ", "")
    operands = list(call.args["tensors"])
    call.args.touch("path")
    if "->" not in equation:
        raise Unverifiable(f"{call.label}: implicit einsum output")
    lhs, lo = equation.split("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise Unverifiable(f"{call.label}: operands do not match the equation")
    if len(ins) == 1:
        term = ins[0]
        if "..." in term or len(set(term)) != len(term) or set(lo) - set(term):
            raise Unverifiable(f"{call.label}: this one-operand einsum form is not supported")
        x = operands[0]
        summed = [i for i, ch in enumerate(term) if ch not in lo]
        kept = [ch for ch in term if ch in lo]
        if summed:
            if not isinstance(x, Moving):
                raise Unverifiable(f"{call.label}: no operand depends on the input")
            sizes = [int(s) for s in x.shape]
            x = reduce(x, summed, tuple(sizes[i] for i, ch in enumerate(term) if ch in lo), call.out_dtype(), call.label)
        perm = [kept.index(ch) for ch in lo]
        return _permute(call, x, perm)
    if len(ins) != 2:
        raise Unverifiable(f"{call.label}: einsum over more than two operands")
    if "..." in equation:
        used = "".join(c for c in equation if c.isalpha())
        expanded = []
        for term, v in zip(ins, operands):
            if "..." in term:
                n = len(_value_shape(v)) - (len(term) - 3)
                expanded.append(term.replace("...", _fresh(n, used)[-n:] if n else ""))
            else:
                expanded.append(term)
        nmax = max(len(_value_shape(v)) - (len(t) - 3) for t, v in zip(ins, operands) if "..." in t)
        lo = lo.replace("...", _fresh(nmax, used)[-nmax:] if nmax else "")
        ins = expanded
    return contract(operands[0], ins[0], operands[1], ins[1], lo, call.out_dtype(), call.label)


@rule("aten::scaled_dot_product_attention")
def _sdpa(call: OpCall) -> Any:
    q, k, v = call.args["query"], call.args["key"], call.args["value"]
    mask, dropout, causal = call.args["attn_mask"], call.args["dropout_p"], call.args["is_causal"]
    call.args.touch("scale")
    if call.args.get("enable_gqa", False):
        raise Unverifiable(f"{call.label}: grouped-query attention is not supported")
    if float(dropout) != 0.0:
        raise Unverifiable(f"{call.label}: draws random numbers (attention dropout)")
    fast = _sdpa_rows(call, q, k, v, mask, bool(causal))
    if fast is not None:
        return fast
    sq, sk = _value_shape(q), _value_shape(k)
    k, v = _keys_up_to_permutation(call, q, k, v, mask)
    lead = _fresh(len(sq) - 2, "ijd")
    scores = contract(q, lead + "id", k, lead + "jd", lead + "ij", call.out_dtype(), call.label)
    if mask is not None:
        scores = pointwise([scores, mask], scores.shape, call.out_dtype(), call.label + " mask")
    if causal:
        tri = torch.ones(sq[-2], sk[-2], dtype=torch.bool).tril()
        scores = pointwise([scores, Constant(tri, tri)], scores.shape, call.out_dtype(), call.label + " causal mask")
    weights = normalize(scores, [len(scores.shape) - 1], call.out_dtype(), call.label + " softmax")
    return contract(weights, lead + "ij", v, lead + "je", lead + "ie", call.out_dtype(), call.label)


def _sdpa_rows(call: OpCall, q: Any, k: Any, v: Any, mask: Any, causal: bool) -> Moving | None:
    """Attention whose operands move by whole rows: queries by ``(block, l) → (β(block), λ(l))``,
    keys and values by one permutation inside the image block ``β(block)`` — the output
    moves like the queries (the softmax sums over all keys of the block in any order). A
    constant mask must be unchanged by the moves; otherwise (or with a causal mask, an
    input-dependent mask, operands from different frames) the general rule decides.
    """
    if causal or not all(isinstance(t, Moving) for t in (q, k, v)) or isinstance(mask, Moving):
        return None
    if mask is not None and not (isinstance(mask, Constant) and isinstance(mask.first, torch.Tensor)):
        return None
    active = [t for t in (q, k, v) if not t.invariant]
    if not active or any(t.frame is not active[0].frame for t in active):
        return None
    frame = active[0].frame
    sq, sk, sv = q.shape, k.shape, v.shape
    if len(sq) < 2 or sq[:-2] != sk[:-2] or sk[:-1] != sv[:-1] or sq[-1] != sk[-1]:
        return None
    L, S = sq[-2], sk[-2]
    blocks = math.prod(sq[:-2])
    rq, rk, rv = _row_maps(q, sq[-1]), _row_maps(k, sk[-1]), _row_maps(v, sv[-1])
    if rq is None or rk is None or rv is None:
        return None
    if len(rq) != len(frame.generators):
        return None
    classes = None
    if mask is not None:
        full = (*sq[:-1], S)
        try:
            first = mask.first.expand(full).reshape(-1)
            second = mask.second.expand(full).reshape(-1)
        except RuntimeError:
            return None
        third = mask.third.expand(full).reshape(-1) if mask.third is not None else None
        classes = value_classes(first, second, third, exact=mask.exact)
    for a, b, c in zip(rq, rk, rv):
        if not torch.equal(b, c):
            return None
        qa, kb = a.reshape(blocks, L), b.reshape(blocks, S)
        beta = qa[:, :1] // L
        if not torch.equal(qa // L, beta.expand(blocks, L)) or not torch.equal(kb // S, beta.expand(blocks, S)):
            return None
        if classes is not None:
            scores = (qa[:, :, None] * S + (kb % S)[:, None, :]).reshape(-1)
            if not torch.equal(classes[scores], classes):
                return None
    return _with_rows(rq, sv[-1], call.out_shape(), call.out_dtype(), frame)


def _key_axis_sources(value: Moving, what: str) -> list[torch.Tensor] | None:
    """Per generator, the key-axis source of each (…, key) position if the map only
    permutes keys inside each (…) slice (and is the same for every channel)."""
    shape = value.shape
    axis = len(shape) - 2
    out = []
    own = coordinates(torch.arange(value.numel), shape)
    for m in value.maps():
        src = coordinates(m, shape)
        for d in range(len(shape)):
            if d != axis and not torch.equal(src[d], own[d]):
                return None
        key = src[axis].reshape(shape)
        if not bool((key == key.narrow(-1, 0, 1)).all()):
            return None
        rows = key[..., 0].reshape(-1, shape[axis])
        if not bool((rows.sort(dim=1).values == torch.arange(shape[axis])).all()):
            return None
        out.append(key[..., 0])
    return out


def _keys_up_to_permutation(call: OpCall, q: Any, k: Any, v: Any, mask: Any) -> tuple[Any, Any]:
    """Keys and values in another frame than the queries, moved only by permuting the
    key axis (the same way for both), count as invariant: attention without a positional
    bias sums over the keys, so it does not see their order."""
    if not (isinstance(q, Moving) and isinstance(k, Moving) and isinstance(v, Moving)):
        return k, v
    if q.invariant or k.invariant or k.frame is q.frame or k.frame is not v.frame:
        return k, v
    if mask is not None:
        raise Unverifiable(f"{call.label}: a mask with keys and queries in different frames")
    ks, vs = _key_axis_sources(k, call.label), _key_axis_sources(v, call.label)
    if ks is None or vs is None or any(not torch.equal(a, b) for a, b in zip(ks, vs)):
        raise Breaks(
            f"{call.label} combines tensors from different frames: {q.frame.describe()} (queries) and "
            f"{k.frame.describe()} (keys and values), and the keys move other than by reordering"
        )
    return Moving(k.shape, k.dtype, q.frame, None), Moving(v.shape, v.dtype, q.frame, None)


# ----------------------------------------------------------------------------- convolution and pooling


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _unfold(call: OpCall, x: Any, kernel: tuple[int, ...], dilation: tuple[int, ...], padding: tuple[int, ...], stride: tuple[int, ...]) -> Any:
    return movement(lambda d: F.unfold(d[0], kernel, dilation, padding, stride), [x], call.label + " windows", rows=(0, 2))[0]


def _conv(call: OpCall, x: Any, w: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
    sx, sw = _value_shape(x), _value_shape(w)
    dims = len(sw) - 2
    if dims not in (1, 2) or len(sx) != dims + 2:
        raise Unverifiable(f"{call.label}: only batched 1-d and 2-d convolutions are supported")
    if not isinstance(w, Constant):
        raise Unverifiable(f"{call.label}: the kernel depends on the input")
    stride_, dil_ = _pair(stride, dims), _pair(dilation, dims)
    ksize = tuple(int(s) for s in sw[2:])
    if isinstance(padding, str):
        if padding == "valid":
            pad_ = (0,) * dims
        else:
            totals = [d * (k - 1) for d, k in zip(dil_, ksize)]
            if any(t % 2 for t in totals):
                raise Unverifiable(f"{call.label}: asymmetric 'same' padding")
            pad_ = tuple(t // 2 for t in totals)
    else:
        pad_ = _pair(padding, dims)
    if dims == 1:
        x = _reshape(call, x, (sx[0], sx[1], 1, sx[2]))
        stride2: tuple[int, ...] = (1, stride_[0])
        dil2: tuple[int, ...] = (1, dil_[0])
        pad2: tuple[int, ...] = (0, pad_[0])
        k2: tuple[int, ...] = (1, ksize[0])
    else:
        stride2, dil2, pad2, k2 = stride_, dil_, pad_, ksize
    cols = _unfold(call, x, k2, dil2, pad2, stride2)  # (B, C*kh*kw, L)
    b, ck, l_ = _value_shape(cols)
    out_c = sw[0]
    g = int(groups)
    cols = _reshape(call, cols, (b, g, ck // g, l_))
    wr = movement(lambda d: d[0].reshape(g, out_c // g, ck // g), [w], call.label)[0]
    out = contract(cols, "zgkl", wr, "gok", "zgol", call.out_dtype(), call.label)
    out = _reshape(call, out, call.out_shape())
    if bias is not None:
        view = (1, out_c) + (1,) * dims
        bb = movement(lambda d: d[0].reshape(view), [bias], call.label)[0]
        out = pointwise([out, bb], call.out_shape(), call.out_dtype(), call.label + " bias")
    return out


@rule("aten::conv1d", "aten::conv2d")
def _conv_rule(call: OpCall) -> Any:
    return _conv(call, call.args["input"], call.args["weight"], call.args["bias"], call.args["stride"], call.args["padding"], call.args["dilation"], call.args["groups"])


@rule("aten::convolution", "aten::_convolution")
def _convolution_rule(call: OpCall) -> Any:
    call.args.touch("benchmark", "deterministic", "cudnn_enabled", "allow_tf32")
    if call.args["transposed"]:
        raise Unverifiable(f"{call.label}: transposed convolutions are not supported")
    call.args.touch("output_padding")
    return _conv(call, call.args["input"], call.args["weight"], call.args["bias"], call.args["stride"], call.args["padding"], call.args["dilation"], call.args["groups"])


def _pool(call: OpCall, kind: str) -> Any:
    x = _moving_input(call)
    sx = x.shape
    dims = 1 if "1d" in call.target._schema.name else 2
    if len(sx) != dims + 2:
        raise Unverifiable(f"{call.label}: only batched inputs are supported")
    kernel = _pair(call.args["kernel_size"], dims)
    stride_arg = call.args["stride"]
    stride = kernel if stride_arg in (None, []) or stride_arg == () else _pair(stride_arg, dims)
    padding = _pair(call.args["padding"], dims)
    dilation = _pair(call.args.get("dilation", 1), dims) if "dilation" in call.args.values else (1,) * dims
    if call.args["ceil_mode"]:
        expected = tuple((s + 2 * p - d * (k - 1) - 1) // st + 1 for s, p, d, k, st in zip(sx[2:], padding, dilation, kernel, stride))
        if tuple(call.out_shape(0 if isinstance(call.out_meta, list | tuple) else None)[2:]) != expected:
            raise Unverifiable(f"{call.label}: ceil_mode adds partial windows")
    if dims == 1:
        x4 = _reshape(call, x, (sx[0], sx[1], 1, sx[2]))
        k2: tuple[int, ...] = (1, kernel[0])
        d2: tuple[int, ...] = (1, dilation[0])
        p2: tuple[int, ...] = (0, padding[0])
        s2: tuple[int, ...] = (1, stride[0])
    else:
        x4, k2, d2, p2, s2 = x, kernel, dilation, padding, stride
    cols = _unfold(call, x4, k2, d2, p2, s2)
    b, ck, l_ = cols.shape
    c = sx[1]
    cols = _reshape(call, cols, (b, c, ck // c, l_))
    pooled = reduce(cols, [2], (b, c, l_), call.out_dtype(0 if isinstance(call.out_meta, list | tuple) else None), call.label)
    out_shape = call.out_shape(0) if isinstance(call.out_meta, list | tuple) else call.out_shape()
    out = _reshape(call, pooled, out_shape)
    if kind == "avg":
        include = call.args["count_include_pad"]
        override = call.args.get("divisor_override")
        if not include and override is None and any(padding):
            ones = torch.ones((1, 1, *tuple(sx[2:])), dtype=torch.float64)
            if dims == 1:
                counts = F.avg_pool1d(ones[0], kernel, stride, padding, False, False) * kernel[0]
            else:
                counts = F.avg_pool2d(ones, kernel, stride, padding, False, False) * math.prod(kernel)
            out = pointwise([out, Constant(counts, counts)], out_shape, out.dtype, call.label + " divisor")
    if isinstance(call.out_meta, list | tuple):
        return (out, Poison("max-pool positions"))
    return out


@rule("aten::max_pool1d", "aten::max_pool2d", "aten::max_pool2d_with_indices", "aten::max_pool1d_with_indices")
def _max_pool(call: OpCall) -> Any:
    return _pool(call, "max")


@rule("aten::avg_pool1d", "aten::avg_pool2d")
def _avg_pool(call: OpCall) -> Any:
    return _pool(call, "avg")


@rule("aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d", "aten::adaptive_max_pool2d", "aten::adaptive_max_pool1d")
def _adaptive_pool(call: OpCall) -> Any:
    x = _moving_input(call)
    size = call.args["output_size"]
    dims = len(x.shape) - 2
    size = _pair(size, dims)
    indexed = isinstance(call.out_meta, list | tuple)
    out_shape = call.out_shape(0) if indexed else call.out_shape()
    spatial = x.shape[2:]
    if all(s == 1 for s in size):
        out = reduce(x, list(range(2, len(x.shape))), out_shape, x.dtype, call.label)
    elif all(i % o == 0 for i, o in zip(spatial, size)):
        k = tuple(i // o for i, o in zip(spatial, size))
        x4 = x if dims == 2 else _reshape(call, x, (x.shape[0], x.shape[1], 1, spatial[0]))
        k2 = k if dims == 2 else (1, k[0])
        cols = _unfold(call, x4, k2, (1, 1), (0, 0), k2)
        b, ck, l_ = cols.shape
        cols = _reshape(call, cols, (b, x.shape[1], ck // x.shape[1], l_))
        out = _reshape(call, reduce(cols, [2], (b, x.shape[1], l_), x.dtype, call.label), out_shape)
    else:
        raise Unverifiable(f"{call.label}: adaptive pooling with uneven windows")
    return (out, Poison("max-pool positions")) if indexed else out


# ----------------------------------------------------------------------------- normalisation layers


def _affine(call: OpCall, out: Moving, weight: Any, bias: Any, view: tuple[int, ...]) -> Moving:
    for p in (weight, bias):
        if p is None:
            continue
        pv = movement(lambda d: d[0].reshape(view), [p], call.label)[0]
        out = pointwise([out, pv], out.shape, out.dtype, call.label + " affine")
    return out


@rule("aten::layer_norm", "aten::native_layer_norm")
def _layer_norm(call: OpCall) -> Any:
    x = _moving_input(call, "input")
    shape = tuple(int(s) for s in call.args["normalized_shape"])
    call.args.touch("eps", "cudnn_enable")
    n = len(shape)
    dims = list(range(len(x.shape) - n, len(x.shape)))
    weight, bias = call.args["weight"], call.args["bias"]
    rows = _row_maps(x, math.prod(shape)) if not isinstance(weight, Moving) and not isinstance(bias, Moving) else None
    if rows is not None:  # rows move whole: each is normalised (and scaled) the same way
        out = _with_rows(rows, math.prod(shape), x.shape, x.dtype, x.frame)
        if isinstance(call.out_meta, list | tuple):
            stat = _with_rows(rows, 1, call.out_shape(1), call.out_dtype(1), x.frame)
            return (out, stat, stat)
        return out
    out = normalize(x, dims, x.dtype, call.label)
    out = _affine(call, out, call.args["weight"], call.args["bias"], (1,) * (len(x.shape) - n) + shape)
    if isinstance(call.out_meta, list | tuple):
        stat = reduce(x, dims, call.out_shape(1), call.out_dtype(1), call.label)
        return (out, stat, stat)
    return out


@rule("aten::rms_norm")
def _rms_norm(call: OpCall) -> Any:
    x = _moving_input(call, "input")
    shape = tuple(int(s) for s in call.args["normalized_shape"])
    call.args.touch("eps")
    n = len(shape)
    out = normalize(x, list(range(len(x.shape) - n, len(x.shape))), x.dtype, call.label)
    return _affine(call, out, call.args["weight"], None, (1,) * (len(x.shape) - n) + shape)


@rule("aten::group_norm")
def _group_norm(call: OpCall) -> Any:
    x = _moving_input(call, "input")
    g = int(call.args["num_groups"])
    call.args.touch("eps", "cudnn_enabled")
    b, c = x.shape[:2]
    rest = math.prod(x.shape[2:])
    grouped = _reshape(call, x, (b, g, (c // g) * rest))
    normed = normalize(grouped, [2], x.dtype, call.label)
    out = _reshape(call, normed, x.shape)
    return _affine(call, out, call.args["weight"], call.args["bias"], (1, c) + (1,) * (len(x.shape) - 2))


@rule("aten::batch_norm", "aten::_native_batch_norm_legit_no_training", "aten::_native_batch_norm_legit_functional", "aten::_native_batch_norm_legit", "aten::native_batch_norm", "aten::instance_norm")
def _batch_norm(call: OpCall) -> Any:
    x = _moving_input(call, "input")
    packet = call.target._schema.name
    call.args.touch("momentum", "eps", "cudnn_enabled", "running_mean", "running_var")
    c = x.shape[1]
    view = (1, c) + (1,) * (len(x.shape) - 2)
    if packet == "aten::instance_norm":
        use_stats = call.args["use_input_stats"]
        if not use_stats:
            raise Unverifiable(f"{call.label}: instance norm with running statistics")
        out = normalize(x, list(range(2, len(x.shape))), x.dtype, call.label)
        return _affine(call, out, call.args["weight"], call.args["bias"], view)
    training = call.args.get("training", False) if packet != "aten::_native_batch_norm_legit_no_training" else False
    if packet == "aten::_native_batch_norm_legit_functional" or packet == "aten::_native_batch_norm_legit":
        training = call.args["training"]
    if training:
        out = normalize(x, [0, *list(range(2, len(x.shape)))], x.dtype, call.label)
    else:
        out = x
        for stat in (call.args["running_mean"], call.args["running_var"]):
            if stat is not None:
                out = pointwise([out, movement(lambda d: d[0].reshape(view), [stat], call.label)[0]], x.shape, x.dtype, call.label + " statistics")
    out = _affine(call, out, call.args["weight"], call.args["bias"], view)
    if isinstance(call.out_meta, list | tuple):
        extra = [Poison("batch statistics") for _ in range(len(call.out_meta) - 1)]
        return (out, *extra)
    return out


@rule("aten::embedding")
def _embedding(call: OpCall) -> Any:
    weight, idx = call.args["weight"], call.args["indices"]
    call.args.touch("padding_idx", "scale_grad_by_freq", "sparse")
    if not isinstance(idx, Moving):
        raise Unverifiable(f"{call.label}: embedding of a non-input index")
    if not isinstance(weight, Constant):
        raise Unverifiable(f"{call.label}: the embedding table depends on the input")
    d = int(weight.first.shape[-1])
    if idx.invariant:
        return Moving(call.out_shape(), call.out_dtype(), idx.frame, None)
    maps = [(m[:, None] * d + torch.arange(d)).reshape(-1) for m in idx.moves]  # type: ignore[union-attr]
    return Moving(call.out_shape(), call.out_dtype(), idx.frame, maps)


# ----------------------------------------------------------------------------- no-ops and refusals


@rule("aten::_assert_tensor_metadata", "aten::_assert_scalar", "aten::sym_constrain_range_for_size", "aten::sym_constrain_range", "aten::_assert_async")
def _assertion(call: OpCall) -> Any:
    call.args.touch_all()
    return None


@rule("aten::where.default", "aten::nonzero", "aten::nonzero_static", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::item", "aten::_local_scalar_dense", "aten::bincount", "aten::histc", "aten::multinomial", "aten::randperm")
def _data_dependent(call: OpCall) -> Any:
    call.args.touch_all()
    raise Unverifiable(f"{call.label}: its output's shape or values are positions chosen by the data")

