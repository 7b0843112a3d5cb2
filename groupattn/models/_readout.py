"""The invariant read-out shared by the group models: ``"orbit"`` or ``"pool"``."""

from __future__ import annotations

from typing import Any

from torch import nn

from .._errors import ConfigurationError
from ..contracts import Contract
from ..groups import Group, PointGroup
from ..nn import GroupGlobalPool, OrbitPooledLinear

READOUTS = ("orbit", "pool")


def build_readout(
    model: str,
    readout: str,
    width: int,
    num_classes: int,
    point_group: PointGroup,
    spatial: str = "max",
) -> tuple[nn.Module, nn.Module]:
    """``(pool, head)`` of a group model, applied as ``head(pool(features))``.

    ``"orbit"``: no separate pooling, the head is an
    [`OrbitPooledLinear`][groupattn.nn.OrbitPooledLinear] (spatial pooling, then one linear
    map on every turned copy of the features, the largest kept). ``"pool"``:
    [`GroupGlobalPool`][groupattn.nn.GroupGlobalPool] (max over the group axis of each
    channel) then a ``Linear``. On the trivial point group the two are the same function
    with the same initial weights.
    """
    if readout == "orbit":
        return nn.Identity(), OrbitPooledLinear(width, num_classes, point_group, spatial=spatial)
    if readout == "pool":
        return GroupGlobalPool(point_group, "max", spatial=spatial), nn.Linear(width, num_classes)
    raise ConfigurationError(f"{model}: expected readout 'orbit' or 'pool', got {readout!r}")


class _UntrustedHead(nn.Module):
    """Stands for a replaced orbit head in a contract chain: promises nothing."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.kind = type(head).__name__

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        return Contract.unknown(
            f"{self.kind} is not the model's OrbitPooledLinear read-out (replaced after "
            "construction): its contract is not taken on trust",
            input_type,
        )


def readout_parts(pool: nn.Module, head: nn.Module) -> list[tuple[str, nn.Module]]:
    """The read-out's entries in a model's contract chain.

    ``"pool"`` models: the pooling (invariant; whatever head follows it stays invariant).
    ``"orbit"`` models (``pool`` is an ``nn.Identity``): the head itself, trusted only if it
    is exactly an ``OrbitPooledLinear`` (a head swapped for another module, a subclass
    included, leaves the contract unverified; [`certify`][groupattn.check.certify]
    traces it instead).
    """
    if isinstance(pool, nn.Identity):
        return [("head", head if type(head) is OrbitPooledLinear else _UntrustedHead(head))]
    return [("pool", pool)]
