"""Centre-of-mass anchoring: roll each image so that its centre of mass sits at the centre (a pixel, or a pixel corner).

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
that shift. With ``target="corner"`` the candidates are the pixel corners ``p + ½`` instead
(scores: four times the moments, ``Σ_n m_n (2 d(n, p + ½))²``, integers) and the best one
is rolled to the corner ``S // 2 − ½``: on an even side that is the image centre, about
which every turn and reflection of the array acts, and the anchor canonicalizes p4 / p4m
there (on an odd side the corner target leaves the shift instead).

Ties: where two candidates have the same least moment on an axis (a glyph whose centre
of mass is exactly half-way between two pixels, or exactly on a pixel for the corner
target; a constant image) the lower index wins and
the tie (margin 0) is reported to
[`record_canonicalizations`][groupattn.canonical.record_canonicalizations]. Generic
images have no tie.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import torch
from torch import nn

from .._errors import ConfigurationError, DtypeError, ShapeError
from .._sealed import sealed
from ..contracts import Contract
from ..groups import Group, PointGroup, RotoTranslationGroup, TorusTranslations
from ..positional._constants import constant_cache
from ._patch_grid import (
    StridedRotoTranslationGroup,
    _centre_score_device,
    _check_input,
    torus_anchor_contract,
)
from ._polyphase import _gather_roll
from ._precision import score_dtype, score_source
from ._record import recording, report_scores
from ._types import Canonicalized

__all__ = ["CentreOfMassAnchor", "centre_of_mass_anchor", "centre_of_mass_scores"]

#: The fewest quantization levels (bits) the exact scores may leave a pixel.
_MIN_LEVEL_BITS = 8


def _check_size(module: str, size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ConfigurationError(f"{module}: expected an image size as an int >= 1, got {size!r}")
    return int(size)


#: Where the anchor puts the centre of mass: on the centre pixel, or on the pixel corner
#: just above and left of it (the image centre on an even side).
TARGETS = ("pixel", "corner")


def _check_target(module: str, target: Any) -> bool:
    """``target == "corner"`` for a valid ``target``; a ``ConfigurationError`` otherwise."""
    if not isinstance(target, str) or target not in TARGETS:
        raise ConfigurationError(f"{module}: expected target 'pixel' or 'corner', got {target!r}")
    return target == "corner"


def _distances(size: int, corner: bool) -> torch.Tensor:
    """``(S, S)`` long: the circular distance from pixel ``n`` (rows) to pixel ``p``
    (columns), or (``corner``) *twice* the distance from pixel ``n`` to the corner ``p + ½``
    between pixels ``p`` and ``p + 1`` (in half pixels, an integer)."""
    offsets = torch.arange(size)
    if not corner:
        distance = torch.remainder(offsets[:, None] - offsets[None, :], size)
        return torch.minimum(distance, size - distance)
    doubled = torch.remainder(2 * (offsets[:, None] - offsets[None, :]) - 1, 2 * size)
    return torch.minimum(doubled, 2 * size - doubled)


@functools.lru_cache(maxsize=64)
def _level_bits(size: int, channels: int, corner: bool) -> int:
    """The quantization bits that keep every profile and moment below ``2**52``."""
    # |profile| ≤ levels · C · S and |moment| ≤ |profile|max · Σ_n D(n, p)² (the same for
    # every p: circulant)
    if corner:
        spread = sum(min(k, 2 * size - k) ** 2 for k in range(1, 2 * size, 2))
    else:
        spread = sum(min(n, size - n) ** 2 for n in range(size))
    return 52 - max(channels * size * spread, 1).bit_length()


def _refuse_size(module: str, size: int, channels: int) -> None:
    raise ShapeError(
        f"{module}: expected an image small enough for exact scores "
        f"(channels · S · Σ d² below 2**{52 - _MIN_LEVEL_BITS}), got {channels} channels "
        f"of {size}x{size}"
    )


@constant_cache(maxsize=32)
def _moment_matrix(size: int, channels: int, corner: bool = False) -> tuple[torch.Tensor, float]:
    """``(minus_moments, levels)`` for a ``size × size`` image with ``channels`` channels.

    ``minus_moments[n, p] = −d(n, p)²`` (float64, CPU; circulant) for the distance from
    pixel ``n`` to pixel ``p``, or (``corner``) ``−(2 d)²`` for the distance to the corner
    ``p + ½`` (four times the moment: integers); and ``levels`` the power of two that
    keeps every profile and moment an integer below ``2**52`` for pixels quantized to
    ``|q| ≤ levels`` (below ``2**53`` for ``|q| ≤ 2 · levels``). Called after
    ``_check_image``, which refuses sizes left with fewer than ``_MIN_LEVEL_BITS`` bits.
    """
    distance = _distances(size, corner)
    return (-(distance * distance)).to(torch.float64), 2.0 ** _level_bits(size, channels, corner)


def _check_image(module: str, x: torch.Tensor, corner: bool) -> int:
    """The side ``S`` of a batch of images the anchor can score, before any work: a real,
    dense tensor of square images with ``S ≥ 1`` and ``C ≥ 1``, small enough for exact
    scores."""
    _check_input(module, x, 1)  # a real tensor, a batch of square images
    if x.layout != torch.strided:
        raise DtypeError(f"{module}: expected a dense (strided) tensor, got layout {x.layout}")
    side, channels = int(x.shape[2]), int(x.shape[1])
    if side == 0:
        raise ShapeError(f"{module}: expected images of side >= 1, got 0x0")
    if channels == 0:
        raise ShapeError(f"{module}: expected images with at least one channel, got 0 channels")
    if _level_bits(side, channels, corner) < _MIN_LEVEL_BITS:
        _refuse_size(module, side, channels)
    return side


#: The least positive float64: the quantization step of an all-zero sample (which stays 0).
_LEAST_STEP = 2.0**-1074


def _mass_scores(
    x: torch.Tensor, corner: bool, with_scale: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``centre_of_mass_scores`` after the checks, and (``with_scale``) each sample's
    sensitivity to rounding of its pixels: the largest moment of the magnitudes ``|q|``,
    ``(B,)`` (signed pixels cancel in the scores, not in their rounding).

    The quantization is ``round(x / step)`` with the per-sample step ``max|x| / levels``
    (``levels`` a power of two: the step is exact unless it is subnormal, and then it is
    at least half the exact one, so ``|q| ≤ 2 · levels``, within the bound's factor of two
    below ``2**53``). An all-zero sample stays zeros (its step is the least positive
    float64); a sample with a NaN or infinite pixel gets NaN scores. Fourteen operations
    for one-channel images: at the models' sizes the cost is their number, not their
    arithmetic.
    """
    b, c, side = int(x.shape[0]), int(x.shape[1]), int(x.shape[2])
    matrix, levels = _moment_matrix(side, c, corner)
    device = _centre_score_device(x.device)
    # no autocast context: everything below is float64 (a float64 device is chosen), which
    # autocast never casts
    with torch.no_grad():
        source, dtype = score_source(x.detach().to(device))
        # max |x| per sample in x's own dtype (the maximum of a cast-up tensor is the
        # cast-up maximum), the step in the score dtype
        step = source.abs().amax(dim=(1, 2, 3)).to(dtype).div_(levels).clamp_(min=_LEAST_STEP)
        q = torch.div(source, step.view(b, 1, 1, 1)).round_()  # integers, |q| ≤ 2 · levels
        matrix = matrix.to(device=device, dtype=dtype)
        scale = None
        if with_scale:
            magnitude = q.abs().sum(dim=1)
            both = torch.cat([magnitude.sum(dim=2), magnitude.sum(dim=1)], dim=1)
            scale = torch.matmul(both.view(b, 2, side), matrix).abs().amax(dim=(1, 2))
        q = q.sum(dim=1) if c > 1 else q.view(b, side, side)  # exact: integers below 2**53
        # the row profile (summed over columns), then the column profile: (B, 2, S)
        profiles = torch.cat([q.sum(dim=2), q.sum(dim=1)], dim=1).view(b, 2, side)
        return torch.matmul(profiles, matrix), scale


def centre_of_mass_scores(x: torch.Tensor, *, target: str = "pixel") -> torch.Tensor:
    """Minus the circular second moment of each sample's row and column mass about every candidate.

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, real.
    target
        ``"pixel"``: the candidates are the pixels ``p`` (moments ``Σ_n m_n d(n, p)²``);
        ``"corner"``: the pixel corners ``p + ½`` between pixels ``p`` and ``p + 1`` (mod
        ``S``), with four times the moment, ``Σ_n m_n (2 d(n, p + ½))²``, an integer.

    Returns
    -------
    torch.Tensor
        ``(B, 2, S)`` in float64 (the score dtype; on a device without float64 they are
        computed on the CPU and stay there): ``[:, 0, p]`` is minus the moment about
        candidate ``p`` of the row profile ``m`` of the image quantized per sample to
        integers (see the module docs), ``[:, 1, p]`` the same for the column profile.
        Integers, exact: a moved input moves them exactly; the best candidate is the
        centre of mass rounded to a pixel (to a corner) for a glyph spanning less than
        half the torus. NaN for a sample with a NaN or infinite pixel.

    Raises
    ------
    GroupError
        For an input that is not a batch of square images ``(B, C, S, S)``.
    ShapeError
        For images with no channel, of side 0, or too large for exact scores (see
        [`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor]).
    DtypeError
        For a complex or sparse input, or one that is not a tensor.
    ConfigurationError
        For a ``target`` other than ``"pixel"`` or ``"corner"``.
    """
    corner = _check_target("centre_of_mass_scores", target)
    _check_image("centre_of_mass_scores", x, corner)
    return _mass_scores(x, corner)[0]


def _mass_anchor(x: torch.Tensor, corner: bool) -> Canonicalized:
    """[`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor] after the checks."""
    b, _, side, _ = x.shape
    reported = recording()
    scores, scale = _mass_scores(x, corner, with_scale=reported)
    with torch.no_grad():
        # one decision per axis (rows, then columns), the first best pixel on a tie
        # (torch.max's index, as argmax's); the margin against the best of the others
        best, index = torch.max(scores, dim=2)  # (B, 2)
        rest = scores.scatter(2, index.unsqueeze(2), float("-inf"))
        # reported once per sample, with the smaller margin, as exact integer scores
        margin = (best - rest.amax(dim=2)).amin(dim=1)
        if reported:
            report_scores(scores.view(b, 2 * side), margin, x.dtype, scale=scale, exact=True)
        # the best pixel goes to S // 2; the best corner to the corner before it
        frame = torch.remainder(index.to(x.device) - (side // 2 - int(corner)), side)
        margin = margin.to(x.device, score_dtype(x.device))
    return Canonicalized(_gather_roll(x, frame[:, 0], frame[:, 1], None), frame, margin)


def centre_of_mass_anchor(x: torch.Tensor, *, target: str = "pixel") -> Canonicalized:
    """Roll each sample so that its centre of mass, rounded to a pixel (or a pixel corner), sits at the centre.

    Per axis, the candidate ``p`` of least circular second moment of the image's mass
    profile (see [`centre_of_mass_scores`][groupattn.canonical.centre_of_mass_scores]).
    With ``target="pixel"`` the best pixel is rolled onto the centre pixel ``S // 2``
    (by ``−(p − S // 2) mod S``): an image centred by its centre of mass, as MNIST centres
    its digits, is not moved. With ``target="corner"`` the best corner ``p + ½`` is rolled
    onto the corner ``S // 2 − ½`` (by ``−(p − S // 2 + 1) mod S``), the image centre on
    an even side, about which the quarter turns and reflections of the array act: the
    centre of mass of a glyph spanning less than half the torus ends within half a pixel of
    it on each axis. Exact integer scores: an
    input shifted by any translation of the torus gives the same output bit for bit; an
    input turned or reflected about the image centre gives the output turned or reflected
    when the target is the centre (``"pixel"`` on an odd side, ``"corner"`` on an even
    one), and turned *and shifted* otherwise; up to reported ties.

    Parameters
    ----------
    x
        Images ``(B, C, S, S)``, real, ``C ≥ 1``; any batch size.
    target
        ``"pixel"`` (default) or ``"corner"``.

    Returns
    -------
    Canonicalized
        ``output`` ``(B, C, S, S)`` in the dtype of ``x`` (``x`` rolled by ``(−a, −b)``);
        ``frame`` long ``(B, 2)`` the roll ``(a, b)``; ``margin`` ``(B,)`` float64 the
        smaller of the two axes' margins (0 on a tie, where the lower candidate wins; NaN
        for a sample with a NaN or infinite pixel; ``inf`` for ``S = 1``, where there is a
        single candidate).

    Raises
    ------
    GroupError
        For an input that is not a batch of square images.
    ShapeError
        For images with no channel, of side 0, or too large for exact scores (``C · S · Σ_n d(n, 0)²``,
        about ``C · S⁴ / 12``, from ``2**44`` on: 1 channel beyond 3,811 × 3,811, 3
        channels beyond 2,896 × 2,896; four times that for ``"corner"``: 1 channel
        beyond 2,695 × 2,695, 3 channels beyond 2,048 × 2,048), raised before any work.
    DtypeError
        For a complex or sparse input, or one that is not a tensor.
    ConfigurationError
        For a ``target`` other than ``"pixel"`` or ``"corner"``.
    """
    corner = _check_target("centre_of_mass_anchor", target)
    _check_image("centre_of_mass_anchor", x, corner)
    return _mass_anchor(x, corner)


@sealed
class CentreOfMassAnchor(nn.Module):
    """Anchor the whole translation by the centre of mass (see [`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor]).

    Cheaper than [`CentreAnchor`][groupattn.canonical.CentreAnchor] (two mass profiles and a
    product with an ``S × S`` matrix instead of a blurred image), and it places an image by
    its centre of mass, where ``CentreAnchor`` places it by its blurred maximum: with
    ``target="pixel"`` an image centred by its centre of mass stays where it is; with
    ``target="corner"`` the centre of mass of a glyph spanning less than half the torus
    ends within half a pixel of the image centre of an even side on each axis
    (``CentreAnchor`` moves a centred digit by up to 2 pixels).

    Contract (images ``GridField → GridField``), on the ``S × S`` torus:

    * under ``TorusTranslations(S, S)``: *canonicalizing* with the trivial output group
      ``TorusTranslations(1, 1, stride=S)`` — the output is invariant;
    * when the target is the image centre — ``"pixel"`` on an odd ``S``, ``"corner"`` on
      an even ``S`` — under ``RotoTranslationGroup(H, S)`` (p4, p4m), under
      ``StridedRotoTranslationGroup(H, S, stride)`` or under ``H`` alone (``H ⊆ D4``):
      *canonicalizing* with output group ``StridedRotoTranslationGroup(H, S, stride=S)``
      (the turns and reflections about the image centre): a body invariant to those with
      absolute positions (``GroupViT``, ``GroupSwin``) makes the whole p4 / p4m-invariant;
    * otherwise (``"pixel"`` on an even ``S``, ``"corner"`` on an odd ``S``), under those
      groups: *canonicalizing* with output group ``RotoTranslationGroup(H, S)`` — the turns
      about the image centre do not fix the target, so the output of a turned input is the
      output turned *and shifted* (by up to a pixel on each axis): a body after it must be
      invariant to p4 / p4m itself for the whole to be;
    * anything else: *unknown*.

    Shapes: ``(B, C, S, S) → Canonicalized(output (B, C, S, S), frame (B, 2), margin (B,))``;
    scores in float64 (on a device without float64, Apple ``mps``, on the CPU: a host
    round trip), the output in the input's dtype.

    Parameters
    ----------
    image_size
        ``S`` (any ``S ≥ 1``); inputs of another side are rejected.
    target
        ``"pixel"`` (default): the centre of mass rounded to a pixel goes to the centre
        pixel ``S // 2``; ``"corner"``: rounded to a pixel corner, it goes to the corner
        ``S // 2 − ½`` (the image centre on an even side).

    Raises
    ------
    ConfigurationError
        For an ``image_size`` that is not an int ``≥ 1``, or another ``target``.
    """

    def __init__(self, image_size: int, target: str = "pixel") -> None:
        super().__init__()
        self.image_size = _check_size("CentreOfMassAnchor", image_size)
        self._corner = _check_target("CentreOfMassAnchor", target)
        self.target = target

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Anchor images ``(B, C, S, S)``; see [`centre_of_mass_anchor`][groupattn.canonical.centre_of_mass_anchor]."""
        side = _check_image("CentreOfMassAnchor", x, self._corner)
        if side != self.image_size:
            raise ShapeError(
                f"CentreOfMassAnchor: expected images of side image_size={self.image_size}, "
                f"got {side}x{side}"
            )
        return _mass_anchor(x, self._corner)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        size = self.image_size
        # the target is the image centre: a pixel on an odd side, a corner on an even one
        centred = (size % 2 == 0) == self._corner

        def turned(point: PointGroup) -> Group:
            if centred:
                return StridedRotoTranslationGroup(point, size, size)
            # the turns do not fix the target: the output of a moved input is the output
            # turned (reflected) and shifted — by some translation
            return RotoTranslationGroup(point, size)

        return torus_anchor_contract(
            "CentreOfMassAnchor", group, size, TorusTranslations(1, 1, stride=size), turned
        )

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, target={self.target!r}"
