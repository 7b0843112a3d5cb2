"""How channels transform: trivial, regular, or any matrix representation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..groups import FiniteGroup, Group, GroupElement, GroupError
from ..groups._base import _describe

if TYPE_CHECKING:
    from ._gset import GSet

__all__ = [
    "DirectSumRepresentation",
    "MatrixRepresentation",
    "PermutationRepresentation",
    "RegularRepresentation",
    "Representation",
    "TrivialRepresentation",
]


class Representation:
    """A representation ``ρ`` of a group on the channel axis: ``g`` ↦ a ``dim × dim`` matrix.

    Subclasses implement [`matrix`][groupattn.actions.Representation.matrix]. ``is_permutation`` says whether every matrix
    is a permutation (then the action is exact in any dtype). A representation is a
    homomorphism: ``matrix(g · h) == matrix(g) @ matrix(h)``, and a vector ``v`` of
    ``dim`` channels transforms as ``v ↦ matrix(g) @ v``.
    """

    dim: int
    group: Group
    is_permutation: bool = False

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The ``(dim, dim)`` matrix of ``g``."""
        raise NotImplementedError

    def matrix_for(self, group: Group, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The ``(dim, dim)`` matrix of an element ``g`` of ``group`` (restricted if needed).

        ``group`` may be this representation's group or one that acts through it (see
        [`restrict`][groupattn.actions.Representation.restrict]); a representation without a group (trivial) gives the identity.
        """
        if self.group is None:
            return torch.eye(self.dim, dtype=dtype)
        return self.matrix(self.restrict(group, g), dtype=dtype)

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
        raise GroupError(
            f"Representation: expected an element of {self.group.name}, got one of {group.name}"
        )

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
    """``dim`` invariant channels: every ``ρ(g)`` is the identity ``(dim, dim)``.

    Parameters
    ----------
    dim
        The number of channels.
    group
        Optionally, the group represented (any group when ``None``).
    """

    is_permutation = True

    def __init__(self, dim: int, group: Group | None = None) -> None:
        self.dim = _check_dim("TrivialRepresentation", dim)
        if group is not None and not isinstance(group, Group):
            raise GroupError(
                f"TrivialRepresentation: expected a Group or None, got {_describe(group)}"
            )
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
    ``g·k``: the matrix of ``g`` has a one at ``[index(g·elements()[k]), k]``, of shape
    ``(multiplicity·|G|, multiplicity·|G|)``.

    Parameters
    ----------
    group
        A finite group whose elements can be listed.
    multiplicity
        The number of copies.
    """

    is_permutation = True

    def __init__(self, group: FiniteGroup, multiplicity: int = 1) -> None:
        if not isinstance(group, Group):
            raise GroupError(
                f"RegularRepresentation: expected a finite group, got {_describe(group)}"
            )
        if not group.is_finite or not isinstance(group, FiniteGroup):
            raise GroupError(f"RegularRepresentation: expected a finite group, got {group.name}")
        self.group = group
        self.multiplicity = _check_dim("RegularRepresentation", multiplicity, "multiplicity")
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
        idx = torch.tensor(
            [m * n + s for m in range(self.multiplicity) for s in src], device=x.device
        )
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

    The function must be a homomorphism (``matrix_fn(g·h) = matrix_fn(g) @
    matrix_fn(h)``); [`intertwiner_basis`][groupattn.actions.intertwiner_basis] and the layers using it
    trust it.

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
        if not isinstance(group, Group):
            raise GroupError(
                f"MatrixRepresentation({name}): expected a Group, got {_describe(group)}"
            )
        if not callable(matrix_fn):
            raise GroupError(
                f"MatrixRepresentation({name}): expected a callable g -> matrix, got {_describe(matrix_fn)}"
            )
        self.group, self.dim, self._fn, self.name = (
            group,
            _check_dim(f"MatrixRepresentation({name})", dim),
            matrix_fn,
            name,
        )

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


class DirectSumRepresentation(Representation):
    """The direct sum ``ρ₁ ⊕ ρ₂ ⊕ …``: block-diagonal matrices, channels concatenated.

    ``matrix(g) = block_diag(ρ₁(g), ρ₂(g), …)`` of shape ``(Σ dimᵢ, Σ dimᵢ)``; channel
    ``c`` of the sum belongs to the summand whose block contains it, in order.

    Parameters
    ----------
    representations
        The summands (at least one). Those with a group must share it (trivial
        summands without a group fit any).

    Raises
    ------
    GroupError
        If a summand is not a [`Representation`][groupattn.actions.Representation] or two summands' groups differ.
    """

    def __init__(self, representations: Sequence[Representation]) -> None:
        reps = tuple(representations) if isinstance(representations, list | tuple) else None
        if not reps:
            raise GroupError(
                f"DirectSumRepresentation: expected a non-empty list of representations, got {_describe(representations)}"
            )
        group: Group | None = None
        for rep in reps:
            if not isinstance(rep, Representation):
                raise GroupError(
                    f"DirectSumRepresentation: expected representations, got {_describe(rep)}"
                )
            if rep.group is not None:
                if group is not None and rep.group != group:
                    raise GroupError(
                        f"DirectSumRepresentation: expected summands of one group, got {group.name} and {rep.group.name}"
                    )
                group = rep.group
        self.representations = reps
        self.group = group  # type: ignore[assignment]
        self.dim = sum(rep.dim for rep in reps)
        self.is_permutation = all(rep.is_permutation for rep in reps)

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        if self.group is not None:
            g = self.group.element(g)
        blocks = [
            torch.eye(rep.dim, dtype=dtype) if rep.group is None else rep.matrix(g, dtype=dtype)
            for rep in self.representations
        ]
        return torch.block_diag(*blocks)

    def apply(self, group: Group, g: Any, x: torch.Tensor, axis: int) -> torch.Tensor:
        """Apply each summand to its own slice of ``axis`` (exact for permutation summands)."""
        parts = torch.split(x, [rep.dim for rep in self.representations], dim=axis)
        return torch.cat(
            [rep.apply(group, g, part, axis) for rep, part in zip(self.representations, parts)],
            dim=axis,
        )

    def __repr__(self) -> str:
        return " ⊕ ".join(repr(rep) for rep in self.representations)


class PermutationRepresentation(Representation):
    """The permutation representation of a finite G-set: ``e_i ↦ e_{perm(g)[i]}``.

    ``matrix(g)`` has a one at ``[perm(g)[i], i]`` (shape ``(n, n)``), so
    ``matrix(g·h) = matrix(g) @ matrix(h)`` with the G-set convention
    ``perm(g·h) = perm(g)[perm(h)]``; on channels, the value at point ``i`` moves to
    point ``perm(g)[i]``.

    Parameters
    ----------
    gset
        A [`GSet`][groupattn.actions.GSet].
    """

    is_permutation = True

    def __init__(self, gset: GSet) -> None:
        from ._gset import GSet

        if not isinstance(gset, GSet):
            raise GroupError(f"PermutationRepresentation: expected a GSet, got {_describe(gset)}")
        self.gset = gset
        self.group = gset.group
        self.dim = gset.num_points

    def matrix(self, g: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        perm = self.gset.permutation(g)
        m = torch.zeros(self.dim, self.dim, dtype=dtype)
        m[perm, torch.arange(self.dim)] = 1
        return m

    def apply(self, group: Group, g: Any, x: torch.Tensor, axis: int) -> torch.Tensor:
        perm = self.gset.permutation(self.restrict(group, g))
        src = torch.empty_like(perm)
        src[perm] = torch.arange(self.dim)
        return x.index_select(axis, src.to(x.device))

    def __repr__(self) -> str:
        return f"permutation({self.gset.name})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PermutationRepresentation) and other.gset is self.gset

    def __hash__(self) -> int:
        return hash(("permutation", id(self.gset)))


def _check_dim(name: str, value: Any, what: str = "dim") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GroupError(f"{name}: expected {what} as an int >= 1, got {_describe(value)}")
    return value
