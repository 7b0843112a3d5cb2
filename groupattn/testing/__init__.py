"""Test utilities: equivariance measurement and assertions, pytest fixtures, strategies.

``groupattn.testing.strategies`` (hypothesis strategies) needs the ``dev`` extra.
"""

from ._equivariance import (
    EquivarianceReport,
    assert_equivariant,
    default_tolerance,
    equivariance_error,
    relative_error,
    representative_elements,
)
from ._pytest import float_dtype, seed_everything

__all__ = [
    "EquivarianceReport",
    "assert_equivariant",
    "default_tolerance",
    "equivariance_error",
    "float_dtype",
    "relative_error",
    "representative_elements",
    "seed_everything",
]
