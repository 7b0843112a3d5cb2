"""Regressions from the third attack round on the checker (a helper with the public docs only).

Four false certificates, each now *unverified* with the right reason:

1. a user's group too large to close under ``generators()`` (order 2^21) whose
   ``generators()`` forgets one generator — claims were proved for a subgroup only;
2. a child of a contract-checked library layer swapped for a module with a float32-only
   path (every numerical check ran in float64, so the path never ran);
3. the same with a user ``EquivariantModule`` whose float32 path calls a custom operator;
4. a network whose samples depend on each other (certified for one element moving the
   whole batch; a user moves each image by its own element).

Plus: mistyped ``certify`` arguments raise one clear ``TypeError`` (they raised raw
``AttributeError``s), and a bf16 lifting layer — exact up to bf16 rounding — is
certified (it was unverified with a wrong reason: "branches on tracing or on the grad mode").
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from groupattn.actions import GridField, GSet, GSetField, LiftedField
from groupattn.attention import GroupSelfAttention, LiftingSelfAttention
from groupattn.check import Status, certify
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    DirectProduct,
    FiniteGroup,
    Group,
    PermutationGroup,
    RotoTranslationGroup,
    p4,
)
from groupattn.nn import EquivariantModule

BITS = 21  # 2^21 elements: above the checker's generation-check limit


class _BitFlips(FiniteGroup):
    """(Z/2)^k written by hand; ``complete=False`` forgets the last generator."""

    def __init__(self, bits: int, complete: bool) -> None:
        self.bits, self.complete = bits, complete
        self.name = f"Z2^{bits}"

    def key(self) -> Any:
        return ("bitflips", self.bits, self.complete)

    def _identity(self) -> tuple[int, ...]:
        return (0,) * self.bits

    def _compose(self, a: Any, b: Any) -> tuple[int, ...]:
        return tuple(x ^ y for x, y in zip(a, b, strict=True))

    def _inverse(self, a: Any) -> Any:
        return a

    def _validate(self, value: Any) -> tuple[int, ...]:
        return tuple(int(v) & 1 for v in value)

    def generators(self) -> list[Any]:
        count = self.bits if self.complete else self.bits - 1
        return [self.element(tuple(int(i == j) for j in range(self.bits))) for i in range(count)]

    def _enumerate(self) -> list[Any]:
        return [tuple((n >> i) & 1 for i in range(self.bits)) for n in range(2**self.bits)]

    def _order_without_enumeration(self) -> int:
        return 2**self.bits

    def _sample(self, rng: random.Random) -> tuple[int, ...]:  # words in the generators
        g = self._identity()
        for _ in range(3 * self.bits):
            g = self._compose(g, rng.choice(self.generators()).value)
        return g


def _pairs_field(group: _BitFlips) -> GSetField:
    def perm(g: Any) -> list[int]:  # bit i swaps tokens 2i and 2i + 1
        p = list(range(2 * group.bits))
        for i, b in enumerate(g.value):
            if b:
                p[2 * i], p[2 * i + 1] = 2 * i + 1, 2 * i
        return p

    return GSetField(GSet(group, 2 * group.bits, perm, name="pairs"))


class _PickToken(torch.nn.Module):
    """Invariant under every generator but the forgotten one (it reads one token of the last pair)."""

    def __init__(self, bits: int) -> None:
        super().__init__()
        self.bits = bits
        self.head = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.bits
        return self.head(x[:, : 2 * k - 2].sum(1) + x[:, 2 * k - 2])


def test_large_user_group_with_forgotten_generator_is_not_certified() -> None:
    group = _BitFlips(BITS, complete=False)
    field = _pairs_field(group)
    torch.manual_seed(0)
    model = _PickToken(BITS).eval()
    x = torch.randn(2, 2 * BITS, 3)
    for verify in (False, True):
        cert = certify(model, x, group, input_type=field, verify=verify)
        assert cert.verdict == Status.UNVERIFIED
        assert "defined outside groupattn" in str(cert.reason)
        assert "generators()" in str(cert.reason)
    # and the model really is not invariant: the forgotten bit moves the logits
    g = group.element(tuple(int(j == BITS - 1) for j in range(BITS)))
    m, xd = model.double(), x.double()
    with torch.no_grad():
        y, moved = m(xd), m(field.act(group, g, xd))
    assert float((moved - y).norm() / y.norm()) > 1e-2


def test_large_user_group_is_unverified_even_with_complete_generators() -> None:
    """Soundness before coverage: the checker cannot tell the two apart above its limit; the
    message says how to get a certificate (a PermutationGroup, or groupattn's groups)."""
    group = _BitFlips(BITS, complete=True)
    cert = certify(
        _PickToken(BITS).eval(), torch.randn(2, 2 * BITS, 3), group, input_type=_pairs_field(group)
    )
    assert cert.verdict == Status.UNVERIFIED and "PermutationGroup" in str(cert.reason)


def test_small_user_group_is_closed_and_a_library_product_checks_its_factors() -> None:
    small = _BitFlips(4, complete=False)
    cert = certify(
        _PickToken(4).eval(), torch.randn(2, 8, 3), small, input_type=_pairs_field(small)
    )
    assert cert.verdict == Status.UNVERIFIED and "generate 8 of its 16" in str(cert.reason)
    # a library product whose factor is the user's incomplete group: the factor is checked
    product = DirectProduct(small, CyclicGroup(4))
    x = torch.randn(2, 1, 4, 4)
    cert = certify(torch.nn.Identity(), x, product, input_type=GridField())
    assert cert.verdict == Status.UNVERIFIED and "generate 8 of its 16" in str(cert.reason)


class _UserInfinite(Group):
    """The integers under addition, acting on nothing (every element trivially)."""

    name = "Z (user)"

    def key(self) -> Any:
        return "user-z"

    def _identity(self) -> int:
        return 0

    def _compose(self, a: Any, b: Any) -> int:
        return int(a) + int(b)

    def _inverse(self, a: Any) -> int:
        return -int(a)

    def _validate(self, value: Any) -> int:
        return int(value)

    def generators(self) -> list[Any]:
        return [self.element(2)]  # forgets the odd integers: generates 2Z only

    def _sample(self, rng: random.Random) -> int:
        return rng.randrange(-5, 6)

    @property
    def is_finite(self) -> bool:
        return False

    def order(self) -> int | None:
        return None


def test_user_infinite_group_is_unverified() -> None:
    group = _UserInfinite()
    field = GSetField(GSet(group, 3, lambda g: [0, 1, 2], name="fixed"))
    cert = certify(torch.nn.Identity(), torch.randn(2, 3, 2), group, input_type=field)
    assert cert.verdict == Status.UNVERIFIED and "an infinite group" in str(cert.reason)


def test_library_groups_above_the_limit_are_still_trusted() -> None:
    """p4 on a 256 x 256 torus has 262,144 elements (above the closure limit): groupattn's own
    generators are tested, so a pointwise network is still certified."""
    group = p4(256)
    assert int(group.order()) > 200_000
    model = torch.nn.Conv2d(1, 2, 1).eval()
    cert = certify(model, torch.randn(1, 1, 256, 256), group)
    assert cert.verdict == Status.EQUIVARIANT, cert.reason


# ------------------------------------------------------------------ dtype branches


class _FastQKV(torch.nn.Module):
    """A drop-in Linear with a (buggy) float32 fast path and a float64 reference path."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.dtype != torch.float64:  # the "fused kernel": no float64 support, one off-by-one
            first = (torch.arange(y.shape[-2], device=y.device) == 0)[:, None].to(y.dtype)
            y = y + 0.5 * torch.roll(y, 1, dims=-2) * first
        return y


def test_dtype_branch_inside_a_contract_checked_layer_is_not_certified() -> None:
    torch.manual_seed(0)
    layer = GroupSelfAttention(4, 4, "C4", num_heads=2, neighbourhood=3)
    layer.qkv = _FastQKV(layer.qkv)  # type: ignore[assignment]
    layer.eval()
    group, field = p4(6), LiftedField(CyclicGroup(4))
    x = torch.randn(2, 4, 4, 6, 6)
    for verify in (False, True):
        cert = certify(layer, x, group, input_type=field, verify=verify)
        assert cert.verdict == Status.UNVERIFIED
    cert = certify(layer, x, group, input_type=field)
    # since round 5 the swapped child unseals the layer, whose body is then traced (the
    # rules see the float32 path); before, the probe in the example's own dtype saw it
    assert "own dtype" in str(cert.reason) or "at qkv" in str(cert.reason)
    # the float32 layer really breaks; the float64 one does not
    errors = {}
    for dtype in (torch.float32, torch.float64):
        m, xx = layer.to(dtype), x.to(dtype)
        with torch.no_grad():
            y = m(xx)
            worst = 0.0
            for g in group.generators():
                ref = field.act(group, g, y)
                worst = max(worst, float((m(field.act(group, g, xx)) - ref).norm() / ref.norm()))
            errors[dtype] = worst
    assert errors[torch.float32] > 1e-2 and errors[torch.float64] < 1e-12


@torch.library.custom_op("groupattn_tests::round3_fused_mix", mutates_args=())
def _fused_mix(x: torch.Tensor) -> torch.Tensor:
    return x + x[:, 1:].sum(1, keepdim=True) / x.shape[1]  # the bug: token 0 is skipped


@_fused_mix.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_dtype_branch_in_a_user_contract_module_is_not_certified() -> None:
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")
    field = GSetField(GSet.natural(hexagon))

    class TokenMix(EquivariantModule):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.dtype == torch.float64:  # reference path
                return x + x.mean(1, keepdim=True)
            return _fused_mix(x)

        def contract(self, group: Any, input_type: Any = None) -> Any:
            return super().contract(group, input_type)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)
            self.mix = TokenMix(field, field)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mix(self.linear(x))

    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 6, 3)
    cert = certify(model, x, hexagon, input_type=field, verify=True)
    assert cert.verdict == Status.UNVERIFIED and "own dtype" in str(cert.reason)


def test_float32_and_bfloat16_examples_of_exact_layers_are_certified() -> None:
    """Completeness: the dtype probe's tolerance is far above rounding."""
    torch.manual_seed(0)
    point = DihedralGroup(4)
    group = RotoTranslationGroup(point, 8)
    layer = LiftingSelfAttention(2, 4, "D4", num_heads=2, neighbourhood=3).eval()
    x = torch.randn(2, 2, 8, 8)
    assert certify(layer, x, group, verify=True).verdict == Status.EQUIVARIANT
    half = layer.to(torch.bfloat16)
    cert = certify(half, x.to(torch.bfloat16), group, verify=True)
    assert cert.verdict == Status.EQUIVARIANT, cert.reason


# ------------------------------------------------------------------ samples that mix


class _CrossSample(torch.nn.Module):
    """Each sample's features correlated with the next sample's (batch attention, memory banks)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head((x * torch.roll(x, 1, dims=0)).mean((-1, -2)))


def test_network_whose_samples_depend_on_each_other_is_not_certified() -> None:
    torch.manual_seed(0)
    model = _CrossSample().eval()
    x = torch.randn(2, 2, 8, 8)
    for verify in (False, True):
        cert = certify(model, x, "d4", verify=verify)
        assert cert.verdict == Status.UNVERIFIED
        assert "mixes the samples of a batch" in str(cert.reason)
    # rotating one image alone changes its logits
    d4 = DihedralGroup(4)
    xd, m = x.double(), model.double()
    with torch.no_grad():
        y = m(xd)
        one = xd.clone()
        one[0] = GridField().act(d4, d4.element(1), xd[:1])[0]
        assert float((m(one)[0] - y[0]).norm() / y[0].norm()) > 1e-2


class _SampleReadsThePrevious(torch.nn.Module):
    """Sample i > 0 adds sample i − 1's pixels; sample 0 is left alone. Equivariant when the
    whole batch moves; moving sample 0 alone moves its own output correctly but changes
    sample 1's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:1], x[1:] + x[:-1]])


class _SampleReadsAnInvariantOfTheNext(torch.nn.Module):
    """Sample i's logits add an *invariant* feature (the max) of sample i + 1: per sample,
    still invariant — moving one sample leaves every output as it was."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean((-1, -2)) + torch.roll(x, 1, dims=0).amax((-1, -2))


class _CountsOverTheBatch(torch.nn.Module):
    """Scales by the fraction of positive entries of the whole batch: moving one sample by a
    permutation keeps that count, so each sample is moved alone exactly as claimed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.gt(0).sum().to(x.dtype) / x.numel()


def test_per_sample_semantics_other_samples_and_batch_pooling() -> None:
    x = torch.randn(3, 2, 6, 6)
    cert = certify(_SampleReadsThePrevious().eval(), x, "d4")
    assert cert.verdict == Status.UNVERIFIED and "mixes the samples" in str(cert.reason)
    cert = certify(_SampleReadsAnInvariantOfTheNext().eval(), x, "d4")
    assert cert.verdict == Status.INVARIANT, cert.reason
    cert = certify(_CountsOverTheBatch().eval(), x, "d4")
    assert cert.verdict == Status.EQUIVARIANT, cert.reason


def test_batch_statistics_in_eval_mode_do_not_mix_samples() -> None:
    """The negative control: an eval-mode batch norm (running statistics) is per sample."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(2), torch.nn.Flatten(2)).eval()

    class Pool(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x).amax(-1)

    cert = certify(Pool().eval(), torch.randn(3, 2, 6, 6), "d4")
    assert cert.verdict == Status.INVARIANT, cert.reason


# ------------------------------------------------------------------ argument types


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((torch.nn.Identity(), torch.zeros(1, 1, 4, 4), 4), "expected the group"),
        ((lambda x: x, torch.zeros(1, 1, 4, 4), "c4"), "expected the model"),
        ((torch.nn.Identity(), (torch.zeros(1, 1, 4, 4),), "c4"), "expected the example input"),
    ],
)
def test_mistyped_arguments_raise_one_clear_type_error(arguments: tuple, message: str) -> None:
    with pytest.raises(TypeError, match=f"certify: {message}"):
        certify(*arguments)
