"""Generated soundness test: random small networks built from the classes of false
certificate in ``checker_zoo.py``; whenever ``certify`` certifies one, the independent
float64 oracle must agree (error ≤ 1e-6).

A network is a chain of at most four ops on ``(B, 3, 8, 8)`` images, each drawn from:
per-axis ops under every group with the dim in every argument form (positional, ``dim=``,
``axis=``, negative, tuples, lists, modules), reductions subtracted or divided back,
layer norms over one / two / three axes with constant or free affine parameters,
pooling with square / non-square / dilated windows and circular or implicit padding,
convolutions (circular, zero-padded, 1×3, D4-symmetric, C4 orbit sums), in-place ops
(on views, by setitem, with ``out=``, on the op's input), parameters added or
multiplied as position tables of every shape, data-dependent and masking functions,
attention over pixels (full, axial, paired), rolls and flips, subclasses of torch
modules overriding ``forward``; and the network returns one output, or several
(tuple / list / dict / nested; an earlier stage or an invariant head among them).

The number of examples: ``GROUPATTN_SOUNDNESS_EXAMPLES`` (default 300); the ``slow``
test runs ``GROUPATTN_SOUNDNESS_EXAMPLES_LONG`` (default 5000). With
``GROUPATTN_SOUNDNESS_COLLECT=1`` every false certificate is collected and all of them
are reported at the end (instead of stopping and shrinking at the first).
The counts (certified / broken / unverified, and the oracle's verdicts) are printed
(``pytest -s``).
"""

from __future__ import annotations

import collections
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from checker_zoo import GROUP_NAMES, Const, Fn, default_dtype, model_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from groupattn.check import certify, group_from_name

EXAMPLES = int(os.environ.get("GROUPATTN_SOUNDNESS_EXAMPLES", "300"))
EXAMPLES_LONG = int(os.environ.get("GROUPATTN_SOUNDNESS_EXAMPLES_LONG", "5000"))
COLLECT = os.environ.get("GROUPATTN_SOUNDNESS_COLLECT", "") not in ("", "0")
SHAPE = (2, 3, 8, 8)
TOLERANCE = 1e-6

# ============================================================================ op catalogue
#
# An op is described by a hashable spec ``(kind, *params)``; ``build_op`` turns it into a
# module. Parameters are drawn under the network's seed when it is built.

DIMS_SINGLE = [1, 2, 3, -1, -2, -3]
REDUCE_DIMS = [(-1,), (-2,), (3,), (2,), (1,), (-2, -1), (2, 3), (-1, -2), (1, 2, 3), (-3, -1)]
REDUCERS = ["mean", "amax", "amin", "sum", "logsumexp", "std", "var", "norm"]
REDUCE_FORMS = ["method-pos", "method-dim", "method-axis", "torch-pos", "torch-dim", "torch-axis"]


def _reduce_fn(
    reducer: str, dims: tuple[int, ...], container: str, form: str
) -> Callable[[torch.Tensor], torch.Tensor]:
    d: Any = dims[0] if container == "int" else (list(dims) if container == "list" else tuple(dims))
    scale = reducer in ("std", "var", "norm", "sum")

    def reduce_back(x: torch.Tensor) -> torch.Tensor:
        if form == "method-pos":
            r = getattr(x, reducer)(d, True)
        elif form == "method-dim":
            r = getattr(x, reducer)(dim=d, keepdim=True)
        elif form == "method-axis":
            r = getattr(x, reducer)(axis=d, keepdims=True)
        elif form == "torch-pos":
            r = getattr(torch, reducer)(x, d, True)
        elif form == "torch-dim":
            r = getattr(torch, reducer)(x, dim=d, keepdim=True)
        else:
            r = getattr(torch, reducer)(x, axis=d, keepdim=True)
        return x / (1.0 + r.abs()) if scale else x - r

    reduce_back.__name__ = f"{reducer}[{form},{d!r}]"
    return reduce_back


def _axis_fn(op: str, d: int, form: str) -> Callable[[torch.Tensor], torch.Tensor] | nn.Module:
    if op == "softmax":
        table: dict[str, Any] = {
            "F-pos": lambda x: F.softmax(x, d),
            "F-kw": lambda x: F.softmax(x, dim=d),
            "method-pos": lambda x: x.softmax(d),
            "method-kw": lambda x: x.softmax(dim=d),
            "torch-pos": lambda x: torch.softmax(x, d),
            "module": lambda: nn.Softmax(dim=d),
        }
    elif op == "log_softmax":
        table = {
            "F-pos": lambda x: F.log_softmax(x, d),
            "F-kw": lambda x: F.log_softmax(x, dim=d),
            "method-pos": lambda x: x.log_softmax(d),
            "method-kw": lambda x: x.log_softmax(dim=d),
            "torch-pos": lambda x: torch.log_softmax(x, d),
            "module": lambda: nn.LogSoftmax(dim=d),
        }
    elif op == "normalize":
        table = {
            "F-pos": lambda x: F.normalize(x, 2.0, d),
            "F-kw": lambda x: F.normalize(x, dim=d),
            "method-pos": lambda x: x / (1e-6 + x.norm(2, d, True)),
            "method-kw": lambda x: x / (1e-6 + x.norm(dim=d, keepdim=True)),
            "torch-pos": lambda x: x / (1e-6 + torch.linalg.vector_norm(x, 2, d, True)),
            "module": None,
        }
    elif op == "cumsum":
        table = {
            "F-pos": lambda x: torch.cumsum(x, d),
            "F-kw": lambda x: torch.cumsum(x, dim=d),
            "method-pos": lambda x: x.cumsum(d),
            "method-kw": lambda x: x.cumsum(dim=d),
            "torch-pos": lambda x: torch.cumsum(x, d) / 8,
            "module": None,
        }
    elif op == "cummax":
        table = {
            "F-pos": lambda x: torch.cummax(x, d)[0],
            "F-kw": lambda x: torch.cummax(x, dim=d).values,
            "method-pos": lambda x: x.cummax(d).values,
            "method-kw": lambda x: x.cummax(dim=d)[0],
            "torch-pos": lambda x: torch.cummax(x, d).values,
            "module": None,
        }
    elif op == "flip":
        dd: Any = (d,) if form.endswith("pos") else [d]
        table = {
            "F-pos": lambda x: torch.flip(x, dd),
            "F-kw": lambda x: torch.flip(x, dims=dd),
            "method-pos": lambda x: x.flip(dd),
            "method-kw": lambda x: x.flip(dims=dd),
            "torch-pos": lambda x: torch.flip(x, dd),
            "module": None,
        }
    else:
        raise ValueError(op)
    made = table[form] or table["F-kw"]
    if form == "module" and table[form] is not None:
        return made()
    made.__name__ = f"{op}[{form},{d}]"
    return made


def _layer_norm(shape: tuple[int, ...], affine: str, form: str) -> nn.Module:
    if form == "module":
        mod = nn.LayerNorm(list(shape), elementwise_affine=affine != "none")
        if affine != "none":
            with torch.no_grad():
                if affine == "const":
                    mod.weight.fill_(float(torch.randn(())))
                    mod.bias.fill_(float(torch.randn(())))
                else:
                    mod.weight.normal_()
                    mod.bias.normal_()
        return mod
    parts: dict[str, Any] = {}
    if affine == "free":
        parts = {"weight": torch.randn(shape), "bias": torch.randn(shape)}
    elif affine == "const":
        parts = {"weight": torch.randn(1), "bias": torch.randn(1)}

    def layer_norm(
        x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if affine == "const":
            weight, bias = weight.expand(shape), bias.expand(shape)  # type: ignore[union-attr]
        if form == "F-pos":
            return F.layer_norm(x, shape, weight, bias)
        return F.layer_norm(x, normalized_shape=list(shape), weight=weight, bias=bias)

    layer_norm.__name__ = f"layer_norm[{form},{shape},{affine}]"
    return Fn(layer_norm, **parts)


def _pool(
    kind: str, kernel: tuple[int, int], dilation: tuple[int, int], padding: str, form: str
) -> nn.Module:
    eff = ((kernel[0] - 1) * dilation[0] + 1, (kernel[1] - 1) * dilation[1] + 1)
    ph, pw = eff[0] // 2, eff[1] // 2
    if padding == "implicit" and (ph > kernel[0] // 2 or pw > kernel[1] // 2):
        padding = "circular"  # torch refuses padding wider than half the window
    if padding == "implicit":
        if kind == "max":
            return (
                nn.MaxPool2d(kernel, 1, (ph, pw), dilation)
                if form == "module"
                else Fn(lambda x: F.max_pool2d(x, kernel, 1, (ph, pw), dilation))
            )
        return (
            nn.AvgPool2d(kernel, 1, (ph, pw))
            if form == "module"
            else Fn(lambda x: F.avg_pool2d(x, kernel, 1, (ph, pw)))
        )

    def pooled(x: torch.Tensor) -> torch.Tensor:
        p = F.pad(x, (pw, pw, ph, ph), mode="circular")
        if kind == "max":
            return F.max_pool2d(p, kernel, 1, 0, dilation)
        return (
            F.avg_pool2d(p, kernel, 1)
            if dilation == (1, 1)
            else F.max_pool2d(-p, kernel, 1, 0, dilation).neg()
        )

    pooled.__name__ = f"{kind}pool[{kernel},{dilation},circular]"
    return Fn(pooled)


class D4Conv(nn.Module):
    """A circular 3×3 conv whose kernel is averaged over D4 (p4m-equivariant)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 3, 3, 3) / 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ws = [torch.rot90(self.weight, k, (2, 3)) for k in range(4)]
        ws += [torch.flip(w, (3,)) for w in ws]
        return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), torch.stack(ws).mean(0))


class C4Orbit(nn.Module):
    """``Σ_k rot90(f(rot90(x, k)), −k)`` for a zero-padded conv ``f`` (C4-equivariant)."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(torch.rot90(self.f(torch.rot90(x, k, (2, 3))), -k, (2, 3)) for k in range(4)) / 4  # type: ignore[return-value]


def _conv(kind: str) -> nn.Module:
    if kind == "circ3":
        return nn.Conv2d(3, 3, 3, padding=1, padding_mode="circular")
    if kind == "zero3":
        return nn.Conv2d(3, 3, 3, padding=1)
    if kind == "pw":
        return nn.Conv2d(3, 3, 1)
    if kind == "circ1x3":
        return nn.Conv2d(3, 3, (1, 3), padding=(0, 1), padding_mode="circular")
    if kind == "circ3-dilated":
        return nn.Conv2d(3, 3, 3, padding=2, dilation=2, padding_mode="circular")
    if kind == "d4sym":
        return D4Conv()
    if kind == "c4orbit":
        return C4Orbit()
    raise ValueError(kind)


POINTWISE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "square": lambda x: x * x,
    "leaky-where": lambda x: torch.where(x > 0, x, 0.1 * x),
    "silu": lambda x: x * torch.sigmoid(x),
    "channel-softmax": lambda x: torch.softmax(x, 1),
}

PARAM_SHAPES = {
    "scalar": (1,),
    "channel": (3, 1, 1),
    "full": (1, 3, 8, 8),
    "grid": (8, 8),
    "row": (8, 1),
    "col": (8,),
    "lifted-row": (1, 1, 8, 1),
}


def _param(shape_name: str, how: str) -> nn.Module:
    shape = PARAM_SHAPES[shape_name]
    table = torch.randn(shape) if how != "mul" else 1 + 0.5 * torch.randn(shape)

    def with_table(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        if how == "add":
            return x + p
        if how == "mul":
            return x * p
        if how == "iadd":
            y = x * 1.0
            y += p
            return y
        if how == "add_":
            y = x.clone()
            y.add_(p)
            return y
        y = torch.empty_like(x)  # out=
        torch.add(x, p, out=y)
        return y

    with_table.__name__ = f"param[{shape_name},{how}]"
    return Fn(with_table, p=table)


def _inplace(variant: str, d: int) -> nn.Module:
    def f(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if variant == "clone-relu_":
            y = x.clone()
            y.relu_()
            return y
        if variant == "narrow-zero_":
            y = x.clone()
            y.narrow(d, 0, 1).zero_()
            return y
        if variant == "setitem":
            y = x.clone()
            index: tuple[Any, ...] = (slice(None),) * (d % 4) + (0,)
            y[index] = 0.0
            return y
        if variant == "diagonal-fill_":
            y = x.clone()
            y.diagonal(dim1=-2, dim2=-1).fill_(0.0)
            return y
        if variant == "tril_":
            y = x.clone()
            y.tril_()
            return y
        if variant == "input-mul_-mask":
            x.mul_(mask)
            return x
        if variant == "input-mul_-scalar":
            x.mul_(1.5)
            return x
        if variant == "masked-fill_-data":
            y = x.clone()
            y.masked_fill_(y < 0, 0.0)
            return y
        if variant == "masked-fill_-eye":
            y = x.clone()
            y.masked_fill_(torch.eye(8, dtype=torch.bool), 0.0)
            return y
        if variant == "index-fill_":
            y = x.clone()
            y.index_fill_(d, torch.tensor([0, 2]), 0.0)
            return y
        if variant == "transposed-view-add_":
            y = x.clone()
            y.transpose(-1, -2).add_(mask)
            return y
        if variant == "clamp_-sigmoid_":
            y = x.clone()
            y.clamp_(min=-0.5).sigmoid_()
            return y
        raise ValueError(variant)

    f.__name__ = f"inplace[{variant},{d}]"
    if variant == "input-mul_-mask":
        return Fn(f, mask=Const(torch.rand(8, 8) + 0.5))
    if variant == "transposed-view-add_":
        return Fn(f, mask=torch.randn(8, 8))
    return Fn(f)


def _data(variant: str, d: int) -> nn.Module:
    def f(x: torch.Tensor) -> torch.Tensor:
        if variant == "tril":
            return torch.tril(x)
        if variant == "triu":
            return torch.triu(x, 1)
        if variant == "where-index":
            return x - torch.where(x > 0)[d % 4].to(x.dtype).mean()
        if variant == "argsort":
            return x * x.argsort(d).to(x.dtype) / 8
        if variant == "topk-index":
            return x + x.topk(1, dim=d).indices.to(x.dtype)
        if variant == "threshold-mask":
            return x * (x > x.mean((2, 3), keepdim=True))
        if variant == "sort":
            return x.sort(dim=d).values
        if variant == "eye-mask":
            return x.masked_fill(torch.eye(8, dtype=torch.bool), 0.0)
        if variant == "arange-mask":
            return x * (torch.arange(8) < 4)
        if variant == "clamp-mean":
            return torch.clamp(x, min=x.mean())
        raise ValueError(variant)

    f.__name__ = f"data[{variant},{d}]"
    return Fn(f)


def _sdpa_cols(x: torch.Tensor) -> torch.Tensor:
    t = x.permute(0, 3, 2, 1)
    return F.scaled_dot_product_attention(t, t, t).permute(0, 3, 2, 1)


def _sdpa_rows(x: torch.Tensor) -> torch.Tensor:
    t = x.permute(0, 2, 3, 1)
    return F.scaled_dot_product_attention(t, t, t).permute(0, 3, 1, 2)


def _sdpa_full(x: torch.Tensor) -> torch.Tensor:
    t = x.flatten(2).transpose(1, 2)
    out = F.scaled_dot_product_attention(t, t, t)
    return out.transpose(1, 2).reshape(2, 3, 8, 8)


class PixelMHA(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(3, 1, batch_first=True)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2)
        mask = torch.ones(64, 64, dtype=torch.bool).triu(1) if self.causal else None
        out = self.attn(t, t, t, attn_mask=mask, need_weights=False)[0]
        return out.transpose(1, 2).reshape(2, 3, 8, 8)


def _attention(variant: str) -> nn.Module:
    if variant == "full":
        return Fn(_sdpa_full)
    if variant == "axial-h":
        return Fn(_sdpa_cols)
    if variant == "axial-w":
        return Fn(_sdpa_rows)
    if variant == "axial-both":
        return Fn(lambda x: _sdpa_cols(x) + _sdpa_rows(x))
    if variant == "mha":
        return PixelMHA(causal=False)
    if variant == "mha-causal":
        return PixelMHA(causal=True)
    raise ValueError(variant)


PAIRED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda x: x.softmax(-1) + x.transpose(-1, -2).softmax(-1).transpose(-1, -2),
    "softmax-one": lambda x: x.softmax(-1) + x.transpose(-1, -2).softmax(-1),
    "maxpool": lambda x: F.max_pool2d(x, (3, 1), 1, (1, 0)) + F.max_pool2d(x, (1, 3), 1, (0, 1)),
    "gram": lambda x: (
        x * ((x @ x.mT).mean((-2, -1), keepdim=True) + (x.mT @ x).mean((-2, -1), keepdim=True))
    ),
    "gram-one": lambda x: x * (x @ x.mT).mean((-2, -1), keepdim=True),
    "flip-both": lambda x: x + x.flip((-2, -1)),
    "transpose": lambda x: x.transpose(-1, -2),
    "transpose-sym": lambda x: x + x.transpose(-1, -2),
    "spatial-softmax": lambda x: x.flatten(2).softmax(-1).view_as(x),
}


def _roll(shifts: Any, dims: Any, form: str) -> nn.Module:
    def rolled(x: torch.Tensor) -> torch.Tensor:
        if form == "pos":
            return torch.roll(x, shifts, dims)
        if form == "kw":
            return torch.roll(x, shifts=shifts, dims=dims)
        return x.roll(shifts, dims)

    rolled.__name__ = f"roll[{shifts},{dims},{form}]"
    return Fn(rolled)


# ---------------------------------------------------------------- subclasses overriding forward


def _forward_replace(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return self.inner(x)


def _forward_after_parent(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return self.inner(type(self).__mro__[1].forward(self, x))


def _forward_conv_functional(self: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    y = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
    return self.inner(y)


def _forward_conv_own(self: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    return self.inner(self._conv_forward(x, self.weight, self.bias))


SUBCLASS_PARENTS: dict[str, Callable[[], nn.Module]] = {
    "Identity": nn.Identity,
    "ReLU": nn.ReLU,
    "GELU": nn.GELU,
    "Dropout": lambda: nn.Dropout(0.5),
    "Softmax1": lambda: nn.Softmax(dim=1),
    "LayerNorm8": lambda: nn.LayerNorm(8),
    "MaxPool3": lambda: nn.MaxPool2d(3, 1, 1),
    "Conv2dCircular": lambda: nn.Conv2d(3, 3, 3, padding=1, padding_mode="circular"),
    "Sequential": lambda: nn.Sequential(nn.Conv2d(3, 3, 1), nn.Tanh()),
}
SUBCLASS_MODES = ["replace", "after-parent", "conv-functional", "conv-own"]
_SUBCLASSES: dict[tuple[str, str], type] = {}


def _subclass(parent_name: str, mode: str, inner: nn.Module) -> nn.Module:
    parent = SUBCLASS_PARENTS[parent_name]()
    if mode.startswith("conv") and not isinstance(parent, nn.Conv2d):
        mode = "after-parent"
    key = (parent_name, mode)
    if key not in _SUBCLASSES:
        forward = {
            "replace": _forward_replace,
            "after-parent": _forward_after_parent,
            "conv-functional": _forward_conv_functional,
            "conv-own": _forward_conv_own,
        }[mode]
        name = f"My{type(parent).__name__}_{mode.replace('-', '_')}"
        _SUBCLASSES[key] = type(name, (type(parent),), {"forward": forward, "__module__": __name__})
    module = parent
    module.__class__ = _SUBCLASSES[key]
    module.inner = inner
    return module


# ---------------------------------------------------------------- strategies

OpSpec = tuple[Any, ...]


def _single_dim_container() -> st.SearchStrategy[tuple[tuple[int, ...], str]]:
    return st.sampled_from(REDUCE_DIMS).flatmap(
        lambda dims: st.tuples(
            st.just(dims),
            st.sampled_from(["int", "tuple", "list"] if len(dims) == 1 else ["tuple", "list"]),
        )
    )


def _valid_reduce(spec: OpSpec) -> bool:
    _, reducer, dims, container, form = spec
    try:
        out = _reduce_fn(reducer, dims, container, form)(torch.randn(SHAPE))
    except Exception:
        return False
    return tuple(out.shape) == SHAPE


BASE_OPS: dict[str, st.SearchStrategy[OpSpec]] = {
    "reduce": st.tuples(
        st.just("reduce"),
        st.sampled_from(REDUCERS),
        _single_dim_container(),
        st.sampled_from(REDUCE_FORMS),
    )
    .map(lambda t: (t[0], t[1], t[2][0], t[2][1], t[3]))
    .filter(_valid_reduce),
    "axis": st.tuples(
        st.just("axis"),
        st.sampled_from(["softmax", "log_softmax", "normalize", "cumsum", "cummax", "flip"]),
        st.sampled_from(DIMS_SINGLE),
        st.sampled_from(["F-pos", "F-kw", "method-pos", "method-kw", "torch-pos", "module"]),
    ),
    "layer-norm": st.tuples(
        st.just("layer-norm"),
        st.sampled_from([(8,), (8, 8), (3, 8, 8)]),
        st.sampled_from(["none", "const", "free"]),
        st.sampled_from(["F-pos", "F-kw", "module"]),
    ),
    "pool": st.tuples(
        st.just("pool"),
        st.sampled_from(["max", "avg"]),
        st.sampled_from([(3, 3), (3, 1), (1, 3), (1, 1)]),
        st.sampled_from([(1, 1), (2, 2), (2, 1), (1, 2)]),
        st.sampled_from(["implicit", "circular"]),
        st.sampled_from(["module", "F"]),
    ),
    "conv": st.tuples(
        st.just("conv"),
        st.sampled_from(["circ3", "zero3", "pw", "circ1x3", "circ3-dilated", "d4sym", "c4orbit"]),
    ),
    "pointwise": st.tuples(st.just("pointwise"), st.sampled_from(sorted(POINTWISE))),
    "param": st.tuples(
        st.just("param"),
        st.sampled_from(sorted(PARAM_SHAPES)),
        st.sampled_from(["add", "mul", "iadd", "add_", "out"]),
    ),
    "inplace": st.tuples(
        st.just("inplace"),
        st.sampled_from(
            [
                "clone-relu_",
                "narrow-zero_",
                "setitem",
                "diagonal-fill_",
                "tril_",
                "input-mul_-mask",
                "input-mul_-scalar",
                "masked-fill_-data",
                "masked-fill_-eye",
                "index-fill_",
                "transposed-view-add_",
                "clamp_-sigmoid_",
            ]
        ),
        st.sampled_from([1, 2, 3, -1, -2]),
    ),
    "data": st.tuples(
        st.just("data"),
        st.sampled_from(
            [
                "tril",
                "triu",
                "where-index",
                "argsort",
                "topk-index",
                "threshold-mask",
                "sort",
                "eye-mask",
                "arange-mask",
                "clamp-mean",
            ]
        ),
        st.sampled_from([1, 2, 3, -1, -2]),
    ),
    "attention": st.tuples(
        st.just("attention"),
        st.sampled_from(["full", "axial-h", "axial-w", "axial-both", "mha", "mha-causal"]),
    ),
    "paired": st.tuples(st.just("paired"), st.sampled_from(sorted(PAIRED))),
    "roll": st.sampled_from(
        [(1, -1), (3, 2), ((1, 2), (2, 3)), ((4, 4), (-2, -1)), ((2, 2), (2, 3)), ((4, 4), [2, 3])]
    ).flatmap(
        lambda sd: st.tuples(
            st.just("roll"),
            st.just(sd[0]),
            st.just(sd[1]),
            st.sampled_from(["pos", "kw", "method"]),
        )
    ),
}

SUBCLASS_OP = st.tuples(
    st.just("subclass"),
    st.sampled_from(sorted(SUBCLASS_PARENTS)),
    st.sampled_from(SUBCLASS_MODES),
    st.one_of(*BASE_OPS.values()),
)

OP = st.one_of(*BASE_OPS.values(), SUBCLASS_OP)


def build_op(spec: OpSpec) -> nn.Module:
    kind = spec[0]
    if kind == "reduce":
        return Fn(_reduce_fn(*spec[1:]))
    if kind == "axis":
        made = _axis_fn(*spec[1:])
        return made if isinstance(made, nn.Module) else Fn(made)
    if kind == "layer-norm":
        return _layer_norm(*spec[1:])
    if kind == "pool":
        return _pool(*spec[1:])
    if kind == "conv":
        return _conv(spec[1])
    if kind == "pointwise":
        f = POINTWISE[spec[1]]
        return Fn(lambda x: f(x))
    if kind == "param":
        return _param(*spec[1:])
    if kind == "inplace":
        return _inplace(*spec[1:])
    if kind == "data":
        return _data(*spec[1:])
    if kind == "attention":
        return _attention(spec[1])
    if kind == "paired":
        return Fn(PAIRED[spec[1]])
    if kind == "roll":
        return _roll(*spec[1:])
    if kind == "subclass":
        return _subclass(spec[1], spec[2], build_op(spec[3]))
    raise ValueError(spec)


# ---------------------------------------------------------------- whole networks


class Net(nn.Module):
    """A chain of ops; returns the last stage, an invariant head of it, or several leaves."""

    def __init__(
        self, ops: list[nn.Module], outputs: str, head: str, extra: int, swap: bool
    ) -> None:
        super().__init__()
        self.ops = nn.ModuleList(ops)
        self.outputs, self.head_kind, self.extra, self.swap = outputs, head, extra, swap
        if head == "axis-mean-linear":
            self.fc = nn.Linear(24, 2)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        if self.head_kind == "mean":
            return x.mean((2, 3))
        if self.head_kind == "amax-axis":
            return torch.amax(x, axis=(-2, -1))
        if self.head_kind == "axis-mean-linear":
            return self.fc(x.mean(axis=-1).flatten(1))
        return x

    def forward(self, x: torch.Tensor) -> Any:
        stages = []
        for op in self.ops:
            x = op(x)
            stages.append(x)
        final = self.head(stages[-1])
        if self.outputs == "single":
            return final
        other = stages[self.extra % len(stages)]
        a, b = (other, final) if self.swap else (final, other)
        if self.outputs == "tuple":
            return a, b
        if self.outputs == "list":
            return [a, b]
        if self.outputs == "dict":
            return {"first": a, "second": b}
        return a, (b, stages[0])  # nested


@dataclass(frozen=True)
class NetSpec:
    ops: tuple[OpSpec, ...]
    group: str
    outputs: str
    head: str
    extra: int
    swap: bool
    seed: int

    def build(self) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = Net(
                [build_op(s) for s in self.ops], self.outputs, self.head, self.extra, self.swap
            )
        return net.eval()

    def example_input(self) -> torch.Tensor:
        return torch.randn(*SHAPE, generator=torch.Generator().manual_seed(self.seed + 1))

    def describe(self) -> str:
        ops = " -> ".join(repr(s) for s in self.ops)
        return (
            f"[{self.group}] {ops}; outputs={self.outputs} head={self.head} extra={self.extra} "
            f"swap={self.swap} seed={self.seed}"
        )


NETS = st.builds(
    NetSpec,
    ops=st.lists(OP, min_size=1, max_size=4).map(tuple),
    group=st.sampled_from(["translations", "c4", "d4", "p4", "p4m", "c4", "p4"]),
    outputs=st.sampled_from(["single", "single", "single", "tuple", "list", "dict", "nested"]),
    head=st.sampled_from(["none", "none", "mean", "amax-axis", "axis-mean-linear"]),
    extra=st.integers(0, 3),
    swap=st.booleans(),
    seed=st.integers(0, 2**16),
)


# ---------------------------------------------------------------- the oracle (float64, plain torch ops)


def oracle(spec: NetSpec, output_action: str | None = None) -> float:
    """Worst relative error of ``f(g·x)`` against ``g·f(x)`` in float64 over the zoo
    oracle's elements (a seeded sample of 18 shifts for translations; all of C4 / D4;
    every rotation and reflection with four shifts for p4 / p4m) and every output leaf;
    denominators are floored at 1e-6·√n so that vanishing outputs do not turn rounding
    into errors. A network that fails to run counts as broken (``inf``). ``output_action``
    overrides the action on every output leaf (``"invariant"`` checks an invariance claim)."""
    with torch.random.fork_rng(devices=[]), default_dtype(torch.float64):
        model = spec.build().double().eval()
        x = spec.example_input().double()
        try:
            return model_error(model, x, spec.group, output_action, exhaustive=False, floor=1e-6)
        except Exception:
            return math.inf


# ---------------------------------------------------------------- the check and its counts


@dataclass
class Tally:
    examples: int = 0
    verdicts: collections.Counter = field(default_factory=collections.Counter)
    oracle_equivariant: int = 0
    certified_of_equivariant: int = 0
    raised: list[str] = field(default_factory=list)
    false_certificates: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def check(self, spec: NetSpec) -> None:
        model, x = spec.build(), spec.example_input()
        group = group_from_name(spec.group, SHAPE)
        try:
            cert = certify(model, x, group)
            verdict, certified = cert.verdict.value, bool(cert.certified)
        except Exception as err:  # no certificate; counted
            verdict, certified = "raised", False
            self.raised.append(f"{spec.describe()}: {type(err).__name__}: {err}")
        err = oracle(spec)
        self.examples += 1
        self.verdicts[verdict] += 1
        if err <= TOLERANCE:
            self.oracle_equivariant += 1
            self.certified_of_equivariant += int(certified)
        if verdict == "invariant":  # the claim is invariance of every output leaf
            err = max(err, oracle(spec, "invariant"))
        if certified and not err <= TOLERANCE:
            message = (
                f"FALSE CERTIFICATE: certify says {verdict}, the float64 oracle measures {err:.3e}: "
                f"{spec.describe()}\n{cert.summary()}"
            )
            self.false_certificates.append(message)
            if not COLLECT:
                raise AssertionError(message)

    def summary(self) -> str:
        v = self.verdicts
        return (
            f"{self.examples} generated networks (hypothesis' shrinking included) in {time.perf_counter() - self.started:.1f}s: "
            f"certified {v['equivariant'] + v['invariant']} (equivariant {v['equivariant']}, invariant {v['invariant']}), "
            f"broken {v['broken']}, unverified {v['unverified']}, certify raised {v['raised']}; "
            f"oracle: {self.oracle_equivariant} equivariant, {self.examples - self.oracle_equivariant} broken; "
            f"completeness {self.certified_of_equivariant}/{self.oracle_equivariant}; "
            f"false certificates {len(self.false_certificates)}"
        )


def _run(examples: int) -> Tally:
    tally = Tally()

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
        ],
    )
    @given(NETS)
    def check(spec: NetSpec) -> None:
        tally.check(spec)

    try:
        check()
    finally:
        print("\n" + tally.summary())
    if tally.false_certificates:
        shown = "\n\n".join(tally.false_certificates[:10])
        raise AssertionError(
            f"{len(tally.false_certificates)} false certificates ({tally.summary()}):\n{shown}"
        )
    return tally


def test_generated_networks_get_no_false_certificate() -> None:
    tally = _run(EXAMPLES)
    assert tally.examples > 0


@pytest.mark.slow
def test_generated_networks_get_no_false_certificate_long() -> None:
    tally = _run(EXAMPLES_LONG)
    assert tally.examples > 0


def test_the_generator_covers_every_op_kind() -> None:
    """Every op kind builds and runs on a (B, 3, 8, 8) batch and keeps its shape; the
    oracle separates a known-equivariant from a known-broken composition."""
    x = torch.randn(SHAPE)
    samples: list[OpSpec] = [
        ("reduce", "mean", (-1,), "int", "method-axis"),
        ("axis", "softmax", -1, "module"),
        ("layer-norm", (8,), "free", "F-pos"),
        ("pool", "max", (3, 1), (2, 1), "circular", "F"),
        ("conv", "c4orbit"),
        ("pointwise", "silu"),
        ("param", "row", "add_"),
        ("inplace", "narrow-zero_", -1),
        ("data", "where-index", 3),
        ("attention", "axial-both"),
        ("paired", "softmax"),
        ("roll", (4, 4), (-2, -1), "kw"),
        ("subclass", "Conv2dCircular", "conv-functional", ("pointwise", "relu")),
    ]
    for spec in samples:
        out = build_op(spec)(x.clone())
        assert tuple(out.shape) == SHAPE, spec
    good = NetSpec((("paired", "softmax"), ("conv", "c4orbit")), "c4", "tuple", "mean", 0, False, 1)
    bad = NetSpec((("axis", "softmax", -1, "F-kw"),), "c4", "single", "none", 0, False, 1)
    assert oracle(good) <= 1e-9
    assert oracle(bad) >= 1e-3
    assert set(GROUP_NAMES) >= {"translations", "c4", "d4", "p4", "p4m"}
