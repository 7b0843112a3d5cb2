"""Rules for normalisation layers with affine parameters, and embeddings.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._aten import OpCall, Poison, _moving_input, rule
from ._rules_contractions import _reshape, _row_maps, _with_rows
from ._semantics import movement, normalize, pointwise, reduce
from ._values import Constant, Moving, Unverifiable

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
    rows = (
        _row_maps(x, math.prod(shape))
        if not isinstance(weight, Moving) and not isinstance(bias, Moving)
        else None
    )
    if rows is not None:  # rows move whole: each is normalised (and scaled) the same way
        out = _with_rows(rows, math.prod(shape), x.shape, x.dtype, x.frame)
        if isinstance(call.out_meta, list | tuple):
            stat = _with_rows(rows, 1, call.out_shape(1), call.out_dtype(1), x.frame)
            return (out, stat, stat)
        return out
    out = normalize(x, dims, x.dtype, call.label)
    out = _affine(
        call, out, call.args["weight"], call.args["bias"], (1,) * (len(x.shape) - n) + shape
    )
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
    return _affine(
        call, out, call.args["weight"], call.args["bias"], (1, c) + (1,) * (len(x.shape) - 2)
    )


@rule(
    "aten::batch_norm",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_native_batch_norm_legit_functional",
    "aten::_native_batch_norm_legit",
    "aten::native_batch_norm",
    "aten::instance_norm",
)
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
    training = (
        call.args.get("training", False)
        if packet != "aten::_native_batch_norm_legit_no_training"
        else False
    )
    if (
        packet == "aten::_native_batch_norm_legit_functional"
        or packet == "aten::_native_batch_norm_legit"
    ):
        training = call.args["training"]
    if training:
        out = normalize(x, [0, *list(range(2, len(x.shape)))], x.dtype, call.label)
    else:
        out = x
        for stat in (call.args["running_mean"], call.args["running_var"]):
            if stat is not None:
                out = pointwise(
                    [out, movement(lambda d: d[0].reshape(view), [stat], call.label)[0]],
                    x.shape,
                    x.dtype,
                    call.label + " statistics",
                )
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
