"""Positional encodings, each with its contract: invariant ones built from orbitals, and baselines."""

from ._group import (
    ContinuousGroupEncoding,
    GroupPositionalEncoding,
    OrbitalTableEncoding,
    RelativeGeometry,
    WindowTiling,
    point_group_tables,
    relative_geometry,
    window_tiling,
)
from ._translation import (
    AbsolutePositionalEncoding,
    CirculantRelativeBias,
    ClippedRelativeBias,
    ConvPositionalEncoding,
)

__all__ = [
    "AbsolutePositionalEncoding",
    "CirculantRelativeBias",
    "ClippedRelativeBias",
    "ContinuousGroupEncoding",
    "ConvPositionalEncoding",
    "GroupPositionalEncoding",
    "OrbitalTableEncoding",
    "RelativeGeometry",
    "WindowTiling",
    "point_group_tables",
    "relative_geometry",
    "window_tiling",
]
