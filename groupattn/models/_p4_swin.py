"""p4 / p4m-invariant Swin: centre-of-mass (or blurred-maximum, or window-grid) anchoring, then the C4 / D4 group Swin."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..groups import PointGroup
from ._anchored import (
    WHOLE_TRANSLATION,
    AnchoredModel,
    build_anchor,
    check_anchored_arguments,
)
from ._group_swin import MIX_ORIENTATIONS, GroupSwin
from ._registry import register_model

__all__ = ["P4Swin"]


class P4Swin(AnchoredModel, GroupSwin):
    """A group Swin exactly invariant to every circular shift and quarter turn together (p4; p4m for D4).

    [`GroupSwin`][groupattn.models.GroupSwin] is invariant to turns (and reflections) about
    the image centre — with its rotation-invariant absolute positions too — and, without
    absolute positions, to circular shifts by multiples of its coarsest cell: the patch
    embedding, every stage's windows (plain and shifted by half a window, on the torus),
    and every ``2 × 2`` patch merging all move onto themselves under a shift by
    ``patch_size · 2^(stages − 1) · window_size`` pixels (16 for the registry preset: a
    2-pixel patch, windows of 4 tokens, two stages). An anchor in front of it picks a
    translation by scores that every 1-pixel shift, quarter turn and reflection of the
    torus permutes exactly, and rolls the image by it; what is left of p4 / p4m after it is
    exactly what the body is invariant to. Three anchorings:

    * ``anchoring="mass"`` (default):
      [`CentreOfMassAnchor`][groupattn.canonical.CentreOfMassAnchor] fixes the *whole*
      translation: it rolls the image's centre of mass, rounded to a pixel corner, to the
      image centre (on an odd side, rounded to a pixel, to the centre pixel), leaving only
      turns and reflections about the centre: the body keeps its absolute positions
      ([`LiftedOrbitPositionalEncoding`][groupattn.positional.LiftedOrbitPositionalEncoding],
      ``absolute_position=True``), which the group models need to learn well, and the
      windows and merge cells fall in the same place for every moved copy of the input.
      Every digit (a glyph spanning less than half the image) reaches the body with its
      centre of mass within half a pixel of the centre on each axis, as consistently
      placed as MNIST places it (MNIST, 5 epochs, seeds 0 / 1 / 2: 92.4 / 92.8 / 91.3 %,
      the baseline 93.4 / 93.9 / 94.3 %);
    * ``anchoring="centre"``: [`CentreAnchor`][groupattn.canonical.CentreAnchor] fixes the
      whole translation by the maximum of a D4-symmetric blur of the image (``S`` even),
      which sits up to 2 pixels from the centre of mass: the body sees digits placed less
      consistently and learns worse (MNIST, 5 epochs, seeds 0 / 1 / 2:
      90.1 / 91.0 / 89.7 %);
    * ``anchoring="patch"``: [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor] with
      the coarsest window's period picks the phase of that window grid, leaving also
      shifts by multiples of the period, so the body is built with
      ``absolute_position=False`` — exact, but it learns worse (MNIST, 5 epochs, seed 0,
      at the former 5e-3: 79.1 %, the baseline 94.3 %).

    Every way, an input shifted by any number of pixels is partitioned into the same
    windows and merged in the same ``2 × 2`` cells as the unshifted one, and the logits are
    invariant to all of p4 (p4m), up to the anchor's harmful ties (a centre of mass
    exactly half-way between two candidates; see also
    [`PatchGridAnchor`][groupattn.canonical.PatchGridAnchor]'s *full ties*; every one is
    reported).

    The layers and parameter names are ``GroupSwin``'s, plus the parameter-free
    ``anchor``. The baseline (``equivariant=False``) is ``GroupSwin``'s plain Swin (no
    anchoring, trivial point group, learned absolute position embedding, free per-pair
    window bias).

    Contract: *invariant* under ``RotoTranslationGroup(H', S)`` for ``H' ⊆ H`` (p4, p4m),
    under ``TorusTranslations(S, S)`` and under ``H'`` (every anchoring); baseline:
    *breaks* ("plain Swin baseline: …").

    Shapes: ``(B, in_channels, S, S) → (B, num_classes)``.

    Inputs: any batch size (``B = 0`` gives ``(0, num_classes)``); a floating tensor of the
    model's dtype (see [`groupattn.models`][groupattn.models]).

    Parameters
    ----------
    equivariant
        p4 / p4m-invariant model or plain Swin baseline.
    point_group
        ``"C4"`` (p4) or ``"D4"`` (p4m).
    in_channels, num_classes, image_size, patch_size, dim, depths, num_heads, window_size, shift, embed_kernel, mlp_ratio, readout, mix_orientations
        As for [`GroupSwin`][groupattn.models.GroupSwin].
    anchoring
        ``"mass"`` ([`CentreOfMassAnchor`][groupattn.canonical.CentreOfMassAnchor] with the
        image centre as target: ``target="corner"`` on an even side, ``"pixel"`` on an odd
        one; body with absolute positions), ``"centre"``
        ([`CentreAnchor`][groupattn.canonical.CentreAnchor] with ``sigma = 0.3 S`` and
        ``window = min(8, S)``; ``S`` even; body with absolute positions) or ``"patch"``
        (``PatchGridAnchor`` with the coarsest window's period; body without). Ignored by
        the baseline.

    Attributes
    ----------
    anchor_period
        The period (pixels) of the anchored grid: ``S`` for ``"mass"`` and ``"centre"``
        (the whole translation is fixed), the coarsest window's side in pixels for
        ``"patch"``.

    Raises
    ------
    ConfigurationError
        As ``GroupSwin``; for an image size that is not an int, an unknown ``anchoring``,
        or (``"centre"``) an odd image size.
    """

    baseline_label = "plain Swin baseline"

    def __init__(
        self,
        equivariant: bool = True,
        point_group: PointGroup | str = "C4",
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 32,
        patch_size: int = 2,
        dim: int = 16,
        depths: Sequence[int] = (2, 2),
        num_heads: int = 2,
        window_size: int = 4,
        shift: bool = True,
        embed_kernel: int | None = None,
        mlp_ratio: float = 4.0,
        anchoring: str = "mass",
        readout: str = "orbit",
        mix_orientations: bool = MIX_ORIENTATIONS,
    ) -> None:
        anchoring = check_anchored_arguments("P4Swin", image_size, anchoring)
        super().__init__(
            equivariant=equivariant,
            point_group=point_group,
            in_channels=in_channels,
            num_classes=num_classes,
            image_size=image_size,
            patch_size=patch_size,
            dim=dim,
            depths=depths,
            num_heads=num_heads,
            window_size=window_size,
            shift=shift,
            embed_kernel=embed_kernel,
            mlp_ratio=mlp_ratio,
            # the whole-translation anchors leave only turns about the centre: invariant
            # absolute positions are allowed; the patch anchor leaves shifts by the period
            absolute_position=anchoring in WHOLE_TRANSLATION,
            readout=readout,
            mix_orientations=mix_orientations,
        )  # the group Swin's layers (and its input check), registered on this module
        self.image_size = image_size
        self.anchoring = anchoring
        # every window, shifted window and merge cell of every stage divides this period
        window_period = patch_size * 2 ** (len(tuple(depths)) - 1) * window_size
        self.anchor_period = image_size if anchoring in WHOLE_TRANSLATION else window_period
        self.anchor: nn.Module = (
            build_anchor("P4Swin", anchoring, window_period, image_size)
            if equivariant
            else nn.Identity()
        )


@register_model(
    "p4_swin",
    group="p4",
    input_shape=(1, 32, 32),
    description="p4/p4m-invariant Swin: centre-of-mass anchoring, then the C4/D4 group Swin with invariant absolute positions",
    # at 5e-3 without a warm-up the equivariant model's first steps drive it to uniform
    # predictions; with orientation-mixing MLPs it often never leaves them (see GroupSwin)
    learning_rate=2e-3,
    warmup_epochs=0.5,
)
def _p4_swin(equivariant: bool = True, **kwargs: Any) -> P4Swin:
    return P4Swin(equivariant=equivariant, **kwargs)
