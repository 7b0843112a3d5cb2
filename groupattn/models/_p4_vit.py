"""p4 / p4m-invariant Vision Transformer: patch-grid anchoring, then the C4 / D4 group ViT."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError
from ..canonical import PatchGridAnchor
from ..contracts import Contract
from ..groups import Group, PointGroup
from ._anchored import anchored_contract
from ._group_vit import GroupViT
from ._registry import register_model

__all__ = ["P4ViT"]


class P4ViT(GroupViT):
    """A patch ViT exactly invariant to every circular shift and quarter turn together (p4; p4m for D4).

    [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor] rolls the image so that its
    best-scoring ``patch_size × patch_size`` patch grid starts at the origin (the choice
    moves with the image under every 1-pixel shift, quarter turn and reflection of the
    torus); then [`GroupViT`][groupattn.models.GroupViT] (lifted patch embedding, group
    attention, group pooling), which is invariant to turns and reflections about the
    centre and to shifts by multiples of the patch size — exactly what the anchoring
    leaves. The logits are therefore invariant to all of p4 (C4) or p4m (D4) on the
    ``S × S`` torus, up to the anchoring's harmful *full ties* (phases equal on every
    score of its cascade whose anchored images the strided group does not relate;
    every full tie is reported as a tie, see [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor]).
    A subclass of ``GroupViT`` with the same layers and parameter names (built with
    ``absolute_position=False``: absolute positions would break the invariance to shifts by
    the patch size that the anchoring relies on), plus the parameter-free ``anchor``. The baseline (``equivariant=False``) is the plain ViT of
    ``GroupViT`` (no anchoring, trivial point group, learned absolute position
    embedding).

    Contract: *invariant* under ``RotoTranslationGroup(H', S)`` for ``H' ⊆ H`` (p4, p4m),
    under ``TorusTranslations(S, S)`` and under ``H'``; baseline: *breaks*
    ("plain ViT baseline: …").

    Shapes: ``(B, in_channels, S, S) → (B, num_classes)``.

    Inputs: any batch size (``B = 0`` gives ``(0, num_classes)``); a floating tensor of the
    model's dtype (see [`groupattn.models`][groupattn.models]).

    Parameters
    ----------
    equivariant
        p4 / p4m-invariant model or plain ViT baseline.
    point_group
        ``"C4"`` (p4) or ``"D4"`` (p4m).
    in_channels, num_classes, image_size, patch_size, dim, depth, num_heads, encoding, embed_bias, embed_kernel
        As for [`GroupViT`][groupattn.models.GroupViT].
    """

    def __init__(
        self,
        equivariant: bool = True,
        point_group: PointGroup | str = "C4",
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 32,
        patch_size: int = 4,
        dim: int = 16,
        depth: int = 2,
        num_heads: int = 2,
        encoding: str = "table",
        embed_bias: bool = False,
        embed_kernel: int | None = None,
    ) -> None:
        if not isinstance(image_size, int) or isinstance(image_size, bool):
            raise ConfigurationError(
                f"P4ViT: expected a square image size as an int, got {image_size!r}"
            )
        super().__init__(
            equivariant=equivariant,
            point_group=point_group,
            in_channels=in_channels,
            num_classes=num_classes,
            image_size=image_size,
            patch_size=patch_size,
            dim=dim,
            depth=depth,
            num_heads=num_heads,
            encoding=encoding,
            embed_bias=embed_bias,
            embed_kernel=embed_kernel,
            absolute_position=False,  # anchored content sits anywhere: no absolute positions
        )  # the group ViT's layers (and its input check), registered on this module
        self.image_size = image_size
        self.anchor: nn.Module = (
            PatchGridAnchor(patch_size, image_size) if equivariant else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of images ``(B, in_channels, S, S)``."""
        if self.equivariant:
            x = self.anchor(x).output
        return super().forward(x)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        return anchored_contract(
            "P4ViT",
            self.equivariant,
            self.image_size,
            self.point_group,
            group,
            lambda g: GroupViT.contract(self, g, input_type),
            "plain ViT baseline",
        )


@register_model(
    "p4_vit",
    group="p4",
    input_shape=(1, 32, 32),
    description="p4/p4m-invariant ViT: patch-grid anchoring, then the C4/D4 group ViT",
)
def _p4_vit(equivariant: bool = True, **kwargs: Any) -> P4ViT:
    return P4ViT(equivariant=equivariant, **kwargs)
