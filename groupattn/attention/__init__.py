"""Attention: one kernel (``scaled_dot_product_attention``) and the equivariant attention layers."""

from ._global import GlobalSelfAttention, make_relative_bias
from ._group_attention import GroupSelfAttention, resolve_point_group
from ._kernel import attend
from ._lifting import LiftingSelfAttention
from ._pooling import AttentionPooling, MeanPooling
from ._reduced import SpatialReductionAttention
from ._window import WindowAttention

__all__ = [
    "AttentionPooling",
    "GlobalSelfAttention",
    "GroupSelfAttention",
    "LiftingSelfAttention",
    "MeanPooling",
    "SpatialReductionAttention",
    "WindowAttention",
    "attend",
    "make_relative_bias",
    "resolve_point_group",
]
