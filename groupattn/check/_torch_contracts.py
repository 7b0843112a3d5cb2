"""Contracts and layout rules for common PyTorch pieces.

Principle: an operation is equivariant when it acts pointwise over the moved positions
(spatial and point-group axes) and only mixes unmoved axes (channels), or when it
applies the same permutation-commuting computation to every position (softmax,
reductions over a whole moved axis, attention over a whole token axis). Whatever mixes
moved positions with fixed weights — a linear layer over a flattened grid or over the
group axis, zero padding, a stride that samples a fixed grid, an absolute positional
table — breaks, and the reason says which axis and why.

The rules here drive the checker (:func:`groupattn.check.certify`); the same logic is
also registered with :func:`groupattn.contracts.register_contract` so that
``contract_of(torch.nn.Conv2d(...), group)`` answers for plain PyTorch modules.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import einops
import torch
import torch.nn.functional as F
from einops.layers.torch import Rearrange
from torch import nn

from ..actions import FieldType, GridField, InvariantField, TokenField, point_group_of
from ..contracts import Contract, register_contract
from ..groups import (
    GridTranslations,
    Group,
    GroupError,
    PointGroup,
    RotoTranslationGroup,
    TorusTranslations,
)
from ._layout import (
    Atom,
    Dim,
    Layout,
    channel_dim,
    describe_layout,
    field_from_layout,
    invariant_layout,
    is_moving,
    layout_from_field,
    moves,
    probe_layout,
)
from ._rules import Call, function_rule, method_rule, module_rule
from ._symbols import Breaks, StaticSym, Sym, TensorSym, TupleSym, Unverifiable, describe_frame

__all__: list[str] = []

_NAMES = {"Y": "vertical spatial", "X": "horizontal spatial", "K": "point-group", "Z": "spatial"}


# ----------------------------------------------------------------------------- helpers


def _first(call: Call) -> TensorSym:
    syms = call.tensor_syms()
    if not syms:
        raise Unverifiable(f"{call.label}: no tensor input")
    x = syms[0]
    if x.layout is None:
        raise Unverifiable(f"{call.label}: the layout of its input is unknown")
    return x


def _moving_kinds(dim: Dim, group: Group | None) -> list[str]:
    return [a.kind for a in dim if moves(a, group)]


def _axis_words(kinds: list[str]) -> str:
    return " and ".join(dict.fromkeys(_NAMES[k] for k in kinds)) + " axis"


def _same_frame(call: Call, syms: list[TensorSym], what: str) -> tuple[Any, Group | None]:
    """The common frame and group of the moving operands; a break if they differ."""
    moving = [s for s in syms if not s.invariant]
    if not moving:
        return None, syms[0].group if syms else None
    frame, group = moving[0].frame, moving[0].group
    for s in moving[1:]:
        if s.frame != frame:
            raise Breaks(
                f"{what} tensors from different frames: {describe_frame(frame)} and {describe_frame(s.frame)}"
            )
        if s.group is not None and group is not None and s.group != group:
            raise Breaks(
                f"{what} tensors acted on by different groups: {group.name} and {s.group.name}"
            )
    return frame, group


def _out_tensor(call: Call) -> torch.Tensor:
    out = call.out
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise Unverifiable(f"{call.label}: expected a tensor output, got {type(out).__name__}")


def _like(x: TensorSym, layout: Layout | None, **changes: Any) -> TensorSym:
    return TensorSym(
        layout=layout,
        group=changes.get("group", x.group),
        frame=changes.get("frame", x.frame),
        constant=changes.get("constant", x.constant),
    )


def _pad(layout: Layout, ndim: int) -> Layout:
    return ((),) * (ndim - len(layout)) + tuple(layout)


def broadcast(call: Call, operands: list[TensorSym], out_shape: tuple[int, ...], what: str) -> TensorSym:
    """Elementwise combination with broadcasting: axes must line up, frames must agree."""
    for s in operands:
        if s.layout is None:
            raise Unverifiable(f"{call.label}: the layout of an operand is unknown")
    frame, group = _same_frame(call, operands, what)
    ndim = len(out_shape)
    padded = [(s, _pad(s.layout, ndim)) for s in operands]  # type: ignore[arg-type]
    dims: list[Dim] = []
    for d in range(ndim):
        chosen: Dim | None = None
        chosen_moving = False
        for _operand, layout in padded:
            dim = layout[d]
            if math.prod(a.size for a in dim) == 1 and out_shape[d] != 1:
                continue  # broadcast along d: constant along it, fine
            is_mov = bool(_moving_kinds(dim, group))
            if chosen is None or (is_mov and not chosen_moving):
                if chosen is not None and not chosen_moving and is_mov:
                    _check_fixed_against_moving(call, chosen, dim, padded, d, group, what)
                chosen, chosen_moving = dim, is_mov
            elif is_mov and chosen_moving and tuple(dim) != tuple(chosen):
                raise Breaks(
                    f"{what} tensors whose axes do not line up: {describe_layout((chosen,))} "
                    f"with {describe_layout((dim,))} in dimension {d}"
                )
            elif chosen_moving and not is_mov:
                _check_fixed_against_moving(call, dim, chosen, padded, d, group, what)
        dims.append(chosen if chosen is not None else ())
    return TensorSym(
        layout=tuple(dims), group=group, frame=frame, constant=all(s.constant for s in operands)
    )


def _check_fixed_against_moving(
    call: Call, fixed: Dim, moving_dim: Dim, padded: Any, d: int, group: Group | None, what: str
) -> None:
    kinds = _moving_kinds(moving_dim, group)
    for s, _layout in padded:
        if s.origin is not None and group is not None and _fixed_point(s.origin, group):
            return
    raise Breaks(
        f"{what} a tensor that varies along dimension {d} without moving with the group "
        f"({describe_layout((fixed,))}) onto the {_axis_words(kinds)} "
        f"({describe_layout((moving_dim,))}): a fixed position-dependent term such as an "
        "absolute positional encoding"
    )


def _fixed_point(module: Any, group: Group) -> bool:
    """Whether a parameter-only module (e.g. a relative bias) declares its output invariant
    under ``group``: then ``g·bias = bias`` on the token pairs it is laid over."""
    from ..contracts import Kind, contract_of

    try:
        return contract_of(module, group).kind == Kind.INVARIANT
    except (GroupError, ValueError):
        return False


def _static_result(out: Any) -> Sym:
    return StaticSym(value=out)


# ----------------------------------------------------------------------------- pointwise


_POINTWISE_MODULES = (
    nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU,
    nn.Softplus, nn.Mish, nn.Hardswish, nn.Hardsigmoid, nn.Hardtanh, nn.PReLU, nn.SELU,
    nn.CELU, nn.GLU, nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Softmax,
    nn.LogSoftmax, nn.Softsign, nn.Tanhshrink, nn.LogSigmoid,
)


_DROPOUT_FUNCTIONS = (F.dropout, F.dropout2d, F.alpha_dropout, F.feature_alpha_dropout)


def _pointwise(call: Call) -> Sym:
    if call.target in _DROPOUT_FUNCTIONS:
        p = call.arg(1, "p", 0.5)[0]
        training = call.arg(2, "training", True)[0]
        if training and p:
            raise Breaks(f"{call.label} with training=True draws a random mask, which does not move with the input")
    x = _first(call)
    out = _out_tensor(call)
    if call.module is not None and isinstance(call.module, nn.PReLU) and call.module.num_parameters > 1:
        return _channel_weights(call, x, 1, "PReLU")
    if call.module is not None and isinstance(call.module, nn.GLU | nn.Dropout2d | nn.Dropout1d):
        return _probe_free(call, x, out)
    if tuple(out.shape) != tuple(math.prod(a.size for a in d) for d in x.layout):  # type: ignore[union-attr]
        return broadcast(call, call.tensor_syms(), tuple(out.shape), "combines")
    others = call.tensor_syms()[1:]
    if others:
        return broadcast(call, call.tensor_syms(), tuple(out.shape), "combines")
    return _like(x, x.layout)


def _probe_free(call: Call, x: TensorSym, out: torch.Tensor) -> Sym:
    if tuple(out.shape) != tuple(math.prod(a.size for a in d) for d in x.layout):  # type: ignore[union-attr]
        raise Unverifiable(f"{call.label}: changes the shape in a way the checker does not track")
    return _like(x, x.layout)


module_rule(*_POINTWISE_MODULES)(_pointwise)

_POINTWISE_FUNCTIONS = [
    F.relu, F.relu6, F.gelu, F.silu, F.elu, F.leaky_relu, F.softplus, F.mish, F.hardswish,
    F.hardtanh, F.sigmoid, F.tanh, F.dropout, F.softmax, F.log_softmax, F.normalize,
    torch.relu, torch.tanh, torch.sigmoid, torch.exp, torch.log, torch.sqrt, torch.rsqrt,
    torch.abs, torch.sin, torch.cos, torch.neg, torch.square, torch.clamp, torch.softmax,
    F.alpha_dropout, F.dropout2d, F.feature_alpha_dropout,
    torch.log_softmax, torch.erf, torch.sign, torch.reciprocal, torch.log1p, torch.expm1,
    torch.nan_to_num, torch.clone, torch.detach, operator.neg, operator.pos, abs,
]
function_rule(*_POINTWISE_FUNCTIONS)(_pointwise)
method_rule(
    "relu", "gelu", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "abs", "sin", "cos",
    "neg", "square", "clamp", "clamp_min", "clamp_max", "softmax", "log_softmax", "erf",
    "sign", "reciprocal", "contiguous", "clone", "detach", "float", "double", "half", "to",
    "type_as", "sigmoid_", "relu_", "pow", "log1p", "expm1", "nan_to_num", "masked_fill",
    "bfloat16", "requires_grad_", "mul_", "add_", "sub_", "div_", "cpu", "cuda",
)(_pointwise)


@function_rule(
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.pow,
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.mod,
    torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.where,
    torch.pow, torch.lerp, torch.addcmul, torch.masked_fill, operator.lt, operator.gt, operator.eq,
)
@method_rule("add", "sub", "mul", "div", "maximum", "minimum", "lerp", "addcmul", "__add__", "__mul__")
def _elementwise(call: Call) -> Sym:
    syms = call.tensor_syms()
    if not isinstance(call.out, torch.Tensor):
        return _static_result(call.out)
    what = "adds" if call.target in (operator.add, operator.iadd, torch.add, "add") else "combines"
    return broadcast(call, syms, tuple(call.out.shape), what)


# ----------------------------------------------------------------------------- data movement


def _replace_first_tensor(values: Any, probe: torch.Tensor) -> tuple[Any, bool]:
    done = False

    def walk(v: Any) -> Any:
        nonlocal done
        if isinstance(v, torch.Tensor) and not done:
            done = True
            return probe
        if isinstance(v, list | tuple) and not isinstance(v, torch.Size):
            return type(v)(walk(i) for i in v)
        return v

    return walk(values), done


def _run_probe(call: Call, x_shape: tuple[int, ...]) -> Any:
    probe = torch.arange(math.prod(x_shape), dtype=torch.long).reshape(x_shape)
    args, _ = _replace_first_tensor(call.args, probe)
    if call.module is not None:
        return call.module(*args, **call.kwargs)
    if isinstance(call.target, str):
        self, rest = args[0], args[1:]
        return getattr(self, call.target)(*rest, **call.kwargs)
    return call.target(*args, **call.kwargs)


def _movement(call: Call) -> Sym:
    syms = call.tensor_syms()
    x = _first(call)
    if len(syms) > 1 and not all(s.invariant for s in syms[1:]):
        raise Unverifiable(f"{call.label}: indexes with a tensor that moves with the group")
    if len(syms) > 1 and any(not s.constant for s in syms[1:]):
        raise Unverifiable(f"{call.label}: indexes with a data-dependent tensor")
    shape = tuple(math.prod(a.size for a in d) for d in x.layout)  # type: ignore[union-attr]
    try:
        probed = _run_probe(call, shape)
    except Exception as err:  # the op does not accept integer tensors
        raise Unverifiable(f"{call.label}: could not trace how it moves entries ({err})") from err

    def convert(p: Any) -> Sym:
        if isinstance(p, torch.Tensor):
            result = probe_layout(x.layout, p, x.group)  # type: ignore[arg-type]
            if result.dropped:
                raise Breaks(f"{call.label} {result.dropped}")
            if result.untracked:
                raise Unverifiable(f"{call.label} {result.untracked}")
            return _like(x, result.layout)
        if isinstance(p, tuple | list):
            return TupleSym(items=tuple(convert(i) for i in p))
        return StaticSym(value=p)

    return convert(probed)


function_rule(
    torch.reshape, torch.flatten, torch.permute, torch.transpose, torch.squeeze, torch.unsqueeze,
    torch.movedim, torch.swapaxes, torch.chunk, torch.split, torch.unbind, torch.narrow,
    torch.select, operator.getitem, torch.unflatten, torch.t, torch.tensor_split,
)(_movement)
method_rule(
    "view", "reshape", "permute", "transpose", "flatten", "unflatten", "squeeze", "unsqueeze",
    "expand", "expand_as", "movedim", "swapaxes", "chunk", "split", "unbind", "narrow",
    "select", "repeat", "t", "view_as", "reshape_as", "__getitem__", "tensor_split",
)(_movement)
module_rule(nn.Flatten, nn.Unflatten)(_movement)

# einops is a core dependency; its functions are traced as leaves
function_rule(einops.rearrange, einops.repeat)(_movement)
module_rule(Rearrange)(_movement)


@function_rule(torch.cat, torch.concat, torch.concatenate)
def _cat(call: Call) -> Sym:
    tensors_sym = call.sargs[0] if call.sargs else call.skwargs.get("tensors", ())
    dim = call.args[1] if len(call.args) > 1 else call.kwargs.get("dim", 0)
    syms = [s for s in tensors_sym if isinstance(s, TensorSym)]
    if len(syms) != len(tensors_sym):
        raise Unverifiable("torch.cat: an operand is not a traced tensor")
    for s in syms:
        if s.layout is None:
            raise Unverifiable("torch.cat: the layout of an operand is unknown")
    out = _out_tensor(call)
    ndim = out.dim()
    d = dim % ndim
    _same_frame(call, syms, "concatenates")
    group = next((s.group for s in syms if not s.invariant), syms[0].group)
    for s in syms:
        kinds = _moving_kinds(s.layout[d], group)  # type: ignore[index]
        if kinds:
            raise Breaks(
                f"torch.cat concatenates along the {_axis_words(kinds)} ({describe_layout((s.layout[d],))}): "  # type: ignore[index]
                "the pieces do not move together"
            )
    rest = [
        TensorSym(layout=(*tuple(s.layout[:d]), (), *tuple(s.layout[d + 1:])), group=s.group, frame=s.frame, constant=s.constant)  # type: ignore[index]
        for s in syms
    ]
    shape = tuple(1 if i == d else n for i, n in enumerate(out.shape))
    merged = broadcast(call, rest, shape, "concatenates")
    layout = list(merged.layout)  # type: ignore[arg-type]
    layout[d] = channel_dim(out.shape[d])
    return TensorSym(layout=tuple(layout), group=merged.group, frame=merged.frame, constant=merged.constant)


@function_rule(torch.stack)
def _stack(call: Call) -> Sym:
    syms = [s for s in call.sargs[0] if isinstance(s, TensorSym)]
    dim = call.args[1] if len(call.args) > 1 else call.kwargs.get("dim", 0)
    out = _out_tensor(call)
    d = dim % out.dim()
    inner = tuple(s for s in out.shape[:d]) + tuple(out.shape[d + 1:])
    merged = broadcast(call, syms, inner, "stacks")
    layout = list(merged.layout)  # type: ignore[arg-type]
    layout.insert(d, channel_dim(out.shape[d]))
    return TensorSym(layout=tuple(layout), group=merged.group, frame=merged.frame, constant=merged.constant)


# ----------------------------------------------------------------------------- linear algebra


def contract_axes(call: Call, a: TensorSym, da: Dim, b: TensorSym, db: Dim, what: str) -> None:
    """Summing over a pair of axes is fine when both move identically, or neither moves."""
    group = a.group if not a.invariant else b.group
    ka, kb = _moving_kinds(da, group), _moving_kinds(db, group)
    if not ka and not kb:
        return
    if ka and kb and tuple(da) == tuple(db):
        return
    kinds = ka or kb
    if "K" in kinds and not set(kinds) & {"Y", "X", "Z"}:
        raise Breaks(f"{what} mixes channels across the point-group axis with fixed weights ({describe_layout((da,))} with {describe_layout((db,))})")
    raise Breaks(
        f"{what} mixes positions of the {_axis_words(kinds)} with fixed weights "
        f"({describe_layout((da,))} with {describe_layout((db,))}): the spatial grid was flattened into channels"
    )


def _matmul_syms(call: Call, a: TensorSym, b: TensorSym, out_shape: tuple[int, ...], what: str) -> TensorSym:
    if a.layout is None or b.layout is None:
        raise Unverifiable(f"{call.label}: the layout of an operand is unknown")
    la, lb = list(a.layout), list(b.layout)
    if len(la) == 1:
        la = [(), la[0]]
    if len(lb) == 1:
        lb = [lb[0], ()]
    contract_axes(call, a, la[-1], b, lb[-2], what)
    _same_frame(call, [a, b], what)
    batch_shape = out_shape[: max(len(la), len(lb)) - 2]
    ba = TensorSym(layout=tuple(la[:-2]), group=a.group, frame=a.frame, constant=a.constant)
    bb = TensorSym(layout=tuple(lb[:-2]), group=b.group, frame=b.frame, constant=b.constant)
    merged = broadcast(call, [ba, bb], batch_shape, what)
    group = a.group if not a.invariant else b.group
    frame = a.frame if not a.invariant else b.frame
    layout = (*merged.layout, la[-2], lb[-1])  # type: ignore[misc]
    if len(a.layout) == 1:
        layout = (*layout[:-2], layout[-1])
    if len(b.layout) == 1:
        layout = layout[:-1]
    return TensorSym(layout=layout, group=group, frame=frame, constant=a.constant and b.constant)


@function_rule(torch.matmul, torch.bmm, operator.matmul, torch.mm)
@method_rule("matmul", "bmm", "mm", "__matmul__")
def _matmul(call: Call) -> Sym:
    syms = call.tensor_syms()
    if len(syms) != 2:
        raise Unverifiable(f"{call.label}: expected two tensor operands")
    return _matmul_syms(call, syms[0], syms[1], tuple(_out_tensor(call).shape), call.label)


def _transpose_last(s: TensorSym) -> TensorSym:
    assert s.layout is not None
    layout = list(s.layout)
    if len(layout) >= 2:
        layout[-1], layout[-2] = layout[-2], layout[-1]
    return TensorSym(layout=tuple(layout), group=s.group, frame=s.frame, constant=s.constant)


@function_rule(F.linear)
def _linear_function(call: Call) -> Sym:
    x = _first(call)
    _, weight = call.arg(1, "weight")
    _, bias = call.arg(2, "bias")
    if not isinstance(weight, TensorSym) or weight.layout is None:
        raise Unverifiable("F.linear: the weight is not a traced tensor")
    out = _out_tensor(call)
    y = _matmul_syms(call, x, _transpose_last(weight), tuple(out.shape), "F.linear")
    if isinstance(bias, TensorSym):
        y = broadcast(call, [y, bias], tuple(out.shape), "F.linear adds")
    return y


def _channel_last(call: Call, x: TensorSym, out_features: int, what: str) -> TensorSym:
    last = x.layout[-1]  # type: ignore[index]
    kinds = _moving_kinds(last, x.group)
    if kinds:
        if set(kinds) == {"K"}:
            raise Breaks(f"{what} is a channel-mixing linear over the point-group axis ({describe_layout((last,))}): its weights do not commute with the group's permutation")
        raise Breaks(
            f"{what} mixes positions of the {_axis_words(kinds)} ({describe_layout((last,))}) with fixed weights: "
            "the spatial grid was flattened into channels"
        )
    return _like(x, (*tuple(x.layout[:-1]), channel_dim(out_features)))  # type: ignore[index]


@module_rule(nn.Linear, nn.Bilinear)
def _linear(call: Call) -> Sym:
    x = _first(call)
    module = call.module
    if isinstance(module, nn.Bilinear):
        syms = call.tensor_syms()
        for s in syms:
            _channel_last(call, s, 1, "Bilinear")
        y = broadcast(call, [TensorSym(layout=s.layout[:-1], group=s.group, frame=s.frame) for s in syms], tuple(_out_tensor(call).shape[:-1]), "Bilinear combines")  # type: ignore[index]
        return _like(y, (*tuple(y.layout), channel_dim(module.out_features)))  # type: ignore[arg-type]
    assert isinstance(module, nn.Linear)
    return _channel_last(call, x, module.out_features, "Linear")


@module_rule(nn.Embedding)
def _embedding(call: Call) -> Sym:
    x = _first(call)
    return _like(x, (*tuple(x.layout), channel_dim(call.module.embedding_dim)))  # type: ignore[union-attr, arg-type]


@function_rule(F.embedding)
def _embedding_function(call: Call) -> Sym:
    x = _first(call)
    syms = call.tensor_syms()
    if len(syms) > 1 and not syms[1].invariant:
        raise Unverifiable("F.embedding: the table moves with the group")
    return _like(x, (*tuple(x.layout), channel_dim(_out_tensor(call).shape[-1])))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- convolutions and pooling


def _translation_stride(group: Group | None) -> int | None:
    """The pixel stride of the translations in ``group`` (``None``: it has no translations)."""
    if isinstance(group, TorusTranslations):
        return group.stride
    if isinstance(group, GridTranslations | RotoTranslationGroup):
        return 1
    return None


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def grid_geometry(
    what: str,
    group: Group | None,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: Any,
    dilation: tuple[int, int],
    padding_mode: str,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    symmetric_kernel: bool = False,
) -> Group | None:
    """The group acting on the output grid of a sliding-window operation, or a break.

    Circular padding with stride 1 commutes with translations; zero (or reflect) padding
    does not; a stride ``s`` only commutes with translations by multiples of ``s``;
    a ``k × k`` kernel with generic weights does not commute with rotations.
    """
    if group is None:
        raise Unverifiable(f"{what}: no acting group")
    try:
        pg = point_group_of(group)
    except GroupError as err:
        raise Unverifiable(f"{what}: {err}") from err
    pointwise = kernel == (1, 1) and stride == (1, 1)
    if pointwise and out_hw == in_hw:
        return group
    if pg is not None and pg.order() > 1:
        rotation = any(pg.rotation(h) % pg.n for h in pg.elements()) if hasattr(pg, "n") else True
        if not symmetric_kernel and kernel != (1, 1):
            raise Breaks(
                f"{what}: a {kernel[0]}×{kernel[1]} kernel with generic weights is not "
                + ("rotation" if rotation else "reflection") + "-equivariant"
            )
        if stride != (1, 1) and not (kernel == stride and in_hw[0] % stride[0] == 0 and padding in (0, (0, 0))):
            raise Breaks(f"{what}: stride {stride[0]} samples a grid that rotations about the centre do not preserve")
        if stride != (1, 1) and kernel == (1, 1):
            raise Breaks(f"{what}: a strided 1×1 sampling picks a corner of each cell, which rotations move")
        if stride == (1, 1) and out_hw != in_hw:
            raise Breaks(f"{what}: changes the grid size from {in_hw[0]}x{in_hw[1]} to {out_hw[0]}x{out_hw[1]}, which breaks rotations about the centre")
    t = _translation_stride(group)
    if t is None:
        return group
    if stride == (1, 1):
        if out_hw != in_hw:
            raise Breaks(
                f"{what}: without padding a {kernel[0]}×{kernel[1]} window shrinks the grid from "
                f"{in_hw[0]}x{in_hw[1]} to {out_hw[0]}x{out_hw[1]}: not a circular convolution"
            )
        if padding_mode != "circular" and kernel != (1, 1):
            raise Breaks(f"{what}: {padding_mode} padding breaks circular-shift equivariance (use padding_mode='circular')")
        return group
    s = stride[0]
    if stride[0] != stride[1]:
        raise Breaks(f"{what}: unequal strides {stride} are not supported by a square translation group")
    if t % s:
        raise Breaks(
            f"{what}: stride {s} samples a fixed coarse grid, which translations by {t} pixel(s) do not move "
            "(anchor the input first, e.g. with PolyphaseAnchor)"
        )
    if out_hw != (in_hw[0] // s, in_hw[1] // s) or in_hw[0] % s or in_hw[1] % s:
        raise Breaks(f"{what}: a {in_hw[0]}x{in_hw[1]} grid does not tile into cells of {s}")
    pad = _pair(padding) if not isinstance(padding, str) else (0, 0)
    reach = (dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1)
    if padding_mode != "circular" and not (pad == (0, 0) and reach[0] <= s and reach[1] <= s):
        raise Breaks(f"{what}: {padding_mode} padding with a {kernel[0]}×{kernel[1]} window that overlaps cells breaks circular-shift equivariance")
    if isinstance(group, TorusTranslations):
        return TorusTranslations(group.height, group.width, stride=t // s)
    raise Breaks(f"{what}: stride {s} is not supported for {group.name}")


def _spatial_io(call: Call, x: TensorSym, what: str) -> tuple[tuple[int, int], tuple[int, int]]:
    out = _out_tensor(call)
    layout = x.layout
    assert layout is not None
    if len(layout) != 4 or out.dim() != 4:
        raise Unverifiable(f"{what}: expected a 4-d image batch, got {describe_layout(layout)}")
    for d, kind in ((2, "Y"), (3, "X")):
        kinds = [a.kind for a in layout[d]]
        if kinds not in ([kind], []) and any(moves(a, x.group) for a in layout[d]):
            raise Unverifiable(f"{what}: expected axis {d} to be the {_NAMES[kind]} axis, got {describe_layout(layout)}")
    in_hw = (math.prod(a.size for a in layout[2]), math.prod(a.size for a in layout[3]))
    return in_hw, (int(out.shape[2]), int(out.shape[3]))


def _grid_output(x: TensorSym, channels: Dim, out_hw: tuple[int, int], group: Group | None) -> TensorSym:
    assert x.layout is not None
    ky = "Y" if any(a.kind == "Y" for a in x.layout[2]) else "C"
    kx = "X" if any(a.kind == "X" for a in x.layout[3]) else "C"
    layout = (x.layout[0], channels, channel_dim(out_hw[0], ky), channel_dim(out_hw[1], kx))
    if out_hw[0] == 1 and ky == "Y":
        layout = (x.layout[0], channels, (Atom("Y", 1),), (Atom("X", 1),))
    return TensorSym(layout=layout, group=group, frame=x.frame, constant=x.constant)


def _check_channels(x: TensorSym, what: str, per_channel: bool = True) -> None:
    chans = x.layout[1]  # type: ignore[index]
    kinds = _moving_kinds(chans, x.group)
    if kinds:
        if set(kinds) == {"K"}:
            raise Breaks(f"{what}: its per-channel weights differ across the point-group axis ({describe_layout((chans,))})")
        raise Breaks(f"{what}: its channel axis holds the {_axis_words(kinds)} ({describe_layout((chans,))})")


@module_rule(nn.Conv2d)
def _conv2d(call: Call) -> Sym:
    x = _first(call)
    m: nn.Conv2d = call.module  # type: ignore[assignment]
    in_hw, out_hw = _spatial_io(call, x, "Conv2d")
    _check_channels(x, "Conv2d")
    padding = m.padding if m.padding != "same" else (m.kernel_size[0] // 2, m.kernel_size[1] // 2)
    group = grid_geometry(
        "Conv2d", x.group, m.kernel_size, m.stride, padding, m.dilation, m.padding_mode, in_hw, out_hw  # type: ignore[arg-type]
    )
    return _grid_output(x, channel_dim(m.out_channels), out_hw, group)


@function_rule(F.conv2d)
def _conv2d_function(call: Call) -> Sym:
    x = _first(call)
    weight, wsym = call.arg(1, "weight")
    if not isinstance(wsym, TensorSym) or not wsym.invariant:
        raise Unverifiable("F.conv2d: the weight moves with the group")
    in_hw, out_hw = _spatial_io(call, x, "F.conv2d")
    _check_channels(x, "F.conv2d")
    stride = _pair(call.arg(3, "stride", 1)[0])
    padding = call.arg(4, "padding", 0)[0]
    dilation = _pair(call.arg(5, "dilation", 1)[0])
    kernel = (int(weight.shape[2]), int(weight.shape[3]))
    group = grid_geometry("F.conv2d", x.group, kernel, stride, padding, dilation, "zeros", in_hw, out_hw)
    return _grid_output(x, channel_dim(weight.shape[0]), out_hw, group)


@function_rule(F.pad)
def _pad_function(call: Call) -> Sym:
    x = _first(call)
    mode = call.arg(2, "mode", "constant")[0]
    pads = call.arg(1, "pad")[0]
    if not any(pads):
        return _like(x, x.layout)
    n = len(pads) // 2
    touched = x.layout[-n:]  # type: ignore[index]
    kinds = [k for d in touched for k in _moving_kinds(d, x.group)]
    if kinds:
        if mode == "circular":
            raise Unverifiable("F.pad: circular padding followed by a valid convolution is not tracked; use padding_mode='circular'")
        raise Breaks(f"F.pad: {mode} padding of the {_axis_words(kinds)} breaks circular-shift equivariance")
    return _like(x, tuple(x.layout[:-n]) + tuple(channel_dim(s) for s in _out_tensor(call).shape[-n:]))  # type: ignore[index]


@module_rule(nn.MaxPool2d, nn.AvgPool2d, nn.LPPool2d)
def _pool2d(call: Call) -> Sym:
    x = _first(call)
    m = call.module
    in_hw, out_hw = _spatial_io(call, x, type(m).__name__)
    group = grid_geometry(
        type(m).__name__, x.group, _pair(m.kernel_size), _pair(m.stride or m.kernel_size),  # type: ignore[union-attr]
        getattr(m, "padding", 0), _pair(getattr(m, "dilation", 1)), "zeros", in_hw, out_hw, symmetric_kernel=True,
    )
    return _grid_output(x, x.layout[1], out_hw, group)  # type: ignore[index]


@function_rule(F.max_pool2d, F.avg_pool2d)
def _pool2d_function(call: Call) -> Sym:
    x = _first(call)
    kernel = _pair(call.arg(1, "kernel_size")[0])
    stride_v = call.arg(2, "stride", None)[0]
    stride = _pair(stride_v) if stride_v not in (None, [], ()) else kernel
    padding = call.arg(3, "padding", 0)[0]
    in_hw, out_hw = _spatial_io(call, x, call.label)
    group = grid_geometry(call.label, x.group, kernel, stride, padding, (1, 1), "zeros", in_hw, out_hw, symmetric_kernel=True)
    return _grid_output(x, x.layout[1], out_hw, group)  # type: ignore[index]


@module_rule(nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
@function_rule(F.adaptive_avg_pool2d, F.adaptive_max_pool2d)
def _adaptive_pool(call: Call) -> Sym:
    x = _first(call)
    in_hw, out_hw = _spatial_io(call, x, call.label)
    if out_hw == in_hw:
        return _like(x, x.layout)
    if out_hw != (1, 1):
        raise Breaks(f"{call.label}: pools to a fixed {out_hw[0]}x{out_hw[1]} grid whose cells do not move with the input")
    return _like(x, (x.layout[0], x.layout[1], (), ()))  # type: ignore[index]


# ----------------------------------------------------------------------------- normalisation


def _channel_weights(call: Call, x: TensorSym, axis: int, what: str) -> TensorSym:
    dim = x.layout[axis]  # type: ignore[index]
    kinds = _moving_kinds(dim, x.group)
    if kinds:
        if set(kinds) == {"K"}:
            raise Breaks(f"{what}: its per-channel weights differ across the point-group axis ({describe_layout((dim,))})")
        raise Breaks(f"{what}: its per-channel weights differ across positions of the {_axis_words(kinds)}")
    return _like(x, x.layout)


@module_rule(nn.LayerNorm, nn.RMSNorm)
def _layer_norm(call: Call) -> Sym:
    x = _first(call)
    m = call.module
    n = len(m.normalized_shape)  # type: ignore[union-attr, arg-type]
    dims = x.layout[-n:]  # type: ignore[index]
    kinds = [k for d in dims for k in _moving_kinds(d, x.group)]
    affine = getattr(m, "elementwise_affine", True) and getattr(m, "weight", None) is not None
    if kinds and affine:
        raise Breaks(
            f"{type(m).__name__} normalizes over the {_axis_words(kinds)} with elementwise affine weights that differ "
            "from position to position"
        )
    return _like(x, x.layout)


@function_rule(F.layer_norm)
def _layer_norm_function(call: Call) -> Sym:
    x = _first(call)
    shape = call.arg(1, "normalized_shape")[0]
    n = len(shape)
    dims = x.layout[-n:]  # type: ignore[index]
    kinds = [k for d in dims for k in _moving_kinds(d, x.group)]
    weight = call.arg(2, "weight")[0]
    if kinds and weight is not None:
        raise Breaks(f"F.layer_norm normalizes over the {_axis_words(kinds)} with position-dependent affine weights")
    return _like(x, x.layout)


@module_rule(nn.GroupNorm)
def _group_norm(call: Call) -> Sym:
    x = _first(call)
    m: nn.GroupNorm = call.module  # type: ignore[assignment]
    chans = x.layout[1]  # type: ignore[index]
    kinds = _moving_kinds(chans, x.group)
    if kinds:
        raise Breaks(f"GroupNorm: its channel groups and per-channel weights split the {_axis_words(kinds)} ({describe_layout((chans,))})")
    del m
    return _like(x, x.layout)


@module_rule(nn.BatchNorm1d, nn.BatchNorm2d, nn.InstanceNorm2d, nn.InstanceNorm1d)
def _batch_norm(call: Call) -> Sym:
    x = _first(call)
    return _channel_weights(call, x, 1, type(call.module).__name__)


# ----------------------------------------------------------------------------- reductions


def _reduce_dims(call: Call, dims: Any, keepdim: bool) -> Sym:
    x = _first(call)
    assert x.layout is not None
    ndim = len(x.layout)
    if dims is None or dims == ():
        return TensorSym(layout=invariant_layout(tuple(_out_tensor(call).shape)), group=x.group, constant=x.constant)
    if isinstance(dims, int):
        dims = (dims,)
    reduced = {d % ndim for d in dims}
    layout = [() if d in reduced else dim for d, dim in enumerate(x.layout)]
    if not keepdim:
        layout = [dim for d, dim in enumerate(layout) if d not in reduced]
    remaining = [a.kind for dim in layout for a in dim]
    removed = [a.kind for d in reduced for a in x.layout[d] if moves(a, x.group)]
    pg = None
    try:
        pg = point_group_of(x.group) if x.group is not None else None
    except GroupError:
        pg = None
    if pg is not None and pg.order() > 1 and removed:
        if ("Y" in remaining) != ("X" in remaining):
            raise Breaks(f"{call.label} reduces over only one of the two spatial axes, which rotations and reflections exchange")
    return _like(x, tuple(layout))


@method_rule("mean", "sum", "amax", "amin", "max", "min", "logsumexp", "prod", "std", "var", "norm", "argmax", "argmin", "nansum", "nanmean", "all", "any")
@function_rule(torch.mean, torch.sum, torch.amax, torch.amin, torch.max, torch.min, torch.logsumexp, torch.prod, torch.std, torch.var, torch.norm, torch.argmax, torch.argmin, torch.nansum)
def _reduction(call: Call) -> Sym:
    x = _first(call)
    dims = call.arg(1, "dim", None)[0]
    keepdim = bool(call.arg(2, "keepdim", False)[0])
    if isinstance(call.args[1:2], tuple) and call.args[1:2] and isinstance(call.args[1], torch.Tensor):
        return _elementwise(call)
    name = call.target if isinstance(call.target, str) else getattr(call.target, "__name__", "")
    if name == "norm":
        dims = call.arg(2, "dim", None)[0]
        keepdim = bool(call.arg(3, "keepdim", False)[0])
    values = _reduce_dims(call, dims, keepdim)
    if name in ("argmax", "argmin"):
        return _positions(call, x, dims, values)
    if isinstance(call.out, tuple):  # (values, indices)
        return TupleSym(items=(values, _positions(call, x, dims, values)), names=("values", "indices"))
    return values


def _positions(call: Call, x: TensorSym, dims: Any, values: Sym) -> Sym:
    assert x.layout is not None
    if dims is None:
        dims = tuple(range(len(x.layout)))
    if isinstance(dims, int):
        dims = (dims,)
    kinds = [k for d in dims for k in _moving_kinds(x.layout[d], x.group)]
    if kinds:
        return TensorSym(status="unknown", layout=None, group=x.group, frame=x.frame)
    return values


@module_rule(nn.MultiheadAttention)
def _mha(call: Call) -> Sym:
    m: nn.MultiheadAttention = call.module  # type: ignore[assignment]
    q = call.arg(0, "query")[1]
    k = call.arg(1, "key")[1]
    v = call.arg(2, "value")[1]
    if not all(isinstance(s, TensorSym) and s.layout is not None for s in (q, k, v)):
        raise Unverifiable("MultiheadAttention: query, key or value is not traced")
    token = 1 if m.batch_first else 0
    batch = 0 if m.batch_first else 1
    for s, name in ((q, "query"), (k, "key"), (v, "value")):
        kinds = _moving_kinds(s.layout[-1], s.group)
        if kinds:
            raise Breaks(f"MultiheadAttention: its {name} projection mixes the {_axis_words(kinds)} held in the channel axis")
    _same_frame(call, [q, k, v], "MultiheadAttention attends across")
    if tuple(k.layout[token]) != tuple(v.layout[token]):
        raise Breaks("MultiheadAttention: keys and values are laid out over different token axes")
    for mask_name, index in (("attn_mask", 5), ("key_padding_mask", 3)):
        mask = call.arg(index, mask_name)[1]
        if isinstance(mask, TensorSym) and not mask.invariant:
            raise Unverifiable(f"MultiheadAttention: a {mask_name} that moves with the input is not tracked")
        if isinstance(mask, TensorSym) and mask.invariant and mask.layout is not None:
            if any(math.prod(a.size for a in d) > 1 for d in mask.layout) and (
                _moving_kinds(q.layout[token], q.group) or _moving_kinds(k.layout[token], k.group)
            ):
                raise Breaks(f"MultiheadAttention: a fixed {mask_name} over token positions (e.g. a causal or window mask) does not move with the tokens")
    if bool(call.kwargs.get("is_causal", False)):
        raise Breaks("MultiheadAttention: a causal mask depends on absolute token positions")
    out = _like(q, (*tuple(q.layout[:-1]), channel_dim(m.embed_dim)))
    weights_layout = (q.layout[batch], q.layout[token], k.layout[token])
    weights = TensorSym(layout=weights_layout, group=q.group, frame=q.frame)
    return TupleSym(items=(out, weights))


@module_rule(nn.TransformerEncoderLayer, nn.TransformerEncoder)
def _transformer_encoder(call: Call) -> Sym:
    """Self-attention and a token-wise MLP with LayerNorm over channels: equivariant to any
    permutation of the tokens, unless a fixed mask (causal, padding) singles out positions."""
    m = call.module
    x = _first(call)
    layer = m.layers[0] if isinstance(m, nn.TransformerEncoder) else m
    token = 1 if getattr(layer.self_attn, "batch_first", False) else 0  # type: ignore[union-attr]
    assert x.layout is not None
    kinds = _moving_kinds(x.layout[-1], x.group)
    if kinds:
        raise Breaks(f"{call.label}: its projections mix the {_axis_words(kinds)} held in the channel axis")
    for other in x.layout[:token] + x.layout[token + 1 : -1]:
        if _moving_kinds(other, x.group):
            raise Unverifiable(f"{call.label}: expected the moved axes on the token axis, got {describe_layout(x.layout)}")
    masks = list(zip(call.args[1:], call.sargs[1:])) + [(call.kwargs[k], call.skwargs[k]) for k in call.kwargs]
    for value, sym in masks:
        if isinstance(sym, TensorSym) and not sym.invariant:
            raise Unverifiable(f"{call.label}: a mask that moves with the input is not tracked")
        if isinstance(sym, TensorSym) or value is True:
            raise Breaks(f"{call.label}: a fixed attention mask over token positions does not move with the tokens")
    return _like(x, x.layout)


@function_rule(F.scaled_dot_product_attention)
def _sdpa(call: Call) -> Sym:
    q, k, v = (call.arg(i, n)[1] for i, n in enumerate(("query", "key", "value")))
    if not all(isinstance(s, TensorSym) and s.layout is not None for s in (q, k, v)):
        raise Unverifiable("scaled_dot_product_attention: query, key or value is not traced")
    if call.arg(4, "dropout_p", 0.0)[0]:
        raise Breaks("scaled_dot_product_attention with dropout_p > 0 draws a random mask, which does not move with the input")
    out = _out_tensor(call)
    qv = call.arg(0, "query")[0]
    kv = call.arg(1, "key")[0]
    score_shape = (*tuple(torch.broadcast_shapes(qv.shape[:-2], kv.shape[:-2])), qv.shape[-2], kv.shape[-2])
    scores = _matmul_syms(call, q, _transpose_last(k), score_shape, "scaled_dot_product_attention")
    mask = call.arg(3, "attn_mask")[1]
    if isinstance(mask, TensorSym):
        scores = broadcast(call, [scores, mask], score_shape, "scaled_dot_product_attention adds the mask")
    if bool(call.arg(5, "is_causal", False)[0]) and is_moving((scores.layout[-1],), scores.group):  # type: ignore[index]
        raise Breaks("scaled_dot_product_attention: a causal mask depends on absolute token positions")
    return _matmul_syms(call, scores, v, tuple(out.shape), "scaled_dot_product_attention")


# ----------------------------------------------------------------------------- constants


_CONSTANT_FUNCTIONS = [
    torch.arange, torch.zeros, torch.ones, torch.full, torch.eye, torch.linspace, torch.tensor,
    torch.as_tensor, torch.empty, torch.meshgrid, torch.cartesian_prod, torch.tril, torch.triu,
]


@function_rule(*_CONSTANT_FUNCTIONS)
def _constant(call: Call) -> Sym:
    def convert(v: Any) -> Sym:
        if isinstance(v, torch.Tensor):
            return TensorSym(layout=invariant_layout(tuple(v.shape)), constant=True)
        if isinstance(v, tuple | list):
            return TupleSym(items=tuple(convert(i) for i in v))
        return StaticSym(value=v)

    syms = call.tensor_syms()
    if syms and not all(s.invariant for s in syms):
        x = syms[0]
        return _like(x, x.layout)
    return convert(call.out)


@function_rule(torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like)
@method_rule("new_zeros", "new_ones", "new_full", "zero_", "fill_")
def _uniform_like(call: Call) -> Sym:
    x = _first(call)
    out = _out_tensor(call)
    if tuple(out.shape) == tuple(math.prod(a.size for a in d) for d in x.layout):  # type: ignore[union-attr]
        return _like(x, x.layout, constant=True)
    return TensorSym(layout=invariant_layout(tuple(out.shape)), constant=True)


@function_rule(torch.randn, torch.rand, torch.randint, torch.randn_like, torch.rand_like, torch.randint_like, torch.randperm, torch.bernoulli, torch.normal, torch.multinomial, torch.poisson)
@method_rule("normal_", "uniform_", "random_", "bernoulli", "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_", "multinomial")
def _random(call: Call) -> Sym:
    raise Breaks(f"{call.label} draws random numbers, which do not move with the input")


def check_not_random(call: Call, op: str) -> None:
    """Raise :class:`Breaks` for a call that draws random numbers (even on invariant inputs)."""
    from ._rules import rule_for

    if op in ("call_function", "call_method") and rule_for(op, call.target) is _random:
        _random(call)
    if op == "call_function" and call.target in _DROPOUT_FUNCTIONS:
        p = call.arg(1, "p", 0.5)[0]
        if call.arg(2, "training", True)[0] and p:
            raise Breaks(f"{call.label} with training=True draws a random mask, which does not move with the input")


# ----------------------------------------------------------------------------- registered contracts


def _probe_size(group: Group) -> tuple[int, int]:
    if isinstance(group, TorusTranslations):
        return group.height * group.stride, group.width * group.stride
    if isinstance(group, RotoTranslationGroup) and group.size is not None:
        return group.size, group.size
    return 8, 8


def _contract_from_rule(module: nn.Module, group: Group, input_type: Any, channels: int) -> Contract:
    """State a plain PyTorch module's contract by running its layout rule on a probe input."""
    from ._rules import rule_for

    field = input_type if isinstance(input_type, FieldType) else GridField()
    h, w = _probe_size(group)
    if isinstance(field, TokenField):
        shape: tuple[int, ...] = (2, field.num_tokens, channels)
    elif isinstance(field, InvariantField):
        shape = (2, channels)
    else:
        shape = (2, channels, h, w)
    layout = layout_from_field(field, shape)
    if layout is None:
        return Contract.unknown(f"{type(module).__name__}: no rule for input {field.describe()}", field)
    x = torch.zeros(shape)
    try:
        with torch.no_grad():
            out = module.eval()(x) if not isinstance(module, nn.MultiheadAttention) else module(x, x, x)
    except Exception as err:
        return Contract.unknown(f"{type(module).__name__}: cannot run on {field.describe()} ({err})", field)
    sym = TensorSym(layout=layout, group=group)
    call = Call(type(module).__name__, module, module, (x, x, x) if isinstance(module, nn.MultiheadAttention) else (x,), {}, (sym, sym, sym) if isinstance(module, nn.MultiheadAttention) else (sym,), {}, out)
    rule = rule_for("call_module", module)
    assert rule is not None
    try:
        result = rule(call)
    except Breaks as reason:
        return Contract.breaks(str(reason), field)
    except Unverifiable as reason:
        return Contract.unknown(str(reason), field)
    if isinstance(result, TupleSym):
        result = result.items[0]
    assert isinstance(result, TensorSym)
    out_group = result.group
    out_field = field_from_layout(result.layout, out_group)
    if out_field is None:
        return Contract.unknown(f"{type(module).__name__}: output layout not expressible", field)
    if result.invariant:
        return Contract.invariant(field, out_field)
    return Contract.equivariant(field, out_field, out_group if out_group != group else None)


def _channels_of(module: nn.Module) -> int:
    for name in ("in_features", "in_channels", "num_channels", "num_features", "embed_dim", "in1_features"):
        if hasattr(module, name):
            return int(getattr(module, name))
    if isinstance(module, nn.LayerNorm):
        return int(module.normalized_shape[-1])
    return 4


def _registered(module: nn.Module, group: Group, input_type: Any) -> Contract:
    return _contract_from_rule(module, group, input_type, _channels_of(module))


for _cls in (
    nn.Linear, nn.Conv2d, nn.LayerNorm, nn.GroupNorm, nn.BatchNorm2d, nn.MaxPool2d, nn.AvgPool2d,
    nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.MultiheadAttention, nn.Flatten, nn.TransformerEncoderLayer,
    *_POINTWISE_MODULES,
):
    register_contract(_cls)(_registered)


def is_point_group(group: Group | None) -> bool:
    return isinstance(group, PointGroup)
