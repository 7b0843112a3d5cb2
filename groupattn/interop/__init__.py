"""Interoperability with other equivariance libraries (optional extras).

The escnn adapter converts our [`CyclicGroup`][groupattn.groups.CyclicGroup] /
[`DihedralGroup`][groupattn.groups.DihedralGroup] and their elements to and from escnn's
``cyclic_group`` / ``dihedral_group``, wraps escnn representations as
[`MatrixRepresentation`][groupattn.actions.MatrixRepresentation] and escnn ``FieldType`` objects on 2-D
gspaces as [`GridField`][groupattn.actions.GridField]. It needs the ``escnn`` extra; nothing in
the core imports this package.

[`register_escnn_contracts`][groupattn.interop.register_escnn_contracts] gives escnn's
equivariant modules (``R2Conv``, pointwise and norm nonlinearities, group and norm
pooling, batch norms, ``SequentialModule``) contracts read from their declared field
types, so [`groupattn.check.certify`][groupattn.check.certify] can check networks that
mix escnn and groupattn; [`GeometricLifted`][groupattn.interop.GeometricLifted] and its
subclasses run groupattn layers between escnn modules, on ``GeometricTensor``s. Importing
this package does not import escnn.
"""

from ._escnn import (
    field_type_from_escnn,
    from_escnn_element,
    from_escnn_group,
    gspace_point_group,
    representation_from_escnn,
    to_escnn_element,
    to_escnn_group,
)
from ._escnn_contracts import (
    ESCNN_CONTRACT_CLASSES,
    FILTER_TOLERANCE,
    WindowedGridField,
    escnn_compatibility,
    escnn_grid_type,
    exact_steerable,
    exportable,
    refresh_filters,
    register_escnn_contracts,
    steerability_error,
)
from ._geometric import (
    GeometricGroupAttention,
    GeometricGroupBlock,
    GeometricInvariantReadout,
    GeometricLifted,
)

__all__ = [
    "ESCNN_CONTRACT_CLASSES",
    "FILTER_TOLERANCE",
    "GeometricGroupAttention",
    "GeometricGroupBlock",
    "GeometricInvariantReadout",
    "GeometricLifted",
    "WindowedGridField",
    "escnn_compatibility",
    "escnn_grid_type",
    "exact_steerable",
    "exportable",
    "field_type_from_escnn",
    "from_escnn_element",
    "from_escnn_group",
    "gspace_point_group",
    "refresh_filters",
    "register_escnn_contracts",
    "representation_from_escnn",
    "steerability_error",
    "to_escnn_element",
    "to_escnn_group",
]
