"""Field types: which axes of a tensor are spatial, which is a group axis, how channels move."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .._errors import ConfigurationError, ShapeError
from ..groups import Group, GroupError, PermutationGroup, PointGroup, TorusTranslations
from ._representations import Representation
from ._spatial import check_grid_size, embed_point_element, spatial_element, transform_grid

if TYPE_CHECKING:
    from ._gset import GSet

__all__ = [
    "FieldType",
    "GSetField",
    "GridField",
    "InvariantField",
    "LiftedField",
    "SetField",
    "TokenField",
    "check_grid",
    "torus_stride",
]


def _shape_error(module: str, expected: str, x: torch.Tensor) -> ShapeError:
    return ShapeError(f"{module}: expected {expected}, got a tensor of shape {tuple(x.shape)}")


def _channels_label(channels: int | None) -> str:
    return "C" if channels is None else f"C={channels}"


def _width(channels: int | None, representation: Representation | None) -> int | None:
    """The width to state in a message: the one asked for, else the representation's."""
    if channels is not None:
        return channels
    return representation.dim if representation is not None else None


def _check_channel_count(channels: Any) -> int | None:
    if channels is None:
        return None
    try:
        width = operator.index(channels)
    except TypeError:
        width = 0
    if isinstance(channels, bool) or width < 1:
        raise ConfigurationError(
            f"FieldType.check: expected channels as an int >= 1 or None, got {channels!r}"
        )
    return width


def check_grid(grid: Any, module: str = "check_grid") -> tuple[int, int]:
    """Validate a token or pixel grid ``(height, width)`` given to a module's constructor.

    Parameters
    ----------
    grid
        Two positive integers ``(h, w)`` (any sequence of two ints).
    module
        The name the error message starts with (the calling module).

    Returns
    -------
    tuple[int, int]
        ``(h, w)`` as Python ints.

    Raises
    ------
    ConfigurationError
        Naming ``module``, if ``grid`` is not a pair of positive integers, e.g.
        ``"WindowAttention: expected a grid (height, width) of positive ints, got (0, 4)"``.

    Examples
    --------
    >>> check_grid([4, 6], "MyLayer")
    (4, 6)
    """
    try:
        height, width = (int(grid[0]), int(grid[1]))
    except (TypeError, IndexError, ValueError):
        raise ConfigurationError(
            f"{module}: expected a grid (height, width), got {grid!r}"
        ) from None
    if height < 1 or width < 1 or len(grid) != 2:
        raise ConfigurationError(
            f"{module}: expected a grid (height, width) of positive ints, got {grid!r}"
        )
    return height, width


def torus_stride(group: Group, grid: tuple[int, int]) -> int | None:
    """The stride with which ``group`` translates a torus grid of shape ``grid``, else ``None``.

    ``TorusTranslations(h, w, stride=s)`` acts on an ``(h·s) × (w·s)`` grid by shifts
    that are multiples of ``s``; this returns ``s`` when ``group`` is such a group for
    ``grid`` (pixels or tokens), and ``None`` for any other group or grid size — the
    usual first test of a layer's contract under translations.

    Parameters
    ----------
    group
        Any group.
    grid
        ``(H, W)`` of the grid the layer works on.

    Returns
    -------
    int or None
        The stride ``s``, or ``None`` when ``group`` is not a torus translation group
        of this grid.

    Examples
    --------
    >>> from groupattn.groups import TorusTranslations
    >>> torus_stride(TorusTranslations(4, 4, stride=2), (8, 8))
    2
    >>> torus_stride(TorusTranslations(4, 4), (8, 8)) is None
    True
    """
    if not isinstance(group, TorusTranslations):
        return None
    if group.height * group.stride != grid[0] or group.width * group.stride != grid[1]:
        return None
    return group.stride


@dataclass(frozen=True)
class FieldType:
    """Base class: how a group acts on a tensor of a given layout.

    Subclasses implement [`act`][groupattn.actions.FieldType.act] and [`check`][groupattn.actions.FieldType.check]. Field types are immutable and
    compare by value, so the checker can compare the type a module produces with the
    type the next module expects.

    [`check`][groupattn.actions.FieldType.check] is the library's one way to validate a module's input: every layer
    checks its input with ``in_type.check(x, "LayerName", channels=width)`` (directly
    or through [`EquivariantModule`][groupattn.contracts.EquivariantModule]), so a wrong rank, token
    count or channel count raises the same kind of message everywhere. A subclass
    implements ``check(x, module)``, and may accept the ``channels`` keyword too.
    """

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        """Return ``g · x``."""
        raise NotImplementedError

    def check(self, x: torch.Tensor, module: str = "FieldType") -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` fits this layout.

        The message reads ``"{module}: expected {layout}, got a tensor of shape
        {shape}"``, naming the module whose input ``x`` is. The library's field types
        ([`GridField`][groupattn.actions.GridField], [`LiftedField`][groupattn.actions.LiftedField], [`TokenField`][groupattn.actions.TokenField],
        [`GSetField`][groupattn.actions.GSetField], [`SetField`][groupattn.actions.SetField], [`InvariantField`][groupattn.actions.InvariantField]) also take a
        keyword ``channels``: the channel width the module needs when the type does not
        state it (plain, trivial channels); ``None`` accepts any width.
        """
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
        raise ShapeError(
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

    def check(
        self, x: torch.Tensor, module: str = "InvariantField", *, channels: int | None = None
    ) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` is ``(B, ...)`` (``(B, C=channels, ...)`` if given)."""
        channels = _check_channel_count(channels)
        if channels is None:
            if x.dim() < 1:
                raise _shape_error(module, "a batched tensor (B, ...)", x)
        elif x.dim() < 2 or x.shape[1] != channels:
            raise _shape_error(module, f"a batched tensor (B, C={channels}, ...)", x)

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

    def check(
        self, x: torch.Tensor, module: str = "GridField", *, channels: int | None = None
    ) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` is an image batch ``(B, C, H, W)`` (``C = channels`` if given)."""
        channels = _check_channel_count(channels)
        if x.dim() != 4 or (channels is not None and x.shape[1] != channels):
            raise _shape_error(module, f"an image batch (B, {_channels_label(channels)}, H, W)", x)

    def describe(self) -> str:
        return "grid(B,C,H,W)" + (f"[{self.channels!r}]" if self.channels is not None else "")


@dataclass(frozen=True)
class LiftedField(FieldType):
    """Fields over position × point group, ``(B, C, |H|, H, W)``.

    ``g = (t, h)`` moves the spatial axes like [`GridField`][groupattn.actions.GridField] and permutes the group
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
            raise ConfigurationError(
                f"LiftedField: expected a point group, got {self.point_group!r}"
            )

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

    def check(
        self, x: torch.Tensor, module: str = "LiftedField", *, channels: int | None = None
    ) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` is ``(B, C, |H|, H, W)`` (``C = channels`` if given)."""
        channels = _check_channel_count(channels)
        n = self.point_group.order()
        if x.dim() != 5 or x.shape[2] != n or (channels is not None and x.shape[1] != channels):
            c = _channels_label(channels)
            raise _shape_error(
                module, f"a lifted field (B, {c}, |{self.point_group.name}|={n}, H, W)", x
            )

    def describe(self) -> str:
        return f"lifted(B,C,|{self.point_group.name}|,H,W)"


@dataclass(frozen=True)
class TokenField(FieldType):
    """Token sequences ``(B, N, C)`` laid out over a known ``grid = (h, w)``.

    ``N = prefix + |H|·h·w``: ``prefix`` invariant tokens (e.g. a class token) come
    first, then the grid tokens in ``(k, y, x)`` order, where ``k`` indexes the optional
    point-group axis ``point_group`` (lifted tokens). Grid tokens move like
    [`GridField`][groupattn.actions.GridField] (or [`LiftedField`][groupattn.actions.LiftedField]).
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

    def check(
        self, x: torch.Tensor, module: str = "TokenField", *, channels: int | None = None
    ) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` is ``(B, N, C)`` with ``N = num_tokens`` (``C = channels`` if given)."""
        channels = _check_channel_count(channels)
        if (
            x.dim() != 3
            or x.shape[1] != self.num_tokens
            or (channels is not None and x.shape[2] != channels)
        ):
            raise _shape_error(
                module,
                f"tokens (B, N={self.num_tokens}, {_channels_label(channels)}) over a {self.grid[0]}x{self.grid[1]} grid"
                + (f" x {self.point_group.name}" if self.point_group else "")
                + (f" with {self.prefix} prefix tokens" if self.prefix else ""),
                x,
            )

    def describe(self) -> str:
        pg = f"x{self.point_group.name}" if self.point_group else ""
        return (
            f"tokens(B,N,C)[{self.grid[0]}x{self.grid[1]}{pg}"
            + (f"+{self.prefix}" if self.prefix else "")
            + "]"
        )


def _is_trivial(channels: Representation | None) -> bool:
    from ._representations import TrivialRepresentation

    return channels is None or isinstance(channels, TrivialRepresentation)


@dataclass(frozen=True, eq=False)
class GSetField(FieldType):
    """Tokens ``(B, N, C)`` whose token axis is moved through a finite G-set.

    The general token layout: ``gset`` is any [`GSet`][groupattn.actions.GSet] — a
    permutation group on its points ([`GSet.natural`][groupattn.actions.GSet.natural]), the nodes of a graph under
    its automorphisms, the cells of a hexagonal grid, a product group, a user's own
    [`FiniteGroup`][groupattn.groups.FiniteGroup] subclass, or the pixels of a torus
    ([`GSet.grid`][groupattn.actions.GSet.grid]). Element ``g`` sends token ``i`` to position
    ``gset.permutation(g)[i]``:

    ``(g·x)[:, perm[i]] = ρ(g) x[:, i]``

    where ``ρ`` is the channel representation ``channels`` (``None``: trivial). With
    trivial, regular or permutation channels the action is an exact permutation of the
    entries (no arithmetic), in any dtype.

    Field types compare by value: two ``GSetField`` are equal when their G-sets have the
    same group, the same number of points and the same generator permutations, and
    their channels are equal.

    Parameters
    ----------
    gset
        The G-set of the tokens; its group is the only group this field type accepts.
    channels
        How channels move (a representation of ``gset.group``), or ``None`` for trivial.

    Raises
    ------
    GroupError
        At construction if ``gset`` is not a ``GSet``; in [`act`][groupattn.actions.FieldType.act] for another
        group than the G-set's, an invalid element, or a tensor that is not
        ``(B, N, C)`` (with ``C = channels.dim`` when channels are given).

    Examples
    --------
    >>> from groupattn.actions import GSet, GSetField
    >>> from groupattn.groups import DirectProduct, CyclicGroup
    >>> G = DirectProduct(CyclicGroup(4), CyclicGroup(2))
    >>> cylinder = GSet(G, 8, lambda g: [2 * ((i + g.value[0]) % 4) + (l + g.value[1]) % 2
    ...                                  for i in range(4) for l in range(2)])
    >>> GSetField(cylinder).act(G, (1, 1), torch.arange(8.0).reshape(1, 8, 1)).flatten().tolist()
    [7.0, 6.0, 1.0, 0.0, 3.0, 2.0, 5.0, 4.0]
    """

    gset: GSet = field(default=None)  # type: ignore[assignment]
    channels: Representation | None = None

    def __post_init__(self) -> None:
        from ._gset import GSet

        if not isinstance(self.gset, GSet):
            raise ConfigurationError(f"{type(self).__name__}: expected a GSet, got {self.gset!r}")

    # ------------------------------------------------------------------ value semantics
    def _key(self) -> Any:
        cached = self.__dict__.get("_cached_key")
        if cached is None:
            gens = tuple(
                tuple(self.gset.permutation(g).tolist()) for g in self.gset.group.generators()
            )
            cached = (self.gset.group, self.gset.num_points, gens)
            object.__setattr__(self, "_cached_key", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, GSetField)
        return self.channels == other.channels and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()[0], self._key()[1], self.channels))

    def __copy__(self) -> GSetField:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> GSetField:
        # an immutable value: copies share the G-set (and its group, which need not be copyable)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gset!r}" + (
            f", channels={self.channels!r})" if self.channels else ")"
        )

    # ------------------------------------------------------------------ the action
    @property
    def num_points(self) -> int:
        """``N``, the number of tokens."""
        return int(self.gset.num_points)

    @property
    def is_trivial_channels(self) -> bool:
        """Whether the channels are trivial (``None`` or a trivial representation)."""
        return _is_trivial(self.channels)

    def gset_for(self, group: Group) -> GSet:
        """The G-set through which ``group`` moves the tokens.

        Raises
        ------
        GroupError
            If ``group`` is not the G-set's group.
        """
        if group != self.gset.group:
            raise GroupError(
                f"{type(self).__name__}: expected the group of {self.gset.name} ({self.gset.group.name}), "
                f"got {group.name}"
            )
        return self.gset

    def source_index(self, group: Group, g: Any) -> torch.Tensor:
        """Long tensor ``(N,)``: ``(g·x)[:, j] = x[:, src[j]]`` (trivial channels)."""
        perm = self.gset_for(group).permutation(
            g
        )  # validated by the G-set (a permutation of range(N))
        src = torch.empty_like(perm)
        src[perm] = torch.arange(perm.numel())
        return src

    def act(self, group: Group, g: Any, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        src = self.source_index(group, g)
        out = x.index_select(1, src.to(x.device))
        return _apply_channels(self.channels, group, g, out, 2)

    def _expected(self, channels: int | None = None) -> str:
        c = _channels_label(_width(channels, self.channels))
        return f"tokens (B, N={self.num_points}, {c}) of {self.gset.name}"

    def check(
        self, x: torch.Tensor, module: str | None = None, *, channels: int | None = None
    ) -> None:
        """Raise [`ShapeError`][groupattn.ShapeError] unless ``x`` is ``(B, N, C)`` with ``N = num_points``.

        ``C`` must be ``channels.dim`` of the type's representation, and ``channels``
        when given.
        """
        module = module or type(self).__name__
        channels = _check_channel_count(channels)
        n = self.num_points
        wrong = self.channels is not None and x.dim() == 3 and x.shape[2] != self.channels.dim
        if (
            x.dim() != 3
            or x.shape[1] != n
            or wrong
            or (channels is not None and x.shape[2] != channels)
        ):
            raise _shape_error(module, self._expected(channels), x)

    def describe(self) -> str:
        ch = f"[{self.channels!r}]" if self.channels is not None else ""
        return f"gset(B,{self.num_points},C)[{self.gset.name}]{ch}"


@dataclass(frozen=True, eq=False, init=False, repr=False)
class SetField(GSetField):
    """Token sets ``(B, N, C)`` acted on by a permutation group of the ``N`` tokens.

    The case of [`GSetField`][groupattn.actions.GSetField] whose G-set is the *natural* action
    ([`GSet.natural`][groupattn.actions.GSet.natural]) of whichever [`PermutationGroup`][groupattn.groups.PermutationGroup] of
    degree ``N`` acts: token ``i`` moves to position ``perm[i]`` for the element's
    permutation ``perm``. Unlike [`GSetField`][groupattn.actions.GSetField] it does not fix the group in
    advance (any permutation group of degree ``N``: ``S_N``, a graph's automorphisms, a
    group given by generator permutations).

    Parameters
    ----------
    num_points
        ``N``.
    channels
        How channels move (``None``: trivial).

    Raises
    ------
    GroupError
        In [`act`][groupattn.actions.FieldType.act] for a group that is not a permutation group of degree ``N``, or a
        tensor that is not ``(B, N, C)``.
    """

    def __init__(self, num_points: int = 1, channels: Representation | None = None) -> None:
        object.__setattr__(self, "gset", None)
        object.__setattr__(self, "channels", channels)
        object.__setattr__(self, "_num_points", int(num_points))

    def _key(self) -> Any:
        return ("natural", self.num_points)

    @property
    def num_points(self) -> int:
        """``N``, the number of tokens."""
        return int(self.__dict__["_num_points"])

    def gset_for(self, group: Group) -> GSet:
        """The natural G-set of ``group``, a permutation group of degree ``N``."""
        from ._gset import GSet

        if not isinstance(group, PermutationGroup):
            raise GroupError(f"SetField: expected a permutation group, got {group.name}")
        if group.degree != self.num_points:
            raise GroupError(
                f"SetField: expected a permutation group of degree {self.num_points}, got degree {group.degree}"
            )
        return GSet.natural(group)

    def _expected(self, channels: int | None = None) -> str:
        c = _channels_label(_width(channels, self.channels))
        return f"a token set (B, N={self.num_points}, {c})"

    def __repr__(self) -> str:
        return f"SetField({self.num_points}" + (
            f", channels={self.channels!r})" if self.channels else ")"
        )

    def describe(self) -> str:
        return f"set(B,{self.num_points},C)"
