"""Patch embedding: a strided convolution, on the polyphase-anchored image when equivariant."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from ..actions import GridField, TokenField, torus_stride
from ..canonical import PolyphaseAnchor
from ..canonical._polyphase import Norm
from ..contracts import Contract
from ..groups import Group, GroupError, TorusTranslations

__all__ = ["PatchEmbedding"]


def _check_image(module: str, x: torch.Tensor, channels: int, size: tuple[int, int]) -> None:
    GridField().check(x, module)
    if x.shape[1] != channels:
        raise GroupError(f"{module}: expected {channels} input channels, got {x.shape[1]}")
    if tuple(x.shape[2:]) != tuple(size):
        raise GroupError(f"{module}: expected {size[0]}x{size[1]} images, got {x.shape[2]}x{x.shape[3]}")


class PatchEmbedding(nn.Module):
    """Split an image into ``patch × patch`` patches and embed each (a strided convolution).

    With ``anchored=True`` the image is polyphase-anchored with stride ``patch`` first,
    so the patch grid moves with the data (Ding et al., 2023).

    Contract under ``TorusTranslations(H, W)``: anchored — *canonicalizing* onto
    ``TorusTranslations(H/p, W/p)`` of the token grid; plain — *breaks* (patches do not
    move with shifts that are not multiples of ``p``). Under
    ``TorusTranslations(H/p, W/p, stride=p)`` both are *equivariant* onto the token grid.

    Shapes: ``(B, in_channels, H, W) → (B, H/p · W/p, dim)``.

    Parameters
    ----------
    in_channels
        Image channels.
    dim
        Token width.
    patch
        Patch size ``p`` (divides the image size).
    image_size
        ``(H, W)``.
    anchored
        Anchor before embedding (the equivariant variant).
    norm
        Norm of the polyphase anchoring.
    """

    def __init__(
        self,
        in_channels: int,
        dim: int,
        patch: int,
        image_size: tuple[int, int],
        anchored: bool = True,
        norm: Norm = "l2",
    ) -> None:
        super().__init__()
        size = (int(image_size[0]), int(image_size[1]))
        if patch < 1 or size[0] % patch or size[1] % patch:
            raise GroupError(
                f"PatchEmbedding: expected an image size divisible by patch {patch}, got {size[0]}x{size[1]}"
            )
        self.in_channels, self.dim, self.patch, self.image_size = in_channels, dim, patch, size
        self.grid = (size[0] // patch, size[1] // patch)
        self.anchored, self.norm = anchored, norm
        self.anchor = PolyphaseAnchor(patch, norm, image_size=size)
        self.conv = nn.Conv2d(in_channels, dim, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed the (anchored) patches as tokens ``(B, N, dim)``."""
        _check_image("PatchEmbedding", x, self.in_channels, self.image_size)
        if self.anchored:
            x = self.anchor(x).output
        return rearrange(self.conv(x), "b c y x -> b (y x) c")

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        stride = torus_stride(group, self.image_size)
        out = TokenField(self.grid)
        if stride is None:
            return Contract.unknown(f"PatchEmbedding: promises nothing for {group.name}", GridField())
        assert isinstance(group, TorusTranslations)
        if stride % self.patch == 0:
            coarse = TorusTranslations(group.height, group.width, stride=stride // self.patch)
            return Contract.equivariant(GridField(), out, coarse)
        if not self.anchored:
            return Contract.breaks(
                "strided patch embedding without anchoring is not translation-equivariant: patches "
                f"do not move with shifts that are not multiples of the patch size {self.patch}",
                GridField(),
                out,
            )
        if stride != 1:
            return Contract.unknown(
                f"PatchEmbedding: patch {self.patch} does not divide the acting stride {stride}", GridField()
            )
        return Contract.canonicalizing(GridField(), out, TorusTranslations(*self.grid))

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, dim={self.dim}, patch={self.patch}, "
            f"image_size={self.image_size}, anchored={self.anchored}"
        )
