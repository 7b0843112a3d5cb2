"""Interoperability with other equivariance libraries (optional extras).

The escnn adapter converts our [`CyclicGroup`][groupattn.groups.CyclicGroup] /
[`DihedralGroup`][groupattn.groups.DihedralGroup] and their elements to and from escnn's
``cyclic_group`` / ``dihedral_group``, wraps escnn representations as
[`MatrixRepresentation`][groupattn.actions.MatrixRepresentation] and escnn ``FieldType`` objects on 2-D
gspaces as [`GridField`][groupattn.actions.GridField]. It needs the ``escnn`` extra; nothing in
the core imports this package.
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

__all__ = [
    "field_type_from_escnn",
    "from_escnn_element",
    "from_escnn_group",
    "gspace_point_group",
    "representation_from_escnn",
    "to_escnn_element",
    "to_escnn_group",
]
