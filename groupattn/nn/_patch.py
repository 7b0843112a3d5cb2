"""Patch embedding: a strided convolution, on the polyphase-anchored image when equivariant."""

from __future__ import annotations

import math
from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError, ShapeError
from ..actions import GridField, TokenField, torus_stride
from ..canonical import PolyphaseAnchor
from ..canonical._exact_blur import (
    blur_exactly,
    circulant_matrix,
    gaussian_weight,
    integer_circulant_row,
    significand_bits,
)
from ..canonical._polyphase import Norm
from ..canonical._precision import scoring, to_score_dtype
from ..canonical._record import judging_ties_as
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import Group, TorusTranslations
from ..positional._constants import constant_cache

__all__ = ["PatchEmbedding"]


def _gaussian_taps(sigma: float, size: int) -> tuple[tuple[int, float], ...]:
    """``(offset, weight)`` of a circular Gaussian of width ``sigma`` on a cycle of ``size``; weights sum to 1."""
    radius = math.ceil(min(3.0 * sigma, (size - 1) // 2))
    taps = [(k, gaussian_weight(k, sigma)) for k in range(-radius, radius + 1)]
    total = sum(w for _, w in taps)
    return tuple((k, w / total) for k, w in taps)


@constant_cache(maxsize=32)
def _blur_operators(
    taps: tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]],
    size: tuple[int, int],
    significand: int,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(left (H, H), right (W, W), levels)``: ``left · q · right`` blurs ``q`` with the taps, exactly.

    Integer circulant matrices whose weights add up to about ``2**13`` each (float64), and
    the quantization ``levels`` of non-negative images that keeps every partial sum below
    ``2**(significand − 1)`` (see ``groupattn.canonical._exact_blur``).
    """
    budget = (significand - 1) // 4
    row_y = integer_circulant_row(taps[0], size[0], budget)
    row_x = integer_circulant_row(taps[1], size[1], budget)
    bits = sum(row_y).bit_length() + sum(row_x).bit_length()
    return circulant_matrix(row_y), circulant_matrix(row_x).T, 2.0 ** (significand - 1 - bits)


def _exact_blur(energy: torch.Tensor, taps: Any) -> torch.Tensor:
    """``Σ_{k,l} w_k w_l · roll(energy, (k, l))`` up to quantization, shift-equivariant bit for bit.

    ``energy`` ``(B, 1, H, W)`` non-negative, in float64 (float32 on a device without it) is
    quantized per sample to integers and multiplied by integer circulant matrices: every
    sum is exact, so a circularly shifted input gives the shifted output exactly although
    the matrix products add their terms in an order tied to absolute positions.
    """
    left, right, levels = _blur_operators(
        taps, (int(energy.shape[-2]), int(energy.shape[-1])), significand_bits(energy.dtype)
    )
    return blur_exactly(energy, left, right, levels)


def _check_image(module: str, x: torch.Tensor, channels: int, size: tuple[int, int]) -> None:
    GridField().check(x, module)
    check_floating_input(x, module)
    if x.shape[1] != channels:
        raise ShapeError(f"{module}: expected {channels} input channels, got {x.shape[1]}")
    if tuple(x.shape[2:]) != tuple(size):
        raise ShapeError(
            f"{module}: expected {size[0]}x{size[1]} images, got {x.shape[2]}x{x.shape[3]}"
        )


class PatchEmbedding(nn.Module):
    """Split an image into ``patch_size × patch_size`` patches and embed each (a strided convolution).

    With ``anchored=True`` the image is polyphase-anchored with stride ``patch_size`` first,
    so the patch grid moves with the data (Ding et al., 2023).

    A network can instead be anchored **once**, here, for all its strided layers:
    ``anchor_stride = S`` (a multiple of ``patch_size``, e.g. the coarsest period of the
    windows, merges and reductions that follow) anchors the image with stride ``S``, and
    the later layers then need only be equivariant to shifts by multiples of ``S`` — they
    run un-anchored. For a large ``S`` the phase should be chosen on a smoothed copy
    of the image (``anchor_sigma > 0``): the score is then the circularly blurred pixel
    energy ``G_σ ∗ Σ_c x_c²`` (carried as an extra channel through the anchor, scaled per
    sample to peak at ``anchor_scale · max|x|`` so it dominates the anchor's norm, and
    dropped after), so similar images get similar frames. The score depends on the input
    alone, not on any weight. The blur is computed exactly — the energy quantized per
    sample to integers (24 bits relative to its maximum) times integer circulant matrices
    (Gaussian weights truncated at ``3σ`` and rounded to about 13 bits), every sum below
    ``2⁵²`` — so a circularly shifted image gives the shifted score bit for bit although
    the two matrix products add in an order tied to absolute positions.

    Precision: every anchoring score (the polyphase norms, and the blurred energy) is
    computed in float64 with autocast disabled, from the image as received, whatever
    the dtype the network runs in; the image keeps its dtype on the data path (the
    float64 round trip of the blurred variant is exact). Near-ties are judged against
    the rounding of the image's dtype (see [`record_canonicalizations`][groupattn.canonical.record_canonicalizations]).

    Contract under ``TorusTranslations(H, W)``: anchored — *canonicalizing* onto
    ``TorusTranslations(H/S, W/S, stride=S/p)`` of the token grid (``S = p`` by default:
    all translations of the token grid); plain — *breaks* (patches do not
    move with shifts that are not multiples of ``p``). Under
    ``TorusTranslations(H/p, W/p, stride=p)`` both are *equivariant* onto the token grid.

    Shapes: ``(B, in_channels, H, W) → (B, H/p · W/p, dim)``.

    Parameters
    ----------
    in_channels
        Image channels.
    dim
        Token width.
    patch_size
        Patch size ``p`` (divides the image size).
    image_size
        ``(H, W)``.
    anchored
        Anchor before embedding (the equivariant variant).
    norm
        Norm of the polyphase anchoring.
    anchor_stride
        Stride ``S`` of the anchoring (default: ``patch_size``); a multiple of
        ``patch_size`` dividing the image size.
    anchor_sigma
        Width in pixels of the Gaussian blur of the anchoring score (``0``, the
        default: the polyphase norms of the image itself).
    bias
        Give the convolution a bias (default). Without one, an empty (zero) patch embeds
        to the zero token.
    anchor_scale
        Peak of the smoothed score channel relative to ``max|x|`` (``anchor_sigma > 0``
        only; its fourth power, 65536 by default, is its weight against the image's own
        channels in the L4 norm).

    Notes
    -----
    Deprecated alias (one release): ``patch`` → ``patch_size`` (argument and attribute).

    Raises
    ------
    ConfigurationError
        For a patch size or anchor stride that does not divide the image size, or a
        negative ``anchor_sigma``.
    ShapeError
        In ``forward``: an input that is not ``(B, in_channels, *image_size)``.
    """

    patch = DeprecatedAttribute("patch_size")

    @renamed_arguments(patch="patch_size")
    def __init__(
        self,
        in_channels: int,
        dim: int,
        patch_size: int,
        image_size: tuple[int, int],
        anchored: bool = True,
        norm: Norm = "l2",
        anchor_stride: int | None = None,
        anchor_sigma: float = 0.0,
        anchor_scale: float = 16.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        size = (int(image_size[0]), int(image_size[1]))
        patch = patch_size
        if patch < 1 or size[0] % patch or size[1] % patch:
            raise ConfigurationError(
                f"PatchEmbedding: expected an image size divisible by patch {patch}, got {size[0]}x{size[1]}"
            )
        stride = patch if anchor_stride is None else int(anchor_stride)
        if stride < 1 or stride % patch or size[0] % stride or size[1] % stride:
            raise ConfigurationError(
                f"PatchEmbedding: expected an anchor stride that is a multiple of patch {patch} and divides "
                f"the image size {size[0]}x{size[1]}, got {anchor_stride}"
            )
        if not (anchor_sigma >= 0.0 and math.isfinite(anchor_sigma)):
            raise ConfigurationError(
                f"PatchEmbedding: expected anchor_sigma as a finite number >= 0, got {anchor_sigma}"
            )
        if not (0.0 <= anchor_scale <= 1e6):
            # the score's fourth power must stay far from float64's overflow
            raise ConfigurationError(
                f"PatchEmbedding: expected anchor_scale as a number in [0, 1e6], got {anchor_scale}"
            )
        self.in_channels, self.dim, self.patch_size, self.image_size = in_channels, dim, patch, size
        self.grid = (size[0] // patch, size[1] // patch)
        self.anchored, self.norm = anchored, norm
        self.anchor_stride, self.anchor_sigma, self.anchor_scale = (
            stride,
            float(anchor_sigma),
            float(anchor_scale),
        )
        self._taps = (
            (_gaussian_taps(self.anchor_sigma, size[0]), _gaussian_taps(self.anchor_sigma, size[1]))
            if self.anchor_sigma > 0
            else None
        )
        self.anchor = PolyphaseAnchor(stride, norm, image_size=size)
        self.conv = nn.Conv2d(in_channels, dim, patch, stride=patch, bias=bias)

    def anchor_score(self, x: torch.Tensor) -> torch.Tensor:
        """The smoothed pixel energy whose polyphase norms pick the phase (``anchor_sigma > 0``).

        Parameters
        ----------
        x
            Images ``(B, C, H, W)``; computed in their dtype, so pass them cast up to
            float64 for the score the anchoring uses (``_anchored`` does, with autocast
            disabled).

        Returns
        -------
        torch.Tensor
            ``(B, 1, H, W)``, scaled per sample to peak at ``anchor_scale · max|x|``.
        """
        if self._taps is None:
            raise ConfigurationError("PatchEmbedding: anchor_score needs anchor_sigma > 0")
        energy = (x * x).sum(dim=1, keepdim=True)
        blurred = _exact_blur(energy, self._taps)
        # per-sample maxima are shift-invariant: the score peaks at anchor_scale · max|x|,
        # so its fourth power outweighs the image's own channels in the anchor's norm
        peak = blurred.amax(dim=(1, 2, 3), keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
        return blurred / peak * (x.abs().amax(dim=(1, 2, 3), keepdim=True) * self.anchor_scale)

    def _anchored(self, x: torch.Tensor) -> torch.Tensor:
        if self._taps is None:
            return self.anchor(x).output  # polyphase norms in float64, outside autocast
        # the score rides along as an extra channel: one anchoring decides and rolls both. In
        # float64 whatever the input's precision, outside autocast (the round trip is exact):
        # a smooth score has small margins between neighbouring phases, which float32, let
        # alone bf16, rounding would turn into ties
        wide = to_score_dtype(x)
        with scoring(x.device):
            score = self.anchor_score(wide)
        with judging_ties_as(x.dtype):  # near-ties against the rounding of the image as received
            anchored = self.anchor(torch.cat([wide, score], dim=1)).output
        return anchored[:, : x.shape[1]].to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed the (anchored) patches as tokens ``(B, N, dim)``."""
        _check_image("PatchEmbedding", x, self.in_channels, self.image_size)
        if self.anchored:
            x = self._anchored(x)
        return rearrange(self.conv(x), "b c y x -> b (y x) c")

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        stride = torus_stride(group, self.image_size)
        out = TokenField(self.grid)
        if stride is None:
            return Contract.unknown(
                f"PatchEmbedding: promises nothing for {group.name}", GridField()
            )
        assert isinstance(group, TorusTranslations)
        if stride % self.patch_size == 0 and (
            not self.anchored or stride % self.anchor_stride == 0
        ):
            # whole patches move, and the anchoring's phase (if any) never changes
            coarse = TorusTranslations(group.height, group.width, stride=stride // self.patch_size)
            return Contract.equivariant(GridField(), out, coarse)
        if not self.anchored:
            return Contract.breaks(
                "strided patch embedding without anchoring is not translation-equivariant: patches "
                f"do not move with shifts that are not multiples of the patch size {self.patch_size}",
                GridField(),
                out,
            )
        if stride != 1:
            return Contract.unknown(
                f"PatchEmbedding: the anchor stride {self.anchor_stride} does not divide the acting stride {stride}",
                GridField(),
            )
        h, w = self.grid
        ratio = self.anchor_stride // self.patch_size
        return Contract.canonicalizing(
            GridField(), out, TorusTranslations(h // ratio, w // ratio, stride=ratio)
        )

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, dim={self.dim}, patch_size={self.patch_size}, "
            f"image_size={self.image_size}, anchored={self.anchored}"
            + (
                f", anchor_stride={self.anchor_stride}"
                if self.anchor_stride != self.patch_size
                else ""
            )
            + (f", anchor_sigma={self.anchor_sigma}" if self.anchor_sigma > 0 else "")
        )
