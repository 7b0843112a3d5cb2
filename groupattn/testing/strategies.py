"""Hypothesis strategies for groups, group elements and signals of a field type.

Requires the ``hypothesis`` package (the ``dev`` extra).
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st

from ..actions import FieldType, GridField, InvariantField, LiftedField, SetField, TokenField
from ..groups import (
    CyclicGroup,
    DihedralGroup,
    Group,
    GroupElement,
    PermutationGroup,
    SymmetricGroup,
    TorusTranslations,
    p4,
    p4m,
)
from ._equivariance import _cheap_order, sample_elements

__all__ = ["finite_groups", "group_elements", "signals", "spatial_groups"]


def spatial_groups(size: int, rotations: bool = True) -> st.SearchStrategy[Group]:
    """Spatial groups acting on a ``size × size`` grid: translations, C2, C4, D2, D4, p4, p4m.

    The translation parts are tori of side ``size``: draw matching signals with
    ``signals(field_type, size=size)`` (on other sizes a torus element still acts as a
    circular roll, but the action law can fail where offsets wrap).
    """
    options: list[Group] = [TorusTranslations(size, size)]
    if rotations:
        options += [
            CyclicGroup(2),
            CyclicGroup(4),
            DihedralGroup(2),
            DihedralGroup(4),
            p4(size),
            p4m(size),
        ]
    return st.sampled_from(options)


def finite_groups(max_order: int = 64) -> st.SearchStrategy[Group]:
    """Small built-in finite groups: cyclic, dihedral, tori, products, symmetric, hexagon."""
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")
    options: list[Group] = [
        CyclicGroup(1),
        CyclicGroup(2),
        CyclicGroup(3),
        CyclicGroup(4),
        CyclicGroup(8),
        DihedralGroup(1),
        DihedralGroup(2),
        DihedralGroup(3),
        DihedralGroup(4),
        DihedralGroup(6),
        TorusTranslations(3, 4),
        TorusTranslations(5, 5),
        p4(2),
        p4m(2),
        SymmetricGroup(4),
        hexagon,
    ]
    return st.sampled_from([g for g in options if (g.order() or 0) <= max_order])


def group_elements(group: Group) -> st.SearchStrategy[GroupElement]:
    """Elements of ``group``; every element of a finite group is reachable.

    A finite group of order ≤ ``ENUMERATION_LIMIT``
    is drawn from its element list (shrinking towards the identity); a larger one (S_20,
    the automorphisms of a large graph) is drawn by seeded sampling
    (``groupattn.testing.sample_elements``), never by enumerating it; infinite
    groups by their own seeded sampler.
    """
    if group.is_finite and _cheap_order(group) is not None:
        return st.sampled_from(group.elements())  # type: ignore[attr-defined]
    return st.integers(0, 2**31 - 1).map(lambda seed: sample_elements(group, 1, seed=seed)[0])


def signals(
    field_type: FieldType,
    batch: int | tuple[int, int] = (1, 3),
    channels: int | tuple[int, int] = (1, 4),
    size: int | tuple[int, int] = (2, 8),
    dtype: torch.dtype = torch.float64,
    square: bool = True,
) -> st.SearchStrategy[torch.Tensor]:
    """Seeded random tensors laid out for ``field_type``.

    For [`GridField`][groupattn.actions.GridField] and [`LiftedField`][groupattn.actions.LiftedField] the spatial size is drawn from
    ``size`` (square when ``square``); token and set fields, and any field type moving
    tokens ``(B, N, C)`` through a G-set, use their declared number of tokens.
    """

    def rng(v: int | tuple[int, int]) -> st.SearchStrategy[int]:
        return st.just(v) if isinstance(v, int) else st.integers(v[0], v[1])

    @st.composite
    def build(draw: Any) -> torch.Tensor:
        b, c = draw(rng(batch)), draw(rng(channels))
        declared = field_type.__dict__.get("channels")
        if isinstance(declared, int) and not isinstance(declared, bool):
            c = declared
        elif declared is not None and hasattr(declared, "dim"):
            c = int(declared.dim)
        h = draw(rng(size))
        w = h if square else draw(rng(size))
        seed = draw(st.integers(0, 2**31 - 1))
        gen = torch.Generator().manual_seed(seed)
        if isinstance(field_type, GridField):
            shape: tuple[int, ...] = (b, c, h, w)
        elif isinstance(field_type, LiftedField):
            shape = (b, c, field_type.point_group.order(), h, w)
        elif isinstance(field_type, TokenField):
            shape = (b, field_type.num_tokens, c)
        elif isinstance(field_type, SetField):
            shape = (b, field_type.num_points, c)
        elif isinstance(field_type, InvariantField):
            shape = (b, c)
        elif _token_count(field_type) is not None:
            # any token layout moved through a G-set: (B, N, C)
            shape = (b, _token_count(field_type), c)  # type: ignore[assignment]
        else:
            raise TypeError(
                f"signals: expected a built-in field type, got {type(field_type).__name__} (or a token "
                f"layout with num_points, num_tokens or gset.num_points)"
            )
        return torch.randn(shape, generator=gen, dtype=dtype)

    return build()


def _token_count(field_type: FieldType) -> int | None:
    """The number of tokens of a token layout (``num_points``, ``num_tokens`` or ``gset.num_points``)."""
    for owner in (field_type, getattr(field_type, "gset", None)):
        for name in ("num_points", "num_tokens"):
            value = getattr(owner, name, None) if owner is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None
