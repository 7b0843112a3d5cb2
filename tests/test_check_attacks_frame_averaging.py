"""Regressions of an attack round on the checker's relations for frame averaging.

The checker relates two results of the same deterministic ATen operator on operands
that are equal entry for entry (see "Orbits" in docs/concepts/checker.md): this is what
certifies ``FrameAveraging`` over an arbitrary backbone. A helper given only the public
docs found networks that abused it, and gaps around it; each is here, every one must
come out *not certified*, and each is shown to be really broken (float64, every element):

1. ``as_strided`` reads memory through strides: equal values in another layout give
   another result (channels-last inputs, the odd and even quarter turns of ``rot90``);
2. ``resize_`` grows a tensor into uninitialised memory;
3. state kept between calls in a ``SimpleNamespace`` (also: a plain tensor attribute,
   a NumPy array, a mutable default argument of ``forward`` or of a helper function,
   a helper's closure), which the snapshot of Python state missed;
4. an operator a user defines *in the ``aten`` namespace* with arbitrary Python code;
5. a break confined to the imaginary part of a complex output, which the numerical
   checks cast away.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from torch import nn

from groupattn.check import certify, verify
from groupattn.groups import CyclicGroup, DihedralGroup
from groupattn.nn import FrameAveraging
from groupattn.testing import relative_error

D4 = DihedralGroup(4)


def _d4_error(model: nn.Module, x: torch.Tensor) -> float:
    """Largest relative change of the output over every element of D4 (float64)."""
    model = model.double().eval()
    x = x.double()
    with torch.no_grad():
        y = model(x)
        return max(
            relative_error(model(torch.rot90(torch.flip(x, (-1,)) if f else x, k, (-2, -1))), y)
            for k in range(4)
            for f in (False, True)
        )


class _StridedRows(nn.Module):
    """A hand-written flatten that assumes a contiguous input."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(48, 3)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.linear(u.as_strided((u.shape[0], 48), (48, 1)))


def test_as_strided_backbone_is_not_certified() -> None:
    torch.manual_seed(0)
    model = FrameAveraging(_StridedRows(), D4)
    x = torch.randn(2, 3, 4, 4)
    for example in (x, x.contiguous(memory_format=torch.channels_last)):
        assert certify(model, example, "d4").status != "certified"
    last = x.double().contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        model = model.double().eval()
        y = model(last)
        turned = model(torch.rot90(last, 1, (-2, -1)).contiguous(memory_format=torch.channels_last))
    assert relative_error(turned, y) > 1e-3  # really broken for channels-last inputs


class _OrbitOfStridedRows(nn.Module):
    """``Σ_k as_strided(rot90(x, k))``: a C4 orbit sum in looks only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(x.shape[0], 16, dtype=x.dtype)
        for k in range(4):
            total = total + torch.rot90(x, k, (-2, -1)).as_strided((x.shape[0], 16), (16, 1))
        return total


def test_as_strided_orbit_sum_is_not_certified() -> None:
    x = torch.rand(2, 1, 4, 4)
    assert certify(_OrbitOfStridedRows(), x, "c4").status != "certified"
    model = _OrbitOfStridedRows().double()
    with torch.no_grad():
        y = model(x.double())
        assert relative_error(model(torch.rot90(x.double(), 1, (-2, -1))), y) > 1e-3


class _Uninitialised(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 8)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        z = self.linear(u.flatten(1))
        scratch = z.new_zeros(1).resize_(z.shape[0], 8)  # entries 1.. are uninitialised
        return (z * scratch.nan_to_num(0.0, 0.0, 0.0).clamp(-1, 1)).sum(-1, keepdim=True)


def test_uninitialised_memory_is_not_certified() -> None:
    torch.manual_seed(0)
    model = FrameAveraging(_Uninitialised(), D4)
    assert certify(model, torch.rand(2, 1, 4, 4), "d4").status != "certified"


class _CountsInANamespace(nn.Module):
    """Invariant for its first 100 calls, then not: the count lives in a SimpleNamespace."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)
        self.stats = types.SimpleNamespace(calls=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stats.calls += 1
        if self.stats.calls > 100:
            return self.linear(x.flatten(1))
        return x.flatten(1).sum(1, keepdim=True) * self.linear.bias


class _CountsInATensor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)
        self.calls = torch.zeros(())  # a plain attribute, not a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 100:
            return self.linear(x.flatten(1))
        return x.flatten(1).sum(1, keepdim=True) * self.linear.bias


class _CountsInAnArray(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)
        self.calls = np.zeros(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls[0] > 100:
            return self.linear(x.flatten(1))
        return x.flatten(1).sum(1, keepdim=True) * self.linear.bias


class _CountsInADefault(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, _calls: list[int] = [0]) -> torch.Tensor:  # noqa: B006
        _calls[0] += 1
        if _calls[0] > 100:
            return self.linear(x.flatten(1))
        return x.flatten(1).sum(1, keepdim=True) * self.linear.bias


def _warmed_up(limit: int, _calls: list[int] = [0]) -> bool:  # noqa: B006
    _calls[0] += 1
    return _calls[0] > limit


def _make_ticker() -> types.FunctionType:
    calls = [0]

    def tick() -> int:
        calls[0] += 1
        return calls[0]

    return tick  # type: ignore[return-value]


_TICK = _make_ticker()


class _CountsInAHelpersDefault(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _warmed_up(100):
            return self.linear(x.flatten(1))
        return x.flatten(1).sum(1, keepdim=True) * self.linear.bias


class _CountsInAHelpersClosure(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _TICK() > 100:
            return self.linear(x.flatten(1))
        return x.flatten(1).sum(1, keepdim=True) * self.linear.bias


@pytest.mark.parametrize(
    "build",
    [
        _CountsInANamespace,
        _CountsInATensor,
        _CountsInAnArray,
        _CountsInADefault,
        _CountsInAHelpersDefault,
        _CountsInAHelpersClosure,
    ],
    ids=[
        "namespace",
        "tensor-attribute",
        "numpy-array",
        "mutable-default",
        "helper-default",
        "helper-closure",
    ],
)
def test_state_kept_between_calls_anywhere_is_seen(build: type[nn.Module]) -> None:
    torch.manual_seed(0)
    x = torch.rand(2, 1, 4, 4)
    cert = certify(build(), x, "d4", verify=True)
    assert cert.status != "certified", cert.summary()
    model = build()
    for _ in range(101):
        model(x)
    assert _d4_error(model, x) > 1e-3  # really broken after its warm-up


_LIBRARY = torch.library.Library("aten", "FRAGMENT")
_LIBRARY.define("groupattn_test_gain(Tensor z) -> Tensor")
_CALLS = [0]


def _gain(z: torch.Tensor) -> torch.Tensor:
    _CALLS[0] += 1
    return z * (_CALLS[0] % 8)  # weighs each copy of a frame average differently


_LIBRARY.impl("groupattn_test_gain", _gain, "CompositeExplicitAutograd")


@torch.library.register_fake("aten::groupattn_test_gain")
def _gain_fake(z: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(z)


class _UserAtenOperator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.groupattn_test_gain(self.linear(u.flatten(1)))


def test_an_operator_a_user_puts_in_the_aten_namespace_is_not_trusted() -> None:
    torch.manual_seed(0)
    model = FrameAveraging(_UserAtenOperator(), D4)
    x = torch.rand(2, 1, 4, 4)
    assert certify(model, x, "d4").status != "certified"
    assert _d4_error(model, x) > 1e-3


class _ImaginaryBreak(nn.Module):
    """An invariant real part, a non-invariant imaginary part."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        invariant = x.sum((1, 2, 3))[:, None].expand(-1, 16)
        return invariant + 1j * x.flatten(1)


def test_a_break_in_the_imaginary_part_is_measured() -> None:
    x = torch.rand(2, 1, 4, 4)
    report = verify(_ImaginaryBreak(), x, CyclicGroup(4))
    assert not report.equivariant and report.max_error > 1e-3
    assert certify(_ImaginaryBreak(), x, "c4").status != "certified"
    y = _ImaginaryBreak()(x)
    assert relative_error(y, y.real.to(y.dtype)) > 0.1  # the imaginary part counts


class _Gelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x.flatten(1)).sum(1, keepdim=True) * self.linear.bias


def test_a_pytorch_kernel_replaced_from_python_is_not_trusted() -> None:
    """A rule describes PyTorch's own kernel: one a user swapped in is not checked."""
    x = torch.rand(2, 1, 4, 4)
    assert certify(_Gelu(), x, "d4").status == "certified"

    def gelu(t: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        return t * torch.arange(t.shape[-1], dtype=t.dtype)  # weighs positions

    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("gelu", gelu, "CPU")
        cert = certify(_Gelu(), x, "d4")
        assert cert.status != "certified"
        assert "aten::gelu" in (cert.reason or ""), cert.reason
    finally:
        library._destroy()
    assert certify(_Gelu(), x, "d4").status == "certified"


# ----------------------------------------------------------------- the rules themselves
def test_which_operators_relate_equal_operands() -> None:
    """White-box: the operators the equal-operand relation may use, and those it may not
    (random, uninitialised, stride-reading, user-defined in the aten namespace)."""
    from groupattn.check._relations import equal_operands_give_equal_results as equal

    aten = torch.ops.aten
    for op in (
        aten.add.Tensor,
        aten.convolution.default,
        aten.unbind.int,
        aten._native_batch_norm_legit_no_training.default,
        aten.native_layer_norm.default,
        aten.gelu.default,
    ):
        assert equal(op), op
    for op in (
        aten.native_dropout.default,
        aten.bernoulli.p,
        aten.rand_like.default,
        aten.empty_like.default,
        aten.resize_.default,
        aten.as_strided.default,
        aten.groupattn_test_gain.default,
    ):
        assert not equal(op), op


def test_copies_are_only_entries_that_copy_a_source_entry() -> None:
    """White-box: a movement that fills (zero padding) has no copy classes; one that only
    repeats entries has them."""
    import torch.nn.functional as F

    from groupattn.check._semantics import copy_classes
    from groupattn.check._values import Frame, Moving

    group = CyclicGroup(4)
    frame = Frame("", group, [group.element(1)])
    turn = torch.rot90(torch.arange(16).reshape(1, 1, 4, 4), 1, (-2, -1)).reshape(-1)
    source = Moving((1, 1, 4, 4), torch.float32, frame, [turn])
    repeated = Moving((1, 1, 8, 8), torch.float32, frame, [torch.arange(64)])
    repeated.source = (
        lambda d: d[0].repeat_interleave(2, -1).repeat_interleave(2, -2),
        [source],
        None,
    )
    classes = copy_classes(repeated)
    assert classes is not None and sorted(set(classes.tolist())) == list(range(16))
    padded = Moving((1, 1, 6, 6), torch.float32, frame, [torch.arange(36)])
    padded.source = (lambda d: F.pad(d[0], (1, 1, 1, 1)), [source], None)
    assert copy_classes(padded) is None
