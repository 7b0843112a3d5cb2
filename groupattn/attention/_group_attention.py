"""Group self-attention (X × H → X × H) on lifted fields, global or local, for T ⋊ H."""

from __future__ import annotations

import math
from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError
from .._sealed import sealed
from ..actions import FieldType, GridField, LiftedField, embed_point_element, point_group_of
from ..contracts import Contract
from ..contracts._module import check_floating_input
from ..groups import (
    GridTranslations,
    Group,
    GroupError,
    PointGroup,
    RotoTranslationGroup,
    TorusTranslations,
)
from ..groups._named import _point_group_from_name
from ..positional._group import (
    ContinuousGroupEncoding,
    GroupPositionalEncoding,
    OrbitalTableEncoding,
    RelativeGeometry,
    WindowTiling,
    check_grid,
    relative_geometry,
    window_tiling,
)
from ._kernel import attend, attend_halos

__all__ = ["GroupSelfAttention", "resolve_point_group"]


def resolve_point_group(point_group: PointGroup | str, module: str = "groupattn") -> PointGroup:
    """A point group from an instance or a name such as ``"C4"``, ``"D4"``, ``"C8"``, ``"C1"``.

    The point-group names of [`parse_group_name`][groupattn.groups.parse_group_name] (the library's
    one parser of group names): ``cN`` and ``dN`` for any ``N ≥ 1`` and ``"trivial"``,
    case-insensitive.

    Raises
    ------
    GroupError
        For an unknown name, or the name of a group that is not a point group (``"p4"``).
    """
    return _point_group_from_name(point_group, module)


class _RotoTranslationAttention(nn.Module):
    """Shared machinery of lifting and group self-attention (projections, encodings, contracts).

    Subclasses name the input and output widths (``_width_names``) and store them under
    those names; the machinery reads them as ``_in_width`` / ``_out_width``.
    """

    lifting: bool = False
    _width_names: tuple[str, str] = ("dim", "out_dim")
    head_channels = DeprecatedAttribute("head_dim")

    def __init__(
        self,
        in_width: int,
        out_width: int,
        point_group: PointGroup | str = "C4",
        num_heads: int = 1,
        head_dim: int | None = None,
        neighbourhood: int | None = None,
        encoding: str = "continuous",
        grid: int | tuple[int, int] | None = None,
        additive: bool = True,
        query_position: bool = False,
        encoding_hidden: int = 16,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        in_name, out_name = self._width_names
        self.point_group = resolve_point_group(point_group, name)
        if in_width < 1 or out_width < 1 or num_heads < 1:
            raise ConfigurationError(
                f"{name}: expected positive {in_name}, {out_name} and num_heads, got "
                f"{in_width}, {out_width}, {num_heads}"
            )
        if head_dim is None:
            if out_width % num_heads != 0:
                raise ConfigurationError(
                    f"{name}: expected {out_name} divisible by num_heads when head_dim is not given, "
                    f"got {out_width} channels and {num_heads} heads (pass head_dim for a per-head width)"
                )
            head_dim = out_width // num_heads
        if head_dim < 1:
            raise ConfigurationError(f"{name}: expected head_dim >= 1, got {head_dim}")
        if neighbourhood is not None and (neighbourhood < 1 or neighbourhood % 2 == 0):
            raise ConfigurationError(
                f"{name}: expected an odd neighbourhood size k >= 1, got {neighbourhood}"
            )
        setattr(self, in_name, in_width)
        setattr(self, out_name, out_width)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.neighbourhood = neighbourhood
        self.query_position = query_position
        inner = num_heads * head_dim
        self.qkv = nn.Linear(in_width, 3 * inner)
        self.proj = nn.Linear(inner, out_width)
        vector_dim = head_dim if query_position else 0
        self.encoding: GroupPositionalEncoding
        if encoding == "table":
            self.encoding = OrbitalTableEncoding(
                self.point_group, num_heads, self.lifting, neighbourhood, grid, vector_dim, additive
            )
        elif encoding == "continuous":
            self.encoding = ContinuousGroupEncoding(
                self.point_group,
                num_heads,
                vector_dim,
                additive,
                hidden=encoding_hidden,
                lifting=self.lifting,
            )
        else:
            raise ConfigurationError(
                f"{name}: expected encoding 'table' or 'continuous', got {encoding!r}"
            )
        self._bias_cache: tuple[Any, torch.Tensor | None, torch.Tensor | None] | None = None
        # tile side cap of local attention (see WindowTiling); k − 1 measured best for k = 3, 5
        self.max_tile = max(1, (neighbourhood or 1) - 1)
        self._tile_cache: dict[
            tuple[int, int], tuple[WindowTiling, torch.Tensor, torch.Tensor]
        ] = {}

    # ------------------------------------------------------------------ helpers
    @property
    def _in_width(self) -> int:
        return int(getattr(self, self._width_names[0]))

    @property
    def _out_width(self) -> int:
        return int(getattr(self, self._width_names[1]))

    @property
    def exact(self) -> bool:
        """Whether ``H`` maps the pixel grid onto itself (exact equivariance, torus offsets)."""
        return bool(self.point_group.acts_exactly_on_grid)

    def geometry(self, height: int, width: int) -> RelativeGeometry:
        """The cached [`RelativeGeometry`][groupattn.positional.RelativeGeometry] of an input grid."""
        check_grid(self.point_group, height, width, self.neighbourhood, type(self).__name__)
        return relative_geometry(self.point_group, height, width, self.neighbourhood, self.lifting)

    def _positional(
        self, geometry: RelativeGeometry, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(bias gathered to (heads, *index.shape), vectors (T, heads, d))``; cached in eval mode."""
        # the cache key reads parameter versions, which torch.compile cannot guard on: no cache while tracing
        use_cache = (
            not self.training and not torch.is_grad_enabled() and not torch.compiler.is_compiling()
        )
        key = None
        if use_cache:
            params = tuple((id(p), p._version) for p in self.encoding.parameters())
            key = (geometry.height, geometry.width, dtype, device, params)
            if self._bias_cache is not None and self._bias_cache[0] == key:
                return self._bias_cache[1], self._bias_cache[2]
        bias_table, vectors = self.encoding(geometry)
        bias = None
        if bias_table is not None:
            index = geometry.index.to(device)
            bias = bias_table.to(dtype).index_select(1, index.reshape(-1)).view(-1, *index.shape)
        self._bias_cache = (key, bias, vectors) if use_cache else None
        return bias, vectors

    def _split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x`` ``(..., C)`` → q, k, v ``(..., heads·d)``."""
        return self.qkv(x).chunk(3, dim=-1)  # type: ignore[return-value]

    def _tile_indices(
        self, geometry: RelativeGeometry
    ) -> tuple[WindowTiling, torch.Tensor, torch.Tensor]:
        """Cached per shape: the tiling, the outside-window mask ``(P·G, S·G_key)`` and the
        table entry of every (tile query, halo key) pair ``(P·G, S·G_key)``."""
        key = (geometry.height, geometry.width)
        if key not in self._tile_cache:
            assert self.neighbourhood is not None
            tiling = window_tiling(
                geometry.height,
                geometry.width,
                self.neighbourhood,
                geometry.circular,
                self.max_tile,
            )
            window = tiling.window  # (P, S)
            outside = window < 0
            clamped = window.clamp(min=0)
            g = self.point_group.order()
            if self.lifting:
                entries = geometry.index[:, clamped]  # (G, P, S)
                entries = entries.permute(1, 0, 2).reshape(-1, window.shape[1])
                mask = outside[:, None, :].expand(-1, g, -1).reshape(-1, window.shape[1])
            else:
                entries = geometry.index[:, clamped, :]  # (G, P, S, G)
                entries = entries.permute(1, 0, 2, 3).reshape(window.shape[0] * g, -1)
                mask = (
                    outside[:, None, :, None].expand(-1, g, -1, g).reshape(window.shape[0] * g, -1)
                )
            self._tile_cache[key] = (tiling, mask.contiguous(), entries.contiguous())
        return self._tile_cache[key]

    def _local_attention(
        self,
        qkv: torch.Tensor,
        geometry: RelativeGeometry,
        bias: torch.Tensor | None,
        vectors: torch.Tensor | None,
    ) -> torch.Tensor:
        """Local attention by tiles with halos (see [`WindowTiling`][groupattn.positional.WindowTiling]).

        ``qkv``: ``(B, N, G_key, 3, heads, d)`` channels-last tokens (``G_key = 1`` for
        lifting, whose queries are shared by all output slices). Returns
        ``(B, N, G, heads·d)``.
        """
        b, g_key = qkv.shape[0], qkv.shape[2]
        heads, d = self.num_heads, self.head_dim
        g = self.point_group.order()
        tiling, outside, entries = self._tile_indices(geometry)
        tiles, p = tiling.queries.shape
        device = qkv.device
        # unbind rather than index: its backward writes the three gradients into one buffer,
        # where indexing allocates and zero-fills a full-size gradient per part; keys and
        # values are gathered into their halos separately, so that their gradients are
        # scattered back to the tokens directly (no halo-sized stack in the backward)
        q_all, k_all, v_all = qkv.unbind(3)  # (B, N, G_key, heads, d) each
        if not geometry.circular:  # a zero token for the positions outside the grid
            k_all = torch.cat([k_all, k_all.new_zeros(b, 1, *k_all.shape[2:])], dim=1)
            v_all = torch.cat([v_all, v_all.new_zeros(b, 1, *v_all.shape[2:])], dim=1)
        s = tiling.halo.shape[1]
        q = q_all.index_select(1, tiling.queries.reshape(-1).to(device)).view(
            b, tiles, p, g_key, heads, d
        )
        q = (
            q.expand(b, tiles, p, g, heads, d)
            .permute(0, 1, 4, 2, 3, 5)
            .reshape(b * tiles, heads, p * g, d)
        )
        window = geometry.neighbourhood * geometry.neighbourhood  # type: ignore[operator]
        mask = torch.zeros(outside.shape, dtype=q.dtype, device=device).masked_fill(
            outside.to(device), float("-inf")
        )
        logits_bias = mask[None, None]
        if bias is not None:
            # bias: (heads, G, k²) lifting or (heads, G, k², G) group -> tile layout
            local = bias.reshape(heads, g, window, -1)
            clamped = tiling.window.clamp(min=0).to(device)
            tile_bias = local[:, :, clamped, :]  # (heads, G, P, S, G_key)
            tile_bias = tile_bias.permute(0, 2, 1, 3, 4).reshape(1, heads, p * g, s * g_key)
            logits_bias = logits_bias + tile_bias
        if vectors is not None:
            qv = torch.einsum("bepd,ted->bept", q, vectors.to(q.dtype)) / math.sqrt(d)
            pos = qv.gather(-1, entries.to(device).expand(b * tiles, heads, p * g, s * g_key))
            logits_bias = logits_bias + pos
        # keys and values are gathered into their halos inside attend_halos: on the chunked
        # (training) path it keeps the tokens for the backward pass, not the halos
        out = attend_halos(
            q, k_all, v_all, tiling.halo.to(device), logits_bias, module=type(self).__name__
        )  # (B·tiles, heads, P·G, d)
        out = (
            out.view(b, tiles, heads, p, g, d)
            .permute(0, 1, 3, 4, 2, 5)
            .reshape(b, tiles * p, g, heads * d)
        )
        return out.index_select(1, tiling.untile.to(device))

    def _check_input(self, x: torch.Tensor) -> None:
        field = GridField() if self.lifting else LiftedField(self.point_group)
        field.check(x, type(self).__name__, channels=self._in_width)
        check_floating_input(x, type(self).__name__)

    # ------------------------------------------------------------------ contract
    def _input_type(self) -> FieldType:
        return GridField() if self.lifting else LiftedField(self.point_group)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant under translations of the torus and under point groups contained in ``H``.

        ``GridField → LiftedField(H)`` (lifting) or ``LiftedField(H) → LiftedField(H)``
        (group layer). For finer rotations (C8, …) the contract is equivariant only for
        the subgroup of quarter turns acting on the image about its centre (planar
        offsets, no torus translations); under the full group it is *unknown*, since
        equivariance is approximate on the pixel grid.
        """
        name = type(self).__name__
        in_t, out_t = self._input_type(), LiftedField(self.point_group)
        try:
            acting = point_group_of(group)
        except GroupError as err:
            return Contract.unknown(f"{name}: {err}", in_t)
        has_translations = isinstance(
            group, TorusTranslations | GridTranslations | RotoTranslationGroup
        )
        if has_translations and not self.exact:
            return Contract.breaks(
                f"{name} with {self.point_group.name} uses planar (non-circular) offsets: not equivariant "
                "to translations of the torus",
                in_t,
                out_t,
            )
        if acting is not None:
            try:
                for gen in acting.generators():
                    embed_point_element(gen, self.point_group, name)
            except GroupError:
                return Contract.breaks(
                    f"{name}: positional encoding is not {acting.name}-invariant (its group axis carries only "
                    f"{self.point_group.name})",
                    in_t,
                    out_t,
                )
            if not acting.acts_exactly_on_grid:
                return Contract.unknown(
                    f"{name}: {acting.name} rotations do not map the pixel grid to itself; equivariance is "
                    "approximate (interpolated offsets)",
                    in_t,
                )
        return Contract.equivariant(in_t, out_t)

    def extra_repr(self) -> str:
        local = f"neighbourhood={self.neighbourhood}" if self.neighbourhood else "global"
        return (
            f"{self._in_width}->{self._out_width}, point_group={self.point_group.name}, "
            f"num_heads={self.num_heads}x{self.head_dim}, {local}"
        )


@sealed
class GroupSelfAttention(_RotoTranslationAttention):
    """Group self-attention on lifted fields: ``(B, C_in, |H|, H, W) → (B, C_out, |H|, H, W)``.

    The output token ``(h, x_i)`` attends (query from the same token) to every key token
    ``(k, x_j)`` (global) or to the tokens ``(k, x_i + δ)``, ``δ`` in a circular
    ``k × k`` window, for all ``k ∈ H`` (local). The positional term is a function of
    ``(h⁻¹(x_j − x_i), h⁻¹k)`` — the orbital of the pair under ``T ⋊ H`` — so the layer
    is exactly equivariant for point groups acting on the grid. (The published GSA-Nets
    code encodes the relative group element without the output slice ``h``, which is
    not invariant; see the tests.)

    Global attention gathers the bias for all ``(query, key)`` pairs once per shape
    from a table of ``|H|·H·W`` entries; local attention's bias does not depend on the
    position at all (``(heads, |H|, |H|·k²)``) and keys are gathered by circular
    ``unfold``. Every attention call goes through [`groupattn.attention.attend`][groupattn.attention.attend].

    Contract: equivariant ``LiftedField(H) → LiftedField(H)`` under torus translations,
    ``H`` (and its subgroups) and ``T ⋊ H`` (p4 for C4, p4m for D4); see
    [`contract`][groupattn.attention.GroupSelfAttention.contract] for finer rotations.

    Shapes: ``(B, dim, |H|, H, W) → (B, out_dim, |H|, H, W)``.

    Parameters
    ----------
    dim, out_dim
        Input and output widths ``C_in``, ``C_out`` (per group element).
    point_group
        ``H`` (an instance or a name: ``"C1"``, ``"C2"``, ``"C4"``, ``"D2"``, ``"D4"``,
        ``"C8"``, …).
    num_heads
        Number of heads.
    head_dim
        Per-head width ``d``; by default ``out_dim // num_heads`` (then ``out_dim``
        must be divisible by ``num_heads``). The heads are concatenated
        (``num_heads · d``) and projected to ``out_dim``.
    neighbourhood
        ``None`` for global attention, else the odd side ``k`` of the neighbourhood
        centred on each query.
    encoding
        ``"continuous"`` (GSA-style MLP of rotated offsets, any size) or ``"table"``
        (one learned value per orbital; global layers need ``grid``).
    grid
        Spatial size ``(H, W)`` (or one int) of the input, for a global orbital table.
    additive
        Add the positional bias to the logits.
    query_position
        Add the query-dependent term ``q · r(h⁻¹(x_j − x_i), h⁻¹k) / √d``.
    encoding_hidden
        Hidden width of the continuous encoding's MLP.

    Notes
    -----
    Deprecated aliases (one release): ``in_channels`` → ``dim``, ``out_channels`` →
    ``out_dim``, ``head_channels`` → ``head_dim``, ``size`` → ``grid`` (arguments and
    attributes).

    Raises
    ------
    ConfigurationError
        For widths not divisible by the heads (without ``head_dim``) or an even
        neighbourhood.
    GroupError
        For an unknown point group.
    ShapeError
        In ``forward``: a wrong shape, a non-square grid under rotations, or a
        neighbourhood larger than the grid.
    """

    lifting = False
    _width_names = ("dim", "out_dim")
    in_channels = DeprecatedAttribute("dim")
    out_channels = DeprecatedAttribute("out_dim")

    @renamed_arguments(
        in_channels="dim", out_channels="out_dim", head_channels="head_dim", size="grid"
    )
    def __init__(
        self,
        dim: int,
        out_dim: int,
        point_group: PointGroup | str = "C4",
        num_heads: int = 1,
        head_dim: int | None = None,
        neighbourhood: int | None = None,
        encoding: str = "continuous",
        grid: int | tuple[int, int] | None = None,
        additive: bool = True,
        query_position: bool = False,
        encoding_hidden: int = 16,
    ) -> None:
        super().__init__(
            dim,
            out_dim,
            point_group,
            num_heads,
            head_dim,
            neighbourhood,
            encoding,
            grid,
            additive,
            query_position,
            encoding_hidden,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        b, _, g, height, width = x.shape
        geometry = self.geometry(height, width)
        n = height * width
        heads, d = self.num_heads, self.head_dim
        bias, vectors = self._positional(geometry, x.dtype, x.device)
        scale = 1.0 / math.sqrt(d)
        if self.neighbourhood is None:
            tokens = rearrange(x, "b c g y x -> b g (y x) c")
            q, k, v = self._split_heads(tokens)  # (B, G, N, heads·d)
            q = rearrange(q, "b g n (e d) -> b e (g n) d", e=heads)
            k = rearrange(k, "b g n (e d) -> b e (g n) d", e=heads)
            v = rearrange(v, "b g n (e d) -> b e (g n) d", e=heads)
            index = geometry.index.reshape(g * n, g * n)
            logits_bias = None if bias is None else bias.reshape(1, heads, g * n, g * n)
            if vectors is not None:
                qv = torch.einsum("beqd,ted->beqt", q, vectors.to(q.dtype)) * scale
                pos = qv.gather(-1, index.to(x.device).expand(b, heads, g * n, g * n))
                logits_bias = pos if logits_bias is None else logits_bias + pos
            out = attend(q, k, v, logits_bias, module="GroupSelfAttention")
            out = rearrange(out, "b e (g n) d -> b g n (e d)", g=g)
        else:
            qkv = self.qkv(rearrange(x, "b c g y x -> b (y x) g c")).view(b, n, g, 3, heads, d)
            out = self.proj(self._local_attention(qkv, geometry, bias, vectors))  # (B, N, G, C)
            return rearrange(out, "b (y x) g c -> b c g y x", y=height)
        out = self.proj(out)
        return rearrange(out, "b g (y x) c -> b c g y x", y=height)
