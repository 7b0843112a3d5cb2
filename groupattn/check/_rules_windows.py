"""Rules for windowed operators: convolutions (after unfolding) and pooling.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ._aten import OpCall, Poison, _moving_input, rule
from ._rules_contractions import _reshape, _value_shape
from ._semantics import contract, movement, pointwise, reduce
from ._values import Constant, Unverifiable

# ----------------------------------------------------------------------------- convolution and pooling


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _unfold(
    call: OpCall,
    x: Any,
    kernel: tuple[int, ...],
    dilation: tuple[int, ...],
    padding: tuple[int, ...],
    stride: tuple[int, ...],
) -> Any:
    return movement(
        lambda d: F.unfold(d[0], kernel, dilation, padding, stride),
        [x],
        call.label + " windows",
        rows=(0, 2),
    )[0]


def _conv(
    call: OpCall, x: Any, w: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: int
) -> Any:
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
    return _conv(
        call,
        call.args["input"],
        call.args["weight"],
        call.args["bias"],
        call.args["stride"],
        call.args["padding"],
        call.args["dilation"],
        call.args["groups"],
    )


@rule("aten::convolution", "aten::_convolution")
def _convolution_rule(call: OpCall) -> Any:
    call.args.touch("benchmark", "deterministic", "cudnn_enabled", "allow_tf32")
    if call.args["transposed"]:
        raise Unverifiable(f"{call.label}: transposed convolutions are not supported")
    call.args.touch("output_padding")
    return _conv(
        call,
        call.args["input"],
        call.args["weight"],
        call.args["bias"],
        call.args["stride"],
        call.args["padding"],
        call.args["dilation"],
        call.args["groups"],
    )


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
    dilation = (
        _pair(call.args.get("dilation", 1), dims) if "dilation" in call.args.values else (1,) * dims
    )
    if call.args["ceil_mode"]:
        expected = tuple(
            (s + 2 * p - d * (k - 1) - 1) // st + 1
            for s, p, d, k, st in zip(sx[2:], padding, dilation, kernel, stride)
        )
        if (
            tuple(call.out_shape(0 if isinstance(call.out_meta, list | tuple) else None)[2:])
            != expected
        ):
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
    pooled = reduce(
        cols,
        [2],
        (b, c, l_),
        call.out_dtype(0 if isinstance(call.out_meta, list | tuple) else None),
        call.label,
    )
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
                counts = F.avg_pool2d(ones, kernel, stride, padding, False, False) * math.prod(
                    kernel
                )
            out = pointwise(
                [out, Constant(counts, counts)], out_shape, out.dtype, call.label + " divisor"
            )
    if isinstance(call.out_meta, list | tuple):
        return (out, Poison("max-pool positions"))
    return out


@rule(
    "aten::max_pool1d",
    "aten::max_pool2d",
    "aten::max_pool2d_with_indices",
    "aten::max_pool1d_with_indices",
)
def _max_pool(call: OpCall) -> Any:
    return _pool(call, "max")


@rule("aten::avg_pool1d", "aten::avg_pool2d")
def _avg_pool(call: OpCall) -> Any:
    return _pool(call, "avg")


@rule(
    "aten::adaptive_avg_pool1d",
    "aten::adaptive_avg_pool2d",
    "aten::_adaptive_avg_pool2d",
    "aten::adaptive_max_pool2d",
    "aten::adaptive_max_pool1d",
)
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
