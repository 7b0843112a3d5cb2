"""Building blocks on lifted fields ``(B, C, |H|, H, W)``: pooling, normalisation, MLP, blocks."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError, DtypeError, ShapeError
from .._sealed import sealed
from ..actions import (
    FieldType,
    GridField,
    InvariantField,
    LiftedField,
    embed_point_element,
    point_group_of,
)
from ..attention._group_attention import GroupSelfAttention, resolve_point_group
from ..canonical import AdaptivePolyphaseDownsample
from ..contracts import Contract, EquivariantModule
from ..contracts._module import check_floating_input
from ..groups import Group, GroupError, PointGroup, RotoTranslationGroup, TorusTranslations
from ..positional._constants import constant_cache

__all__ = [
    "GroupBlock",
    "GroupGlobalPool",
    "GroupLayerNorm",
    "GroupMLP",
    "GroupPooling",
    "LiftedAvgPool",
    "LiftedPolyphaseDownsample",
    "OrbitPooledLinear",
    "SymmetricConvStem",
]


def _pointwise_contract(
    module: str,
    point_group: PointGroup,
    group: Group,
    in_t: FieldType,
    out_t: FieldType,
    invariant: bool = False,
    input_type: Any = None,
) -> Contract:
    """Contract of a module acting per position and permutation-equivariantly on the group axis.

    Unverified when asked about an ``input_type`` other than ``in_t`` (e.g. a lifted
    field of another point group of the same order, whose group axis moves differently).
    """
    if input_type is not None and input_type != in_t:
        what = input_type.describe() if isinstance(input_type, FieldType) else repr(input_type)
        return Contract.unknown(
            f"{module}: expected input type {in_t.describe()}, got {what}", input_type
        )
    try:
        acting = point_group_of(group)
        if acting is not None:
            for gen in acting.generators():
                embed_point_element(gen, point_group, module)
    except GroupError as err:
        return Contract.unknown(f"{module}: {err}", in_t)
    if invariant:
        return Contract.invariant(in_t, out_t)
    return Contract.equivariant(in_t, out_t)


def _lifted_invariant_contract(
    module: str, point_group: PointGroup, group: Group, input_type: Any
) -> Contract:
    """Contract of a read-out from the lifted field of ``point_group`` to invariant features."""
    return _pointwise_contract(
        module,
        point_group,
        group,
        LiftedField(point_group),
        InvariantField(),
        invariant=True,
        input_type=input_type,
    )


def _spatial_pool(x: torch.Tensor, mode: str) -> torch.Tensor:
    """Max or mean over the last two (spatial) axes."""
    return x.amax(dim=(-2, -1)) if mode == "max" else x.mean(dim=(-2, -1))


class GroupPooling(EquivariantModule):
    """Pool over the group axis: ``(B, C, |H|, H, W) → (B, C, H, W)`` (max or mean).

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)`` to
    ``GridField()``: calling it checks the input is a lifted field of ``H``.

    Contract: equivariant ``LiftedField(H) → GridField`` (the group axis is permuted,
    pooling forgets the permutation).

    Parameters
    ----------
    point_group
        ``H`` (instance or name).
    mode
        ``"max"`` or ``"mean"``.
    """

    def __init__(self, point_group: PointGroup | str, mode: str = "max") -> None:
        pg = resolve_point_group(point_group, "GroupPooling")
        super().__init__(LiftedField(pg), GridField())
        self.point_group = pg
        if mode not in ("max", "mean"):
            raise ConfigurationError(f"GroupPooling: expected mode 'max' or 'mean', got {mode!r}")
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=2) if self.mode == "max" else x.mean(dim=2)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant ``LiftedField(H) → GridField``."""
        return _pointwise_contract(
            "GroupPooling",
            self.point_group,
            group,
            LiftedField(self.point_group),
            GridField(),
            input_type=input_type,
        )

    def extra_repr(self) -> str:
        return f"{self.point_group.name}, mode={self.mode}"


class GroupGlobalPool(EquivariantModule):
    """Pool over the group axis and space: ``(B, C, |H|, H, W) → (B, C)``.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)`` to
    [`InvariantField`][groupattn.actions.InvariantField]: calling it checks the input is a lifted
    field of ``H``.

    Contract: invariant (every element permutes the pooled positions).

    Parameters
    ----------
    point_group
        ``H`` (instance or name).
    mode
        ``"max"`` or ``"mean"`` over the group axis.
    spatial
        ``"mean"`` or ``"max"`` over space. Max pooling keeps the strongest local
        response, which matters at full resolution where most positions are background.

    Raises
    ------
    ConfigurationError
        For an unknown ``spatial`` mode.
    """

    def __init__(
        self, point_group: PointGroup | str, mode: str = "max", spatial: str = "mean"
    ) -> None:
        pool = GroupPooling(point_group, mode)
        super().__init__(LiftedField(pool.point_group), InvariantField())
        self.pool = pool
        self.point_group = self.pool.point_group
        if spatial not in ("mean", "max"):
            raise ConfigurationError(
                f"GroupGlobalPool: expected spatial pooling 'mean' or 'max', got {spatial!r}"
            )
        self.spatial = spatial

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _spatial_pool(self.pool(x), self.spatial)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant ``LiftedField(H) → InvariantField``."""
        return _lifted_invariant_contract("GroupGlobalPool", self.point_group, group, input_type)


@constant_cache(maxsize=64)
def _orbit_gather_index(gather: tuple[tuple[int, ...], ...], device: torch.device) -> torch.Tensor:
    """The read-out's gather table as a long tensor on ``device``, built once per device."""
    return torch.tensor(gather, dtype=torch.long, device=device)


class OrbitPooledLinear(EquivariantModule):
    """An invariant linear read-out: pool over space, apply one linear map to every turned copy, keep the largest.

    ``(B, dim, |H|, H, W) → (B, out_dim)``. The features are pooled over space to
    ``v`` of shape ``(B, dim, |H|)``, which a group element ``h`` moves by the left-regular
    permutation of its group axis, ``(h·v)(k) = v(h⁻¹k)``. The read-out applies one
    weight ``W`` of shape ``(out_dim, dim, |H|)`` to the whole orbit of ``v``,

    ``logit_o(v) = max_{g ∈ H} Σ_{c,k} W[o, c, k] · v[c, g⁻¹k] + b_o``,

    so turning the input permutes the ``|H|`` candidates and the maximum does not move.
    Unlike [`GroupGlobalPool`][groupattn.nn.GroupGlobalPool] followed by a ``Linear``
    (a max over the group axis of *each channel on its own*), it keeps the relative
    orientation of the channels: "a stroke at 0° in channel 1 together with one at 90° in
    channel 2" differs from "both at 0°". On a few C4 channels this is what limits an
    invariant classifier (``escnn_hybrid`` on the MNIST digits: see its docstring).

    Exact with ``spatial="max"``: the candidates of a turned input are the same floats as
    those of the upright one, in another order (each candidate is a gather of ``v``
    multiplied by the same ``W`` and summed in the same order), so the logits are
    invariant to the last bit, in every dtype. A spatial mean adds the turned grid up in
    another order: invariant up to rounding.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)``
    to [`InvariantField`][groupattn.actions.InvariantField]: calling it checks the input is
    ``(B, dim, |H|, H, W)`` of a floating dtype.

    Contract: invariant ``LiftedField(H) → InvariantField`` under ``H`` and its subgroups
    and under every translation of the grid (the spatial pooling is global), like
    ``GroupGlobalPool``.

    Shapes: ``(B, dim, |H|, H, W) → (B, out_dim)``.

    Parameters
    ----------
    dim
        Channels ``C`` of the lifted field.
    out_dim
        Outputs (e.g. classes).
    point_group
        ``H`` (instance or name).
    spatial
        ``"max"`` or ``"mean"`` over space.
    bias
        Add a learned bias (the same for every candidate).

    Raises
    ------
    ConfigurationError
        For sizes below 1, an unknown ``spatial`` mode or a ``bias`` that is not a bool.
    GroupError
        For an unknown point group.
    ShapeError
        In ``forward``, for an input that is not ``(B, dim, |H|, H, W)`` with ``H, W ≥ 1``.
    DtypeError
        In ``forward``, for an integer or bool input, or (outside autocast) a floating
        dtype other than the weights'.
    """

    floating_input = True

    def __init__(
        self,
        dim: int,
        out_dim: int,
        point_group: PointGroup | str,
        spatial: str = "max",
        bias: bool = True,
    ) -> None:
        pg = resolve_point_group(point_group, "OrbitPooledLinear")
        for what, value in (("dim", dim), ("out_dim", out_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"OrbitPooledLinear: expected {what} as an int >= 1, got {value!r}"
                )
        if spatial not in ("mean", "max"):
            raise ConfigurationError(
                f"OrbitPooledLinear: expected spatial pooling 'mean' or 'max', got {spatial!r}"
            )
        if not isinstance(bias, bool):
            raise ConfigurationError(f"OrbitPooledLinear: expected bias as a bool, got {bias!r}")
        super().__init__(LiftedField(pg), InvariantField(), in_channels=dim)
        self.point_group = pg
        self.dim, self.out_dim, self.spatial = dim, out_dim, spatial
        n = pg.order()
        elements = pg.elements()
        # gather[g, k] = index of g⁻¹k: candidate g reads v[:, :, gather[g]]
        self._gather = tuple(
            tuple(pg.index(pg.compose(pg.inverse(g), k)) for k in elements) for g in elements
        )
        bound = 1.0 / (dim * n) ** 0.5  # nn.Linear's default over C·|H| inputs
        self.weight = nn.Parameter(torch.empty(out_dim, dim, n).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(out_dim).uniform_(-bound, bound)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] == 0 or x.shape[-1] == 0:
            raise ShapeError(
                f"OrbitPooledLinear: expected a lifted field over a non-empty grid, got shape "
                f"{tuple(x.shape)}"
            )
        if x.dtype != self.weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise DtypeError(
                f"OrbitPooledLinear: expected an input of the weights' dtype {self.weight.dtype} "
                f"(or autocast), got {x.dtype}"
            )
        pooled = _spatial_pool(x, self.spatial)
        if len(self._gather) == 1:  # the trivial group: one candidate, a plain linear layer
            bias = None if self.bias is None else self.bias.to(pooled.dtype)
            return nn.functional.linear(
                pooled.flatten(1), self.weight.flatten(1).to(pooled.dtype), bias
            )
        index = _orbit_gather_index(self._gather, x.device)  # (|H|, |H|), a cached constant
        candidates = pooled[:, :, index]  # (B, C, |H| candidates, |H|)
        weight = self.weight.to(pooled.dtype)
        # (B, 1, C, G, |H|) * (O, C, 1, |H|) summed over C and |H|: the same order for every g
        logits = (candidates.unsqueeze(1) * weight.unsqueeze(2)).sum(dim=(2, 4))  # (B, O, G)
        out = logits.amax(dim=-1)
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant ``LiftedField(H) → InvariantField``; unverified for another input type."""
        return _lifted_invariant_contract("OrbitPooledLinear", self.point_group, group, input_type)

    def extra_repr(self) -> str:
        return (
            f"{self.dim}, {self.out_dim}, {self.point_group.name}, "
            f"spatial={self.spatial}, bias={self.bias is not None}"
        )


class GroupLayerNorm(EquivariantModule):
    """Layer normalisation over channels and the group axis, per position.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)`` to
    itself: calling it checks the input is ``(B, dim, |H|, H, W)``.

    Statistics are taken over ``(C, |H|)`` at each pixel, so permuting the group axis
    or moving pixels leaves them unchanged; the affine scale and shift are per channel,
    shared across the group axis.

    Contract: equivariant ``LiftedField(H) → LiftedField(H)``.

    Parameters
    ----------
    dim
        ``C``.
    point_group
        ``H`` (instance or name).
    eps
        Added to the variance.

    Notes
    -----
    Deprecated alias (one release): ``channels`` → ``dim`` (argument and attribute).
    """

    floating_input = True

    channels = DeprecatedAttribute("dim")

    @renamed_arguments(channels="dim")
    def __init__(self, dim: int, point_group: PointGroup | str, eps: float = 1e-5) -> None:
        pg = resolve_point_group(point_group, "GroupLayerNorm")
        super().__init__(LiftedField(pg), LiftedField(pg), in_channels=dim)
        self.point_group = pg
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(1, 2), keepdim=True)
        centred = x - mean
        # the biased variance as a mean of squares (torch.var warns about an empty batch)
        var = centred.square().mean(dim=(1, 2), keepdim=True)
        y = centred * torch.rsqrt(var + self.eps)
        return y * self.weight[:, None, None, None] + self.bias[:, None, None, None]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant ``LiftedField(H) → LiftedField(H)``."""
        t = LiftedField(self.point_group)
        return _pointwise_contract(
            "GroupLayerNorm", self.point_group, group, t, t, input_type=input_type
        )

    def extra_repr(self) -> str:
        return f"{self.dim}, {self.point_group.name}"


class GroupMLP(EquivariantModule):
    """Pointwise MLP on channels, shared across positions and the group axis.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)`` to
    itself: calling it checks the input is ``(B, dim, |H|, H, W)``.

    ``Linear(C, hidden) → GELU → Linear(hidden, C_out)`` applied to every
    ``(h, x)`` token of ``(B, C, |H|, H, W)``. With ``mix_orientations=True`` each linear
    map is a 1 × 1 [`GroupConvolution`][groupattn.nn.GroupConvolution] instead: output
    slice ``h`` reads every input slice ``h'`` through a learned weight that depends on
    ``h⁻¹h'`` only (``|H|`` times the weights). Pointwise maps never mix orientations, so
    in a lifted transformer only the attention weights — positive, over the same values —
    could; the learned mixing lets the model combine "this edge at 0°" with "that edge at
    90°" directly (for the trivial group it is the pointwise MLP itself).

    Contract: equivariant ``LiftedField(H) → LiftedField(H)``.

    Parameters
    ----------
    dim
        ``C``.
    hidden
        Hidden width.
    point_group
        ``H`` (instance or name).
    out_dim
        Output width ``C_out`` (``C`` by default).
    mix_orientations
        Mix the group axis with learned 1 × 1 group convolutions (``False``: shared
        pointwise maps). Needs a square grid under quarter turns.

    Notes
    -----
    Deprecated aliases (one release): ``channels`` → ``dim``, ``out_channels`` →
    ``out_dim`` (arguments; the attribute ``channels`` too).
    """

    floating_input = True

    channels = DeprecatedAttribute("dim")

    @renamed_arguments(channels="dim", out_channels="out_dim")
    def __init__(
        self,
        dim: int,
        hidden: int,
        point_group: PointGroup | str,
        out_dim: int | None = None,
        mix_orientations: bool = False,
    ) -> None:
        pg = resolve_point_group(point_group, "GroupMLP")
        super().__init__(LiftedField(pg), LiftedField(pg), in_channels=dim)
        self.point_group = pg
        self.dim = dim
        self.mix_orientations = bool(mix_orientations) and pg.order() > 1
        self.fc1: nn.Module
        self.fc2: nn.Module
        if self.mix_orientations:
            from ._group_patch import GroupConvolution

            self.fc1 = GroupConvolution(dim, hidden, 1, pg)
            self.fc2 = GroupConvolution(hidden, out_dim or dim, 1, pg)
        else:
            self.fc1 = nn.Linear(dim, hidden)
            self.fc2 = nn.Linear(hidden, out_dim or dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mix_orientations:
            return self.fc2(self.act(self.fc1(x)))
        y = self.fc2(self.act(self.fc1(x.movedim(1, -1))))
        return y.movedim(-1, 1)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant ``LiftedField(H) → LiftedField(H)``."""
        t = LiftedField(self.point_group)
        return _pointwise_contract("GroupMLP", self.point_group, group, t, t, input_type=input_type)


class GroupBlock(nn.Module):
    """A pre-norm transformer block on lifted fields.

    ``x + GroupSelfAttention(GroupLayerNorm(x))`` then ``x + GroupMLP(GroupLayerNorm(x))``.

    Contract: equivariant ``LiftedField(H) → LiftedField(H)`` wherever its attention is
    (torus translations, ``H``, ``T ⋊ H``); otherwise that of the attention.

    Shapes: ``(B, dim, |H|, H, W) → (B, dim, |H|, H, W)``.

    Parameters
    ----------
    dim
        ``C`` (in and out).
    point_group
        ``H`` (instance or name).
    num_heads, head_dim, neighbourhood, encoding, grid, query_position
        Passed to [`GroupSelfAttention`][groupattn.attention.GroupSelfAttention].
    mlp_ratio
        Hidden width of the MLP relative to ``C``.
    mix_orientations
        Passed to [`GroupMLP`][groupattn.nn.GroupMLP]: learned mixing of the group axis.

    Notes
    -----
    Deprecated aliases (one release): ``channels`` → ``dim``, ``head_channels`` →
    ``head_dim``, ``size`` → ``grid``.
    """

    @renamed_arguments(channels="dim", head_channels="head_dim", size="grid")
    def __init__(
        self,
        dim: int,
        point_group: PointGroup | str,
        num_heads: int = 1,
        head_dim: int | None = None,
        neighbourhood: int | None = None,
        encoding: str = "continuous",
        grid: int | tuple[int, int] | None = None,
        query_position: bool = False,
        mlp_ratio: float = 2.0,
        mix_orientations: bool = False,
    ) -> None:
        super().__init__()
        self.point_group = resolve_point_group(point_group, "GroupBlock")
        self.dim = dim
        self.norm1 = GroupLayerNorm(dim, self.point_group)
        self.attention = GroupSelfAttention(
            dim,
            dim,
            self.point_group,
            num_heads=num_heads,
            head_dim=head_dim,
            neighbourhood=neighbourhood,
            encoding=encoding,
            grid=grid,
            query_position=query_position,
        )
        self.norm2 = GroupLayerNorm(dim, self.point_group)
        self.mlp = GroupMLP(
            dim,
            max(1, int(dim * mlp_ratio)),
            self.point_group,
            mix_orientations=mix_orientations,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_floating_input(x, "GroupBlock")
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """That of the attention (norms and MLP are equivariant wherever it is)."""
        return self.attention.contract(group, input_type)


class LiftedAvgPool(EquivariantModule):
    """Strided average pooling of lifted fields: ``(B, C, |H|, H, W) → (B, C, |H|, H/s, W/s)``.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)`` to
    itself: calling it checks the input is a lifted field of ``H``.

    With ``s`` dividing the (square) grid side, the ``s × s`` cells are mapped onto each
    other by the rotations and reflections about the centre, so the layer is exactly
    equivariant to ``H``; it is equivariant to translations by multiples of ``s`` only
    (``TorusTranslations(h, w, stride=s)`` of the input onto ``TorusTranslations(h, w)``
    of the output). For full translation equivariance anchor first
    (``groupattn.canonical``) or keep the resolution.

    Contract: equivariant under ``H``'s subgroups and strided translations; *breaks*
    under translations by other amounts and under ``T ⋊ H``.

    Parameters
    ----------
    point_group
        ``H`` (instance or name).
    stride
        ``s``.
    """

    def __init__(self, point_group: PointGroup | str, stride: int = 2) -> None:
        pg = resolve_point_group(point_group, "LiftedAvgPool")
        if stride < 1:
            raise ConfigurationError(f"LiftedAvgPool: expected a stride >= 1, got {stride}")
        super().__init__(LiftedField(pg), LiftedField(pg))
        self.point_group = pg
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, g, h, w = x.shape
        s = self.stride
        if h % s or w % s:
            raise ShapeError(f"LiftedAvgPool: expected a grid divisible by stride {s}, got {h}x{w}")
        return x.reshape(b, c, g, h // s, s, w // s, s).mean(dim=(4, 6))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        t = LiftedField(self.point_group)
        s = self.stride
        if isinstance(group, TorusTranslations):
            if group.stride % s == 0:
                out = TorusTranslations(group.height, group.width, stride=group.stride // s)
                return Contract.equivariant(t, t, output_group=out)
            return Contract.breaks(
                f"LiftedAvgPool: stride {s} pooling is equivariant only to translations by multiples of {s}, "
                f"got {group.name}",
                t,
                t,
            )
        if isinstance(group, RotoTranslationGroup) and s > 1:
            return Contract.breaks(
                f"LiftedAvgPool: stride {s} pooling is not equivariant to all translations of {group.name}",
                t,
                t,
            )
        return _pointwise_contract(
            "LiftedAvgPool", self.point_group, group, t, t, input_type=input_type
        )


@sealed
class LiftedPolyphaseDownsample(EquivariantModule):
    """Anchored stride-``s`` subsampling of lifted fields: ``(B, C, |H|, H, W) → (B, C, |H|, H/s, W/s)``.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``LiftedField(H)`` to
    itself: calling it checks the input is a lifted field of ``H``.

    Adaptive polyphase sampling on the whole lifted field: of the ``s²`` polyphase
    components ``x[..., py::s, px::s]`` it keeps the one of largest norm, the norm taken
    over channels *and* the group axis (so permuting the group axis does not change the
    choice). A circular translation permutes the components and the choice moves with
    it; so does a rotation or reflection of the torus — about its centre or about any
    pixel, which differ by a translation — because every element of ``T ⋊ H`` maps the
    stride-``s`` sublattices onto each other. The output therefore moves by an element of
    the coarse group ``T_{H/s} ⋊ H`` that depends on the input (the frame): the layer is
    *canonicalizing*, and an invariant head after it (pooling over space and group) is
    exactly invariant to p4 / p4m on the fine torus, unlike plain strided pooling (see
    [`LiftedAvgPool`][groupattn.nn.LiftedAvgPool]). Equal largest norms (ties) are broken by the lowest phase
    index, which is not equivariant; they do not occur for generic features.

    Contract: *canonicalizing* ``LiftedField(H) → LiftedField(H)`` with output group the
    coarse torus translations (under ``TorusTranslations``) or the coarse ``T ⋊ H'``
    (under a point group ``H' ⊆ H`` — then ``image_size`` must be given — or under
    ``T ⋊ H'``).

    Parameters
    ----------
    point_group
        ``H`` (instance or name); must act exactly on the grid.
    stride
        ``s``; must divide the grid side.
    norm
        Polyphase norm: ``"l2"``, ``"l1"``, ``"l4"`` or ``"max"``.
    image_size
        ``(H, W)`` of the input, used only to state the contract under a bare point
        group (which carries no grid size).

    Raises
    ------
    GroupError
        For a point group not acting exactly on the grid.
    ShapeError
        In ``forward``: a wrong shape or a grid not divisible by the stride.
    """

    def __init__(
        self,
        point_group: PointGroup | str,
        stride: int = 2,
        norm: str = "l2",
        image_size: tuple[int, int] | None = None,
    ) -> None:
        pg = resolve_point_group(point_group, "LiftedPolyphaseDownsample")
        if not pg.acts_exactly_on_grid:
            raise GroupError(
                f"LiftedPolyphaseDownsample: expected a point group acting exactly on the grid, got {pg.name}"
            )
        super().__init__(LiftedField(pg), LiftedField(pg))
        self.point_group = pg
        self.sampler = AdaptivePolyphaseDownsample(stride, norm)  # type: ignore[arg-type]
        self.image_size = image_size

    @property
    def stride(self) -> int:
        """``s`` (held by the wrapped [`AdaptivePolyphaseDownsample`][groupattn.canonical.AdaptivePolyphaseDownsample])."""
        return self.sampler.stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, g, h, w = x.shape
        if h % self.stride or w % self.stride:
            raise ShapeError(
                f"LiftedPolyphaseDownsample: expected a grid divisible by stride {self.stride}, got {h}x{w}"
            )
        out = self.sampler(x.reshape(b, c * g, h, w)).output
        return out.reshape(b, c, g, h // self.stride, w // self.stride)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        name = "LiftedPolyphaseDownsample"
        t = LiftedField(self.point_group)
        s = self.stride
        if isinstance(group, TorusTranslations):
            inner = self.sampler.contract(group)
            return Contract(inner.kind, t, t, inner.reason, inner.output_group)
        try:
            acting = point_group_of(group)
            if acting is not None:
                for gen in acting.generators():
                    embed_point_element(gen, self.point_group, name)
        except GroupError as err:
            return Contract.unknown(f"{name}: {err}", t)
        if acting is None:
            return Contract.unknown(f"{name}: no rule for {group.name}", t)
        if isinstance(group, RotoTranslationGroup):
            size = group.size
        elif self.image_size is not None and self.image_size[0] == self.image_size[1]:
            size = self.image_size[0]
        else:
            return Contract.unknown(
                f"{name}: pass a square image_size to state the output group under {group.name}", t
            )
        if size is None or size % s:
            return Contract.unknown(
                f"{name}: the grid side {size} is not divisible by the stride {s}", t
            )
        return Contract.canonicalizing(t, t, RotoTranslationGroup(acting, size // s))

    def extra_repr(self) -> str:
        return f"{self.point_group.name}, stride={self.stride}, norm={self.sampler.norm!r}"


#: orbit of each 3 × 3 offset under D4 (0: centre, 1: edge midpoints, 2: corners)
_D4_ORBITS_3X3 = (2, 1, 2, 1, 0, 1, 2, 1, 2)  # row-major; a constant, not an index buffer


class SymmetricConvStem(nn.Module):
    """A circular 3 × 3 convolution stem ``(B, C_in, H, W) → (B, C_out, H, W)``, then GELU.

    With ``symmetric=True`` every kernel is invariant under D4 (the square's rotations
    and reflections): it is parametrised by the three orbits of the 3 × 3 offsets
    (centre, edge midpoints, corners), three weights per ``(out, in)`` pair. A
    convolution with a D4-symmetric kernel commutes with the quarter turns and
    reflections of the grid, and circular padding keeps it equivariant to torus
    translations, so the stem turns a one-channel image into several scalar feature
    maps before lifting without breaking p4 / p4m equivariance. With
    ``symmetric=False`` the kernels are unconstrained (the z2 baselines' stem).

    Contract: equivariant ``GridField → GridField`` under torus translations, under
    point groups acting exactly on the grid (subgroups of D4) and ``T ⋊ H``; the
    unconstrained stem breaks rotations and reflections; finer rotations (C8, …):
    unknown.

    Parameters
    ----------
    in_channels, out_channels
        Channel widths.
    symmetric
        D4-symmetric kernels (equivariant) or unconstrained kernels (baseline).
    dilation
        Spacing of the 3 × 3 taps (a dilated kernel keeps the same symmetry).
    """

    def __init__(
        self, in_channels: int, out_channels: int, symmetric: bool = True, dilation: int = 1
    ) -> None:
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ConfigurationError(
                f"SymmetricConvStem: expected positive channel widths, got {in_channels} -> {out_channels}"
            )
        if dilation < 1:
            raise ConfigurationError(f"SymmetricConvStem: expected a dilation >= 1, got {dilation}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.symmetric = symmetric
        self.dilation = dilation
        taps = 3 if symmetric else 9
        bound = 1.0 / (in_channels * 9) ** 0.5
        self.weight = nn.Parameter(
            torch.empty(out_channels, in_channels, taps).uniform_(-bound, bound) * 3**0.5
        )
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def kernel(self) -> torch.Tensor:
        """The convolution kernel ``(C_out, C_in, 3, 3)``."""
        weight = self.weight[:, :, list(_D4_ORBITS_3X3)] if self.symmetric else self.weight
        return weight.reshape(self.out_channels, self.in_channels, 3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ShapeError(
                f"SymmetricConvStem: expected an image batch (B, C={self.in_channels}, H, W), got shape "
                f"{tuple(x.shape)}"
            )
        check_floating_input(x, "SymmetricConvStem")
        r = self.dilation
        padded = torch.nn.functional.pad(x, (r, r, r, r), mode="circular")
        out = torch.nn.functional.conv2d(
            padded, self.kernel().to(x.dtype), self.bias.to(x.dtype), dilation=r
        )
        return torch.nn.functional.gelu(out)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        in_t = GridField()
        try:
            acting = point_group_of(group)
        except GroupError as err:
            return Contract.unknown(f"SymmetricConvStem: {err}", in_t)
        if acting is None or acting.order() == 1:
            return Contract.equivariant(in_t, in_t)
        if not self.symmetric:
            return Contract.breaks(
                "SymmetricConvStem: unconstrained 3x3 kernels are not rotation-invariant",
                in_t,
                in_t,
            )
        if not acting.acts_exactly_on_grid:
            return Contract.unknown(
                f"SymmetricConvStem: {acting.name} rotations do not map the pixel grid to itself",
                in_t,
            )
        return Contract.equivariant(in_t, in_t)

    def extra_repr(self) -> str:
        return f"{self.in_channels}->{self.out_channels}, symmetric={self.symmetric}, circular 3x3, dilation={self.dilation}"
