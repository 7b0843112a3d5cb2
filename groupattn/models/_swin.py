"""Shift-equivariant Swin Transformer: anchored (shifted) windows and anchored patch merging."""

from __future__ import annotations

from typing import Any

from torch import nn

from ..attention import MeanPooling, WindowAttention
from ..canonical._polyphase import Norm
from ..nn import PatchEmbedding, PatchMerging, TransformerBlock
from ._registry import register_model
from ._shift_common import ShiftTransformer, as_pair, per_stage

__all__ = ["ShiftSwin"]


class ShiftSwin(ShiftTransformer):
    """Hierarchical window transformer (Swin); with ``equivariant=True`` exactly shift-invariant.

    Stages of window-attention blocks (every second block with windows cyclically
    shifted by ``window // 2``, on the torus, without a boundary mask), separated by
    patch merging. Equivariant: the patch embedding, every window attention and every
    patch merging are polyphase-anchored (window attention restores the frame before
    the residual). Baseline: identical layers and parameters, no anchoring.

    Contract: equivariant — *invariant* under ``TorusTranslations(H, W)``; baseline —
    *breaks*, naming the patch embedding.

    Shapes: ``(B, in_channels, H, W) → (B, num_classes)``.

    Parameters
    ----------
    equivariant
        Which variant to build.
    in_channels, num_classes, image_size
        Input channels, classes and image size.
    patch
        Patch size of the embedding.
    dims, depths, heads
        Per stage (a scalar is used for every stage of ``len(depths)``).
    window
        Window size (each stage's grid must be divisible by it).
    mlp_ratio
        MLP width ratio.
    bias
        Within-window bias: ``"clipped"`` (Swin), ``"circulant"`` or ``None``.
    anchor_norm
        Norm of every polyphase anchoring (default ``"l4"``: the L2 and L1 polyphase
        norms of smoothly upsampled images such as the bundled digits tie exactly).
    """

    def __init__(
        self,
        equivariant: bool = True,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int | tuple[int, int] = 32,
        patch: int = 2,
        dims: int | tuple[int, ...] = (16, 32),
        depths: tuple[int, ...] = (2, 2),
        heads: int | tuple[int, ...] = (1, 2),
        window: int | tuple[int, ...] = 4,
        mlp_ratio: float = 2.0,
        bias: str | None = "clipped",
        anchor_norm: Norm = "l4",
    ) -> None:
        super().__init__()
        self.equivariant = equivariant
        stages = len(depths)
        dims_ = per_stage("ShiftSwin", "dims", dims, stages)
        heads_ = per_stage("ShiftSwin", "heads", heads, stages)
        windows = per_stage("ShiftSwin", "window", window, stages)
        size = as_pair("ShiftSwin", image_size)
        self.patch_embed = PatchEmbedding(in_channels, dims_[0], patch, size, anchored=equivariant, norm=anchor_norm)
        grid = self.patch_embed.grid
        layers: list[nn.Module] = []
        for stage in range(stages):
            if stage:
                merge = PatchMerging(dims_[stage - 1], dims_[stage], grid, anchored=equivariant, norm=anchor_norm)
                layers.append(merge)
                grid = merge.out_grid
            for block in range(depths[stage]):
                shift = windows[stage] // 2 if block % 2 else 0
                attention = WindowAttention(
                    dims_[stage], heads_[stage], grid, windows[stage], shift=shift,
                    anchored=equivariant, bias=bias, pre_norm=True, norm=anchor_norm,  # type: ignore[arg-type]
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
    description="Swin with anchored (shifted) window attention and anchored patch merging",
)
def _swin(equivariant: bool = True, **kwargs: Any) -> ShiftSwin:
    return ShiftSwin(equivariant=equivariant, **kwargs)
