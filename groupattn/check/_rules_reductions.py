"""Rules for reductions and normalisations along dims: sums, extrema, soft-max, sorting.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._aten import OpCall, Poison, _dims, _moving_input, rule
from ._maps import coordinates, flat_index
from ._rules_pointwise import _pointwise_rule
from ._semantics import normalize, reduce
from ._values import Moving, Unverifiable

# ----------------------------------------------------------------------------- reductions


def _reduction(
    call: OpCall, dims: Any, positional: bool = False, out_index: int | None = None
) -> Moving:
    x = _moving_input(call, "self" if "self" in call.args.values else "input")
    call.args.touch("self", "input", "keepdim", "dtype", "out_dtype")
    ds = _dims(dims, len(x.shape))
    return reduce(
        x, ds, call.out_shape(out_index), call.out_dtype(out_index), call.label, positional
    )


@rule(
    "aten::sum",
    "aten::mean",
    "aten::amax",
    "aten::amin",
    "aten::prod",
    "aten::logsumexp",
    "aten::nansum",
    "aten::nanmean",
    "aten::all",
    "aten::any",
    "aten::count_nonzero",
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
            indices: Any = reduce(
                x, _dims(dim, len(x.shape)), call.out_shape(1), call.out_dtype(1), call.label, True
            )
        except Unverifiable as err:
            indices = Poison(str(err))
        return (values, indices)
    if "other" in call.args.values:  # binary maximum / minimum
        return _pointwise_rule(call)
    return _reduction(call, None)


@rule("aten::argmax", "aten::argmin")
def _argmax(call: OpCall) -> Any:
    return _reduction(call, call.args["dim"], positional=True)


@rule(
    "aten::softmax",
    "aten::_softmax",
    "aten::log_softmax",
    "aten::_log_softmax",
    "aten::special_softmax",
)
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
        reduce(
            x,
            _dims(dim, len(x.shape)),
            tuple(s for i, s in enumerate(x.shape) if i not in _dims(dim, len(x.shape))),
            x.dtype,
            call.label,
            positional=True,
        )
    if packet == "aten::kthvalue":
        values = reduce(
            x, _dims(dim, len(x.shape)), call.out_shape(0), call.out_dtype(0), call.label
        )
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
