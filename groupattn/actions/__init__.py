"""Actions: how groups move coordinates, token sets (G-sets) and tensors (field types)."""

from ._fields import FieldType, GridField, InvariantField, LiftedField, SetField, TokenField
from ._gset import GSet, connected_labels
from ._representations import (
    MatrixRepresentation,
    RegularRepresentation,
    Representation,
    TrivialRepresentation,
)
from ._rotate import gaussian_mixture_image, rotate_image, rotate_lifted
from ._spatial import (
    SpatialElement,
    act_on_coordinates,
    check_grid_size,
    embed_point_element,
    point_group_of,
    spatial_element,
    transform_grid,
)

__all__ = [
    "FieldType",
    "GSet",
    "GridField",
    "InvariantField",
    "LiftedField",
    "MatrixRepresentation",
    "RegularRepresentation",
    "Representation",
    "SetField",
    "SpatialElement",
    "TokenField",
    "TrivialRepresentation",
    "act_on_coordinates",
    "check_grid_size",
    "connected_labels",
    "embed_point_element",
    "gaussian_mixture_image",
    "point_group_of",
    "rotate_image",
    "rotate_lifted",
    "spatial_element",
    "transform_grid",
]
