"""Orientation canonicalization: turn each image by the angle of its fourth angular moment.

A C4- or D4-invariant network is exactly invariant to quarter turns but only learns what it
sees about the angles between them: trained on upright digits, it meets a digit turned by
30° as a new shape. Canonicalizing the orientation first closes that gap: each image is
rotated (bilinear interpolation, about the image centre) by minus the angle of its
*fourth angular moment*

``m = Σ_p I(p) · r(p) · e^{4iφ(p)}``,   ``θ = arg(m) / 4 ∈ (−π/4, π/4]``,

(polar coordinates ``(r, φ)`` of the pixel centre ``p`` about the image centre, ``I`` summed
over channels). Rotating the image by ``α`` multiplies ``m`` by ``e^{4iα}``, so the
canonical image of a rotated input is the canonical image of the original up to a quarter
turn (and the rounding of the interpolation) — which the C4 / D4 body absorbs.

Exact under D4. The moment and the interpolation are arranged so that an exact quarter
turn or reflection of the input about its centre gives the same canonical image turned or
reflected **bit for bit** (so the canonicalizer is *equivariant* under C4, and a C4 /
D4-invariant body after it stays exactly invariant). One exception under reflections: at
the branch cut ``θ = ±π/4`` (``Im m = 0``, ``Re m < 0``, e.g. an image symmetric about a
diagonal) a reflected input keeps ``θ = π/4`` where ``−π/4`` would mirror it, and its
canonical image is the mirrored one turned by a quarter turn (equal to rounding, not bit for
bit: ``cos(π/4)`` and ``sin(π/4)`` differ in the last bit):

- the moment is summed from the C4 orbit sums of the image (opposite pixels first,
  ``(I(p) + I(R²p)) + (I(Rp) + I(R³p))``: commutative additions) over one quadrant, its
  real part from ``orbit(p) + orbit(p*)`` and its imaginary part from
  ``orbit(p) − orbit(p*)`` (``p*`` the mirror image of ``p`` in the diagonal), so a quarter
  turn leaves ``m`` unchanged bit for bit and a reflection conjugates it exactly;
- the sample position of output pixel ``q`` is ``(c·x − s·y, s·x + c·y)`` in centred
  coordinates, which a quarter turn or reflection of ``q`` moves exactly (negations and
  commutative sums), and each bilinear weight ``max(0, 1 − |u − c|)`` depends only on a
  distance that a mirror image keeps; the four weighted neighbours are added diagonal
  pairs first.

Where a sample position lies within rounding of a pixel-centre line, ``floor`` may choose
the neighbours on either side of it for the turned image; a bilinear weight below 1e-9
(float64; 1e-4 in a float32 score dtype) is therefore taken as exactly 0, so that both
choices keep the same non-zero terms (a found attack: an angle of ~1e-16 rad made a zero
pixel ~1e-17 in one orientation and 0 in the other, and a body thresholding at 0 turned
that into a 9 % change). Rotations by other angles are canonicalized up to the
interpolation (the canonical images of an image and of its 30° turn agree to the blur of
two bilinear resamplings, not exactly).

An image whose fourth moment vanishes (a blank image, a shape with a 4-fold symmetry)
has no orientation: ``θ = 0`` and the margin is 0, reported like a tie.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._errors import ShapeError
from .._sealed import sealed
from ..actions import GridField
from ..contracts import Contract
from ..groups import CyclicGroup, DihedralGroup, Group, PointGroup, RotoTranslationGroup
from ._patch_grid import StridedRotoTranslationGroup
from ._precision import scoring, to_score_dtype
from ._record import report_scores
from ._types import Canonicalized

__all__ = ["OrientationCanonicalizer", "orientation_canonicalize"]


def _check_orientation_input(module: str, x: torch.Tensor) -> int:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{module}: expected a tensor (B, C, S, S), got {type(x).__name__}")
    if x.dim() != 4 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"{module}: expected square images (B, C, S, S), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{module}: expected a floating-point image, got {x.dtype}")
    side = int(x.shape[-1])
    if side < 2 or side % 2:
        raise ShapeError(f"{module}: expected an even image side >= 2, got {side}x{side}")
    return side


def _centred(side: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Pixel-centre coordinates about the image centre: ``k − (S − 1)/2`` (exact half-integers)."""
    return torch.arange(side, dtype=dtype, device=device) - (side - 1) / 2


def _fourth_moment(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Real and imaginary parts of ``m`` and the mass ``Σ I·r`` per sample, in ``x``'s dtype.

    ``x``: ``(B, C, S, S)`` in the score dtype. Rows are ``y`` (downwards), columns ``x``.
    """
    side = x.shape[-1]
    half = side // 2
    image = x.sum(1)  # (B, S, S): the same channel order at every pixel
    opposite = image + torch.rot90(image, 2, dims=(-2, -1))
    across = torch.rot90(image, 1, dims=(-2, -1)) + torch.rot90(image, 3, dims=(-2, -1))
    orbit = (opposite + across)[:, half:, half:]  # one quadrant: x > 0, y > 0
    mirrored = orbit.transpose(-2, -1)  # p* (x and y exchanged)
    c = _centred(side, x.dtype, x.device)[half:]
    y, xx = c[:, None], c[None, :]
    r2 = xx * xx + y * y
    r = r2.sqrt()
    # r · e^{4iφ} = r · ((x⁴ − 6x²y² + y⁴) + i · 4xy(x² − y²)) / r⁴
    cos4 = (xx**4 + y**4 - 6 * xx * xx * y * y) / (r2 * r2)
    sin4 = 4 * xx * y * (xx * xx - y * y) / (r2 * r2)
    real = ((orbit + mirrored) * (r * cos4)).sum(dim=(-2, -1)) / 2
    imaginary = ((orbit - mirrored) * (r * sin4)).sum(dim=(-2, -1)) / 2
    # the scale of |m|: Σ |I|·r (absolute values, so that signed inputs have a scale too)
    magnitude = torch.rot90(image.abs(), 2, dims=(-2, -1)) + image.abs()
    magnitude = magnitude + (
        torch.rot90(image.abs(), 1, dims=(-2, -1)) + torch.rot90(image.abs(), 3, dims=(-2, -1))
    )
    quadrant = magnitude[:, half:, half:]
    mass = ((quadrant + quadrant.transpose(-2, -1)) * r).sum(dim=(-2, -1)) / 2
    return real, imaginary, mass


#: Bilinear weights below this are taken as 0 (see ``_rotate``): far above the rounding of
#: a sample position (~1e-14 in float64 on images of a few hundred pixels), far below any
#: weight that matters.
_SNAP = {torch.float64: 1e-9, torch.float32: 1e-4}


def _rotate(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """``out(q) = x(R_θ q)`` (bilinear, zero outside): each image turned by ``−θ``.

    ``x``: ``(B, C, S, S)`` and ``angle``: ``(B,)``, both in the score dtype.
    """
    b, channels, side, _ = x.shape
    c = _centred(side, x.dtype, x.device)
    qy, qx = c[:, None], c[None, :]  # (S, 1), (1, S)
    cos, sin = angle.cos()[:, None, None], angle.sin()[:, None, None]
    ux = cos * qx - sin * qy  # (B, S, S)
    uy = sin * qx + cos * qy
    offset = (side - 1) / 2
    left = torch.floor(ux + offset)  # index of the neighbour at or left of ux
    top = torch.floor(uy + offset)
    flat = x.reshape(b, channels, side * side)

    # a weight within rounding of 0 is 0: where a sample position lies within rounding of a
    # pixel-centre line, ``floor`` may pick the neighbours on either side of it for a
    # turned image; with the tiny weight snapped, both choices keep the same non-zero terms
    snap = _SNAP[x.dtype] if x.dtype in _SNAP else 1e-4

    def axis_weight(u: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        weight = (1 - (u - (index - offset)).abs()).clamp_min(0)
        return torch.where(weight < snap, torch.zeros_like(weight), weight)

    def corner(col: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """Weighted value of one neighbour: ``(B, C, S, S)``."""
        weight = axis_weight(ux, col) * axis_weight(uy, row)
        inside = (col >= 0) & (col < side) & (row >= 0) & (row < side)
        index = (row.clamp(0, side - 1) * side + col.clamp(0, side - 1)).long()
        values = flat.gather(2, index.reshape(b, 1, -1).expand(b, channels, -1))
        values = values.reshape(b, channels, side, side)
        return values * torch.where(inside, weight, torch.zeros_like(weight))[:, None]

    # diagonal pairs first: a quarter turn or reflection maps diagonals onto diagonals
    return (corner(left, top) + corner(left + 1, top + 1)) + (
        corner(left + 1, top) + corner(left, top + 1)
    )


def orientation_canonicalize(x: torch.Tensor) -> Canonicalized:
    """Turn each image by minus the angle of its fourth angular moment (see [`OrientationCanonicalizer`][groupattn.canonical.OrientationCanonicalizer]).

    Parameters
    ----------
    x
        ``(B, C, S, S)`` floating images, ``S`` even.

    Returns
    -------
    Canonicalized
        ``output`` ``(B, C, S, S)`` in ``x``'s dtype; ``frame`` ``(B,)`` the angle ``θ`` in
        radians (score dtype), in ``(−π/4, π/4]``; ``margin`` ``(B,)`` the strength
        ``|m| / Σ |I|·r`` in ``[0, 1]`` (0: no orientation, ``θ = 0``; reported as a tie to
        [`record_canonicalizations`][groupattn.canonical.record_canonicalizations]).

    Raises
    ------
    ShapeError
        For images that are not square with an even side.
    TypeError
        For a non-tensor or a non-floating tensor.
    """
    _check_orientation_input("orientation_canonicalize", x)
    if x.shape[0] == 0:  # an empty batch: nothing to turn
        empty = torch.zeros(0, dtype=to_score_dtype(x[:0]).dtype, device=x.device)
        return Canonicalized(x.clone(), empty, empty.clone())
    with scoring(x.device):
        wide = to_score_dtype(x.detach())
        real, imaginary, mass = _fourth_moment(wide)
        angle = torch.atan2(imaginary, real) / 4
        # a non-finite image has no orientation: leave it where it is (its values, NaN or
        # infinite, pass through; the strength is NaN and reported as non-finite)
        angle = torch.where(angle.isfinite(), angle, torch.zeros_like(angle))
        strength = torch.hypot(real, imaginary) / mass.clamp_min(torch.finfo(mass.dtype).tiny)
        strength = torch.where(mass > 0, strength, torch.zeros_like(strength))
        rotated = _rotate(to_score_dtype(x), angle)
    # the strength plays the margin: near 0 the angle is decided by rounding
    report_scores(torch.stack([strength, torch.zeros_like(strength)], dim=1), strength, x.dtype)
    return Canonicalized(rotated.to(x.dtype), angle, strength)


@sealed
class OrientationCanonicalizer(nn.Module):
    """Rotate each image to the canonical orientation of its fourth angular moment (any angle, modulo quarter turns).

    Put it in front of a C4- or D4-invariant body (``GroupViT``, ``GSANet``): the body
    absorbs the quarter turn the canonicalizer leaves, and the network becomes
    (approximately, through bilinear interpolation) invariant to rotations by *any* angle
    — what a model trained on upright images needs to read rotated ones (the
    upright-train / rotated-test protocol). See the module docstring of
    ``groupattn.canonical._orientation`` (reproduced in the API reference) for why an exact
    quarter turn or reflection of the input moves the output bit for bit.

    The angle is ``θ = arg(Σ_p I(p)·r(p)·e^{4iφ(p)}) / 4`` (polar coordinates about the
    image centre, channels summed, computed in the score dtype with autocast off), and the
    output is the image turned by ``−θ`` about its centre, bilinear, zero outside. The
    angle is not differentiated (gradients reach the input through the interpolated
    values only).

    Contract: *canonicalizing* ``GridField → GridField`` under ``C1``, ``C2``, ``C4`` about
    the image centre with the group itself as output group (the output moves by the same
    element, bit for bit: equivariant, with the angle as frame); under ``D1``, ``D2``,
    ``D4`` with output group ``D4``
    (a reflection moves the output by the same reflection — except at the branch cut
    ``θ = ±π/4``, e.g. for an image symmetric about a diagonal, where it moves it by the
    reflection and a quarter turn, to rounding: a D4-invariant body absorbs both); the same under what
    [`CentreAnchor`][groupattn.canonical.CentreAnchor] leaves of p4 / p4m,
    ``StridedRotoTranslationGroup(H, S, stride=S)``;
    *broken* under translations (the moment is taken about the image centre: anchor the
    translation first, e.g. with [`CentreAnchor`][groupattn.canonical.CentreAnchor]);
    nothing is promised for other groups (rotations by other angles are only approximately
    canonicalized).

    Shapes: ``(B, C, S, S) → Canonicalized(output (B, C, S, S), frame (B,) angles,
    margin (B,))``; ``S`` even.

    Parameters
    ----------
    image_size
        ``S`` (checked in ``forward``), even; ``None`` accepts any even side.

    Raises
    ------
    ConfigurationError
        For an odd or non-positive ``image_size``.
    """

    def __init__(self, image_size: int | None = None) -> None:
        super().__init__()
        from .._errors import ConfigurationError

        if image_size is not None and (
            not isinstance(image_size, int)
            or isinstance(image_size, bool)
            or image_size < 2
            or image_size % 2
        ):
            raise ConfigurationError(
                f"OrientationCanonicalizer: expected an even image size >= 2 (or None), got {image_size!r}"
            )
        self.image_size = image_size

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Canonicalize images ``(B, C, S, S)``; see [`orientation_canonicalize`][groupattn.canonical.orientation_canonicalize]."""
        side = _check_orientation_input("OrientationCanonicalizer", x)
        if self.image_size is not None and side != self.image_size:
            raise ShapeError(
                f"OrientationCanonicalizer: expected images of side image_size={self.image_size}, "
                f"got {side}x{side}"
            )
        return orientation_canonicalize(x)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        field = GridField()
        name = "OrientationCanonicalizer"
        point: Group = group
        if isinstance(group, RotoTranslationGroup) and getattr(group, "stride", 1) == group.size:
            # translations by multiples of the side: the identity of the torus (what a
            # CentreAnchor leaves of p4 / p4m is the turns and reflections about the centre)
            point = group.point_group
        if isinstance(point, CyclicGroup) and point.n in (1, 2, 4):
            # the output moves by the same element (bit for bit): canonicalizing onto the
            # group itself, with the angle as the frame
            return Contract.canonicalizing(field, field, output_group=group)
        if isinstance(point, DihedralGroup) and point.n in (1, 2, 4):
            # at the branch cut (θ = ±π/4) a reflection picks the other end: the output
            # moves by the reflection, or by the reflection and a quarter turn
            full = DihedralGroup(4)
            output_group: Group = (
                full
                if point is group
                else StridedRotoTranslationGroup(full, group.size, stride=group.size)  # type: ignore[attr-defined]
            )
            return Contract.canonicalizing(field, field, output_group=output_group)
        if isinstance(group, PointGroup):
            return Contract.unknown(
                f"{name}: promises nothing for {group.name}; expected a point group of the square "
                f"grid (C1, C2, C4, D1, D2, D4)",
                field,
            )
        from ..actions import point_group_of

        try:
            point_group_of(group)
        except Exception:  # not a group of the plane
            return Contract.unknown(f"{name}: promises nothing for {group.name}", field)
        return Contract.breaks(
            f"{name}: turns each image about the image centre, which does not move with "
            f"translations ({group.name}); anchor the translation first (CentreAnchor)",
            field,
            field,
        )

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}"
