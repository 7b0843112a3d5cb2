"""Shift-equivariant Swin Transformer: anchored (shifted) windows and anchored patch merging."""

from __future__ import annotations

from typing import Any

from torch import nn

from .._deprecation import renamed_arguments
from ..attention import MeanPooling, WindowAttention
from ..canonical._polyphase import Norm
from ..nn import PatchEmbedding, PatchMerging, TransformerBlock
from ._anchored import WHOLE_TRANSLATION
from ._registry import register_model
from ._shift_common import (
    Anchoring,
    ShiftTransformer,
    as_pair,
    check_anchoring,
    input_anchor_stride,
    mass_anchoring_fits,
    per_stage,
    whole_anchor,
)

__all__ = ["ShiftSwin"]

#: Deprecated argument names (old → new), kept for one release.
_RENAMED = {"patch": "patch_size", "heads": "num_heads", "window": "window_size"}


class ShiftSwin(ShiftTransformer):
    """Hierarchical window transformer (Swin); with ``equivariant=True`` exactly shift-invariant.

    Stages of window-attention blocks (every second block with windows cyclically
    shifted by ``window_size // 2``, on the torus, without a boundary mask), separated by
    patch merging. Baseline: no anchoring. Equivariant, ``anchoring="input"`` (default):
    the image is polyphase-anchored **once**, in the patch embedding, with stride
    ``S`` = the least common multiple of every window's and merge's period in pixels
    (16 for the tiny preset), choosing the phase on a blurred copy of the image
    (``anchor_sigma``); every later layer is then the baseline's own, un-anchored, and
    needs only be equivariant to shifts by multiples of ``S``, which windows on the
    torus and patch merging are. ``anchoring="layers"``: the patch embedding, every
    window attention and every patch merging are polyphase-anchored on their own input
    (window attention restores the frame before the residual) — exact too, but the
    hidden layers' phases are picked from features that change as the weights train,
    and differ between similar images, which makes it learn much more slowly (see the
    benchmarks page). Both variants have identical layers and parameters.

    Contract: equivariant — *invariant* under ``TorusTranslations(H, W)``; baseline —
    *breaks*, naming the patch embedding.

    Shapes: ``(B, in_channels, H, W) → (B, num_classes)``.

    Inputs: any batch size (``B = 0`` gives ``(0, num_classes)``); a floating tensor of the
    model's dtype — integer and bool images, and (outside autocast) other floating
    dtypes, raise [`DtypeError`][groupattn.DtypeError] (see [`groupattn.models`][groupattn.models]).

    Parameters
    ----------
    equivariant
        Which variant to build.
    in_channels, num_classes, image_size
        Input channels, classes and image size.
    patch_size
        Patch size of the embedding.
    dims, depths, num_heads
        Per stage (a scalar is used for every stage of ``len(depths)``).
    window_size
        Window size (each stage's grid must be divisible by it).
    mlp_ratio
        MLP width ratio.
    bias
        Within-window bias: ``"clipped"`` (Swin), ``"circulant"`` or ``None``.
    anchor_norm
        Norm of every polyphase anchoring (default ``"l4"``: the L2 and L1 polyphase
        norms of smoothly upsampled images such as the bundled digits tie exactly).
    anchoring
        ``"input"`` (one anchoring, in the patch embedding), ``"layers"`` (every
        strided layer anchors its own input), ``"mass"``: a
        [`CentreOfMassAnchor`][groupattn.canonical.CentreOfMassAnchor] (the centre of mass,
        rounded to a pixel, rolled to the centre pixel) anchors the *whole* translation
        first and the body is the baseline's (zero padding: tokens know where they sit;
        square images) — or ``"centre"``: the same with a
        [`CentreAnchor`][groupattn.canonical.CentreAnchor] (``sigma = 0.3 S``,
        ``window = 2``; square images with an even side); equivariant model only. The class
        defaults to ``"input"`` (the literature's model); the registry preset uses
        ``"mass"`` for square images (it learns as well as the baseline, and costs the
        baseline's body plus one anchor).
    anchor_sigma
        Blur (pixels) of the input anchoring's score (``anchoring="input"``; ``0``: the
        polyphase norms of the image itself).
    embed_bias
        Bias in the patch embedding (off by default: with it every empty background patch
        of a digit canvas embeds to the same non-zero token, which dominates the
        mean-pooled features at initialisation, so both variants sat at chance for
        several epochs, how many depending on the seed).

    Notes
    -----
    Deprecated aliases (one release): ``patch`` → ``patch_size``, ``heads`` →
    ``num_heads``, ``window`` → ``window_size``.
    """

    @renamed_arguments(**_RENAMED)
    def __init__(
        self,
        equivariant: bool = True,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int | tuple[int, int] = 32,
        patch_size: int = 2,
        dims: int | tuple[int, ...] = (16, 32),
        depths: tuple[int, ...] = (2, 2),
        num_heads: int | tuple[int, ...] = (1, 2),
        window_size: int | tuple[int, ...] = 4,
        mlp_ratio: float = 2.0,
        bias: str | None = "clipped",
        anchor_norm: Norm = "l4",
        anchoring: Anchoring = "input",
        anchor_sigma: float = 8.0,
        embed_bias: bool = False,
    ) -> None:
        super().__init__()
        check_anchoring("ShiftSwin", anchoring)
        self.equivariant, self.anchoring = equivariant, anchoring
        size = as_pair("ShiftSwin", image_size)
        # first child: the whole translation anchored
        if equivariant and anchoring in WHOLE_TRANSLATION:
            self.anchor = whole_anchor("ShiftSwin", anchoring, size)
        # with the whole translation anchored, the body is the baseline's
        equivariant = equivariant and anchoring not in WHOLE_TRANSLATION
        stages = len(depths)
        dims_ = per_stage("ShiftSwin", "dims", dims, stages)
        heads_ = per_stage("ShiftSwin", "num_heads", num_heads, stages)
        windows = per_stage("ShiftSwin", "window_size", window_size, stages)
        per_layer = (
            equivariant and anchoring == "layers"
        )  # each strided layer anchors its own input
        once = equivariant and anchoring == "input"  # the patch embedding anchors for all of them
        # pixel periods: every stage's windows, every merge (a scalar window broadcasts to each stage)
        periods = [patch_size * 2**i * windows[i] for i in range(stages)] + [
            patch_size * 2**i for i in range(stages)
        ]
        self.patch_embed = PatchEmbedding(
            in_channels,
            dims_[0],
            patch_size,
            size,
            anchored=equivariant,
            norm=anchor_norm,
            anchor_stride=input_anchor_stride(periods, size) if once else None,
            anchor_sigma=anchor_sigma if once else 0.0,
            bias=embed_bias,
        )
        grid = self.patch_embed.grid
        layers: list[nn.Module] = []
        for stage in range(stages):
            if stage:
                merge = PatchMerging(
                    dims_[stage - 1], dims_[stage], grid, anchored=per_layer, norm=anchor_norm
                )
                layers.append(merge)
                grid = merge.out_grid
            for block in range(depths[stage]):
                shift = windows[stage] // 2 if block % 2 else 0
                attention = WindowAttention(
                    dims_[stage],
                    heads_[stage],
                    grid,
                    windows[stage],
                    shift=shift,
                    anchored=per_layer,
                    bias=bias,  # type: ignore[arg-type]
                    pre_norm=True,
                    norm=anchor_norm,
                )
                layers.append(TransformerBlock(dims_[stage], attention, mlp_ratio))
        self.stages = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims_[-1])
        self.pool = MeanPooling(grid)
        self.head = nn.Linear(dims_[-1], num_classes)


@register_model(
    "swin",
    group="translations",
    input_shape=(1, 32, 32),
    learning_rate=1e-3,
    description="Swin, shift-invariant: centre-of-mass anchoring then the plain Swin (anchoring='input': one anchoring in the patch embedding)",
)
@renamed_arguments(**_RENAMED)
def _swin(equivariant: bool = True, **kwargs: Any) -> ShiftSwin:
    # the registry preset anchors the whole translation by the centre of mass (square
    # images), as the ViT's does: the body is the baseline's (docs/results.md)
    kwargs.setdefault("anchoring", "mass" if mass_anchoring_fits(kwargs) else "input")
    return ShiftSwin(equivariant=equivariant, **kwargs)
