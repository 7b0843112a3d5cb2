"""Lifting self-attention: images (X) to lifted fields over position × point group (X × H)."""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._sealed import sealed
from ..groups import PointGroup
from ._group_attention import _RotoTranslationAttention
from ._kernel import attend, attend_shared_query_windows, choose_implementation

__all__ = ["LiftingSelfAttention"]


def _is_plain_linear(module: nn.Module) -> bool:
    """A plain ``nn.Linear`` without hooks: its product may be taken in any layout, or folded."""
    return type(module) is nn.Linear and not module._forward_hooks and not module._forward_pre_hooks


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

    def _channels_first_qkv(
        self, x: torch.Tensor, heads: int, d: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values ``(B, heads, d, H, W)`` from the plain projection, taken
        channels first — ``W · x`` over ``(C_in, B·H·W)`` — so that each head's ``(d, B, H, W)``
        block is one contiguous run of memory: the layout the factorised kernel copies from.
        """
        b, _, height, width = x.shape
        flat = x.transpose(0, 1).reshape(x.shape[1], b * height * width)  # (C_in, B·H·W)
        linear = self.qkv
        if linear.bias is None:
            product = torch.mm(linear.weight, flat)
        else:
            product = torch.addmm(linear.bias[:, None], linear.weight, flat)
        q, k, v = product.view(3, heads, d, b, height, width).permute(0, 3, 1, 2, 4, 5)
        return q, k, v

    def _input_space_pays(self, x: torch.Tensor) -> bool:
        """Whether attending over the input's ``C_in + 1`` channels is narrower than over the
        heads' ``d`` (and the output projection a plain ``nn.Linear`` to fold into)."""
        return _is_plain_linear(self.proj) and x.shape[1] + 1 < self.head_dim

    def _input_space_projections(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Attention over the input's channels instead of the heads' (``C_in + 1 < d``).

        With ``x̃ = [x; 1]`` per pixel (and ``x̃ = 0`` for the zero tokens outside the grid
        of zero padding), each head's key and value are linear in ``x̃``:
        ``k_j = W̃_k x̃_j`` and ``v_j = W̃_v x̃_j`` with ``W̃ = [W | b]``. So

        * the logit ``q_i · k_j = (W̃_kᵀ q_i) · x̃_j``: the query mapped back to the input's
          ``C_in + 1`` channels, against the input itself as the key;
        * ``Σ_j a_ij v_j = W̃_v Σ_j a_ij x̃_j``: the attention averages the input, and the value
          and output projections act after, folded into one ``(C, heads·(C_in + 1))``
          matrix ``W_o^{(e)} W̃_v^{(e)}``.

        The same function as the head-width computation (up to rounding), in every padding
        mode; it pays when ``C_in + 1 < d`` (a lifting layer reads an image: 1 or 3
        channels against heads of e.g. 20), cutting the factorised local kernel's work and
        memory by ``d / (C_in + 1)`` and the output projection's by ``d`` per head. (Not
        used for global attention: PyTorch's fused attention kernel is several times slower
        with 2-channel heads than with 20-channel ones — measured 1.1 s against 0.28 s.)

        Returns
        -------
        query, lifted, folded
            ``(B, heads, C_in + 1, H, W)`` the mapped queries, scaled by ``√((C_in + 1)/d)``
            so that an attention's ``1/√(C_in + 1)`` makes the heads' ``1/√d``; ``x̃``
            ``(B, C_in + 1, H, W)``; the folded projection ``(C, heads·(C_in + 1))``.
        """
        b, c_in, height, width = x.shape
        heads, d = self.num_heads, self.head_dim
        weight = self.qkv.weight.view(3, heads, d, c_in)
        bias = (
            self.qkv.bias.view(3, heads, d)
            if self.qkv.bias is not None
            else weight.new_zeros(3, heads, d)
        )
        w_q, w_k, w_v = weight.unbind(0)
        b_q, b_k, b_v = bias.unbind(0)
        wide_k = torch.cat([w_k, b_k[..., None]], dim=-1)  # W̃_k (heads, d, C_in + 1)
        wide_v = torch.cat([w_v, b_v[..., None]], dim=-1)  # W̃_v
        rescale = math.sqrt((c_in + 1) / d)
        query_map = torch.einsum("edf,edc->efc", wide_k, w_q) * rescale  # W̃_kᵀ W_q
        query_shift = torch.einsum("edf,ed->ef", wide_k, b_q) * rescale  # W̃_kᵀ b_q
        query = torch.einsum("efc,bcyx->befyx", query_map.to(x.dtype), x)
        query = query + query_shift.to(x.dtype)[None, :, :, None, None]
        lifted = torch.cat([x, x.new_ones(b, 1, height, width)], dim=1)
        out_features = self.proj.out_features
        folded = torch.einsum(
            "oed,edf->oef", self.proj.weight.view(out_features, heads, d), wide_v
        ).reshape(out_features, heads * (c_in + 1))
        return query, lifted, folded

    def _attend_in_input_space(
        self,
        x: torch.Tensor,
        projections: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        table: torch.Tensor,
        k_side: int,
        circular: bool,
    ) -> torch.Tensor | None:
        """Local lifting attention over the input's channels (see
        ``_input_space_projections``), ``(B, C, G, H, W)``; ``None`` where the factorised
        kernel declines (a bias too spread for its dtype)."""
        b, c_in, height, width = x.shape
        heads, c = self.num_heads, c_in + 1
        query, lifted, folded = projections  # from _input_space_projections(x)
        keys = lifted[:, None].expand(b, heads, c, height, width)
        local = attend_shared_query_windows(
            query, keys, keys, table, k_side, circular, "LiftingSelfAttention"
        )
        if local is None:
            return None
        g = local.shape[2]
        channels = local.permute(1, 3, 2, 0, 4, 5).reshape(heads * c, -1)  # (heads·c, G·B·H·W)
        out = self._project_folded(folded, channels)
        out = out.view(self.proj.out_features, g, b, height, width)
        return out.permute(2, 0, 1, 3, 4)  # (B, C, G, H, W)

    def _project_folded(self, folded: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
        """``folded · channels + b_o``: ``(C, heads·c) × (heads·c, M) → (C, M)``."""
        folded = folded.to(channels.dtype)
        if self.proj.bias is None:
            return torch.mm(folded, channels)
        return torch.addmm(self.proj.bias[:, None].to(channels.dtype), folded, channels)

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
            channels_first = vectors is None and _is_plain_linear(self.qkv)
            qkv = None if channels_first else self.qkv(tokens)
            if vectors is None:  # additive bias only: the problem also has the factorised form
                k_side = int(self.neighbourhood or 1)
                window = k_side * k_side
                # attend over the input's channels when the heads are wider, else over the
                # heads': only the chosen form's projections are computed
                input_space = channels_first and self._input_space_pays(x)
                if input_space:
                    projections = self._input_space_projections(x)
                    probe = projections[0]
                elif channels_first:
                    q, k, v = self._channels_first_qkv(x, heads, d)  # (B, heads, d, H, W)
                    probe = q
                else:
                    assert qkv is not None
                    q, k, v = qkv.view(b, height, width, 3, heads, d).permute(3, 0, 4, 5, 1, 2)
                    probe = q
                table = (
                    bias.reshape(heads, g, window)
                    if bias is not None
                    else probe.new_zeros(heads, g, window)
                )
                choice = choose_implementation(
                    probe, window_bias=table, module="LiftingSelfAttention"
                )
                if choice == "factorised" and input_space:
                    low = self._attend_in_input_space(
                        x, projections, table, k_side, geometry.circular
                    )
                    if low is not None:
                        return low
                elif choice == "factorised":  # one content weight per pixel for all slices
                    local = attend_shared_query_windows(
                        q, k, v, table, k_side, geometry.circular, "LiftingSelfAttention"
                    )
                    if local is not None:
                        # (B, heads, G, d, H, W): project channels as one matrix product
                        channels = local.permute(1, 3, 2, 0, 4, 5).reshape(heads * d, -1)
                        out = self._project_folded(self.proj.weight, channels)
                        # explicit sizes: with an empty batch a -1 would be ambiguous
                        out = out.view(self.proj.out_features, g, b, height, width)
                        return out.permute(2, 0, 1, 3, 4)  # (B, C, G, H, W)
            # content × position term, a bias too spread for the factorised kernel, or "sdpa" /
            # "chunked" forced: the tiled path through attend
            if qkv is None:
                qkv = self.qkv(tokens)
            out = self.proj(
                self._local_attention(qkv.view(b, n, 1, 3, heads, d), geometry, bias, vectors)
            )
            return rearrange(out, "b (y x) g c -> b c g y x", y=height)
        out = self.proj(out)
        return rearrange(out, "b g (y x) c -> b c g y x", y=height)
