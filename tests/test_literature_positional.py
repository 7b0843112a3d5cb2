"""Positional encodings from the literature: which symmetry each keeps, and which it breaks.

For every element of the small groups involved (all circular shifts of a small grid, all
8 elements of D4, the generators of p4m) the output moves as the contract claims (float64,
1e-10; exactly where the computation is a gather), and for every symmetry an encoding is
claimed to break, a concrete element breaks it measurably (relative error > 1e-3). The
checker's verdict on a small network with each encoding is never a certificate where the
encoding breaks the symmetry.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Literal, cast

import numpy
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from groupattn import ConfigurationError, DtypeError, ShapeError
from groupattn._resources import BudgetError, estimate_model_memory
from groupattn.actions import TokenField
from groupattn.attention import GlobalSelfAttention
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, FiniteGroup, TorusTranslations, p4m
from groupattn.positional import (
    ALiBiBias,
    LogSpacedContinuousBias,
    RotaryPositionalEncoding,
    RotarySelfAttention,
    SinusoidalPositionalEncoding,
    apply_rotary,
    token_permutation,
)

Mode = Literal["plane", "torus"]
EXACT = 1e-10
BREAKS = 1e-3


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _act(
    group: FiniteGroup, g: Any, x: torch.Tensor, grid: tuple[int, int], prefix: int = 0
) -> torch.Tensor:
    return TokenField(grid, prefix=prefix).act(group, g, x)


def _layer_errors(
    layer: nn.Module, group: FiniteGroup, grid: tuple[int, int], dim: int, scale: float = 1.0
) -> list[float]:
    """``‖f(g·x) − g·f(x)‖ / ‖g·f(x)‖`` for every element ``g`` (float64)."""
    torch.manual_seed(1)
    x = scale * torch.randn(2, grid[0] * grid[1], dim, dtype=torch.float64)
    layer = layer.double().eval()
    with torch.no_grad():
        fx = layer(x)
        return [
            _rel(layer(_act(group, g, x, grid)), _act(group, g, fx, grid)) for g in group.elements()
        ]


def _bias_moves(
    bias: torch.Tensor, group: FiniteGroup, grid: tuple[int, int], prefix: int = 0
) -> list[float]:
    """``max |B[g·i, g·j] − B[i, j]| / max |B|`` for every element ``g``."""
    field = TokenField(grid, prefix=prefix)
    bias, n = bias.detach(), bias.shape[-1]
    out = []
    for g in group.elements():
        p = token_permutation(field, group, g, n)
        moved = bias[:, p[:, None], p[None, :]]
        out.append(float((moved - bias).abs().max() / bias.abs().max()))
    return out


def _attention(
    bias: nn.Module, grid: tuple[int, int], dim: int = 8, heads: int = 2
) -> GlobalSelfAttention:
    torch.manual_seed(2)
    return GlobalSelfAttention(dim, heads, grid, bias=bias)


# ============================================================================ sinusoidal


def test_sinusoidal_is_vaswanis_table_per_axis() -> None:
    pe = SinusoidalPositionalEncoding(8, (3, 5)).double()
    table = pe(torch.zeros(1, 15, 8, dtype=torch.float64))[0]
    y, x = 2, 3  # token 13
    row = [math.sin(y), math.cos(y), math.sin(y / 100), math.cos(y / 100)]
    col = [math.sin(x), math.cos(x), math.sin(x / 100), math.cos(x / 100)]
    assert torch.allclose(table[y * 5 + x], torch.tensor(row + col, dtype=torch.float64))
    assert list(pe.state_dict()) == []


def test_sinusoidal_prefix_tokens_are_untouched() -> None:
    pe = SinusoidalPositionalEncoding(4, (2, 2), prefix=1)
    x = torch.randn(3, 5, 4)
    out = pe(x)
    assert torch.equal(out[:, 0], x[:, 0])
    assert not torch.equal(out[:, 1:], x[:, 1:])


@settings(max_examples=10)
@given(h=st.integers(2, 4), w=st.integers(2, 4), dim=st.sampled_from([4, 8]))
def test_sinusoidal_breaks_every_shift_but_the_identity(h: int, w: int, dim: int) -> None:
    group = TorusTranslations(h, w)
    errors = _layer_errors(SinusoidalPositionalEncoding(dim, (h, w)), group, (h, w), dim)
    for g, err in zip(group.elements(), errors):
        if g == group.identity():
            assert err == 0.0
        else:
            assert err > BREAKS, (g, err)
    assert SinusoidalPositionalEncoding(dim, (h, w)).contract(group).kind == Status.BROKEN


def test_sinusoidal_breaks_every_rotation_and_reflection() -> None:
    d4 = DihedralGroup(4)
    errors = _layer_errors(SinusoidalPositionalEncoding(8, (4, 4)), d4, (4, 4), 8)
    assert errors[0] == 0.0 and min(errors[1:]) > BREAKS
    contract = SinusoidalPositionalEncoding(8, (4, 4)).contract(d4)
    assert contract.kind == Status.BROKEN and "absolute" in (contract.reason or "")


def test_sinusoidal_contract_under_a_group_that_moves_nothing_and_a_foreign_input() -> None:
    pe = SinusoidalPositionalEncoding(8, (4, 4))
    assert pe.contract(CyclicGroup(1)).kind == Status.EQUIVARIANT
    assert pe.contract(TorusTranslations(4, 4), TokenField((2, 2))).kind == Status.UNVERIFIED


# ============================================================================ RoPE


def test_apply_rotary_rotates_pairs_like_complex_multiplication() -> None:
    q, k = (
        torch.randn(2, 3, 5, 6, dtype=torch.float64),
        torch.randn(2, 3, 5, 6, dtype=torch.float64),
    )
    angles = torch.randn(5, 3, dtype=torch.float64)
    rq, rk = apply_rotary(q, k, angles.cos(), angles.sin())
    as_complex = torch.view_as_complex(q.reshape(2, 3, 5, 3, 2).contiguous()) * torch.polar(
        torch.ones_like(angles), angles
    )
    assert torch.allclose(rq, torch.view_as_real(as_complex).reshape(2, 3, 5, 6), atol=1e-14)
    assert torch.allclose(rk.norm(dim=-1), k.norm(dim=-1), atol=1e-13)
    with pytest.raises(ShapeError, match="apply_rotary: expected cos and sin"):
        apply_rotary(q, k, angles.cos()[:4], angles.sin())


@pytest.mark.parametrize("mode", ["plane", "torus"])
def test_relative_logits_are_the_rotated_logits(mode: Mode) -> None:
    rope = RotaryPositionalEncoding(8, (3, 4), mode).double()
    q, k = (
        torch.randn(2, 2, 12, 8, dtype=torch.float64),
        torch.randn(2, 2, 12, 8, dtype=torch.float64),
    )
    rq, rk = rope(q, k)
    assert torch.allclose(rope.relative_logits(q, k), rq @ rk.transpose(-1, -2), atol=1e-12)
    assert list(rope.state_dict()) == []


@settings(max_examples=10)
@given(h=st.integers(2, 5), w=st.integers(2, 5), mode=st.sampled_from(["plane", "torus"]))
def test_rope_logits_depend_on_the_offset_only(h: int, w: int, mode: Mode) -> None:
    """Same content at every token: the logit of (i, j) is a function of j − i (planar or circular)."""
    rope = RotaryPositionalEncoding(8, (h, w), mode)
    n = h * w
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64).expand(1, 1, n, 8)
    k = torch.randn(1, 1, 1, 8, dtype=torch.float64).expand(1, 1, n, 8)
    rq, rk = rope(q, k)
    logits = (rq @ rk.transpose(-1, -2))[0, 0]
    labels = rope.pair_labels()
    for label in torch.unique(labels):
        values = logits[labels == label]
        assert float(values.max() - values.min()) <= 1e-12 * max(1.0, float(values.abs().max()))


def test_rope_torus_frequencies_fit_the_grid() -> None:
    rope = RotaryPositionalEncoding(16, (4, 6), "torus")
    assert rope.harmonics(0).tolist() == [1, 2, 1, 2] and rope.harmonics(1).tolist() == [1, 2, 3, 1]
    for axis, side in ((0, 4), (1, 6)):
        assert torch.allclose(
            torch.cos(rope.frequencies(axis) * side), torch.ones(4, dtype=torch.float64)
        )
    plane = RotaryPositionalEncoding(16, (4, 6), "plane")
    assert torch.allclose(plane.frequencies(0), 10000.0 ** (-torch.arange(4) / 4).double())


@settings(max_examples=8)
@given(h=st.integers(2, 5), w=st.integers(2, 5), heads=st.sampled_from([1, 2]))
def test_torus_rope_attention_is_equivariant_to_every_circular_shift(
    h: int, w: int, heads: int
) -> None:
    group = TorusTranslations(h, w)
    torch.manual_seed(3)
    layer = RotarySelfAttention(4 * heads, heads, (h, w), mode="torus")
    assert max(_layer_errors(layer, group, (h, w), 4 * heads)) <= EXACT
    assert layer.contract(group).kind == Status.EQUIVARIANT


def test_plane_rope_breaks_a_circular_shift() -> None:
    group = TorusTranslations(4, 4)
    torch.manual_seed(3)
    layer = RotarySelfAttention(8, 2, (4, 4), mode="plane")
    errors = _layer_errors(layer, group, (4, 4), 8, scale=3.0)
    assert errors[0] <= EXACT
    shift = group.elements().index(group.generators()[1])
    assert errors[shift] > BREAKS
    contract = layer.contract(group)
    assert contract.kind == Status.BROKEN and "wraps" in (contract.reason or "")


@pytest.mark.parametrize("mode", ["plane", "torus"])
def test_rope_breaks_rotations_and_reflections(mode: Mode) -> None:
    d4 = DihedralGroup(4)
    torch.manual_seed(3)
    layer = RotarySelfAttention(8, 2, (4, 4), mode=mode)
    errors = _layer_errors(layer, d4, (4, 4), 8, scale=3.0)
    assert errors[0] <= EXACT and min(errors[1:]) > BREAKS  # every non-identity element
    assert layer.contract(d4).kind == Status.BROKEN
    assert layer.contract(p4m(4)).kind == Status.BROKEN


# ============================================================================ ALiBi


def test_alibi_slopes_and_values() -> None:
    bias = ALiBiBias((3, 4), num_heads=8, mode="plane").double()
    slopes = 2.0 ** (-torch.arange(1, 9, dtype=torch.float64))
    assert torch.equal(bias.slopes, slopes)
    values = bias()
    i, j = 0, 11  # (0, 0) and (2, 3)
    assert torch.allclose(values[:, i, j], -slopes * math.sqrt(13.0), rtol=0, atol=1e-15)
    torus = ALiBiBias((3, 4), num_heads=8, mode="torus")()
    assert torch.allclose(torus[:, i, j], -slopes * math.sqrt(2.0), rtol=0, atol=1e-15)  # (−1, −1)
    assert list(bias.state_dict()) == []


@settings(max_examples=10)
@given(h=st.integers(2, 5), w=st.integers(2, 5))
def test_torus_alibi_is_exactly_shift_invariant(h: int, w: int) -> None:
    group = TorusTranslations(h, w)
    bias = ALiBiBias((h, w), 2, mode="torus")
    assert max(_bias_moves(bias(), group, (h, w))) == 0.0
    assert bias.contract(group).kind == Status.INVARIANT
    assert max(_layer_errors(_attention(bias, (h, w)), group, (h, w), 8)) <= EXACT


@settings(max_examples=8)
@given(n=st.integers(2, 5), mode=st.sampled_from(["plane", "torus"]))
def test_alibi_is_d4_invariant_on_a_square_grid(n: int, mode: Mode) -> None:
    d4 = DihedralGroup(4)
    bias = ALiBiBias((n, n), 2, mode=mode)
    assert max(_bias_moves(bias(), d4, (n, n))) == 0.0
    assert bias.contract(d4).kind == Status.INVARIANT
    assert max(_layer_errors(_attention(bias, (n, n)), d4, (n, n), 8)) <= EXACT


def test_plane_alibi_is_d2_invariant_on_any_grid() -> None:
    d2 = DihedralGroup(2)
    bias = ALiBiBias((3, 5), 2, mode="plane")
    assert max(_bias_moves(bias(), d2, (3, 5))) == 0.0
    assert bias.contract(d2).kind == Status.INVARIANT


def test_torus_alibi_is_p4m_invariant() -> None:
    group = p4m(4)
    bias = ALiBiBias((4, 4), 2, mode="torus")
    field = TokenField((4, 4))
    for g in group.generators():
        p = token_permutation(field, group, g, 16)
        assert torch.equal(bias()[:, p[:, None], p[None, :]], bias())
    assert bias.contract(group).kind == Status.INVARIANT


def test_plane_alibi_breaks_a_circular_shift() -> None:
    group = TorusTranslations(4, 4)
    bias = ALiBiBias((4, 4), 2, mode="plane")
    moves = _bias_moves(bias(), group, (4, 4))
    assert moves[0] == 0.0 and min(moves[1:]) > BREAKS
    errors = _layer_errors(_attention(bias, (4, 4)), group, (4, 4), 8, scale=3.0)
    assert max(errors) > BREAKS
    contract = bias.contract(group)
    assert contract.kind == Status.BROKEN and "wraps" in (contract.reason or "")
    assert _attention(bias, (4, 4)).contract(group).kind == Status.BROKEN


def test_alibi_prefix_rows_are_zero_and_it_follows_the_module() -> None:
    bias = ALiBiBias((2, 3), 2, mode="torus", prefix=1)
    out = bias()
    assert out.shape == (2, 7, 7) and not out[:, 0].any() and not out[:, :, 0].any()
    assert bias.contract(TorusTranslations(2, 3)).kind == Status.INVARIANT
    assert bias.float()().dtype == torch.float32


# ============================================================================ SwinV2


def test_log_spaced_features_are_swinv2s() -> None:
    bias = LogSpacedContinuousBias((3, 5), 2, hidden=8, mode="plane")
    assert bias.num_labels == 5 * 9
    f = bias.features[:, 0]  # (K, 2), the representative offsets in class order
    dy = torch.arange(-2, 3).repeat_interleave(9).double()
    dx = torch.arange(-4, 5).repeat(5).double()
    for got, delta, side in ((f[:, 0], dy, 3), (f[:, 1], dx, 5)):
        t = 8 * delta / (side - 1)
        assert torch.allclose(got, torch.sign(t) * torch.log2(1 + t.abs()) / 3, atol=1e-15)
    values = bias()
    assert bool(((values > 0) & (values < 16)).all())
    assert list(bias.state_dict()) == ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight"]


@settings(max_examples=10)
@given(h=st.integers(2, 5), w=st.integers(2, 5))
def test_torus_log_spaced_bias_is_exactly_shift_invariant(h: int, w: int) -> None:
    group = TorusTranslations(h, w)
    torch.manual_seed(4)
    bias = LogSpacedContinuousBias((h, w), 2, hidden=16, mode="torus")
    assert max(_bias_moves(bias(), group, (h, w))) == 0.0
    assert bias.contract(group).kind == Status.INVARIANT
    assert max(_layer_errors(_attention(bias, (h, w)), group, (h, w), 8)) <= EXACT


def test_plane_log_spaced_bias_breaks_a_circular_shift() -> None:
    group = TorusTranslations(4, 4)
    torch.manual_seed(4)
    bias = LogSpacedContinuousBias((4, 4), 2, hidden=16, mode="plane")
    moves = _bias_moves(bias(), group, (4, 4))
    assert moves[0] == 0.0 and min(moves[1:]) > BREAKS
    assert max(_layer_errors(_attention(bias, (4, 4)), group, (4, 4), 8, scale=3.0)) > BREAKS
    assert bias.contract(group).kind == Status.BROKEN


@pytest.mark.parametrize("mode", ["plane", "torus"])
def test_log_spaced_bias_breaks_rotations_unless_symmetric(mode: Mode) -> None:
    d4 = DihedralGroup(4)
    torch.manual_seed(4)
    plain = LogSpacedContinuousBias((4, 4), 2, hidden=16, mode=mode)
    moves = _bias_moves(plain(), d4, (4, 4))
    assert moves[0] == 0.0 and min(moves[1:]) > BREAKS
    assert plain.contract(d4).kind == Status.BROKEN
    symmetric = LogSpacedContinuousBias((4, 4), 2, hidden=16, mode=mode, symmetric=True)
    assert max(_bias_moves(symmetric(), d4, (4, 4))) == 0.0  # all 8 elements, exactly
    assert symmetric.contract(d4).kind == Status.INVARIANT
    assert max(_layer_errors(_attention(symmetric, (4, 4)), d4, (4, 4), 8)) <= EXACT


@settings(max_examples=8)
@given(n=st.integers(2, 6), mode=st.sampled_from(["plane", "torus"]))
def test_symmetric_log_spaced_bias_is_the_d4_average(n: int, mode: Mode) -> None:
    """The table of an orbit is the mean of the MLP over the 8 D4 images of one of its offsets."""
    torch.manual_seed(5)
    bias = LogSpacedContinuousBias((n, n), 1, hidden=8, mode=mode, symmetric=True).double()
    plain = LogSpacedContinuousBias((n, n), 1, hidden=8, mode=mode).double()
    plain.mlp.load_state_dict(bias.mlp.state_dict())
    raw = plain.mlp(plain.features[:, 0])[:, 0]  # (K0,): the MLP on every offset class
    by_pair = raw[plain.pair_index]  # (N, N)
    d4 = DihedralGroup(4)
    field = TokenField((n, n))
    perms = [token_permutation(field, d4, g, n * n) for g in d4.elements()]
    average = torch.stack([by_pair[p[:, None], p[None, :]] for p in perms]).mean(0)
    assert torch.allclose(bias()[0], 16 * torch.sigmoid(average), rtol=0, atol=1e-12)
    assert max(_bias_moves(bias(), d4, (n, n))) == 0.0


def test_torus_symmetric_log_spaced_bias_is_p4m_invariant() -> None:
    group = p4m(4)
    bias = LogSpacedContinuousBias((4, 4), 2, hidden=8, mode="torus", symmetric=True)
    field = TokenField((4, 4))
    for g in group.generators():
        p = token_permutation(field, group, g, 16)
        assert torch.equal(bias()[:, p[:, None], p[None, :]], bias())
    assert bias.contract(group).kind == Status.INVARIANT
    plane = LogSpacedContinuousBias((4, 4), 2, hidden=8, mode="plane", symmetric=True)
    assert plane.contract(group).kind == Status.BROKEN  # translations wrap around


# ============================================================================ contracts agree with the numbers


def _make_bias(
    kind: str, grid: tuple[int, int], mode: Mode, symmetric: bool
) -> ALiBiBias | LogSpacedContinuousBias:
    torch.manual_seed(6)
    if kind == "alibi":
        return ALiBiBias(grid, 2, mode=mode)
    return LogSpacedContinuousBias(grid, 2, hidden=8, mode=mode, symmetric=symmetric)


@settings(max_examples=20)
@given(
    kind=st.sampled_from(["alibi", "swinv2"]),
    n=st.integers(2, 4),
    mode=st.sampled_from(["plane", "torus"]),
    symmetric=st.booleans(),
    group_name=st.sampled_from(["translations", "d4", "c4"]),
)
def test_bias_contract_matches_the_numbers(
    kind: str, n: int, mode: Mode, symmetric: bool, group_name: str
) -> None:
    """Invariant by contract ⇔ exactly invariant for every element; breaks ⇔ some element moves it."""
    group: FiniteGroup = {
        "translations": TorusTranslations(n, n),
        "d4": DihedralGroup(4),
        "c4": CyclicGroup(4),
    }[group_name]
    bias = _make_bias(kind, (n, n), mode, symmetric)
    moves = _bias_moves(bias(), group, (n, n))
    kind_ = bias.contract(group).kind
    assert kind_ in (Status.INVARIANT, Status.BROKEN)
    if kind_ == Status.INVARIANT:
        assert max(moves) == 0.0
    else:
        assert max(moves) > BREAKS


@settings(max_examples=12)
@given(
    n=st.integers(2, 4),
    mode=st.sampled_from(["plane", "torus"]),
    group_name=st.sampled_from(["translations", "d4"]),
)
def test_rope_contract_matches_the_relative_rotations(n: int, mode: Mode, group_name: str) -> None:
    group: FiniteGroup = (
        TorusTranslations(n, n) if group_name == "translations" else DihedralGroup(4)
    )
    rope = RotaryPositionalEncoding(8, (n, n), mode)
    cos, sin = rope.relative_tables()
    field = TokenField((n, n))
    moved = 0.0
    for g in group.elements():
        p = token_permutation(field, group, g, n * n)
        for table in (cos, sin):
            moved = max(moved, float((table[p[:, None], p[None, :]] - table).abs().max()))
    if rope.contract(group).kind == Status.INVARIANT:
        assert moved == 0.0
    else:
        assert rope.contract(group).kind == Status.BROKEN and moved > BREAKS


# ============================================================================ the checker


class RelativeRotaryAttention(nn.Module):
    """Single-head attention whose RoPE logits are computed from relative rotations."""

    def __init__(self, grid: tuple[int, int], mode: Mode, dim: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.rotary = RotaryPositionalEncoding(dim, grid, mode)
        self.scale = dim**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        logits = self.rotary.relative_logits(q, k) * self.scale
        return (torch.softmax(logits, dim=-1) @ v).squeeze(1)


GRID = (4, 4)
CERTIFIED, NOT_CERTIFIED = "certified", "not certified"

#: (name, model factory, group, expected): "certified" where the encoding keeps the
#: symmetry and the checker can see it, "not certified" (broken or unverified) otherwise.
CHECKER_CASES: list[tuple[str, Callable[[], nn.Module], str, str]] = [
    (
        "sinusoidal",
        lambda: nn.Sequential(SinusoidalPositionalEncoding(8, GRID), nn.Linear(8, 8)),
        "translations",
        NOT_CERTIFIED,
    ),
    (
        "sinusoidal",
        lambda: nn.Sequential(SinusoidalPositionalEncoding(8, GRID), nn.Linear(8, 8)),
        "d4",
        NOT_CERTIFIED,
    ),
    ("rope-plane", lambda: RotarySelfAttention(8, 2, GRID, "plane"), "translations", NOT_CERTIFIED),
    ("rope-torus", lambda: RotarySelfAttention(8, 2, GRID, "torus"), "d4", NOT_CERTIFIED),
    (
        "rope-relative-torus",
        lambda: RelativeRotaryAttention(GRID, "torus"),
        "translations",
        CERTIFIED,
    ),
    (
        "rope-relative-plane",
        lambda: RelativeRotaryAttention(GRID, "plane"),
        "translations",
        NOT_CERTIFIED,
    ),
    ("rope-relative-torus", lambda: RelativeRotaryAttention(GRID, "torus"), "d4", NOT_CERTIFIED),
    (
        "alibi-plane",
        lambda: _attention(ALiBiBias(GRID, 2, "plane"), GRID),
        "translations",
        NOT_CERTIFIED,
    ),
    ("alibi-plane", lambda: _attention(ALiBiBias(GRID, 2, "plane"), GRID), "d4", CERTIFIED),
    (
        "alibi-torus",
        lambda: _attention(ALiBiBias(GRID, 2, "torus"), GRID),
        "translations",
        CERTIFIED,
    ),
    ("alibi-torus", lambda: _attention(ALiBiBias(GRID, 2, "torus"), GRID), "p4m", CERTIFIED),
    (
        "swinv2-plane",
        lambda: _attention(LogSpacedContinuousBias(GRID, 2, 8, "plane"), GRID),
        "translations",
        NOT_CERTIFIED,
    ),
    (
        "swinv2-torus",
        lambda: _attention(LogSpacedContinuousBias(GRID, 2, 8, "torus"), GRID),
        "translations",
        CERTIFIED,
    ),
    (
        "swinv2-torus",
        lambda: _attention(LogSpacedContinuousBias(GRID, 2, 8, "torus"), GRID),
        "d4",
        NOT_CERTIFIED,
    ),
    (
        "swinv2-plane-d4",
        lambda: _attention(LogSpacedContinuousBias(GRID, 2, 8, "plane", True), GRID),
        "d4",
        CERTIFIED,
    ),
    (
        "swinv2-torus-d4",
        lambda: _attention(LogSpacedContinuousBias(GRID, 2, 8, "torus", True), GRID),
        "p4m",
        CERTIFIED,
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "group", "expected"),
    CHECKER_CASES,
    ids=[f"{c[0]}-{c[2]}" for c in CHECKER_CASES],
)
def test_checker_verdicts(
    name: str, make: Callable[[], nn.Module], group: str, expected: str
) -> None:
    torch.manual_seed(7)
    model = make()
    cert = certify(model, torch.randn(2, 16, 8), group, verify=True)
    assert cert.verification is not None
    if expected == CERTIFIED:
        assert cert.verdict == Status.EQUIVARIANT, cert.to_text()
        assert cert.verification.equivariant
    else:
        assert cert.verdict in (Status.BROKEN, Status.UNVERIFIED), cert.to_text()
        assert not cert.verification.equivariant  # each of these really breaks the symmetry


def test_checker_does_not_see_through_the_rotation_of_torus_rope() -> None:
    """Known limitation: the rotated queries alone do not move with the input, so the
    operator rules find a break, although the layer is equivariant (the numbers say so).
    A break needs a numerical witness, and there is none: the verdict is ``unverified``,
    never ``broken``. ``relative_logits`` is the certifiable form (above)."""
    torch.manual_seed(7)
    layer = RotarySelfAttention(8, 2, GRID, "torus")
    cert = certify(layer, torch.randn(2, 16, 8), "translations", verify=True)
    assert cert.verdict == Status.UNVERIFIED, cert.to_text()
    assert cert.first_break is None and "no element moves the output" in (cert.reason or "")
    assert cert.verification is not None and cert.verification.equivariant
    assert layer.contract(TorusTranslations(*GRID)).kind == Status.EQUIVARIANT


# ============================================================================ validation


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: SinusoidalPositionalEncoding(6, (2, 2)),
            "SinusoidalPositionalEncoding: expected dim as an int >= 4 divisible by 4, got 6",
        ),
        (
            lambda: SinusoidalPositionalEncoding(8, (0, 2)),
            "SinusoidalPositionalEncoding: expected a grid",
        ),
        (lambda: SinusoidalPositionalEncoding(True, (2, 2)), "expected dim"),
        (
            lambda: RotaryPositionalEncoding(6, (2, 2)),
            "RotaryPositionalEncoding: expected head_dim",
        ),
        (
            lambda: RotaryPositionalEncoding(8, (2, 2), cast(Any, "sphere")),
            "RotaryPositionalEncoding: expected mode 'plane' or 'torus', got 'sphere'",
        ),
        (
            lambda: RotarySelfAttention(12, 2, (2, 2)),
            "RotarySelfAttention: expected a width dim = num_heads · head_dim",
        ),
        (lambda: RotarySelfAttention(8, 0, (2, 2)), "RotarySelfAttention: expected num_heads"),
        (lambda: ALiBiBias((2, 2), 2, cast(Any, "circle")), "ALiBiBias: expected mode"),
        (lambda: ALiBiBias((2, 2), 0), "ALiBiBias: expected num_heads as an int >= 1, got 0"),
        (
            lambda: LogSpacedContinuousBias((2, 3), 2, symmetric=True),
            "LogSpacedContinuousBias: expected a square window",
        ),
        (
            lambda: LogSpacedContinuousBias((2, 2), 2, hidden=0),
            "LogSpacedContinuousBias: expected hidden",
        ),
        (
            lambda: LogSpacedContinuousBias((2, 2), 2, symmetric=cast(Any, "d4")),
            "LogSpacedContinuousBias: expected symmetric as a bool",
        ),
    ],
)
def test_bad_arguments_are_refused_by_name(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_bad_inputs_are_refused_by_name() -> None:
    with pytest.raises(ShapeError, match="SinusoidalPositionalEncoding"):
        SinusoidalPositionalEncoding(8, (2, 2))(torch.randn(1, 5, 8))
    with pytest.raises(ShapeError, match="RotarySelfAttention"):
        RotarySelfAttention(8, 2, (2, 2))(torch.randn(1, 4, 4))
    rope = RotaryPositionalEncoding(8, (2, 2))
    with pytest.raises(ShapeError, match="RotaryPositionalEncoding: expected query and key"):
        rope.relative_logits(torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8))
    with pytest.raises(
        ShapeError, match=r"RotaryPositionalEncoding: expected N=4 tokens \(the grid 2x2\), got 3"
    ):
        rope(torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8))


#: Token layers of this module, for the batch and dtype checks every public layer passes.
TOKEN_LAYERS: list[tuple[str, Callable[[], nn.Module]]] = [
    ("SinusoidalPositionalEncoding", lambda: SinusoidalPositionalEncoding(8, (4, 4))),
    ("RotarySelfAttention", lambda: RotarySelfAttention(8, 2, (4, 4), "torus")),
    ("ALiBiBias", lambda: _attention(ALiBiBias((4, 4), 2), (4, 4))),
    ("LogSpacedContinuousBias", lambda: _attention(LogSpacedContinuousBias((4, 4), 2, 8), (4, 4))),
]


@pytest.mark.parametrize(("name", "make"), TOKEN_LAYERS, ids=[n for n, _ in TOKEN_LAYERS])
def test_layers_handle_empty_and_single_batches_and_refuse_integers(
    name: str, make: Callable[[], nn.Module]
) -> None:
    torch.manual_seed(8)
    layer = make().eval()
    batch = torch.randn(3, 16, 8)
    with torch.no_grad():
        assert layer(batch[:0]).shape == (0, 16, 8)
        torch.testing.assert_close(layer(batch[2:3])[0], layer(batch)[2], rtol=1e-5, atol=1e-5)
    with pytest.raises(DtypeError, match="expected a floating-point input"):
        layer(torch.ones(2, 16, 8, dtype=torch.int64))


def test_apply_rotary_refuses_integer_input() -> None:
    rope = RotaryPositionalEncoding(8, (2, 2))
    with pytest.raises(
        DtypeError, match="RotaryPositionalEncoding: expected a floating-point query"
    ):
        rope(torch.ones(1, 1, 4, 8, dtype=torch.int64), torch.ones(1, 1, 4, 8))


# ============================================================================ settings, tables and resources


#: (class, a factory, the read-only settings): every construction-time setting a contract uses.
READ_ONLY: list[tuple[str, Callable[[], nn.Module], tuple[str, ...]]] = [
    ("Sinusoidal", lambda: SinusoidalPositionalEncoding(8, (4, 4)), ("dim", "grid", "prefix")),
    ("Rotary", lambda: RotaryPositionalEncoding(8, (4, 4)), ("head_dim", "grid", "mode")),
    (
        "RotarySelfAttention",
        lambda: RotarySelfAttention(8, 2, (4, 4)),
        ("dim", "num_heads", "grid", "mode"),
    ),
    ("ALiBi", lambda: ALiBiBias((4, 4), 2), ("grid", "num_heads", "mode", "prefix")),
    (
        "LogSpaced",
        lambda: LogSpacedContinuousBias((4, 4), 2, 8),
        ("grid", "num_heads", "mode", "prefix", "hidden", "symmetric"),
    ),
]


@pytest.mark.parametrize(("name", "make", "settings_"), READ_ONLY, ids=[r[0] for r in READ_ONLY])
def test_construction_settings_are_read_only(
    name: str, make: Callable[[], nn.Module], settings_: tuple[str, ...]
) -> None:
    module = make()
    cls = type(module).__name__
    for attribute in settings_:
        before = getattr(module, attribute)
        with pytest.raises(
            AttributeError, match=f"{cls}: expected {attribute} to stay as constructed"
        ):
            setattr(module, attribute, "torus" if attribute == "mode" else before)
        with pytest.raises(AttributeError, match=cls):
            delattr(module, attribute)
        assert getattr(module, attribute) == before


def test_rope_mode_cannot_be_switched_under_its_tables() -> None:
    """S1: switching ``mode`` after construction used to give a false equivariant contract."""
    group = TorusTranslations(4, 4)
    layer = RotarySelfAttention(8, 2, (4, 4), mode="plane").double()
    with pytest.raises(AttributeError, match="RotaryPositionalEncoding: expected mode"):
        layer.rotary.mode = "torus"
    with pytest.raises(AttributeError, match="RotarySelfAttention: expected mode"):
        layer.mode = "torus"
    assert layer.rotary.mode == "plane"
    assert layer.contract(group).kind == Status.BROKEN
    assert max(_layer_errors(layer, group, (4, 4), 8)) > BREAKS


#: (factory, the fixed table to edit): every fixed table whose values a contract assumes.
FIXED_TABLES: list[tuple[str, Callable[[], nn.Module], str]] = [
    ("rope-cos", lambda: RotaryPositionalEncoding(8, (4, 4), "torus"), "cos"),
    ("rope-sin", lambda: RotaryPositionalEncoding(8, (4, 4), "torus"), "sin"),
    ("sinusoidal", lambda: SinusoidalPositionalEncoding(8, (4, 4)), "encoding"),
    ("alibi-slopes", lambda: ALiBiBias((4, 4), 2, "torus"), "slopes"),
    ("alibi-distances", lambda: ALiBiBias((4, 4), 2, "torus"), "squared_distances"),
    ("swinv2-features", lambda: LogSpacedContinuousBias((4, 4), 2, 8, "torus"), "features"),
]


@pytest.mark.parametrize(("name", "make", "table"), FIXED_TABLES, ids=[f[0] for f in FIXED_TABLES])
def test_an_edited_fixed_table_makes_the_contract_unverified(
    name: str, make: Callable[[], Any], table: str
) -> None:
    """S2: the contract is decided from the tables the module computes with."""
    group = TorusTranslations(4, 4)
    module = make()
    before = module.contract(group).kind
    with torch.no_grad():
        getattr(module, table).view(-1)[1] += 0.5
    contract = module.contract(group)
    assert contract.kind == Status.UNVERIFIED
    assert f"expected its table {table} to be the one its settings define" in (
        contract.reason or ""
    )
    assert "changed after construction" in (contract.reason or "")
    module.reset_tables()
    assert module.contract(group).kind == before


def test_edited_rope_tables_do_not_leave_the_layer_equivariant() -> None:
    """S2 on the layer: edited cos used to keep 'equivariant' with an error of 0.41."""
    group = TorusTranslations(4, 4)
    layer = RotarySelfAttention(8, 2, (4, 4), mode="torus").double()
    assert layer.contract(group).kind == Status.EQUIVARIANT
    with torch.no_grad():
        layer.rotary.cos[3] += 0.5
    assert max(_layer_errors(layer, group, (4, 4), 8)) > BREAKS
    contract = layer.contract(group)
    assert contract.kind == Status.UNVERIFIED and "cos" in (contract.reason or "")


@pytest.mark.parametrize(
    "dtypes", [(torch.float32,), (torch.float32, torch.bfloat16), (torch.float16,)]
)
def test_tables_cast_to_another_dtype_keep_the_contract(dtypes: tuple[torch.dtype, ...]) -> None:
    """Casting the module (also through float32 first) is not an edit of its tables."""
    group = TorusTranslations(8, 8)
    modules: list[nn.Module] = [
        RotarySelfAttention(16, 2, (8, 8), "torus"),
        ALiBiBias((8, 8), 3, "torus"),
        LogSpacedContinuousBias((8, 8), 2, 8, "torus", True),
    ]
    for module in modules:
        for dtype in dtypes:
            module = module.to(dtype)
        kind = cast(Any, module).contract(group).kind
        assert kind in (Status.EQUIVARIANT, Status.INVARIANT), type(module).__name__


DEFERRED: list[tuple[str, Callable[[], nn.Module], Callable[[], torch.Tensor]]] = [
    (
        "RotarySelfAttention",
        lambda: RotarySelfAttention(8, 2, (4, 4), "torus"),
        lambda: torch.randn(2, 16, 8),
    ),
    (
        "Sinusoidal",
        lambda: SinusoidalPositionalEncoding(8, (4, 4), prefix=1),
        lambda: torch.randn(2, 17, 8),
    ),
    (
        "ALiBi",
        lambda: _attention(ALiBiBias((4, 4), 2, "torus"), (4, 4)),
        lambda: torch.randn(2, 16, 8),
    ),
    (
        "LogSpaced",
        lambda: _attention(LogSpacedContinuousBias((4, 4), 2, 8, "torus", True), (4, 4)),
        lambda: torch.randn(2, 16, 8),
    ),
]


@pytest.mark.parametrize(("name", "make", "data"), DEFERRED, ids=[d[0] for d in DEFERRED])
def test_meta_to_empty_load_state_dict_round_trip(
    name: str, make: Callable[[], nn.Module], data: Callable[[], torch.Tensor]
) -> None:
    """W1: fixed tables are recomputed by load_state_dict (and reported until then)."""
    group = TorusTranslations(4, 4)
    torch.manual_seed(9)
    source = make().eval()
    with torch.device("meta"):
        deferred = make().eval()
    deferred.to_empty(device="cpu")
    with torch.no_grad():
        for buffer in deferred.buffers():
            buffer.fill_(float("nan"))  # what to_empty may leave
    assert cast(Any, deferred).contract(group).kind == Status.UNVERIFIED
    deferred.load_state_dict(source.state_dict())
    x = data()
    with torch.no_grad():
        assert torch.equal(deferred(x), source(x))
    assert cast(Any, deferred).contract(group) == cast(Any, source).contract(group)


BAD_BIASES: list[tuple[str, Callable[[], Any], str]] = [
    (
        "heads",
        lambda: GlobalSelfAttention(8, 2, (3, 3), bias=ALiBiBias((3, 3), 4)),
        "expected a bias module with num_heads=2 (the layer's), got ALiBiBias with num_heads=4",
    ),
    (
        "grid",
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias=ALiBiBias((3, 3), 2)),
        "expected a bias module with grid=(4, 4) (the layer's), got ALiBiBias with grid=(3, 3)",
    ),
    (
        "same-token-count",
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias=ALiBiBias((2, 8), 2)),
        "expected a bias module with grid=(4, 4) (the layer's), got ALiBiBias with grid=(2, 8)",
    ),
    (
        "prefix",
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias=ALiBiBias((4, 4), 2, prefix=1)),
        "expected a bias module with prefix=0 (the layer's), got ALiBiBias with prefix=1",
    ),
    (
        "swinv2-heads",
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias=LogSpacedContinuousBias((4, 4), 4, 8)),
        "expected a bias module with num_heads=2 (the layer's), got LogSpacedContinuousBias with num_heads=4",
    ),
    (
        "swinv2-grid",
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias=LogSpacedContinuousBias((3, 3), 2, 8)),
        "expected a bias module with grid=(4, 4) (the layer's), got LogSpacedContinuousBias with grid=(3, 3)",
    ),
]


@pytest.mark.parametrize(("name", "make", "message"), BAD_BIASES, ids=[b[0] for b in BAD_BIASES])
def test_global_attention_refuses_a_bias_of_other_settings(
    name: str, make: Callable[[], Any], message: str
) -> None:
    """E1: refused at construction, not deep in the kernel (or silently)."""
    with pytest.raises(ConfigurationError, match="GlobalSelfAttention: " + _escape(message)):
        make()
    GlobalSelfAttention(8, 2, (4, 4), bias=ALiBiBias((4, 4), 2, prefix=1), prefix=1)  # matching


def _escape(text: str) -> str:
    return text.replace("(", r"\(").replace(")", r"\)")


def test_apply_rotary_refuses_low_ranks_and_non_tensors() -> None:
    """E2: no IndexError or AttributeError from inside."""
    cos, sin = torch.ones(4, 4), torch.zeros(4, 4)
    for query in (torch.randn(8), torch.randn(())):
        with pytest.raises(
            ShapeError, match=r"apply_rotary: expected query of shape \(\.\.\., N, d\) \(rank >= 2"
        ):
            apply_rotary(query, query, cos, sin)
    for array in (numpy.ones((4, 8)), [[1.0] * 8] * 4):
        with pytest.raises(
            DtypeError, match=r"apply_rotary: expected query as a floating-point torch\.Tensor"
        ):
            apply_rotary(cast(Any, array), torch.ones(4, 8), cos, sin)
    with pytest.raises(DtypeError, match="apply_rotary: expected cos as a floating-point"):
        apply_rotary(torch.ones(4, 8), torch.ones(4, 8), cast(Any, numpy.ones((4, 4))), sin)


def test_rope_names_the_token_count_it_expects() -> None:
    """E3: the grid's token count is what is expected, the input's what it got."""
    rope = RotaryPositionalEncoding(8, (3, 3))
    with pytest.raises(ShapeError, match=r"expected N=9 tokens \(the grid 3x3\), got 8"):
        rope(torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8))
    with pytest.raises(ShapeError, match="expected a head width d=8, got 4"):
        rope(torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4))


HUGE: list[tuple[str, Callable[[], Any]]] = [
    ("ALiBiBias", lambda: ALiBiBias((10000, 10000), 2)),
    ("ALiBiBias", lambda: ALiBiBias((3000, 3000), 2, "torus")),
    ("RotaryPositionalEncoding", lambda: RotaryPositionalEncoding(8, (10**6, 10**6))),
    ("SinusoidalPositionalEncoding", lambda: SinusoidalPositionalEncoding(8, (10**6, 10**6))),
    (
        "LogSpacedContinuousBias",
        lambda: LogSpacedContinuousBias((3000, 3000), 2, 16, "torus", True),
    ),
    (
        "SinusoidalPositionalEncoding",
        lambda: SinusoidalPositionalEncoding(8, (3, 3), prefix=10**12),
    ),
    ("ALiBiBias", lambda: ALiBiBias((3, 3), 2, prefix=10**9)),
    ("LogSpacedContinuousBias", lambda: LogSpacedContinuousBias((3, 3), 2, 8, prefix=10**9)),
]


@pytest.mark.parametrize(("name", "make"), HUGE, ids=[f"{h[0]}-{i}" for i, h in enumerate(HUGE)])
def test_tables_over_the_memory_limit_are_refused_up_front(
    name: str, make: Callable[[], Any]
) -> None:
    """E4: sizes that would need over 1 TB are refused before any allocation, in < 0.5 s."""
    start = time.perf_counter()
    with pytest.raises(
        ConfigurationError,
        match=rf"{name}: expected .* to fit in the memory limit of .*, got .*(TiB|PiB)",
    ):
        make()
    assert time.perf_counter() - start < 0.5


def test_model_sizing_refuses_pair_tables_over_its_budget() -> None:
    """E4: the constructors announce their real (non-meta) tables to ``estimate_model_memory``."""
    with pytest.raises(BudgetError, match="ALiBiBias: the labels of the 4096x4096 token pairs"):
        estimate_model_memory(
            lambda: GlobalSelfAttention(8, 2, (64, 64), bias=ALiBiBias((64, 64), 2)),
            (1, 4096, 8),
            budget=2**20,
        )


def test_contract_reasons_tell_types_apart_and_name_the_group() -> None:
    """E5: no 'expected X, got X'; no rotations or reflections in a translation group's reason."""
    grid_as_list = TokenField(cast(Any, [4, 4]))
    for layer in (SinusoidalPositionalEncoding(8, (4, 4)), RotarySelfAttention(8, 2, (4, 4))):
        reason = layer.contract(TorusTranslations(4, 4), grid_as_list).reason or ""
        expected, got = reason.split("expected input type ")[1].split(", got ", 1)
        assert got != expected and "grid=[4, 4]" in got
    group = TorusTranslations(2, 8)
    for module in (
        RotaryPositionalEncoding(8, (4, 4), "torus"),
        LogSpacedContinuousBias((4, 4), 2, 8, "torus"),
        ALiBiBias((4, 4), 2, "torus"),
    ):
        contract = module.contract(group, TokenField((2, 8)))
        assert contract.kind == Status.BROKEN
        assert "rotation" not in (contract.reason or "") and "reflection" not in (
            contract.reason or ""
        )
        assert group.name in (contract.reason or "")


def test_relative_logits_refuses_integer_queries() -> None:
    rope = RotaryPositionalEncoding(8, (2, 2))
    with pytest.raises(
        DtypeError, match="RotaryPositionalEncoding: expected a floating-point query"
    ):
        rope.relative_logits(torch.ones(1, 1, 4, 8, dtype=torch.int64), torch.ones(1, 1, 4, 8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_rotary_attention_refuses_another_dtype_than_its_weights(dtype: torch.dtype) -> None:
    layer = RotarySelfAttention(8, 2, (3, 3))
    with pytest.raises(
        DtypeError,
        match=f"RotarySelfAttention: expected an input of dtype torch.float32 .*got {dtype}",
    ):
        layer(torch.randn(2, 9, 8, dtype=dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(torch.randn(2, 9, 8, dtype=torch.bfloat16)).shape == (2, 9, 8)
