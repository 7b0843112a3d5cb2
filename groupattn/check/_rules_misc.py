"""Rules for run-time assertions and operators with data-dependent output shapes.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

from typing import Any

from ._aten import OpCall, rule
from ._values import Unverifiable

# ----------------------------------------------------------------------------- no-ops and refusals


@rule(
    "aten::_assert_tensor_metadata",
    "aten::_assert_scalar",
    "aten::sym_constrain_range_for_size",
    "aten::sym_constrain_range",
    "aten::_assert_async",
)
def _assertion(call: OpCall) -> Any:
    call.args.touch_all()
    return None


@rule(
    "aten::where.default",
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique2",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::bincount",
    "aten::histc",
    "aten::multinomial",
    "aten::randperm",
)
def _data_dependent(call: OpCall) -> Any:
    call.args.touch_all()
    raise Unverifiable(
        f"{call.label}: its output's shape or values are positions chosen by the data"
    )
