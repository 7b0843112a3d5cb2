"""Building blocks: patch embedding, patch merging, MLP, transformer blocks, class token.

[`EquivariantModule`][groupattn.contracts.EquivariantModule] (defined in [`groupattn.contracts`][groupattn.contracts]) is re-exported here.
"""

import warnings
from typing import Any

from ..contracts import EquivariantModule
from ._blocks import TransformerBlock, chain_contract
from ._group import (
    GroupBlock,
    GroupGlobalPool,
    GroupLayerNorm,
    GroupMLP,
    GroupPooling,
    LiftedAvgPool,
    LiftedPolyphaseDownsample,
    OrbitPooledLinear,
    SymmetricConvStem,
)
from ._group_patch import GroupConvolution, LiftedPatchEmbedding, LiftingConvolution
from ._group_swin import GroupPatchMerging, GroupWindowBlock, LiftedUpsample
from ._heads import ClassToken, ClassTokenReadout
from ._merge import PatchMerging
from ._mlp import MLP
from ._patch import PatchEmbedding
from ._wrappers import Canonicalized, FrameAveraging, LearnedCanonicalizer, norm_score

__all__ = [
    "MLP",
    "Canonicalized",
    "ClassToken",
    "ClassTokenReadout",
    "EquivariantModule",
    "FrameAveraging",
    "GroupBlock",
    "GroupConvolution",
    "GroupGlobalPool",
    "GroupLayerNorm",
    "GroupMLP",
    "GroupPatchMerging",
    "GroupPooling",
    "GroupWindowBlock",
    "LearnedCanonicalizer",
    "LiftedAvgPool",
    "LiftedPatchEmbedding",
    "LiftedPolyphaseDownsample",
    "LiftedUpsample",
    "LiftingConvolution",
    "OrbitPooledLinear",
    "PatchEmbedding",
    "PatchMerging",
    "SymmetricConvStem",
    "TransformerBlock",
    "chain_contract",
    "norm_score",
]


def __getattr__(name: str) -> Any:
    if name == "AbsolutePositionEmbedding":
        warnings.warn(
            "groupattn.nn.AbsolutePositionEmbedding is deprecated: use "
            "groupattn.positional.LiftedAbsolutePositionalEncoding (the old name will be removed in a future release)",
            DeprecationWarning,
            stacklevel=2,
        )
        from ..positional import LiftedAbsolutePositionalEncoding

        return LiftedAbsolutePositionalEncoding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
