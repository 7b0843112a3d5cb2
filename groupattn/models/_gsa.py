"""GSA-Net (Romero & Cordonnier, 2021): lifting and group self-attention, invariant head."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._deprecation import renamed_arguments
from .._errors import ConfigurationError
from ..actions import GridField, InvariantField, LiftedField
from ..attention import LiftingSelfAttention, resolve_point_group
from ..canonical import OrientationCanonicalizer
from ..contracts import Contract, Status
from ..groups import CyclicGroup, Group, PointGroup
from ..nn import (
    GroupBlock,
    GroupConvolution,
    GroupLayerNorm,
    LiftedPolyphaseDownsample,
    LiftingConvolution,
    SymmetricConvStem,
    chain_contract,
)
from ._anchored import build_anchor
from ._inputs import install_input_check
from ._readout import build_readout, readout_parts
from ._registry import register_model

__all__ = ["GSANet"]

#: Deprecated argument names (old → new), kept for one release.
_RENAMED = {"channels": "dim", "head_channels": "head_dim"}


class _ConstantLift(nn.Module):
    """A pointwise (1 × 1) map of scalar maps, constant along the group axis: ``(B, C, H, W) → (B, C', 1, H, W)``."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).unsqueeze(2)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant ``GridField → LiftedField``: a 1 × 1 map commutes with every spatial
        transform, and a field constant along the group axis is fixed by its permutations."""
        return Contract.equivariant(GridField(), LiftedField(CyclicGroup(1)))


class GSANet(nn.Module):
    """Group equivariant stand-alone self-attention network for p4 (C4) or p4m (D4).

    Default (``stem="lifting"``): ``LiftingConvolution`` 3 × 3 → ``GroupConvolution``
    3 × 3 per further entry of ``stem_dilations`` (GELU after each) → a 1 × 1
    ``GroupConvolution`` to ``dim`` → ``GroupBlock × depth`` (group self-attention) →
    ``GroupLayerNorm`` → ``OrbitPooledLinear`` (max over space by default, then one
    linear map on every turned copy of the features, the largest logit kept). Every layer works at full resolution on the torus, so the logits
    are exactly invariant to circular translations and to the point group (p4 / p4m as a
    whole). GSA-Nets' own lifting self-attention is kept behind ``stem="symmetric"``:
    ``SymmetricConvStem × len(stem_dilations)`` (circular D4-symmetric 3 × 3 kernels,
    three weights per channel pair) → ``LiftingSelfAttention`` + ``LiftingConvolution``
    (added) → the same blocks. That stem's isotropic kernels cannot see orientation at
    all, and it learned the digits far more slowly than its baseline (4 epochs, seed 0:
    48.6 % against 92.0 %); the lifted stem gives every orientation slice oriented
    features from the first layer (90.4 % on the same budget — see the results page).
    The baseline (``equivariant=False``) is the same network with the trivial point group
    C1 (plain convolutions; for ``stem="symmetric"`` an unconstrained stem and a plain
    convolution skip), equivariant to translations only.

    Contract: *invariant* (``GridField → InvariantField``) under torus translations,
    ``H`` and ``T ⋊ H``; baseline: invariant under translations, *breaks* under
    rotations ("z2 baseline: its kernels and positional encoding are not rotation-invariant").

    Shapes: ``(B, in_channels, S, S) → (B, num_classes)``.

    Inputs: any batch size (``B = 0`` gives ``(0, num_classes)``); a floating tensor of the
    model's dtype — integer and bool images, and (outside autocast) other floating
    dtypes, raise [`DtypeError`][groupattn.DtypeError] (see [`groupattn.models`][groupattn.models]).

    Parameters
    ----------
    equivariant
        Equivariant model or z2 baseline.
    point_group
        ``"C4"`` (p4) or ``"D4"`` (p4m), or any point group acting on the grid.
    in_channels, num_classes
        Input channels and classes.
    dim, depth, num_heads, head_dim
        Width (per group element), number of group blocks, heads and per-head width.
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
    lift_skip
        What is added to the lifting attention: ``"convolution"`` (a 3 × 3
        [`LiftingConvolution`][groupattn.nn.LiftingConvolution], default) or ``"pointwise"`` (a 1 × 1
        map of the stem's scalar maps, constant along the group axis).
    stem
        ``"lifting"`` (default: lifting and group convolutions, then group
        self-attention) or ``"symmetric"`` (GSA-Nets' lifting self-attention on the maps of
        a D4-symmetric stem; ``lift_skip`` applies to it only). Weights of one do not
        load into the other.
    downsample
        Stride of a [`LiftedPolyphaseDownsample`][groupattn.nn.LiftedPolyphaseDownsample] between the lift
        and the group blocks (``1``: none, full resolution throughout). Anchored, so the
        logits stay exactly invariant; the blocks then cost ``downsample²`` times less.
    readout
        ``"orbit"`` (default) or ``"pool"``, as for [`GroupViT`][groupattn.models.GroupViT]:
        an [`OrbitPooledLinear`][groupattn.nn.OrbitPooledLinear] head (spatial pooling
        ``pool``, then one linear map on every turned copy of the features, the largest
        kept), or ``GroupGlobalPool`` then a ``Linear``.
    canonicalize_orientation
        Put a [`CentreAnchor`][groupattn.canonical.CentreAnchor] (``sigma = 0.3 S``, as in
        [`P4ViT`][groupattn.models.P4ViT]) and then an
        [`OrientationCanonicalizer`][groupattn.canonical.OrientationCanonicalizer] in front
        (equivariant model only; the baseline ignores it). The anchor rolls the blurred
        centre of the image to the image centre, so the canonicalizer's turn about the
        image centre is a turn about the glyph; the model is then also invariant — up to
        bilinear interpolation — to rotations by angles between the quarter turns, which it
        never sees when trained on upright images (the upright-train / rotated-test
        protocol). Both are exactly equivariant under p4m, so the contract is unchanged.
        Needs an even ``image_size`` equal to the input side.

    Notes
    -----
    Deprecated aliases (one release): ``channels`` → ``dim``, ``head_channels`` → ``head_dim``.

    Raises
    ------
    ConfigurationError
        For an unknown ``lift_skip``, an odd ``image_size`` with
        ``canonicalize_orientation=True`` (and the layers' own errors).
    """

    @renamed_arguments(**_RENAMED)
    def __init__(
        self,
        equivariant: bool = True,
        point_group: PointGroup | str = "C4",
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 16,
        depth: int = 1,
        num_heads: int = 2,
        head_dim: int | None = None,
        neighbourhood: int | None = 3,
        encoding: str = "continuous",
        query_position: bool = False,
        image_size: int = 20,
        stem_channels: int = 16,
        stem_dilations: tuple[int, ...] = (1, 2, 4),
        pool: str = "max",
        lift_skip: str = "convolution",
        downsample: int = 1,
        stem: str = "lifting",
        readout: str = "orbit",
        canonicalize_orientation: bool = False,
    ) -> None:
        super().__init__()
        self.equivariant = equivariant
        self.point_group = (
            resolve_point_group(point_group, "GSANet") if equivariant else resolve_point_group("C1")
        )
        pg = self.point_group
        if not isinstance(canonicalize_orientation, bool):
            raise ConfigurationError(
                f"GSANet: expected canonicalize_orientation True or False, got {canonicalize_orientation!r}"
            )
        self.canonicalize_orientation = canonicalize_orientation and equivariant
        self.anchor: nn.Module | None = None
        self.orientation: nn.Module | None = None
        if self.canonicalize_orientation:
            if not isinstance(image_size, int) or isinstance(image_size, bool) or image_size % 2:
                raise ConfigurationError(
                    "GSANet: expected an even image_size (the input side) for "
                    f"canonicalize_orientation=True, got {image_size!r}"
                )
            self.anchor = build_anchor("GSANet", "centre", 1, image_size)
            self.orientation = OrientationCanonicalizer(image_size)
        common: dict[str, Any] = dict(
            num_heads=num_heads,
            head_dim=head_dim,
            neighbourhood=neighbourhood,
            encoding=encoding,
            grid=image_size,
            query_position=query_position,
        )
        if stem not in ("symmetric", "lifting"):
            raise ConfigurationError(
                f"GSANet: expected stem 'lifting' or 'symmetric', got {stem!r}"
            )
        self.stem_kind = stem
        layers: list[nn.Module] = []
        if stem == "lifting" and stem_channels:
            if not stem_dilations or stem_dilations[0] != 1:
                raise ConfigurationError(
                    "GSANet: expected stem_dilations starting with 1 for the lifting stem (its first "
                    f"layer is a 3 × 3 lifting convolution), got {stem_dilations}"
                )
            layers += [LiftingConvolution(in_channels, stem_channels, 3, pg), nn.GELU()]
            for dilation in stem_dilations[1:]:
                layers += [
                    GroupConvolution(stem_channels, stem_channels, 3, pg, dilation=dilation),
                    nn.GELU(),
                ]
        stem_modules: list[nn.Module] = layers
        if stem_channels and stem == "symmetric":
            for i, dilation in enumerate(stem_dilations):
                width = in_channels if i == 0 else stem_channels
                stem_modules.append(
                    SymmetricConvStem(
                        width, stem_channels, symmetric=equivariant, dilation=dilation
                    )
                )
        self.stem = nn.Sequential(*stem_modules)
        lift_in = stem_channels or in_channels
        self.lift: nn.Module
        self.skip: nn.Module | None
        if stem == "lifting":  # the stem's output is lifted already: project it, no skip
            self.lift = (
                GroupConvolution(stem_channels, dim, 1, pg)
                if stem_channels
                else LiftingConvolution(in_channels, dim, 3, pg)  # no stem: lift the image
            )
            self.skip = None
        elif (
            lift_skip == "convolution"
        ):  # oriented features from the start: a 3 × 3 lifting convolution
            self.lift = LiftingSelfAttention(lift_in, dim, pg, **common)
            self.skip = LiftingConvolution(lift_in, dim, 3, pg)
        elif lift_skip == "pointwise":  # the stem's scalar maps, constant along the group axis
            self.lift = LiftingSelfAttention(lift_in, dim, pg, **common)
            self.skip = _ConstantLift(lift_in, dim)
        else:
            raise ConfigurationError(
                f"GSANet: expected lift_skip 'convolution' or 'pointwise', got {lift_skip!r}"
            )
        # anchored down-sampling keeps p4 / p4m exact (the blocks then see a canonical coarse grid)
        self.downsample: nn.Module = (
            LiftedPolyphaseDownsample(pg, downsample, image_size=(image_size, image_size))
            if downsample > 1
            else nn.Identity()
        )
        if downsample > 1:
            common["grid"] = image_size // downsample
        self.blocks = nn.Sequential(*[GroupBlock(dim, pg, **common) for _ in range(depth)])
        self.norm = GroupLayerNorm(dim, pg)
        self.readout = readout
        self.pool, self.head = build_readout("GSANet", readout, dim, num_classes, pg, spatial=pool)
        install_input_check(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _, canonicalizer in self._front():
            x = canonicalizer(x).output
        features = self.stem(x)
        lifted = self.lift(features)
        if self.skip is not None:
            lifted = lifted + self.skip(features)
        return self.head(self.pool(self.norm(self.blocks(self.downsample(lifted)))))

    def _front(self) -> list[tuple[str, nn.Module]]:
        """The canonicalizers in front of the stem (``canonicalize_orientation``), in order;
        the forward pass and the contract both read this one list."""
        if self.anchor is None or self.orientation is None:
            return []
        return [("anchor", self.anchor), ("orientation", self.orientation)]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        front = self._front()
        parts = [
            *front,
            ("stem", self.stem),
            ("lift", self.lift),
            ("downsample", self.downsample),
            ("blocks", self.blocks),
            ("norm", self.norm),
            *readout_parts(self.pool, self.head),
        ]
        contract = chain_contract(parts, group, input_type)
        # the skip runs beside the lifting attention: the sum is equivariant only if both branches are
        skip = (
            chain_contract([*front, ("stem", self.stem), ("skip", self.skip)], group, input_type)
            if self.skip is not None
            else contract
        )
        if (
            self.skip is not None
            and skip.kind != Status.EQUIVARIANT
            and contract.kind != Status.BROKEN
        ):
            contract = (
                skip
                if skip.kind == Status.BROKEN
                else Contract.unknown(skip.reason or "skip", GridField())
            )
        if contract.kind == Status.BROKEN and not self.equivariant:
            return Contract.breaks(
                f"z2 baseline: its kernels and positional encoding are not rotation-invariant ({contract.reason})",
                GridField(),
                InvariantField(),
            )
        return contract


@register_model(
    "gsa",
    group="p4",
    input_shape=(1, 20, 20),
    learning_rate=6e-3,
    description="GSA-Net: lifting + group self-attention (p4 / p4m via point_group), z2 baseline",
)
@renamed_arguments(**_RENAMED)
def _gsa(equivariant: bool = True, **kwargs: Any) -> GSANet:
    return GSANet(equivariant=equivariant, **kwargs)
