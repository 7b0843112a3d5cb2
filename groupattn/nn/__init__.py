"""Building blocks: patch embedding, patch merging, MLP, transformer blocks, class token.

:class:`EquivariantModule` (defined in :mod:`groupattn.contracts`) is re-exported here.
"""

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
    SymmetricConvStem,
)
from ._group_patch import AbsolutePositionEmbedding, LiftedPatchEmbedding, LiftingConvolution
from ._heads import ClassToken, ClassTokenReadout
from ._merge import PatchMerging
from ._mlp import MLP
from ._patch import PatchEmbedding

__all__ = [
    "MLP",
    "AbsolutePositionEmbedding",
    "ClassToken",
    "ClassTokenReadout",
    "EquivariantModule",
    "GroupBlock",
    "GroupGlobalPool",
    "GroupLayerNorm",
    "GroupMLP",
    "GroupPooling",
    "LiftedAvgPool",
    "LiftedPatchEmbedding",
    "LiftedPolyphaseDownsample",
    "LiftingConvolution",
    "PatchEmbedding",
    "PatchMerging",
    "SymmetricConvStem",
    "TransformerBlock",
    "chain_contract",
]
