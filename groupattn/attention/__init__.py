"""Attention: the kernel (``scaled_dot_product_attention``), its factorised local variant, and the layers.

[`OrbitalAttention`][groupattn.attention.OrbitalAttention] attends over the tokens of any G-set (any finite group acting
on them) with an orbital bias; the grid layers are fast special cases.
"""

from ._global import GlobalSelfAttention, check_heads, make_relative_bias
from ._group_attention import GroupSelfAttention, resolve_point_group
from ._kernel import attend, attend_shared_query_windows
from ._lifting import LiftingSelfAttention
from ._orbital import OrbitalAttention
from ._pooling import AttentionPooling, MeanPooling
from ._reduced import SpatialReductionAttention
from ._window import WindowAttention

__all__ = [
    "AttentionPooling",
    "GlobalSelfAttention",
    "GroupSelfAttention",
    "LiftingSelfAttention",
    "MeanPooling",
    "OrbitalAttention",
    "SpatialReductionAttention",
    "WindowAttention",
    "attend",
    "attend_shared_query_windows",
    "check_heads",
    "make_relative_bias",
    "resolve_point_group",
]
