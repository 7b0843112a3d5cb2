"""How channels transform: trivial, regular, or any matrix representation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..groups import FiniteGroup, Group, GroupElement, GroupError

__all__ = ["MatrixRepresentation", "RegularRepresentation", "Representation", "TrivialRepresentation"]


class Representation:
    """A representation ``ρ`` of a group on the channel axis: ``g`` ↦ a ``dim × dim`` matrix.

    Subclasses implement :meth:`matrix`. ``is_permutation`` says whether every matrix
    is a permutation (then the action is exact in any dtype).
    """

    dim: int
    group: Group
    is_permutation: bool = False

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The ``(dim, dim)`` matrix of ``g``."""
        raise NotImplementedError

    def restrict(self, group: Group, g: Any) -> GroupElement:
        """Map an element of an acting group to this representation's group."""
        from ._spatial import embed_point_element, spatial_element

        if group == self.group:
            return self.group.element(g)
        se = spatial_element(group, g)
        if se.point is None:
            return self.group.identity()
        from ..groups import PointGroup

        if isinstance(self.group, PointGroup):
            return embed_point_element(se.point, self.group, "Representation")
        raise GroupError(f"Representation: expected an element of {self.group.name}, got one of {group.name}")

    def apply(self, group: Group, g: Any, x: torch.Tensor, axis: int) -> torch.Tensor:
        """Apply ``ρ(g)`` along ``axis`` of ``x``."""
        h = self.restrict(group, g)
        m = self.matrix(h, dtype=x.dtype if x.is_floating_point() else torch.float64).to(x.device)
        xt = x.movedim(axis, -1)
        return (xt @ m.T).movedim(-1, axis)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.dim))


class TrivialRepresentation(Representation):
    """``dim`` invariant channels: every ``ρ(g)`` is the identity."""

    is_permutation = True

    def __init__(self, dim: int, group: Group | None = None) -> None:
        self.dim = dim
        self.group = group  # type: ignore[assignment]

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.eye(self.dim, dtype=dtype)

    def apply(self, group: Group, g: Any, x: torch.Tensor, axis: int) -> torch.Tensor:
        return x

    def __repr__(self) -> str:
        return f"trivial({self.dim})"


class RegularRepresentation(Representation):
    """``multiplicity`` copies of the left-regular representation of a finite group.

    Channels are laid out as ``(multiplicity, |G|)``; ``g`` sends block entry ``k`` to
    ``g·k``.
    """

    is_permutation = True

    def __init__(self, group: FiniteGroup, multiplicity: int = 1) -> None:
        if not group.is_finite:
            raise GroupError(f"RegularRepresentation: expected a finite group, got {group.name}")
        self.group = group
        self.multiplicity = multiplicity
        self.dim = multiplicity * group.order()
        self._table = group.cayley_table()

    def permutation(self, g: Any) -> list[int]:
        """``perm[k]`` is the index of ``g · elements()[k]``."""
        i = self.group.index(g)  # type: ignore[attr-defined]
        return self._table[i]

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        n = self.group.order()
        assert n is not None
        block = torch.zeros(n, n, dtype=dtype)
        for k, j in enumerate(self.permutation(g)):
            block[j, k] = 1
        return torch.block_diag(*([block] * self.multiplicity))

    def apply(self, group: Group, g: Any, x: torch.Tensor, axis: int) -> torch.Tensor:
        h = self.restrict(group, g)
        n = len(self._table)
        perm = self.permutation(h)
        src = [0] * n
        for k, j in enumerate(perm):
            src[j] = k
        idx = torch.tensor([m * n + s for m in range(self.multiplicity) for s in src], device=x.device)
        return x.index_select(axis, idx)

    def __repr__(self) -> str:
        return f"regular({self.group.name}, x{self.multiplicity})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RegularRepresentation) and (self.group, self.multiplicity) == (
            other.group,
            other.multiplicity,
        )

    def __hash__(self) -> int:
        return hash(("regular", self.group, self.multiplicity))


class MatrixRepresentation(Representation):
    """A representation given by a function ``g ↦ matrix`` (e.g. wrapping escnn's).

    Parameters
    ----------
    group
        The group represented.
    dim
        Matrix size.
    matrix_fn
        Returns a ``(dim, dim)`` array-like for an element of ``group``.
    name
        Display name.
    """

    def __init__(
        self, group: Group, dim: int, matrix_fn: Callable[[GroupElement], Any], name: str = "matrix"
    ) -> None:
        self.group, self.dim, self._fn, self.name = group, dim, matrix_fn, name

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        m = torch.as_tensor(self._fn(self.group.element(g)), dtype=dtype)
        if m.shape != (self.dim, self.dim):
            raise GroupError(
                f"MatrixRepresentation({self.name}): expected a {self.dim}x{self.dim} matrix, got {tuple(m.shape)}"
            )
        return m

    def __repr__(self) -> str:
        return f"{self.name}({self.dim})"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)
