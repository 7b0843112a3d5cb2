"""Rules for elementwise operators (PyTorch's pointwise tag), casts and dropout.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

from typing import Any

from ._aten import OpCall, Poison, _tensor_values, rule
from ._semantics import pointwise
from ._values import FrameValue, Moving, Unverifiable

# ----------------------------------------------------------------------------- pointwise


def _pointwise_rule(call: OpCall) -> Any:
    call.args.touch_all()
    operands = [v for v in call.args.values.values() for v in _tensor_values(v)]
    for v in call.args.values.values():
        if isinstance(v, FrameValue | Poison):
            raise Unverifiable(
                f"{call.label}: uses an untracked value (a canonicalizer's frame or positions) as data"
            )
    return pointwise(operands, call.out_shape(), call.out_dtype(), call.label)


@rule(
    "aten::_to_copy",
    "aten::to",
    "aten::_conj",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::positive",
)
def _cast(call: OpCall) -> Any:
    return _pointwise_rule(call)


@rule("aten::__and__", "aten::__or__", "aten::__xor__", "aten::__lshift__", "aten::__rshift__")
def _bitwise_operator(call: OpCall) -> Any:
    """``a & b`` and friends: ``bitwise_and`` and the like under their operator names, which
    PyTorch does not tag as pointwise."""
    return _pointwise_rule(call)


@rule("aten::where.ScalarOther", "aten::where.ScalarSelf", "aten::where.Scalar")
def _where_with_a_number(call: OpCall) -> Any:
    """``torch.where(condition, x, 0.0)``: elementwise like ``where.self`` (which PyTorch tags
    pointwise); not ``where(condition)`` alone, the indices of the non-zero entries."""
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
