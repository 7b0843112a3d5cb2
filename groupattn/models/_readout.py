"""The invariant read-out shared by the group models: ``"orbit"`` or ``"pool"``."""

from __future__ import annotations

from torch import nn

from .._errors import ConfigurationError
from ..groups import PointGroup
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


def readout_parts(pool: nn.Module, head: nn.Module) -> list[tuple[str, nn.Module]]:
    """The read-out's entry in a model's contract chain (the invariant part)."""
    return [("head", head)] if isinstance(head, OrbitPooledLinear) else [("pool", pool)]
