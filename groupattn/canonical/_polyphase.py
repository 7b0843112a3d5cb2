"""Polyphase anchoring, un-anchoring and adaptive polyphase down/up-sampling (APS, APS-U).

All operators act per sample, in one batched pass: the ``s²`` polyphase norms come from
one reshape ``(B, C, H/s, s, W/s, s)`` and one reduction, the phase from one ``argmax``,
and the shift from one batched ``gather`` — no Python loop over the batch, and no
host synchronisation (the operators run under ``torch.compile(fullgraph=True)``).

Conventions
-----------
The phase of a sample is ``(py, px)`` with ``0 ≤ py, px < s``, numbered ``k = py·s + px``;
the polyphase component ``k`` is ``x[..., py::s, px::s]``. Anchoring rolls the sample by
``(−py, −px)`` so that its largest-norm component sits at the origin; the *frame* is
``(py, px)`` and un-anchoring rolls by ``(+py, +px)``. Ties go to the lowest phase
index ``k`` and are reported by a margin of exactly 0.

Precision
---------
The polyphase norms (the decision scores) are computed in float64 with autocast
disabled, from the received tensor cast up (see ``groupattn.canonical._precision``),
each component's sum exactly (per-sample quantized integers, ``_exact_component_sums``),
so a moved input gives the same norms bit for bit and equal components tie exactly;
the roll, the gather and every other part of the data path run in the input's dtype, so
anchoring a bf16 / fp16 tensor gives a bf16 / fp16 tensor, bit for bit a permutation of
the input.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from .._sealed import sealed
from ..actions import GridField, TokenField
from ..contracts import Contract
from ..groups import Group, GroupError, TorusTranslations
from ..positional._constants import constant_cache
from ._argmax import argmax_with_margin
from ._precision import check_real_input, scoring, to_score_dtype
from ._types import Canonicalized

__all__ = [
    "AdaptivePolyphaseDownsample",
    "AdaptivePolyphaseUpsample",
    "PolyphaseAnchor",
    "PolyphaseUnanchor",
    "gather_tokens",
    "polyphase_anchor",
    "polyphase_norms",
    "polyphase_phase",
    "polyphase_unanchor",
    "shifted_token_index",
]

Norm = Literal["l2", "l1", "l4", "max"]
_ORDERS: dict[str, float] = {"l2": 2.0, "l1": 1.0, "l4": 4.0, "max": float("inf")}


def _check_stride(module: str, stride: int) -> int:
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise GroupError(f"{module}: expected a stride as an int >= 1, got {stride!r}")
    return stride


def _check_norm(module: str, norm: str) -> float:
    if norm not in _ORDERS:
        raise GroupError(f"{module}: expected norm 'l2', 'l1', 'l4' or 'max', got {norm!r}")
    return _ORDERS[norm]


def _spatial_shape(module: str, x: torch.Tensor, grid: tuple[int, int] | None) -> tuple[int, int]:
    """``(H, W)`` of an image batch ``(B, C, H, W)`` or a token batch ``(B, H·W, C)``."""
    check_real_input(x, module)
    if grid is None:
        GridField().check(x, module)
        return int(x.shape[2]), int(x.shape[3])
    TokenField(grid).check(x, module)
    return grid


def _check_divisible(module: str, shape: tuple[int, int], stride: int) -> None:
    if shape[0] % stride or shape[1] % stride:
        raise GroupError(
            f"{module}: expected a grid divisible by stride {stride}, got {shape[0]}x{shape[1]}"
        )


def polyphase_norms(
    x: torch.Tensor, stride: int, norm: Norm = "l2", grid: tuple[int, int] | None = None
) -> torch.Tensor:
    """Norms of the ``s²`` polyphase components of each sample.

    Parameters
    ----------
    x
        Images ``(B, C, H, W)``, or tokens ``(B, H·W, C)`` when ``grid = (H, W)`` is given.
    stride
        ``s``; ``H`` and ``W`` must be divisible by it.
    norm
        ``"l2"``, ``"l1"``, ``"l4"`` or ``"max"`` (max-abs). The L2 and L1 norms of
        the polyphase components of images upsampled with a symmetric kernel (e.g. a
        bilinear ×2 zoom) tie *exactly* — a structural symmetry no rounding breaks —
        while the L4 norm does not; prefer ``"l4"`` for such inputs.
    grid
        The token grid for token input.

    Returns
    -------
    torch.Tensor
        ``(B, s²)`` in float64 (the score dtype, [`score_dtype`][groupattn.canonical.score_dtype]),
        computed with autocast disabled whatever the dtype of ``x``; column
        ``k = py·s + px`` is the norm of ``x[..., py::s, px::s]``.
    """
    module = "polyphase_norms"
    stride = _check_stride(module, stride)
    _check_norm(module, norm)
    height, width = _spatial_shape(module, x, grid)
    _check_divisible(module, (height, width), stride)
    with scoring(x.device):
        return _norms(to_score_dtype(x), stride, norm, grid, height, width)


def _norms(
    x: torch.Tensor, stride: int, norm: str, grid: tuple[int, int] | None, height: int, width: int
) -> torch.Tensor:
    """[`polyphase_norms`][groupattn.canonical.polyphase_norms] after the checks, in the dtype of ``x`` (``(B, s²)``)."""
    b = x.shape[0]
    if grid is None:
        # Per-pixel channel reduction as one batched matrix product (ones @ |x|^p): much
        # faster than a strided reduction over (C, H/s, W/s); then a tiny (H/s, W/s) sum.
        c = x.shape[1]
        flat = x.reshape(b, c, height * width)
        if norm == "max":
            per_pixel = flat.abs().amax(dim=1)
        else:
            powered = _powered(flat, norm)
            per_pixel = torch.matmul(powered.new_ones(1, c), powered).reshape(b, height * width)
    else:
        if norm == "max":
            per_pixel = x.abs().amax(dim=2)
        else:
            per_pixel = _powered(x, norm).sum(dim=2)
    phases = per_pixel.reshape(b, height // stride, stride, width // stride, stride)
    if norm == "max":
        return phases.amax(dim=1).amax(dim=2).reshape(b, stride * stride)
    scores = _exact_component_sums(per_pixel, phases, stride)
    if norm == "l2":
        return scores.sqrt()
    return scores.sqrt().sqrt() if norm == "l4" else scores


def _exact_component_sums(
    per_pixel: torch.Tensor, phases: torch.Tensor, stride: int
) -> torch.Tensor:
    """``(B, s²)`` sums of each polyphase component's per-pixel values, the same bits for a moved input.

    A shift by a multiple of the stride permutes each component's pixels, and a float sum
    over them adds in an order tied to absolute positions: two components holding the same
    values round apart, by a few ulps, and which one wins changes with the input's
    position. So the values are quantized per sample first — ``round(v / max v · L)``,
    elementwise with a per-sample constant, with ``L`` a power of two that keeps every sum
    of a component's ``N`` values below ``2**52`` — and the integer sums are exact in
    any order: a moved input gives the same sums bit for bit, and equal components tie
    exactly. The result is scaled back (``· max v / L``), so it is the component's sum to
    about ``52 − log2 N`` bits of the largest per-pixel value; NaN / inf in a sample give
    NaN / inf sums as before.

    ``per_pixel`` is ``(B, H·W)``, non-negative; ``phases`` the same numbers viewed as
    ``(B, H/s, s, W/s, s)``.
    """
    count = per_pixel.shape[1] // (stride * stride)  # values per component
    levels = 2.0 ** (52 - max(1, count).bit_length())  # count · levels ≤ 2**52
    top = per_pixel.amax(dim=1, keepdim=True)  # NaN propagates
    # 0 < top < inf is False for NaN too: such a sample is divided by 1
    scale = torch.where(torch.logical_and(top > 0, top < math.inf), top, 1.0)
    quantized = torch.div(phases, scale.view(-1, 1, 1, 1, 1)).mul_(levels).round_()
    # one dimension at a time: a joint reduction over (1, 3) of this strided view is ~10x slower
    sums = quantized.sum(dim=1).sum(dim=2).reshape(per_pixel.shape[0], stride * stride)
    return sums.div_(levels).mul_(scale)


def _powered(x: torch.Tensor, norm: str) -> torch.Tensor:
    """``|x|^p`` for the L1, L2 and L4 norms."""
    if norm == "l1":
        return x.abs()
    squared = x * x
    return squared * squared if norm == "l4" else squared


def _roll_index(
    shift_y: torch.Tensor, shift_x: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """Flat source index ``(B, H·W)`` of a per-sample circular roll by ``(−shift_y, −shift_x)``."""
    rows = torch.arange(height, device=shift_y.device)
    cols = torch.arange(width, device=shift_y.device)
    rows = torch.remainder(rows[None, :] + shift_y[:, None], height)
    cols = torch.remainder(cols[None, :] + shift_x[:, None], width)
    return (rows[:, :, None] * width + cols[:, None, :]).reshape(shift_y.shape[0], height * width)


def _gather_roll(
    x: torch.Tensor, shift_y: torch.Tensor, shift_x: torch.Tensor, grid: tuple[int, int] | None
) -> torch.Tensor:
    """``out[b] = roll(x[b], (−shift_y[b], −shift_x[b]))`` in one batched gather."""
    if grid is None:
        return _window_roll(x, shift_y, shift_x)
    return gather_tokens(x, _roll_index(shift_y, shift_x, grid[0], grid[1]))


@constant_cache(maxsize=32)
def _window_offsets(
    batch: int, channels: int, height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, rows)`` for ``_window_roll``: the flat index of each image's first number in
    the column-doubled batch ``(B, C, 1)`` and the row numbers ``0 … H − 1`` ``(1, H)``."""
    first = torch.arange(batch * channels).view(batch, channels, 1) * (height * 2 * width)
    return first, torch.arange(height).view(1, height)


def _window_roll(x: torch.Tensor, shift_y: torch.Tensor, shift_x: torch.Tensor) -> torch.Tensor:
    """``out[b] = roll(x[b], (−shift_y[b], −shift_x[b]))`` for images ``(B, C, H, W)``, as row copies.

    Each output row is a contiguous run of ``W`` numbers of the image with its columns
    repeated (``(B, C, H, 2W)``): row ``(shift_y + i) mod H`` from column ``shift_x``. One
    ``index_select`` of those runs (a view of overlapping windows) copies whole rows, with
    an index of ``B·C·H`` entries, where an element-wise ``gather`` needs a ``(B, H·W)``
    index and is about twice as slow. The index takes five small operations (the offsets
    that do not depend on the shifts are cached per shape): the anchors' cost at the
    models' sizes is the number of operations, not their arithmetic.
    """
    b, c, height, width = x.shape
    doubled = torch.cat([x, x], dim=3).reshape(-1)
    if doubled.numel() == 0:
        return x.clone()
    # every window of `width` consecutive numbers: row k starts at number k
    windows = doubled.as_strided((doubled.numel() - width + 1, width), (1, 1))
    first, rows = _window_offsets(b, c, height, width)
    first, rows = first.to(x.device), rows.to(x.device)
    rows = torch.remainder(rows + shift_y[:, None], height)  # (B, H)
    # the start of each source row within its image (B, 1, H), then over the batch (B, C, H)
    starts = torch.add(torch.remainder(shift_x, width)[:, None], rows, alpha=2 * width)
    return windows.index_select(0, (first + starts[:, None, :]).reshape(-1)).reshape(
        b, c, height, width
    )


def gather_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``out[b, t] = x[b, index[b, t]]`` for tokens ``(B, N, C)``, as one row ``index_select``.

    Copying whole token rows is several times faster than an element-wise ``gather``.

    Parameters
    ----------
    x
        Tokens ``(B, N, C)``.
    index
        Long ``(B, M)`` with entries in ``[0, N)``.

    Returns
    -------
    torch.Tensor
        ``(B, M, C)``.
    """
    b, n, c = x.shape
    offsets = torch.arange(b, device=x.device)[:, None] * n
    rows = x.reshape(b * n, c).index_select(0, (index + offsets).reshape(-1))
    return rows.reshape(b, index.shape[1], c)


def shifted_token_index(
    shift_y: torch.Tensor,
    shift_x: torch.Tensor,
    grid: tuple[int, int],
    rows: torch.Tensor,
    cols: torch.Tensor,
) -> torch.Tensor:
    """Per-sample source index of a circular shift composed with a fixed token order.

    ``index[b, t] = ((rows[t] + shift_y[b]) mod h) · w + (cols[t] + shift_x[b]) mod w``:
    with [`gather_tokens`][groupattn.canonical.gather_tokens], output token ``t`` reads grid position
    ``(rows[t], cols[t])`` of the sample rolled by ``(−shift_y[b], −shift_x[b])``. With
    ``(rows, cols)`` listing the grid in window order this fuses anchoring, Swin's
    cyclic shift and window partition into a single copy.

    Parameters
    ----------
    shift_y, shift_x
        Long ``(B,)``.
    grid
        ``(h, w)``.
    rows, cols
        Long ``(M,)`` grid coordinates in the desired output order.

    Returns
    -------
    torch.Tensor
        Long ``(B, M)``.
    """
    height, width = grid
    y = torch.remainder(rows[None, :] + shift_y[:, None], height)
    x = torch.remainder(cols[None, :] + shift_x[:, None], width)
    return y * width + x


def polyphase_phase(
    x: torch.Tensor, stride: int, norm: Norm = "l2", grid: tuple[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The anchoring frame alone: the phase ``(py, px)`` of the largest-norm component.

    Parameters
    ----------
    x, stride, norm, grid
        As for [`polyphase_anchor`][groupattn.canonical.polyphase_anchor].

    Returns
    -------
    tuple of torch.Tensor
        ``frame`` long ``(B, 2)`` and ``margin`` ``(B,)`` in float64 (lowest phase index on
        a tie).
    """
    index, margin = argmax_with_margin(polyphase_norms(x, stride, norm, grid), x.dtype)
    shift_y = torch.div(index, stride, rounding_mode="floor")
    return torch.stack([shift_y, index - shift_y * stride], dim=1), margin


def polyphase_anchor(
    x: torch.Tensor, stride: int, norm: Norm = "l2", grid: tuple[int, int] | None = None
) -> Canonicalized:
    """Shift each sample so that its largest-norm polyphase component sits at the origin.

    Contract: canonicalizing under ``TorusTranslations(H, W)`` with output group
    ``TorusTranslations(H/s, W/s, stride=s)``: a shifted input gives an output that
    differs only by a shift by a multiple of ``s``.

    Parameters
    ----------
    x
        Images ``(B, C, H, W)``, or tokens ``(B, H·W, C)`` when ``grid`` is given.
    stride
        ``s ≥ 1``.
    norm
        ``"l2"``, ``"l1"``, ``"l4"`` or ``"max"``.
    grid
        The token grid ``(H, W)`` for token input.

    Returns
    -------
    Canonicalized
        ``output`` like ``x``; ``frame`` long ``(B, 2)`` phase ``(py, px)`` (the roll that
        un-anchoring applies); ``margin`` ``(B,)`` best minus second-best norm, in float64
        (0 on a tie, where the lowest phase index ``py·s + px`` wins; ``+inf`` for ``s = 1``).
        The norms are computed in float64 with autocast disabled; ``output`` keeps the
        dtype of ``x``.
    """
    frame, margin = polyphase_phase(x, stride, norm, grid)
    return Canonicalized(_gather_roll(x, frame[:, 0], frame[:, 1], grid), frame, margin)


def _check_frame(module: str, frame: torch.Tensor, batch: int) -> None:
    if (
        frame.dim() != 2
        or frame.shape[1] != 2
        or frame.shape[0] != batch
        or frame.is_floating_point()
    ):
        raise GroupError(
            f"{module}: expected an integer frame of shape ({batch}, 2), got "
            f"{frame.dtype} of shape {tuple(frame.shape)}"
        )


def polyphase_unanchor(
    x: torch.Tensor, frame: torch.Tensor, grid: tuple[int, int] | None = None
) -> torch.Tensor:
    """Undo [`polyphase_anchor`][groupattn.canonical.polyphase_anchor]: roll each sample back by its frame.

    Contract: frame-restoring — ``polyphase_unanchor(polyphase_anchor(x).output, frame)``
    is ``x`` exactly, and so is anything equivariant computed in between.

    Parameters
    ----------
    x
        Images ``(B, C, H, W)``, or tokens ``(B, H·W, C)`` when ``grid`` is given.
    frame
        Long ``(B, 2)`` from [`polyphase_anchor`][groupattn.canonical.polyphase_anchor].
    grid
        The token grid for token input.

    Returns
    -------
    torch.Tensor
        Same shape as ``x``.
    """
    module = "polyphase_unanchor"
    _spatial_shape(module, x, grid)
    _check_frame(module, frame, x.shape[0])
    return _gather_roll(x, -frame[:, 0], -frame[:, 1], grid)


def _torus_stride(group: Group, shape: tuple[int, int]) -> int | None:
    """The pixel stride of a torus translation group acting on a grid of ``shape``, else ``None``."""
    if not isinstance(group, TorusTranslations):
        return None
    if group.height * group.stride != shape[0] or group.width * group.stride != shape[1]:
        return None
    return group.stride


def _not_translations(
    module: str, group: Group, shape: tuple[int, int], input_type: Any
) -> Contract:
    torus = f"the {shape[0]}x{shape[1]} torus" if shape[0] and shape[1] else "an image torus"
    return Contract.unknown(
        f"{module}: promises nothing for {group.name}; expected translations of {torus} "
        f"(TorusTranslations)",
        input_type,
    )


@sealed
class PolyphaseAnchor(nn.Module):
    """Polyphase anchoring as a module (see [`polyphase_anchor`][groupattn.canonical.polyphase_anchor]).

    Contract: under ``TorusTranslations(H, W)`` *canonicalizing* with output group
    ``TorusTranslations(H/s, W/s, stride=s)``; under a subgroup whose stride is a
    multiple of ``s`` the phase never changes and anchoring is *equivariant*.

    Parameters
    ----------
    stride
        ``s ≥ 1``.
    norm
        ``"l2"`` (default), ``"l1"``, ``"l4"`` or ``"max"``.
    grid
        ``(H, W)`` for token input ``(B, H·W, C)``; ``None`` for images ``(B, C, H, W)``.
    image_size
        ``(H, W)`` of image input, used only to state the contract without an input.
    """

    def __init__(
        self,
        stride: int,
        norm: Norm = "l2",
        grid: tuple[int, int] | None = None,
        image_size: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.stride = _check_stride("PolyphaseAnchor", stride)
        _check_norm("PolyphaseAnchor", norm)
        self.norm = norm
        self.grid = None if grid is None else (int(grid[0]), int(grid[1]))
        if self.grid is not None:
            _check_divisible("PolyphaseAnchor", self.grid, self.stride)
        self.image_size = image_size

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Anchor ``x`` (images ``(B, C, H, W)`` or tokens ``(B, N, C)``); see [`polyphase_anchor`][groupattn.canonical.polyphase_anchor]."""
        _check_divisible(
            "PolyphaseAnchor", _spatial_shape("PolyphaseAnchor", x, self.grid), self.stride
        )
        return polyphase_anchor(x, self.stride, self.norm, self.grid)  # type: ignore[arg-type]

    def _shape(self, group: Group) -> tuple[int, int]:
        if self.grid is not None:
            return self.grid
        if self.image_size is not None:
            return self.image_size
        if isinstance(group, TorusTranslations):
            return (group.height * group.stride, group.width * group.stride)
        return (0, 0)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        shape = self._shape(group)
        field = GridField() if self.grid is None else TokenField(self.grid)
        acting = _torus_stride(group, shape)
        if acting is None:
            return _not_translations("PolyphaseAnchor", group, shape, field)
        if acting % self.stride == 0:
            return Contract.equivariant(field, field)
        if acting != 1:
            return Contract.unknown(
                f"PolyphaseAnchor: stride {self.stride} does not divide the acting stride {acting}",
                field,
            )
        out_group = TorusTranslations(
            shape[0] // self.stride, shape[1] // self.stride, stride=self.stride
        )
        return Contract.canonicalizing(field, field, out_group)

    def extra_repr(self) -> str:
        return f"stride={self.stride}, norm={self.norm!r}" + (
            f", grid={self.grid}" if self.grid else ""
        )


@sealed
class PolyphaseUnanchor(nn.Module):
    """Un-anchoring: roll each sample back by its frame (see [`polyphase_unanchor`][groupattn.canonical.polyphase_unanchor]).

    ``forward(x, frame)``. Contract: *frame-restoring* — the output is back in the frame
    of the tensor that was anchored, so it may be added to it (residual connections).

    Parameters
    ----------
    grid
        ``(H, W)`` for token input ``(B, H·W, C)``; ``None`` for images.
    """

    def __init__(self, grid: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.grid = None if grid is None else (int(grid[0]), int(grid[1]))

    def forward(self, x: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
        """Roll ``x`` back by ``frame`` (long ``(B, 2)``); same shape as ``x``."""
        return polyphase_unanchor(x, frame, self.grid)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Frame-restoring under translations of the grid."""
        field = GridField() if self.grid is None else TokenField(self.grid)
        if not isinstance(group, TorusTranslations):
            return _not_translations("PolyphaseUnanchor", group, self.grid or (0, 0), field)
        return Contract.frame_restoring(field, field)

    def extra_repr(self) -> str:
        return f"grid={self.grid}" if self.grid else ""


@sealed
class AdaptivePolyphaseDownsample(nn.Module):
    """Adaptive polyphase sampling (APS): keep the largest-norm polyphase component.

    ``out[b] = x[b, :, py::s, px::s]`` for the per-sample phase ``(py, px)`` of
    [`polyphase_anchor`][groupattn.canonical.polyphase_anchor] (equal to ``polyphase_anchor(x).output[..., ::s, ::s]``).

    Contract: under ``TorusTranslations(H, W)`` *canonicalizing* with output group
    ``TorusTranslations(H/s, W/s)``: image translations map onto coarse translations up
    to the frame (exactly, without any aliasing error).

    Parameters
    ----------
    stride
        ``s ≥ 1``.
    norm
        ``"l2"``, ``"l1"``, ``"l4"`` or ``"max"``.
    image_size
        ``(H, W)``, used only to state the contract without an input.
    """

    def __init__(
        self, stride: int, norm: Norm = "l2", image_size: tuple[int, int] | None = None
    ) -> None:
        super().__init__()
        self.stride = _check_stride("AdaptivePolyphaseDownsample", stride)
        _check_norm("AdaptivePolyphaseDownsample", norm)
        self.norm = norm
        self.image_size = image_size

    def forward(self, x: torch.Tensor) -> Canonicalized:
        """Downsample images ``(B, C, H, W)`` to ``(B, C, H/s, W/s)``.

        Returns
        -------
        Canonicalized
            ``output`` ``(B, C, H/s, W/s)``; ``frame`` long ``(B, 2)`` phase; ``margin`` ``(B,)``.
        """
        module = "AdaptivePolyphaseDownsample"
        height, width = _spatial_shape(module, x, None)
        _check_divisible(module, (height, width), self.stride)
        s = self.stride
        scores = polyphase_norms(x, s, self.norm)  # type: ignore[arg-type]
        index, margin = argmax_with_margin(scores, x.dtype)
        b, c = x.shape[0], x.shape[1]
        shift_y = torch.div(index, s, rounding_mode="floor")
        shift_x = index - shift_y * s
        rows = torch.arange(0, height, s, device=x.device)[None, :] + shift_y[:, None]
        cols = torch.arange(0, width, s, device=x.device)[None, :] + shift_x[:, None]
        source = (rows[:, :, None] * width + cols[:, None, :]).reshape(
            b, 1, rows.shape[1] * cols.shape[1]
        )
        flat = x.reshape(b, c, height * width)
        output = torch.gather(flat, 2, source.expand(b, c, source.shape[2]))
        output = output.reshape(b, c, height // s, width // s)
        return Canonicalized(output, torch.stack([shift_y, shift_x], dim=1), margin)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        shape = self.image_size or (
            (group.height * group.stride, group.width * group.stride)
            if isinstance(group, TorusTranslations)
            else (0, 0)
        )
        acting = _torus_stride(group, shape)
        if acting is None:
            return _not_translations("AdaptivePolyphaseDownsample", group, shape, GridField())
        s = self.stride
        if acting % s == 0:
            return Contract.equivariant(
                GridField(),
                GridField(),
                TorusTranslations(shape[0] // acting, shape[1] // acting, stride=acting // s),
            )
        if acting != 1:
            return Contract.unknown(
                f"AdaptivePolyphaseDownsample: stride {s} does not divide the acting stride {acting}",
                GridField(),
            )
        return Contract.canonicalizing(
            GridField(), GridField(), TorusTranslations(shape[0] // s, shape[1] // s)
        )

    def extra_repr(self) -> str:
        return f"stride={self.stride}, norm={self.norm!r}"


@sealed
class AdaptivePolyphaseUpsample(nn.Module):
    """APS-U: put coarse values back on the phase the paired down-sampler chose.

    ``out[b, :, py::s, px::s] = x[b]`` and zeros elsewhere, for the frame ``(py, px)``
    returned by [`AdaptivePolyphaseDownsample`][groupattn.canonical.AdaptivePolyphaseDownsample]. ``forward(x, frame)``.

    Contract: *frame-restoring* — with output group ``TorusTranslations(h·s, w·s)`` for
    input translations ``TorusTranslations(h, w)``: up(down(x)) moves exactly with ``x``.

    Parameters
    ----------
    stride
        ``s ≥ 1``.
    """

    def __init__(self, stride: int) -> None:
        super().__init__()
        self.stride = _check_stride("AdaptivePolyphaseUpsample", stride)

    def forward(self, x: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
        """Upsample ``(B, C, h, w)`` to ``(B, C, h·s, w·s)`` on the phases ``frame`` (long ``(B, 2)``)."""
        module = "AdaptivePolyphaseUpsample"
        height, width = _spatial_shape(module, x, None)
        _check_frame(module, frame, x.shape[0])
        s = self.stride
        b, c = x.shape[0], x.shape[1]
        out = x.new_zeros(b, c, height, s, width, s)
        batch = torch.arange(b, device=x.device)
        out[batch, :, :, frame[:, 0], :, frame[:, 1]] = x
        return out.reshape(b, c, height * s, width * s)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """See the class docstring."""
        if not (isinstance(group, TorusTranslations) and group.stride == 1):
            return Contract.unknown(
                f"AdaptivePolyphaseUpsample: promises nothing for {group.name}; expected coarse torus translations",
                GridField(),
            )
        assert isinstance(group, TorusTranslations)
        s = self.stride
        return Contract.frame_restoring(
            GridField(), GridField(), TorusTranslations(group.height * s, group.width * s)
        )

    def extra_repr(self) -> str:
        return f"stride={self.stride}"
