"""Rules for operators that copy entries: views, indexing with constant indices, padding, concatenation.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

from typing import Any

import torch

from ._aten import OpCall, _structural, _tensor_values, rule
from ._semantics import movement
from ._values import Breaks, Constant, Moving, Unverifiable

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
    "aten::view",
    "aten::reshape",
    "aten::_unsafe_view",
    "aten::view_as",
    "aten::reshape_as",
    "aten::expand",
    "aten::expand_as",
    "aten::broadcast_to",
    "aten::permute",
    "aten::transpose",
    "aten::swapaxes",
    "aten::swapdims",
    "aten::t",
    "aten::mT",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::slice",
    "aten::select",
    "aten::narrow",
    "aten::flip",
    "aten::fliplr",
    "aten::flipud",
    "aten::roll",
    "aten::rot90",
    "aten::repeat",
    "aten::repeat_interleave",
    "aten::tile",
    "aten::alias",
    "aten::detach",
    "aten::clone",
    "aten::contiguous",
    "aten::lift_fresh_copy",
    "aten::movedim",
    "aten::moveaxis",
    "aten::flatten",
    "aten::unflatten",
    "aten::diagonal",
    "aten::tril",
    "aten::triu",
    "aten::pixel_shuffle",
    "aten::pixel_unshuffle",
    "aten::constant_pad_nd",
    "aten::pad",
    "aten::reflection_pad1d",
    "aten::reflection_pad2d",
    "aten::reflection_pad3d",
    "aten::replication_pad1d",
    "aten::replication_pad2d",
    "aten::replication_pad3d",
    "aten::circular_pad1d",
    "aten::circular_pad2d",
    "aten::_pad_circular",
    "aten::im2col",
    "aten::unfold",
    "aten::index_select",
    "aten::gather",
    "aten::take_along_dim",
    "aten::index",
    "aten::split",
    "aten::split_with_sizes",
    "aten::chunk",
    "aten::tensor_split",
    "aten::unbind",
    "aten::cat",
    "aten::concat",
    "aten::concatenate",
    "aten::stack",
    "aten::hstack",
    "aten::vstack",
    "aten::slice_scatter",
    "aten::select_scatter",
    "aten::diagonal_scatter",
    "aten::index_put",
    "aten::scatter",
    "aten::copy",
    "aten::masked_scatter",
    "aten::fill",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::full_like",
    "aten::new_zeros",
    "aten::new_ones",
    "aten::new_full",
    "aten::upsample_nearest1d",
    "aten::upsample_nearest2d",
    "aten::_upsample_nearest_exact2d",
    "aten::channel_shuffle",
    "aten::native_channel_shuffle",
    "aten::squeeze_copy",
    "aten::unsqueeze_copy",
    "aten::view_copy",
    "aten::permute_copy",
    "aten::expand_copy",
    "aten::slice_copy",
    "aten::select_copy",
    "aten::transpose_copy",
    "aten::t_copy",
    "aten::alias_copy",
    "aten::detach_copy",
    "aten::as_strided_copy",
    "aten::unfold_copy",
    "aten::zero",
    "aten::index_fill",
    "aten::masked_fill_",
    "aten::diag_embed",
)


#: Operators that only copy entries (and fill constants).
MOVEMENT_OPS = frozenset(_MOVEMENT)

#: Arguments that only give a shape.
_SHAPE_ONLY = frozenset(
    {("aten::view_as", "other"), ("aten::reshape_as", "other"), ("aten::expand_as", "other")}
)


def _replace_value(
    args: tuple[Any, ...], kwargs: dict[str, Any], old: Any, new: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
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
        "aten::view",
        "aten::reshape",
        "aten::_unsafe_view",
        "aten::permute",
        "aten::transpose",
        "aten::t",
        "aten::mT",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::alias",
        "aten::detach",
        "aten::clone",
        "aten::contiguous",
        "aten::movedim",
        "aten::flatten",
        "aten::unflatten",
        "aten::unbind",
        "aten::swapaxes",
        "aten::swapdims",
    }
)


def _permutation_of_one(call: OpCall, data: list[Any], replace: dict[int, int]) -> list[Any] | None:
    """Maps of a rearrangement of one moving operand, read off one exact (long) index probe.

    The outputs together must hold every entry of the operand exactly once (a bijection);
    then an output entry that copies entry ``s`` moves to the entry that copies ``m[s]``.
    Anything else (copies, fills, an invariant operand with value classes) goes to the
    general ``movement``.
    """
    if (
        len(data) != 1
        or not isinstance(data[0], Moving)
        or data[0].invariant
        or data[0].source is not None
    ):
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
            call.raw_args, call.raw_kwargs = _replace_value(
                call.raw_args,
                call.raw_kwargs,
                v,
                Constant(torch.empty(v.shape), torch.empty(v.shape)),
            )
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
