"""Actions: how groups move coordinates, token sets (G-sets) and tensors (field types).

Field types are also the library's input validation: ``FieldType.check(x, module,
channels=...)`` raises a [`GroupError`][groupattn.groups.GroupError] naming the module, the
expected layout and the actual shape, and [`check_grid`][groupattn.actions.check_grid] validates a grid argument.
"""

from ._fields import (
    FieldType,
    GridField,
    GSetField,
    InvariantField,
    LiftedField,
    SetField,
    TokenField,
    check_grid,
    torus_stride,
)
from ._gset import GSet, connected_labels
from ._intertwiners import (
    INTERTWINER_BUDGET,
    INTERTWINER_TOLERANCE,
    IntertwinerCacheInfo,
    clear_intertwiner_cache,
    intertwiner_basis,
    intertwiner_cache_info,
)
from ._representations import (
    DirectSumRepresentation,
    MatrixRepresentation,
    PermutationRepresentation,
    RegularRepresentation,
    Representation,
    TrivialRepresentation,
)
from ._rotate import gaussian_mixture_image, rotate_image, rotate_lifted
from ._spatial import (
    SpatialElement,
    act_on_coordinates,
    check_acts_on_grid,
    check_grid_size,
    embed_point_element,
    point_group_of,
    spatial_element,
    transform_grid,
)

__all__ = [
    "INTERTWINER_BUDGET",
    "INTERTWINER_TOLERANCE",
    "DirectSumRepresentation",
    "FieldType",
    "GSet",
    "GSetField",
    "GridField",
    "IntertwinerCacheInfo",
    "InvariantField",
    "LiftedField",
    "MatrixRepresentation",
    "PermutationRepresentation",
    "RegularRepresentation",
    "Representation",
    "SetField",
    "SpatialElement",
    "TokenField",
    "TrivialRepresentation",
    "act_on_coordinates",
    "check_acts_on_grid",
    "check_grid",
    "check_grid_size",
    "clear_intertwiner_cache",
    "connected_labels",
    "embed_point_element",
    "gaussian_mixture_image",
    "intertwiner_basis",
    "intertwiner_cache_info",
    "point_group_of",
    "rotate_image",
    "rotate_lifted",
    "spatial_element",
    "torus_stride",
    "transform_grid",
]
