"""GSA-Net (Romero & Cordonnier, 2021): lifting and group self-attention, invariant head."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..actions import GridField, InvariantField
from ..attention import LiftingSelfAttention, resolve_point_group
from ..contracts import Contract, Kind
from ..groups import Group, PointGroup
from ..nn import GroupBlock, GroupGlobalPool, GroupLayerNorm, SymmetricConvStem, chain_contract
from ._registry import register_model

__all__ = ["GSANet"]


class GSANet(nn.Module):
    """Group equivariant stand-alone self-attention network for p4 (C4) or p4m (D4).

    ``SymmetricConvStem × len(stem_dilations) → LiftingSelfAttention (+ pointwise skip of
    the stem's maps, constant along the group axis) → GroupBlock × depth →
    GroupLayerNorm → GroupGlobalPool (max over the group axis and, by default, space) →
    Linear``: every layer works at full resolution on the torus, so the logits are
    exactly invariant to circular translations and to the point group (p4 / p4m as a
    whole). The stem's circular 3 × 3 kernels are D4-symmetric (three weights per
    channel pair), so it turns the one-channel image into several scalar maps without
    breaking equivariance; without it the lifted features of a one-channel image are
    nearly one-dimensional and the model does not learn. The baseline
    (``equivariant=False``) is GSA-Nets' z2 model: the same layers with the trivial point
    group C1 (no group axis) and an unconstrained stem, equivariant to translations only.

    Contract: *invariant* (``GridField → InvariantField``) under torus translations,
    ``H`` and ``T ⋊ H``; baseline: invariant under translations, *breaks* under
    rotations ("z2 baseline: positional encoding is not rotation-invariant").

    Shapes: ``(B, in_channels, S, S) → (B, num_classes)``.

    Parameters
    ----------
    equivariant
        Equivariant model or z2 baseline.
    point_group
        ``"C4"`` (p4) or ``"D4"`` (p4m), or any point group acting on the grid.
    in_channels, num_classes
        Input channels and classes.
    channels, depth, num_heads, head_channels
        Width, number of group blocks, heads and per-head width.
    neighbourhood
        Window side of the local attention (``None``: global attention).
    encoding
        ``"continuous"`` (GSA-style MLP) or ``"table"`` (orbital table; needs
        ``image_size`` for global attention).
    query_position
        Use GSA-Nets' query-dependent content × position term (off by default: the
        tiny preset keeps the additive orbital bias only, for speed).
    image_size
        Input side (for global orbital tables).
    stem_channels
        Width of the convolution stem (``0``: no stem, lift the image directly).
    stem_dilations
        One stem layer per entry, with that dilation (receptive field grows with each).
    pool
        Spatial pooling before the head: ``"max"`` (default; most positions of a digit
        are background, which a mean would average in) or ``"mean"``.
    """

    def __init__(
        self,
        equivariant: bool = True,
        point_group: PointGroup | str = "C4",
        in_channels: int = 1,
        num_classes: int = 10,
        channels: int = 8,
        depth: int = 1,
        num_heads: int = 2,
        head_channels: int | None = None,
        neighbourhood: int | None = 3,
        encoding: str = "continuous",
        query_position: bool = False,
        image_size: int = 32,
        stem_channels: int = 16,
        stem_dilations: tuple[int, ...] = (1, 2, 4),
        pool: str = "max",
    ) -> None:
        super().__init__()
        self.equivariant = equivariant
        self.point_group = resolve_point_group(point_group, "GSANet") if equivariant else resolve_point_group("C1")
        pg = self.point_group
        common: dict[str, Any] = dict(
            num_heads=num_heads,
            head_channels=head_channels,
            neighbourhood=neighbourhood,
            encoding=encoding,
            size=image_size,
            query_position=query_position,
        )
        stem: list[nn.Module] = []
        if stem_channels:
            for i, dilation in enumerate(stem_dilations):
                width = in_channels if i == 0 else stem_channels
                stem.append(SymmetricConvStem(width, stem_channels, symmetric=equivariant, dilation=dilation))
        self.stem = nn.Sequential(*stem)
        lift_in = stem_channels or in_channels
        self.lift = LiftingSelfAttention(lift_in, channels, pg, **common)
        # pointwise skip around the lifting layer: the stem's scalar maps, constant along the group axis
        self.skip = nn.Conv2d(lift_in, channels, 1)
        self.blocks = nn.Sequential(*[GroupBlock(channels, pg, **common) for _ in range(depth)])
        self.norm = GroupLayerNorm(channels, pg)
        self.pool = GroupGlobalPool(pg, "max", spatial=pool)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stem(x)
        lifted = self.lift(features) + self.skip(features).unsqueeze(2)
        return self.head(self.pool(self.norm(self.blocks(lifted))))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        parts = [("stem", self.stem), ("lift", self.lift), ("blocks", self.blocks), ("norm", self.norm), ("pool", self.pool)]
        contract = chain_contract(parts, group, input_type)
        if contract.kind == Kind.BREAKS and not self.equivariant:
            return Contract.breaks(
                f"z2 baseline: positional encoding is not rotation-invariant ({contract.reason})",
                GridField(),
                InvariantField(),
            )
        return contract


@register_model(
    "gsa",
    group="p4",
    input_shape=(1, 32, 32),
    description="GSA-Net: lifting + group self-attention (p4 / p4m via point_group), z2 baseline",
)
def _gsa(equivariant: bool = True, **kwargs: Any) -> GSANet:
    return GSANet(equivariant=equivariant, **kwargs)
