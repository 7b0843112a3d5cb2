"""Window attention (Swin) with polyphase anchoring and cyclic shifted windows."""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import nn

from .._deprecation import DeprecatedAttribute, renamed_arguments
from .._errors import ConfigurationError
from .._sealed import sealed
from ..actions import TokenField, check_grid, torus_stride
from ..canonical import gather_tokens, polyphase_phase, shifted_token_index
from ..canonical._polyphase import Norm
from ..contracts import Contract, EquivariantModule
from ..groups import Group
from ..positional import translation_contract
from ._global import BiasKind, check_heads, make_relative_bias
from ._kernel import attend

__all__ = ["WindowAttention"]


@sealed
class WindowAttention(EquivariantModule):
    """Multi-head attention inside non-overlapping ``window_size × window_size`` windows of a token grid.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid)`` to
    itself: calling it checks the input is ``(B, h·w, dim)``.

    With ``anchored=True`` the tokens are first polyphase-anchored with stride
    ``window_size`` (so the window grid moves with the data), windows are (optionally)
    shifted by a cyclic roll of ``shift`` tokens — on the torus, without Swin's boundary
    mask — attention runs per window, and the roll and the anchoring are undone before
    returning, so the output is in the input's frame and can be added to the residual.

    Contract under ``TorusTranslations(h, w)``: *equivariant* when anchored; otherwise
    *breaks* (windows do not move with shifts that are not multiples of the window),
    while under the subgroup of shifts by multiples of ``window_size = M``
    (``TorusTranslations(h/M, w/M, stride=M)``) it is equivariant either
    way. The within-window bias (default: Swin's clipped relative bias) does not matter
    for this: anchored windows move as a whole.

    Shapes: ``(B, h·w, C) → (B, h·w, C)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    num_heads
        Number of heads (divides ``dim``).
    grid
        Token grid ``(h, w)``, divisible by ``window_size``.
    window_size
        Window side ``M``.
    shift
        Cyclic shift of the windows, ``0 ≤ shift < window_size`` (Swin uses
        ``window_size // 2`` in every second block).
    anchored
        Polyphase-anchor with stride ``window_size`` (the equivariant variant).
    bias
        Within-window bias: ``"clipped"`` (Swin), ``"circulant"`` or ``None``.
    norm
        Norm of the polyphase anchoring.
    pre_norm
        Apply a ``LayerNorm`` to the tokens *after* anchoring (use instead of the block's
        pre-norm). The phase is then chosen from the un-normalised residual stream:
        after a LayerNorm every token has nearly the same L2 norm, so the polyphase
        norms of normalised tokens nearly tie and the anchoring would be fragile.
    """

    window_rows: torch.Tensor
    window_cols: torch.Tensor
    window_position: torch.Tensor
    grid_rows: torch.Tensor
    grid_cols: torch.Tensor
    floating_input = True
    heads = DeprecatedAttribute("num_heads")
    window = DeprecatedAttribute("window_size")

    @renamed_arguments(heads="num_heads", window="window_size")
    def __init__(
        self,
        dim: int,
        num_heads: int,
        grid: tuple[int, int],
        window_size: int,
        shift: int = 0,
        anchored: bool = True,
        bias: BiasKind | nn.Module = "clipped",
        norm: Norm = "l2",
        pre_norm: bool = False,
    ) -> None:
        check_heads(dim, num_heads, "WindowAttention")
        grid = check_grid(grid, "WindowAttention")
        field = TokenField(grid)
        super().__init__(field, field, in_channels=dim)
        self.grid = grid
        window = window_size
        if window < 1 or self.grid[0] % window or self.grid[1] % window:
            raise ConfigurationError(
                f"WindowAttention: expected a grid divisible by window {window}, got {self.grid[0]}x{self.grid[1]}"
            )
        if not 0 <= shift < window:
            raise ConfigurationError(
                f"WindowAttention: expected a shift in [0, {window}), got {shift}"
            )
        self.dim, self.num_heads, self.window_size, self.shift = dim, num_heads, window, shift
        self.anchored, self.norm, self.pre_norm = anchored, norm, pre_norm
        self.input_norm: nn.Module = nn.LayerNorm(dim) if pre_norm else nn.Identity()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias = make_relative_bias(bias, (window, window), num_heads)
        # Token order of the windows: (window row, window col, row in window, col in window).
        h, w = self.grid
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        order = rearrange(ys * w + xs, "(nh m1) (nw m2) -> (nh nw m1 m2)", m1=window, m2=window)
        position = torch.empty_like(order)
        position[order] = torch.arange(h * w)
        self.register_buffer("window_rows", order // w, persistent=False)
        self.register_buffer("window_cols", order % w, persistent=False)
        self.register_buffer(
            "window_position", position, persistent=False
        )  # grid index -> window order
        self.register_buffer("grid_rows", ys.reshape(-1), persistent=False)
        self.register_buffer("grid_cols", xs.reshape(-1), persistent=False)

    def _window_attention(self, windows: torch.Tensor) -> torch.Tensor:
        """Attention inside each window: ``(B·windows, M², C) → (B·windows, M², C)``."""
        q, k, v = rearrange(
            self.qkv(windows), "n t (three h d) -> three n h t d", three=3, h=self.num_heads
        )
        bias = None if self.bias is None else self.bias().unsqueeze(0)
        out = attend(q, k, v, bias, module="WindowAttention")
        return self.proj(rearrange(out, "n h t d -> n t (h d)"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Window attention (anchored and un-anchored around it when ``anchored``).

        Anchoring (a per-sample roll by the frame), the cyclic window shift and the window
        partition are fused into one row gather; the inverse gather restores the grid
        order and the input's frame. The baseline runs the same two gathers with a zero
        frame, so both variants cost the same apart from the polyphase norms.
        """
        b = x.shape[0]
        if self.anchored:
            frame = polyphase_phase(x, self.window_size, self.norm, self.grid)[0]
        else:
            frame = torch.zeros(b, 2, dtype=torch.long, device=x.device)
        shift_y, shift_x = frame[:, 0] + self.shift, frame[:, 1] + self.shift
        to_windows = shifted_token_index(
            shift_y, shift_x, self.grid, self.window_rows, self.window_cols
        )
        windows = gather_tokens(self.input_norm(x), to_windows)
        m2 = self.window_size * self.window_size
        n = self.grid[0] * self.grid[1]
        # explicit sizes: with an empty batch a -1 would be ambiguous
        out = self._window_attention(windows.reshape(b * (n // m2), m2, self.dim)).reshape(
            b, n, self.dim
        )
        back = shifted_token_index(-shift_y, -shift_x, self.grid, self.grid_rows, self.grid_cols)
        return gather_tokens(out, self.window_position[back])

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        stride = torus_stride(group, self.grid)
        reason = None
        if stride is not None and not self.anchored and stride % self.window_size:
            reason = (
                "window attention without anchoring is not translation-equivariant: windows do not "
                f"move with shifts that are not multiples of the window size {self.window_size}"
            )
        return translation_contract("WindowAttention", group, self.grid, 0, reason)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, grid={self.grid}, window_size={self.window_size}, "
            f"shift={self.shift}, anchored={self.anchored}"
        )
