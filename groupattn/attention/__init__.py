"""Attention: the one entry point [`attend`][groupattn.attention.attend] and its implementations, and the layers.

Every layer attends through [`attend`][groupattn.attention.attend]; which implementation
runs (SDPA, SDPA with a chunked backward for a trainable bias, or the factorised local
kernel) is decided by [`choose_implementation`][groupattn.attention.choose_implementation]
and can be forced with [`attention_implementation`][groupattn.attention.attention_implementation].

[`OrbitalAttention`][groupattn.attention.OrbitalAttention] attends over the tokens of any G-set (any finite group acting
on them) with an orbital bias; the grid layers are fast special cases.
"""

from ._global import GlobalSelfAttention, check_heads, make_relative_bias
from ._group_attention import GroupSelfAttention, resolve_point_group
from ._group_window import GroupWindowAttention, window_orbitals
from ._kernel import (
    attend,
    attend_shared_query_windows,
    attention_implementation,
    choose_implementation,
    get_attention_implementation,
)
from ._lifting import LiftingSelfAttention
from ._orbital import OrbitalAttention
from ._pooling import AttentionPooling, MeanPooling
from ._reduced import SpatialReductionAttention
from ._window import WindowAttention

__all__ = [
    "AttentionPooling",
    "GlobalSelfAttention",
    "GroupSelfAttention",
    "GroupWindowAttention",
    "LiftingSelfAttention",
    "MeanPooling",
    "OrbitalAttention",
    "SpatialReductionAttention",
    "WindowAttention",
    "attend",
    "attend_shared_query_windows",
    "attention_implementation",
    "check_heads",
    "choose_implementation",
    "get_attention_implementation",
    "make_relative_bias",
    "resolve_point_group",
    "window_orbitals",
]
