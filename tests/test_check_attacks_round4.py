"""Regressions from the fourth attack round: an attack on the guards added after the third.

False certificates it found against those guards, each now *unverified*:

1. a G-set over a library group whose ``permutation_fn`` is an action on every element
   the checker used to ask about but one (claims for the generators did not carry over);
2. a float32-only break of 5e-5 relative inside a contract-checked layer (the dtype probe's
   float32 tolerance was 1e-4; it is now DESIGN.md's 1e-5);
3. samples other than the first mixed among themselves (only the first sample was moved);
4. mixing that appears only for batches larger than the example's;
5. a branch on ``torch.inference_mode()``;
6. a library group instance whose ``generators`` was replaced on the instance.

And raw exceptions, now verdicts or one ``TypeError``: a user group whose ``order()`` /
``generators()`` / ``_enumerate()`` raises; a meta-device or sparse example input.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from groupattn.actions import GSet, GSetField
from groupattn.check import Status, certify
from groupattn.groups import CyclicGroup, FiniteGroup, GroupError, SymmetricGroup


class _TokenConvolution(torch.nn.Module):
    """A circular convolution along the token axis of ``(B, N, C)``: equivariant to rotations of the tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.3, 1.1, -0.7]))

    def f(self, x: torch.Tensor) -> torch.Tensor:
        return self.w[0] * x + self.w[1] * torch.roll(x, 1, 1) + self.w[2] * torch.roll(x, -1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x)


def _rotations(order: int, n: int, bad: int | None = None) -> GSetField:
    group = CyclicGroup(order)

    def perm(e: Any) -> list[int]:
        if e.value == bad:
            return [1, 0, *range(2, n)]  # a transposition: not the rotation by `bad`
        return [(i + e.value) % n for i in range(n)]

    return GSetField(GSet(group, n, perm, name="tokens"))


def test_a_map_that_is_not_an_action_on_one_element_is_not_certified() -> None:
    field = _rotations(1000, 4, bad=5)
    x = torch.randn(2, 4, 3)
    cert = certify(_TokenConvolution(), x, field.gset.group, input_type=field, verify=True)
    assert cert.verdict == Status.UNVERIFIED and "not a group action" in str(cert.reason)
    # the same G-set without the bad element: certified (every element checked)
    good = _rotations(1000, 4)
    cert = certify(_TokenConvolution(), x, good.gset.group, input_type=good)
    assert cert.verdict == Status.EQUIVARIANT, cert.reason


def test_a_users_map_on_a_group_too_large_to_check_is_unverified() -> None:
    group = SymmetricGroup(10)  # 3,628,800 elements: too many permutation_fn calls

    field = GSetField(GSet(group, 10, lambda e: group.permutation(e), name="points"))
    cert = certify(_TokenConvolution(), torch.randn(2, 10, 3), group, input_type=field)
    assert cert.verdict == Status.UNVERIFIED and "cannot confirm" in str(cert.reason)
    # GSet.natural (groupattn's own map) is an action by construction: the verdict is the
    # convolution's (not S10-equivariant), no longer the map's
    cert = certify(
        _TokenConvolution(), torch.randn(2, 10, 3), group, input_type=GSetField(GSet.natural(group))
    )
    assert "cannot confirm" not in str(cert.reason)


def test_a_library_group_with_generators_replaced_on_the_instance_is_not_trusted() -> None:
    group = SymmetricGroup(10)
    gens = group.generators()
    group.generators = lambda: gens[1:]  # type: ignore[method-assign]  # drops the transposition
    field = GSetField(GSet.natural(group))
    cert = certify(
        _TokenConvolution().double(),
        torch.randn(2, 10, 3, dtype=torch.float64),
        group,
        input_type=field,
    )
    assert cert.verdict == Status.UNVERIFIED


class _ProjectionWithFastPath(torch.nn.Module):
    """A Linear whose non-float64 path adds a small position-dependent term (a fused kernel's bug)."""

    def __init__(self, linear: torch.nn.Module, eps: float) -> None:
        super().__init__()
        self.linear, self.eps = linear, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.dtype != torch.float64:
            ramp = torch.linspace(0, 1, y.shape[-2], device=y.device, dtype=y.dtype)[:, None]
            y = y + self.eps * ramp * y.detach().abs().amax()
        return y


def test_a_small_float32_only_break_inside_a_contract_checked_layer_is_seen() -> None:
    from groupattn.actions import LiftedField
    from groupattn.attention import GroupSelfAttention
    from groupattn.groups import p4

    torch.manual_seed(0)
    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, neighbourhood=3)
    layer.qkv = _ProjectionWithFastPath(layer.qkv, 2e-4)  # type: ignore[assignment]
    x = torch.randn(2, 4, 4, 6, 6)
    cert = certify(layer.eval(), x, p4(6), input_type=LiftedField(CyclicGroup(4)))
    # since round 5 the swapped child unseals the layer and its body is traced
    assert cert.verdict == Status.UNVERIFIED
    assert "own dtype" in str(cert.reason) or "at qkv" in str(cert.reason)


class _MixesLaterSamples(_TokenConvolution):
    """Sample i >= 2 adds sample i − 1: samples 0 and the whole batch look fine."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.f(x)
        return torch.cat([y[:2], y[2:] + x[1:-1]], 0)


class _SortsAcrossTheBatch(_TokenConvolution):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.f(x)
        return torch.cat([y[:1], torch.sort(y[1:], dim=0).values], 0)


class _MixesOnlyInLargerBatches(_TokenConvolution):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.f(x)
        if x.shape[0] >= 3:
            y = torch.cat([y[:1], y[1:] + x[:-1]], 0)
        return y


@pytest.mark.parametrize(
    ("model", "batch"),
    [(_MixesLaterSamples, 3), (_SortsAcrossTheBatch, 3), (_MixesOnlyInLargerBatches, 2)],
)
def test_samples_mixed_anywhere_in_the_batch_are_not_certified(model: type, batch: int) -> None:
    field = _rotations(8, 8)
    torch.manual_seed(0)
    cert = certify(model(), torch.randn(batch, 8, 3), field.gset.group, input_type=field)
    assert cert.verdict == Status.UNVERIFIED and "mixes the samples" in str(cert.reason)


class _BranchesOnInferenceMode(_TokenConvolution):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("position", torch.linspace(-1, 1, 8)[:, None].repeat(1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.f(x)
        if torch.is_inference_mode_enabled():
            y = y + self.get_buffer("position").to(y.dtype)
        return y


def test_a_branch_on_inference_mode_is_not_certified() -> None:
    field = _rotations(8, 8)
    cert = certify(
        _BranchesOnInferenceMode(), torch.randn(2, 8, 3), field.gset.group, input_type=field
    )
    assert cert.verdict == Status.UNVERIFIED and "inference_mode" in str(cert.reason)


class _Quarter(FiniteGroup):
    name = "Z4 (user)"

    def key(self) -> Any:
        return ("user-z4", type(self).__name__)

    def _identity(self) -> int:
        return 0

    def _compose(self, a: Any, b: Any) -> int:
        return (a + b) % 4

    def _inverse(self, a: Any) -> int:
        return (-a) % 4

    def _validate(self, value: Any) -> int:
        if not isinstance(value, int) or not 0 <= value < 4:
            raise GroupError("Z4 (user): expected 0..3")
        return value

    def generators(self) -> list[Any]:
        return [self.element(1)]

    def _enumerate(self) -> list[Any]:
        return list(range(4))


class _OrderRaises(_Quarter):
    def order(self) -> int:
        raise RuntimeError("order() failed")


class _GeneratorsRaise(_Quarter):
    def generators(self) -> list[Any]:
        raise KeyError("generators() failed")


class _EnumerationRaises(_Quarter):
    def _enumerate(self) -> list[Any]:
        raise ValueError("_enumerate() failed")


@pytest.mark.parametrize("group_class", [_OrderRaises, _GeneratorsRaise, _EnumerationRaises])
def test_a_user_group_whose_methods_raise_gives_a_verdict(group_class: type) -> None:
    group = group_class()
    field = GSetField(GSet(group, 4, lambda e: [(i + e.value) % 4 for i in range(4)]))
    cert = certify(_TokenConvolution(), torch.randn(2, 4, 3), group, input_type=field, verify=True)
    assert cert.verdict == Status.UNVERIFIED


@pytest.mark.parametrize(
    ("example", "message"),
    [
        (torch.randn(2, 1, 8, 8, device="meta"), "meta device"),
        (torch.randn(2, 1, 8, 8).to_sparse(), "dense"),
    ],
)
def test_meta_and_sparse_examples_raise_one_type_error(example: torch.Tensor, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        certify(torch.nn.Identity(), example, "c4")
