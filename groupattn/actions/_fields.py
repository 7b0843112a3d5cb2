"""Field types: which axes of a tensor are spatial, which is a group axis, how channels move."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..groups import Group, GroupError, PermutationGroup, PointGroup
from ._representations import Representation
from ._spatial import check_grid_size, embed_point_element, spatial_element, transform_grid

__all__ = [
    "FieldType",
    "GridField",
    "InvariantField",
    "LiftedField",
    "SetField",
    "TokenField",
]


def _shape_error(module: str, expected: str, x: torch.Tensor) -> GroupError:
    return GroupError(f"{module}: expected {expected}, got a tensor of shape {tuple(x.shape)}")


@dataclass(frozen=True)
class FieldType:
    """Base class: how a group acts on a tensor of a given layout.

    Subclasses implement :meth:`act` and :meth:`check`. Field types are immutable and
    compare by value, so the checker can compare the type a module produces with the
    type the next module expects.
    """

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        """Return ``g · x``."""
        raise NotImplementedError

    def check(self, x: torch.Tensor, module: str = "FieldType") -> None:
        """Raise :class:`GroupError` naming ``module`` if ``x`` does not fit this layout."""
        raise NotImplementedError

    @property
    def is_invariant(self) -> bool:
        """Whether every group element acts as the identity."""
        return False

    def describe(self) -> str:
        """A short human-readable description."""
        return repr(self)


def _apply_channels(
    channels: Representation | None, group: Group, g: Any, x: torch.Tensor, axis: int
) -> torch.Tensor:
    if channels is None:
        return x
    if x.shape[axis] != channels.dim:
        raise GroupError(
            f"FieldType: expected {channels.dim} channels for {channels!r}, got {x.shape[axis]}"
        )
    return channels.apply(group, g, x, axis)


@dataclass(frozen=True)
class InvariantField(FieldType):
    """Values that no group element moves (e.g. logits, pooled features): shape ``(B, ...)``."""

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        group.element(g)
        return x

    def check(self, x: torch.Tensor, module: str = "InvariantField") -> None:
        if x.dim() < 1:
            raise _shape_error(module, "a batched tensor (B, ...)", x)

    @property
    def is_invariant(self) -> bool:
        return True

    def describe(self) -> str:
        return "invariant"


@dataclass(frozen=True)
class GridField(FieldType):
    """Images ``(B, C, H, W)``: space moves by the spatial action, channels by ``channels``.

    Translations roll circularly; C4/D4 elements rotate (``rot90``) and reflect about the
    centre; p4/p4m elements do both. ``channels=None`` means trivial channels.
    """

    channels: Representation | None = None

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        check_grid_size(group, x.shape[-2], x.shape[-1], "GridField")
        y = transform_grid(x, spatial_element(group, g), "GridField")
        return _apply_channels(self.channels, group, g, y, 1)

    def check(self, x: torch.Tensor, module: str = "GridField") -> None:
        if x.dim() != 4:
            raise _shape_error(module, "an image batch (B, C, H, W)", x)

    def describe(self) -> str:
        return "grid(B,C,H,W)" + (f"[{self.channels!r}]" if self.channels is not None else "")


@dataclass(frozen=True)
class LiftedField(FieldType):
    """Fields over position × point group, ``(B, C, |H|, H, W)``.

    ``g = (t, h)`` moves the spatial axes like :class:`GridField` and permutes the group
    axis by the left-regular representation: ``(g·f)(x, k) = f(g⁻¹x, h⁻¹k)``.

    Parameters
    ----------
    point_group
        The point group ``H`` indexing axis 2.
    channels
        How channels move (``None``: trivial).
    """

    point_group: PointGroup = field(default=None)  # type: ignore[assignment]
    channels: Representation | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.point_group, PointGroup):
            raise GroupError(f"LiftedField: expected a point group, got {self.point_group!r}")

    def group_axis_permutation(self, group: Group, g: Any) -> torch.Tensor:
        """``src`` such that ``out[:, :, j] = in[:, :, src[j]]`` on the group axis."""
        se = spatial_element(group, g)
        H = self.point_group
        if se.point is None:
            return torch.arange(H.order())
        h = embed_point_element(se.point, H, "LiftedField")
        h_inv = H.inverse(h)
        return torch.tensor([H.index(H.compose(h_inv, k)) for k in H.elements()])

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        se = spatial_element(group, g)
        check_grid_size(group, x.shape[-2], x.shape[-1], "LiftedField")
        y = transform_grid(x, se, "LiftedField")
        if se.point is not None:
            y = y.index_select(2, self.group_axis_permutation(group, g).to(x.device))
        return _apply_channels(self.channels, group, g, y, 1)

    def check(self, x: torch.Tensor, module: str = "LiftedField") -> None:
        n = self.point_group.order()
        if x.dim() != 5 or x.shape[2] != n:
            raise _shape_error(module, f"a lifted field (B, C, |{self.point_group.name}|={n}, H, W)", x)

    def describe(self) -> str:
        return f"lifted(B,C,|{self.point_group.name}|,H,W)"


@dataclass(frozen=True)
class TokenField(FieldType):
    """Token sequences ``(B, N, C)`` laid out over a known ``grid = (h, w)``.

    ``N = prefix + |H|·h·w``: ``prefix`` invariant tokens (e.g. a class token) come
    first, then the grid tokens in ``(k, y, x)`` order, where ``k`` indexes the optional
    point-group axis ``point_group`` (lifted tokens). Grid tokens move like
    :class:`GridField` (or :class:`LiftedField`).
    """

    grid: tuple[int, int] = (1, 1)
    point_group: PointGroup | None = None
    prefix: int = 0
    channels: Representation | None = None

    @property
    def num_tokens(self) -> int:
        """``N``, the sequence length."""
        k = 1 if self.point_group is None else self.point_group.order()
        return self.prefix + k * self.grid[0] * self.grid[1]

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        b, _, c = x.shape
        h, w = self.grid
        head, body = x[:, : self.prefix], x[:, self.prefix :]
        if self.point_group is None:
            img = body.transpose(1, 2).reshape(b, c, h, w)
            img = GridField().act(group, g, img)
            body = img.reshape(b, c, h * w).transpose(1, 2)
        else:
            k = self.point_group.order()
            img = body.transpose(1, 2).reshape(b, c, k, h, w)
            img = LiftedField(self.point_group).act(group, g, img)
            body = img.reshape(b, c, k * h * w).transpose(1, 2)
        out = torch.cat([head, body], dim=1) if self.prefix else body
        return _apply_channels(self.channels, group, g, out, 2)

    def check(self, x: torch.Tensor, module: str = "TokenField") -> None:
        if x.dim() != 3 or x.shape[1] != self.num_tokens:
            raise _shape_error(
                module,
                f"tokens (B, N={self.num_tokens}, C) over a {self.grid[0]}x{self.grid[1]} grid"
                + (f" x {self.point_group.name}" if self.point_group else "")
                + (f" with {self.prefix} prefix tokens" if self.prefix else ""),
                x,
            )

    def describe(self) -> str:
        pg = f"x{self.point_group.name}" if self.point_group else ""
        return f"tokens(B,N,C)[{self.grid[0]}x{self.grid[1]}{pg}" + (f"+{self.prefix}" if self.prefix else "") + "]"


@dataclass(frozen=True)
class SetField(FieldType):
    """Token sets ``(B, N, C)`` acted on by a permutation group of the ``N`` tokens.

    Token ``i`` moves to position ``perm[i]`` for the element's permutation ``perm``
    (natural action of a :class:`~groupattn.groups.PermutationGroup` of degree ``N``).
    """

    num_points: int = 1
    channels: Representation | None = None

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        if not isinstance(group, PermutationGroup):
            raise GroupError(f"SetField: expected a permutation group, got {group.name}")
        if group.degree != self.num_points:
            raise GroupError(
                f"SetField: expected a permutation group of degree {self.num_points}, got degree {group.degree}"
            )
        perm = torch.tensor(group.permutation(g), device=x.device)
        out = torch.empty_like(x)
        out[:, perm] = x
        return _apply_channels(self.channels, group, g, out, 2)

    def check(self, x: torch.Tensor, module: str = "SetField") -> None:
        if x.dim() != 3 or x.shape[1] != self.num_points:
            raise _shape_error(module, f"a token set (B, N={self.num_points}, C)", x)

    def describe(self) -> str:
        return f"set(B,{self.num_points},C)"


