"""Shift-equivariant layers: positional encodings, attention layers, patch embedding and merging, heads."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from groupattn.actions import GridField, GSet, InvariantField, TokenField
from groupattn.attention import (
    AttentionPooling,
    GlobalSelfAttention,
    MeanPooling,
    SpatialReductionAttention,
    WindowAttention,
    make_relative_bias,
)
from groupattn.contracts import Status
from groupattn.groups import GroupError, TorusTranslations
from groupattn.nn import (
    MLP,
    ClassToken,
    ClassTokenReadout,
    PatchEmbedding,
    PatchMerging,
    TransformerBlock,
    chain_contract,
)
from groupattn.positional import (
    AbsolutePositionalEncoding,
    CirculantRelativeBias,
    ClippedRelativeBias,
    ConvPositionalEncoding,
)
from groupattn.testing import assert_equivariant, equivariance_error

GRID = (4, 4)
TORUS = TorusTranslations(*GRID)
BREAK_THRESHOLD = 1e-3  # far above the 1e-5 float32 tolerance


def _tokens(
    batch: int, grid: tuple[int, int], dim: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    return torch.randn(batch, grid[0] * grid[1], dim, dtype=dtype)


def _roll_tokens(x: torch.Tensor, grid: tuple[int, int], shift: tuple[int, int]) -> torch.Tensor:
    b, _, c = x.shape
    image = torch.roll(x.reshape(b, grid[0], grid[1], c), shifts=shift, dims=(1, 2))
    return image.reshape(x.shape)


def _strong_bias(module: nn.Module) -> nn.Module:
    """Give every bias table unit-scale entries so that a broken bias is clearly visible."""
    for sub in module.modules():
        if isinstance(sub, CirculantRelativeBias | ClippedRelativeBias):
            nn.init.normal_(sub.table)
    return module


# ----------------------------------------------------------------------------- relative biases
def test_circulant_bias_is_built_from_orbitals_and_is_invariant() -> None:
    bias_module = _strong_bias(CirculantRelativeBias((3, 5), num_heads=2))
    assert bias_module.table.shape == (2, 15)  # one entry per translation orbital
    bias = bias_module()
    gset = GSet.grid(TorusTranslations(3, 5), 3, 5)
    for g in TorusTranslations(3, 5).elements():
        perm = gset.permutation(g)
        moved = torch.empty_like(bias)
        moved[:, perm[:, None], perm[None, :]] = bias
        assert torch.equal(moved, bias), g
    # bias[i, j] depends on (j − i) mod (h, w) only
    ys, xs = torch.meshgrid(torch.arange(3), torch.arange(5), indexing="ij")
    offset = ((ys.reshape(-1)[None] - ys.reshape(-1)[:, None]) % 3) * 5 + (
        xs.reshape(-1)[None] - xs.reshape(-1)[:, None]
    ) % 5
    for o in range(15):
        assert bias[:, offset == o].unique(dim=1).shape[1] == 1
    assert bias_module.contract(TorusTranslations(3, 5)).kind == Status.INVARIANT


def test_clipped_bias_is_not_constant_on_orbitals() -> None:
    bias = _strong_bias(ClippedRelativeBias(GRID, num_heads=1))()
    orbitals = GSet.grid(TORUS, *GRID).orbitals()
    assert any(bias[0][orbitals == o].unique().numel() > 1 for o in range(int(orbitals.max()) + 1))
    assert ClippedRelativeBias(GRID, 1).contract(TORUS).kind == Status.BROKEN


def test_counterexample_clipped_bias_breaks_attention_circulant_keeps_it(float_dtype) -> None:
    x = _tokens(2, GRID, 8, float_dtype)
    circulant = _strong_bias(GlobalSelfAttention(8, 2, GRID, bias="circulant")).to(float_dtype)
    clipped = _strong_bias(GlobalSelfAttention(8, 2, GRID, bias="clipped")).to(float_dtype)
    clipped.load_state_dict(
        {k: v for k, v in circulant.state_dict().items() if "bias.table" not in k}, strict=False
    )
    assert circulant.contract(TORUS).kind == Status.EQUIVARIANT
    assert_equivariant(circulant, x, TORUS)  # every one of the 16 translations
    contract = clipped.contract(TORUS)
    assert contract.kind == Status.BROKEN and "clipped" in (contract.reason or "")
    assert equivariance_error(clipped, x, TORUS).max_error > BREAK_THRESHOLD
    # No bias at all: attention is equivariant to every permutation.
    assert_equivariant(GlobalSelfAttention(8, 2, GRID, bias=None).to(float_dtype), x, TORUS)


def test_global_attention_with_class_token_prefix() -> None:
    attention = _strong_bias(GlobalSelfAttention(8, 2, GRID, bias="circulant", prefix=1))
    x = torch.randn(2, 1 + 16, 8)
    assert attention(x).shape == x.shape
    assert_equivariant(attention, x, TORUS)


# ----------------------------------------------------------------------------- positional encodings
def test_conv_positional_encoding_circular_vs_zero_padding(float_dtype) -> None:
    x = _tokens(2, GRID, 6, float_dtype)
    circular = ConvPositionalEncoding(6, GRID).to(float_dtype)
    assert_equivariant(circular, x, TORUS)
    zeros = ConvPositionalEncoding(6, GRID, padding_mode="zeros").to(float_dtype)
    zeros.load_state_dict(circular.state_dict())
    assert zeros.contract(TORUS).kind == Status.BROKEN
    assert equivariance_error(zeros, x, TORUS).max_error > BREAK_THRESHOLD
    with_prefix = ConvPositionalEncoding(6, GRID, prefix=1).to(float_dtype)
    assert_equivariant(with_prefix, torch.randn(2, 17, 6, dtype=float_dtype), TORUS)


def test_absolute_positional_encoding_breaks() -> None:
    absolute = AbsolutePositionalEncoding(6, GRID)
    nn.init.normal_(absolute.embedding)
    contract = absolute.contract(TORUS)
    assert contract.kind == Status.BROKEN
    assert contract.reason == "absolute positional encoding is not translation-invariant"
    assert equivariance_error(absolute, _tokens(2, GRID, 6), TORUS).max_error > BREAK_THRESHOLD


# ----------------------------------------------------------------------------- window attention
@settings(max_examples=8)
@given(
    windows=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    window=st.sampled_from([2, 4]),
    shifted=st.booleans(),
    bias=st.sampled_from(["clipped", "circulant", None]),
    element=st.tuples(st.integers(0, 11), st.integers(0, 11)),
)
def test_anchored_window_attention_is_equivariant(windows, window, shifted, bias, element) -> None:
    grid = (windows[0] * window, windows[1] * window)
    layer = _strong_bias(
        WindowAttention(
            8, 2, grid, window, shift=window // 2 if shifted else 0, bias=bias, pre_norm=shifted
        )
    )
    group = TorusTranslations(*grid)
    x = _tokens(3, grid, 8)
    # anchoring + window attention + un-anchoring is a permutation of the same arithmetic
    assert_equivariant(layer, x, group, elements=[element, (1, 0), (0, 1)], exact=True)


def test_window_attention_exhaustive_and_baseline() -> None:
    grid = (8, 8)
    group = TorusTranslations(*grid)
    x = _tokens(2, grid, 8)
    anchored = _strong_bias(WindowAttention(8, 2, grid, 4, shift=2))
    assert anchored.contract(group).kind == Status.EQUIVARIANT
    assert_equivariant(anchored, x, group, exact=True)  # all 64 shifts
    plain = WindowAttention(8, 2, grid, 4, shift=2, anchored=False)
    plain.load_state_dict(anchored.state_dict())
    contract = plain.contract(group)
    assert contract.kind == Status.BROKEN and "window" in (contract.reason or "")
    assert equivariance_error(plain, x, group).max_error > BREAK_THRESHOLD
    # shifts by whole windows: equivariant even without anchoring
    windows = TorusTranslations(2, 2, stride=4)
    assert plain.contract(windows).kind == Status.EQUIVARIANT
    assert_equivariant(plain, x, windows, exact=True)


# ----------------------------------------------------------------------------- spatial reduction
@pytest.mark.parametrize("pre_norm", [False, True])
def test_spatial_reduction_attention(pre_norm: bool, float_dtype) -> None:
    grid = (8, 8)
    group = TorusTranslations(*grid)
    x = _tokens(2, grid, 8, float_dtype)
    anchored = SpatialReductionAttention(8, 2, grid, 4, pre_norm=pre_norm).to(float_dtype)
    assert_equivariant(anchored, x, group)  # all 64 shifts
    plain = SpatialReductionAttention(8, 2, grid, 4, anchored=False, pre_norm=pre_norm).to(
        float_dtype
    )
    plain.load_state_dict(anchored.state_dict())
    assert plain.contract(group).kind == Status.BROKEN
    assert equivariance_error(plain, x, group).max_error > BREAK_THRESHOLD
    assert_equivariant(plain, x, TorusTranslations(2, 2, stride=4))
    assert_equivariant(
        SpatialReductionAttention(8, 2, grid, 1, anchored=False).to(float_dtype), x, group
    )


# ----------------------------------------------------------------------------- patch embedding / merging
def _check_coarse_equivariance(
    module: nn.Module, x: torch.Tensor, stride: int, out_grid, roll
) -> float:
    """Max error of module(roll(x, stride·t)) vs the token roll by t, over a few t."""
    y = module(x)
    worst = 0.0
    for t in [(1, 0), (0, 1), (1, 2)]:
        moved = module(roll(x, (stride * t[0], stride * t[1])))
        worst = max(worst, (moved - _roll_tokens(y, out_grid, t)).abs().max().item())
    return worst


def _error_up_to_token_rolls(module: nn.Module, x: torch.Tensor, shift, out_grid, roll) -> float:
    """Relative error of module(roll(x, shift)) against the closest token roll of module(x)."""
    y, moved = module(x), module(roll(x, shift))
    best = min(
        (moved - _roll_tokens(y, out_grid, (a, b))).abs().max().item()
        for a in range(out_grid[0])
        for b in range(out_grid[1])
    )
    return best / y.abs().max().item()


def roll_image(z: torch.Tensor, shift: tuple[int, int]) -> torch.Tensor:
    return torch.roll(z, shift, dims=(2, 3))


def test_patch_embedding_anchored_plain_and_coarse_group() -> None:
    image = TorusTranslations(16, 16)
    anchored = PatchEmbedding(2, 8, 4, (16, 16))
    contract = anchored.contract(image)
    assert contract.kind == Status.CANONICALIZING and contract.output_group == TorusTranslations(
        4, 4
    )
    assert contract.output_type == TokenField((4, 4))
    x = torch.randn(1, 2, 16, 16)
    report = equivariance_error(anchored, x, image)  # up to the frame, all 256 shifts
    assert report.max_error <= 1e-5 and len(report.errors) == 256
    plain = PatchEmbedding(2, 8, 4, (16, 16), anchored=False)
    plain.load_state_dict(anchored.state_dict())
    contract = plain.contract(image)
    assert contract.kind == Status.BROKEN and "patch size 4" in (contract.reason or "")
    assert _error_up_to_token_rolls(plain, x, (1, 0), (4, 4), roll_image) > BREAK_THRESHOLD
    coarse = plain.contract(TorusTranslations(4, 4, stride=4))
    assert coarse.kind == Status.EQUIVARIANT and coarse.output_group == TorusTranslations(4, 4)

    assert (
        _check_coarse_equivariance(plain, torch.randn(3, 2, 16, 16), 4, (4, 4), roll_image) <= 1e-5
    )


def test_patch_merging_anchored_plain_and_coarse_group() -> None:
    grid = (8, 8)
    group = TorusTranslations(*grid)
    anchored = PatchMerging(4, 6, grid)
    contract = anchored.contract(group)
    assert contract.kind == Status.CANONICALIZING and contract.output_group == TorusTranslations(
        4, 4
    )
    x = _tokens(3, grid, 4)
    assert (
        equivariance_error(anchored, x, group).max_error == 0.0
    )  # all 64 shifts, per-sample frames
    plain = PatchMerging(4, 6, grid, anchored=False)
    plain.load_state_dict(anchored.state_dict())
    assert plain.contract(group).kind == Status.BROKEN
    assert (
        _error_up_to_token_rolls(plain, x, (1, 0), (4, 4), lambda z, t: _roll_tokens(z, grid, t))
        > BREAK_THRESHOLD
    )
    assert plain.contract(TorusTranslations(4, 4, stride=2)).kind == Status.EQUIVARIANT
    assert (
        _check_coarse_equivariance(
            plain, _tokens(3, grid, 4), 2, (4, 4), lambda z, s: _roll_tokens(z, grid, s)
        )
        == 0.0
    )


# ----------------------------------------------------------------------------- heads and blocks
def test_invariant_heads(float_dtype) -> None:
    grid = (4, 4)
    x = _tokens(3, grid, 8, float_dtype)
    for head in [MeanPooling(grid), AttentionPooling(8, 2, grid, num_queries=2)]:
        head = head.to(float_dtype)
        assert head.contract(TORUS).kind == Status.INVARIANT
        assert head(x).shape == (3, 8)
        assert_equivariant(head, x, TORUS, output_type=InvariantField())
    with_cls = nn.Sequential(
        ClassToken(8, grid),
        GlobalSelfAttention(8, 2, grid, bias="circulant", prefix=1),
        ClassTokenReadout(grid),
    ).to(float_dtype)
    assert_equivariant(
        with_cls, x, TORUS, input_type=TokenField(grid), output_type=InvariantField()
    )
    assert ClassToken(8, grid).contract(TORUS).output_type == TokenField(grid, prefix=1)
    assert ClassTokenReadout(grid).contract(TORUS).kind == Status.INVARIANT


def test_transformer_block_and_chain_contract() -> None:
    grid = (8, 8)
    group = TorusTranslations(*grid)
    block = TransformerBlock(8, WindowAttention(8, 2, grid, 4, shift=2, pre_norm=True))
    assert isinstance(block.norm1, nn.Identity)
    assert block.contract(group).kind == Status.EQUIVARIANT
    assert_equivariant(block, _tokens(2, grid, 8), group, elements=[(1, 3), (5, 2)], exact=True)
    broken = TransformerBlock(8, WindowAttention(8, 2, grid, 4, anchored=False))
    contract = broken.contract(group)
    assert contract.kind == Status.BROKEN and (contract.reason or "").startswith(
        "attention: window attention"
    )
    assert MLP(8, 16, grid=grid).contract(group).kind == Status.EQUIVARIANT
    chain = chain_contract(
        [
            ("embed", PatchEmbedding(1, 8, 2, (16, 16))),
            ("block", block),
            ("pool", MeanPooling(grid)),
        ],
        TorusTranslations(16, 16),
    )
    assert chain.kind == Status.INVARIANT and chain.input_type == GridField()
    chain = chain_contract([("merge", PatchMerging(8, 8, grid))], group)
    assert chain.kind == Status.CANONICALIZING and chain.output_group == TorusTranslations(4, 4)
    unknown = chain_contract([("conv", nn.Conv2d(1, 1, 3))], group)
    assert unknown.kind == Status.UNVERIFIED and "conv" in (unknown.reason or "")


# ----------------------------------------------------------------------------- bad input
def test_layer_errors() -> None:
    with pytest.raises(
        GroupError, match="WindowAttention: expected a grid divisible by window 4, got 30x30"
    ):
        WindowAttention(8, 2, (30, 30), 4)
    with pytest.raises(GroupError, match=r"WindowAttention: expected a shift in \[0, 4\), got 4"):
        WindowAttention(8, 2, (8, 8), 4, shift=4)
    with pytest.raises(
        GroupError, match=r"WindowAttention: expected tokens \(B, N=64, C=8\) over a 8x8 grid"
    ):
        WindowAttention(8, 2, (8, 8), 4)(torch.randn(2, 60, 8))
    with pytest.raises(
        GroupError,
        match="GlobalSelfAttention: expected a width divisible by the number of heads 3, got 8",
    ):
        GlobalSelfAttention(8, 3, (4, 4))
    with pytest.raises(GroupError, match=r"GlobalSelfAttention: expected tokens \(B, N=16, C=8\)"):
        GlobalSelfAttention(8, 2, (4, 4))(torch.randn(16, 8))
    with pytest.raises(
        GroupError,
        match="SpatialReductionAttention: expected a grid divisible by reduction 3, got 8x8",
    ):
        SpatialReductionAttention(8, 2, (8, 8), 3)
    with pytest.raises(
        GroupError, match="PatchEmbedding: expected an image size divisible by patch 5, got 32x32"
    ):
        PatchEmbedding(1, 8, 5, (32, 32))
    embed = PatchEmbedding(1, 8, 4, (32, 32))
    with pytest.raises(GroupError, match="PatchEmbedding: expected 1 input channels, got 3"):
        embed(torch.randn(2, 3, 32, 32))
    with pytest.raises(GroupError, match="PatchEmbedding: expected 32x32 images, got 30x32"):
        embed(torch.randn(2, 1, 30, 32))
    with pytest.raises(GroupError, match=r"PatchEmbedding: expected an image batch \(B, C, H, W\)"):
        embed(torch.randn(1, 32, 32))
    with pytest.raises(
        GroupError, match="PatchMerging: expected a grid divisible by stride 2, got 5x4"
    ):
        PatchMerging(4, 8, (5, 4))
    with pytest.raises(
        GroupError, match="ConvPositionalEncoding: expected padding_mode 'circular' or 'zeros'"
    ):
        ConvPositionalEncoding(4, (4, 4), padding_mode="reflect")  # type: ignore[arg-type]
    with pytest.raises(
        GroupError, match="ConvPositionalEncoding: expected an odd kernel size, got 4"
    ):
        ConvPositionalEncoding(4, (4, 4), kernel_size=4)
    with pytest.raises(
        GroupError, match=r"AbsolutePositionalEncoding: expected tokens \(B, N=16, C=4\)"
    ):
        AbsolutePositionalEncoding(4, (4, 4))(torch.randn(2, 16, 5))
    with pytest.raises(
        GroupError, match="make_relative_bias: expected 'circulant', 'clipped' or None, got 'rope'"
    ):
        make_relative_bias("rope", (4, 4), 2)  # type: ignore[arg-type]
    with pytest.raises(GroupError, match="CirculantRelativeBias: expected a grid"):
        CirculantRelativeBias(4, 2)  # type: ignore[arg-type]
    assert MeanPooling((4, 4)).contract(TorusTranslations(8, 8)).kind == Status.UNVERIFIED
