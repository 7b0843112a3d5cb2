"""Lifting self-attention: images (X) to lifted fields over position × point group (X × H)."""

from __future__ import annotations

import math

import torch
from einops import rearrange

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._sealed import sealed
from ..groups import PointGroup
from ._group_attention import _RotoTranslationAttention
from ._kernel import attend, attend_shared_query_windows, choose_implementation

__all__ = ["LiftingSelfAttention"]


@sealed
class LiftingSelfAttention(_RotoTranslationAttention):
    """Lifting self-attention: ``(B, in_channels, H, W) → (B, dim, |H|, H, W)``.

    Output slice ``h`` at pixel ``x_i`` attends from the query of ``x_i`` to every pixel
    ``x_j`` (global) or to the circular ``k × k`` window around ``x_i`` (local), with a
    positional term that is a function of ``h⁻¹(x_j − x_i)`` only. Rotating the input by
    ``g`` therefore rotates the output spatially and permutes its group axis by
    ``h ↦ g h``: the layer lifts images to fields over ``T ⋊ H``.

    Global attention gathers the bias ``(heads, |H|·N, N)`` once per shape from a table
    of ``N = H·W`` entries (an orbital per torus offset) and runs on
    [`groupattn.attention.attend`][groupattn.attention.attend]. Local attention's bias is ``(heads, |H|, k²)``,
    the same at every pixel; with the additive bias alone the problem also has the form
    of the factorised kernel [`groupattn.attention.attend_shared_query_windows`][groupattn.attention.attend_shared_query_windows]
    (content weights once per pixel for all ``|H|`` slices), which
    [`choose_implementation`][groupattn.attention.choose_implementation] picks unless the
    bias spreads too wide for its normaliser or another implementation is forced; with
    the content × position term, or otherwise, the layer runs the tiled path through
    ``attend``.

    Contract: equivariant ``GridField → LiftedField(H)`` under torus translations,
    ``H`` (and subgroups) and ``T ⋊ H``; for finer rotations (C8, …) see
    [`contract`][groupattn.attention.LiftingSelfAttention.contract] (approximate).

    Parameters
    ----------
    in_channels
        Channels of the input image (or of scalar feature maps).
    dim
        Output width per group element.
    point_group, num_heads, head_dim, neighbourhood, encoding, grid, additive, query_position, encoding_hidden
        As for [`GroupSelfAttention`][groupattn.attention.GroupSelfAttention]
        (``head_dim`` defaults to ``dim // num_heads``).

    Notes
    -----
    Deprecated aliases (one release): ``out_channels`` → ``dim``, ``head_channels`` →
    ``head_dim``, ``size`` → ``grid`` (arguments and attributes).

    Raises
    ------
    ConfigurationError, GroupError, ShapeError
        As for [`GroupSelfAttention`][groupattn.attention.GroupSelfAttention].
    """

    lifting = True
    _width_names = ("in_channels", "dim")
    out_channels = DeprecatedAttribute("dim")

    @renamed_arguments(out_channels="dim", head_channels="head_dim", size="grid")
    def __init__(
        self,
        in_channels: int,
        dim: int,
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
            in_channels,
            dim,
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
        b, _, height, width = x.shape
        g = self.point_group.order()
        geometry = self.geometry(height, width)
        n = height * width
        heads, d = self.num_heads, self.head_dim
        tokens = rearrange(x, "b c y x -> b (y x) c")
        bias, vectors = self._positional(geometry, x.dtype, x.device)
        scale = 1.0 / math.sqrt(d)
        if self.neighbourhood is None:
            q, k, v = self._split_heads(tokens)  # (B, N, heads·d)
            q = rearrange(q, "b n (e d) -> b e n d", e=heads)
            k = rearrange(k, "b n (e d) -> b e n d", e=heads)
            v = rearrange(v, "b n (e d) -> b e n d", e=heads)
            queries = q.unsqueeze(2).expand(b, heads, g, n, d).reshape(b, heads, g * n, d)
            logits_bias = None if bias is None else bias.reshape(1, heads, g * n, n)
            if vectors is not None:
                qv = (
                    torch.einsum("bend,ted->bent", q, vectors.to(q.dtype)) * scale
                )  # (B, heads, N, T)
                index = geometry.index.to(x.device)  # (G, N, N)
                pos = (
                    qv.unsqueeze(2)
                    .expand(b, heads, g, n, qv.shape[-1])
                    .gather(-1, index.expand(b, heads, g, n, n))
                )
                pos = pos.reshape(b, heads, g * n, n)
                logits_bias = pos if logits_bias is None else logits_bias + pos
            out = attend(queries, k, v, logits_bias, module="LiftingSelfAttention")
            out = rearrange(out, "b e (g n) d -> b g n (e d)", g=g)
        else:
            qkv = self.qkv(tokens)
            if vectors is None:  # additive bias only: the problem also has the factorised form
                k_side = int(self.neighbourhood or 1)
                window = k_side * k_side
                table = (
                    bias.reshape(heads, g, window)
                    if bias is not None
                    else qkv.new_zeros(heads, g, window)
                )
                choice = choose_implementation(
                    qkv, window_bias=table, module="LiftingSelfAttention"
                )
                local = None
                if choice == "factorised":  # one content weight per pixel for all slices
                    q, k, v = qkv.view(b, height, width, 3, heads, d).permute(
                        3, 0, 4, 5, 1, 2
                    )  # (B, heads, d, H, W)
                    local = attend_shared_query_windows(
                        q, k, v, table, k_side, geometry.circular, "LiftingSelfAttention"
                    )
                if (
                    local is not None
                ):  # (B, heads, G, d, H, W): project channels as one matrix product
                    channels = local.permute(1, 3, 2, 0, 4, 5).reshape(
                        heads * d, -1
                    )  # (heads·d, G·B·H·W)
                    out = torch.addmm(self.proj.bias[:, None], self.proj.weight, channels)
                    # explicit sizes: with an empty batch a -1 would be ambiguous
                    out = out.view(self.proj.out_features, g, b, height, width)
                    return out.permute(2, 0, 1, 3, 4)  # (B, C, G, H, W)
            # content × position term, a bias too spread for the factorised kernel, or "sdpa" /
            # "chunked" forced: the tiled path through attend
            out = self.proj(
                self._local_attention(qkv.view(b, n, 1, 3, heads, d), geometry, bias, vectors)
            )
            return rearrange(out, "b (y x) g c -> b c g y x", y=height)
        out = self.proj(out)
        return rearrange(out, "b g (y x) c -> b c g y x", y=height)
