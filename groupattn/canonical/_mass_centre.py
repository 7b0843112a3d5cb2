"""Centre-of-mass anchoring: roll each image so that its centre of mass sits on the centre pixel.

On the ``S × S`` torus the *circular second moment* of a mass profile ``m`` (length ``S``)
about a pixel ``p`` is ``Σ_n m_n · d(n, p)²``, with ``d`` the distance around the cycle.
For a glyph that spans less than half the torus it is ``M · (p − μ)² + const`` about its
centre of mass ``μ``, so the pixel that minimises it is ``μ`` rounded to the nearest pixel.
The anchor takes, per sample, the row profile (the image summed over channels and
columns) and the column profile, picks for each the pixel of least second moment, and
rolls the image so that this pixel lands on the centre pixel ``(S // 2, S // 2)``: a
digit centred by its centre of mass, as MNIST centres its digits, is not moved at all.

Exact: each sample is quantized to integers (``round(x / max|x| · L)``, an elementwise
map with a per-sample constant, which commutes with every permutation of the pixels) with
``L`` a power of two small enough that every profile and every second moment is an
integer below ``2**53``, so they are computed exactly in float64 whatever order the sums
and the matrix product add their terms in. A shifted input shifts the profiles and the
moments exactly, and the chosen pixel moves with it. The moments about every pixel are
the profile times a symmetric circulant matrix, so a reflection of the image reverses
them exactly, and a quarter turn swaps the row and column profiles (one reversed): on an
*odd* side, where the centre pixel is the centre of every turn and reflection of the
array, the anchor canonicalizes p4 / p4m too. On an even side the turns' centre is a
pixel corner, which no pixel of least moment can be moved to: the output of a turned
input is the output turned *and shifted*, so the anchor fixes the translation only up to
that shift (use [`CentreAnchor`][groupattn.canonical.CentreAnchor] for p4 there).

Ties: where two pixels have the same least moment on an axis (a glyph whose centre of
mass is exactly half-way between two pixels, a constant image) the lower index wins and
the tie (margin 0) is reported to
[`record_canonicalizations`][groupattn.canonical.record_canonicalizations]. Generic
images have no tie.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError, ShapeError
from .._sealed import sealed
from ..contracts import Contract
from ..groups import Group, PointGroup, RotoTranslationGroup, TorusTranslations
from ..positional._constants import constant_cache
from ._argmax import best_and_margin
from ._exact_blur import quantize_per_sample
from ._patch_grid import (
    StridedRotoTranslationGroup,
    _centre_score_device,
    _check_input,
    torus_anchor_contract,
)
from ._polyphase import _gather_roll
from ._precision import score_dtype, score_source, scoring
from ._record import recording, report_scores
from ._types import Canonicalized

__all__ = ["CentreOfMassAnchor", "centre_of_mass_anchor", "centre_of_mass_scores"]

#: The fewest quantization levels (bits) the exact scores may leave a pixel.
_MIN_LEVEL_BITS = 8


def _check_size(module: str, size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ConfigurationError(f"{module}: expected an image size as an int >= 1, got {size!r}")
    return int(size)


@constant_cache(maxsize=32)
def _moment_matrix(size: int, channels: int) -> tuple[torch.Tensor, float]:
    """``(minus_moments, levels)`` for a ``size × size`` image with ``channels`` channels.

    ``minus_moments[n, p] = −d(n, p)²`` (float64, CPU; symmetric and circulant), and
    ``levels`` the power of two that keeps every profile and moment an integer below
    ``2**53`` for pixels quantized to ``|q| ≤ levels``.
    """
    # |profile| ≤ levels · C · S and |moment| ≤ |profile|max · Σ_n d(n, p)², checked before
    # anything is built
    bound = channels * size * sum(min(n, size - n) ** 2 for n in range(size))
    bits = 52 - max(bound, 1).bit_length()
    if bits < _MIN_LEVEL_BITS:
        raise ShapeError(
            f"CentreOfMassAnchor: expected an image small enough for exact scores "
            f"(channels · S · Σ d² below 2**{52 - _MIN_LEVEL_BITS}), got {channels} channels "
            f"of {size}x{size}"
        )
    offsets = torch.arange(size)
    distance = torch.remainder(offsets[:, None] - offsets[None, :], size)
    distance = torch.minimum(distance, size - distance)
    return (-(distance * distance)).to(torch.float64), 2.0**bits


def _check_image(module: str, x: torch.Tensor) -> int:
    _check_input(module, x, 1)  # a real tensor, a batch of square images
    if int(x.shape[1]) == 0:
        raise ShapeError(f"{module}: expected images with at least one channel, got 0 channels")
    return int(x.shape[2])


def _mass_scores(
    x: torch.Tensor, with_scale: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``centre_of_mass_scores`` after the checks, and (``with_scale``) each sample's
    sensitivity to rounding of its pixels: the largest moment of the magnitudes ``|q|``,
    ``(B,)`` (signed pixels cancel in the scores, not in their rounding)."""
    c, side = int(x.shape[1]), int(x.shape[2])
    matrix, levels = _moment_matrix(side, c)
    device = _centre_score_device(x.device)
    with scoring(device), torch.no_grad():
        source, dtype = score_source(x.detach().to(device))
        q = quantize_per_sample(source, levels, dtype)  # integers, |q| ≤ levels
        matrix = matrix.to(device=device, dtype=dtype)
        scale = None
        if with_scale:
            magnitude = q.abs().sum(dim=1)
            both = torch.stack([magnitude.sum(dim=2), magnitude.sum(dim=1)], dim=1)
            scale = torch.matmul(both, matrix).abs().amax(dim=(1, 2))
        if c > 1:
            q = q.sum(dim=1, keepdim=True)  # exact: integers far below 2**53
        profiles = torch.stack([q.sum(dim=(1, 3)), q.sum(dim=(1, 2))], dim=1)  # (B, 2, S)
        return torch.matmul(profiles, matrix), scale


def centre_of_mass_scores(x: torch.Tensor) -> torch.Tensor:
    """Minus the circular second moment of each sample's row and column mass about every pixel.

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, real.

    Returns
    -------
    torch.Tensor
        ``(B, 2, S)`` in float64 (the score dtype; on a device without float64 they are
        computed on the CPU and stay there): ``[:, 0, p]`` is ``−Σ_n m_n d(n, p)²`` for the
        row profile ``m`` of the image quantized per sample to integers (see the module
        docs), ``[:, 1, p]`` the same for the column profile. Integers, exact: a moved
        input moves them exactly; the best pixel is the centre of mass rounded (for a
        glyph spanning less than half the torus). NaN for a sample with a NaN pixel.

    Raises
    ------
    GroupError
        For an input that is not a batch of square images ``(B, C, S, S)`` with ``C ≥ 1``.
    DtypeError
        For a complex input.
    """
    _check_image("centre_of_mass_scores", x)
    return _mass_scores(x)[0]


def _mass_anchor(x: torch.Tensor) -> Canonicalized:
    """[`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor] after the checks."""
    b, _, side, _ = x.shape
    reported = recording()
    scores, scale = _mass_scores(x, with_scale=reported)
    # one decision per axis (rows, then columns); reported once per sample, with the
    # smaller margin, as exact integer scores
    index, margin = best_and_margin(scores.reshape(2 * b, side))
    index, margin = index.view(b, 2), margin.view(b, 2).amin(dim=1)
    if reported:
        report_scores(scores.reshape(b, 2 * side), margin, x.dtype, scale=scale, exact=True)
    frame = torch.remainder(index.to(x.device) - side // 2, side)  # the best pixel goes to S // 2
    margin = margin.to(x.device, score_dtype(x.device))
    return Canonicalized(_gather_roll(x, frame[:, 0], frame[:, 1], None), frame, margin)


def centre_of_mass_anchor(x: torch.Tensor) -> Canonicalized:
    """Roll each sample so that its centre of mass, rounded to a pixel, sits on the centre pixel.

    Per axis, the pixel ``p`` of least circular second moment of the image's mass profile
    (see [`centre_of_mass_scores`][groupattn.canonical.centre_of_mass_scores]); the image is
    rolled by ``−(p − S // 2) mod S`` along that axis. Exact integer scores: an input
    shifted by any translation of the torus gives the same output bit for bit (and, for an
    odd ``S``, an input turned or reflected about the centre gives the output turned or
    reflected), up to reported ties.

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, real, ``C ≥ 1``; any batch size.

    Returns
    -------
    Canonicalized
        ``output`` ``(B, C, S, S)`` in the dtype of ``x`` (``x`` rolled by ``(−a, −b)``);
        ``frame`` long ``(B, 2)`` the roll ``(a, b)``; ``margin`` ``(B,)`` float64 the
        smaller of the two axes' margins (0 on a tie, where the lower pixel wins; NaN for
        a sample with a NaN pixel).

    Raises
    ------
    GroupError
        For an input that is not a batch of square images.
    ShapeError
        For images with no channel, or too large for exact scores (``C · S · Σ_n d(n, 0)²``,
        about ``C · S⁴ / 12``, from ``2**44`` on: 1 channel beyond 3,811 × 3,811, 3
        channels beyond 2,896 × 2,896), raised before any work.
    DtypeError
        For a complex input.
    """
    _check_image("centre_of_mass_anchor", x)
    return _mass_anchor(x)


@sealed
class CentreOfMassAnchor(nn.Module):
    """Anchor the whole translation by the centre of mass (see [`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor]).

    Cheaper than [`CentreAnchor`][groupattn.canonical.CentreAnchor] (two mass profiles and a
    product with an ``S × S`` matrix instead of a blurred image), and it leaves an image
    that is centred by its centre of mass where it is, where ``CentreAnchor`` moves it by
    the offset of its blurred maximum (and, on an even side, to a pixel corner).

    Contract (images ``GridField → GridField``), on the ``S × S`` torus:

    * under ``TorusTranslations(S, S)``: *canonicalizing* with the trivial output group
      ``TorusTranslations(1, 1, stride=S)`` — the output is invariant;
    * ``S`` odd, under ``RotoTranslationGroup(H, S)`` (p4, p4m), under
      ``StridedRotoTranslationGroup(H, S, stride)`` or under ``H`` alone (``H ⊆ D4``):
      *canonicalizing* with output group ``StridedRotoTranslationGroup(H, S, stride=S)``
      (the turns and reflections about the centre pixel);
    * ``S`` even, under those groups: *canonicalizing* with output group
      ``RotoTranslationGroup(H, S)`` — the turns about the image centre (a pixel corner)
      do not fix the centre pixel, so the output of a turned input is the output turned
      *and shifted* (by up to a pixel on each axis): a body after it must be invariant to
      p4 / p4m itself for the whole to be (use
      [`CentreAnchor`][groupattn.canonical.CentreAnchor], or an odd side, to leave only
      the turns);
    * anything else: *unknown*.

    Shapes: ``(B, C, S, S) → Canonicalized(output (B, C, S, S), frame (B, 2), margin (B,))``;
    scores in float64 with autocast disabled (on a device without float64, Apple ``mps``,
    on the CPU: a host round trip), the output in the input's dtype.

    Parameters
    ----------
    image_size
        ``S`` (any ``S ≥ 1``); inputs of another side are rejected.

    Raises
    ------
    ConfigurationError
        For an ``image_size`` that is not an int ``≥ 1``.
    """

    def __init__(self, image_size: int) -> None:
        super().__init__()
        self.image_size = _check_size("CentreOfMassAnchor", image_size)

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Anchor images ``(B, C, S, S)``; see [`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor]."""
        side = _check_image("CentreOfMassAnchor", x)
        if side != self.image_size:
            raise ShapeError(
                f"CentreOfMassAnchor: expected images of side image_size={self.image_size}, "
                f"got {side}x{side}"
            )
        return _mass_anchor(x)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        size = self.image_size

        def turned(point: PointGroup) -> Group:
            # on an even side the turns are about a pixel corner: the output of a moved
            # input is the output turned (reflected) and shifted — by some translation
            if size % 2 == 0:
                return RotoTranslationGroup(point, size)
            return StridedRotoTranslationGroup(point, size, size)

        return torus_anchor_contract(
            "CentreOfMassAnchor", group, size, TorusTranslations(1, 1, stride=size), turned
        )

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}"
