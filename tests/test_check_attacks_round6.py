"""Sixth attack round (a helper with the public docs only), against this round's additions:
every false certificate and crash it found, as a regression test.

1. ``OrientationCanonicalizer`` was not bit-exact when a sample position lay within rounding
   of a pixel-centre line (an angle of ~1e-16 rad): a zero pixel became ~1e-17 in one
   orientation and 0 in the other, which a certified body thresholding at 0 turned into a
   9 % change. Bilinear weights below 1e-9 are now exactly 0.
2. Call counters the state comparison did not see: a class attribute of a torch class, a
   ``functools.partial``'s bound data, the closure of a function stored on a child, an
   attribute of a stored function, a ``range`` iterator, an ``array``, a module made in
   memory and put in ``sys.modules``.
3. A NaN / inf image crashed ``orientation_canonicalize`` (an out-of-bounds index).
"""

from __future__ import annotations

import array
import functools
import sys
import types
from collections.abc import Callable

import pytest
import torch
from torch import nn

from groupattn.canonical import OrientationCanonicalizer, orientation_canonicalize
from groupattn.check import certify, verify
from groupattn.contracts import Status
from groupattn.models import create

# ---------------------------------------------------------------- 1. rounding at pixel-centre lines


class _PositiveFraction(nn.Module):
    """Canonicalize, then the fraction of positive pixels: C4-invariant, and a threshold at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.canon = OrientationCanonicalizer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.canon(x).output
        return (y > 0).to(y.dtype).mean(dim=(1, 2, 3))


def _near_a_pixel_line() -> torch.Tensor:
    """A mirror-symmetric 8x8 image (θ = 0) nudged by 1e-14: θ ≈ −3.6e-16 rad."""
    side = 8
    c = (side - 1) / 2
    yy, xx = torch.meshgrid(torch.arange(side) - c, torch.arange(side) - c, indexing="ij")
    mask = (torch.cos(4 * torch.atan2(yy, xx)) > 0).double()
    gen = torch.Generator().manual_seed(29)
    x = ((torch.rand(1, 1, side, side, dtype=torch.float64, generator=gen) * 2).round() / 2) * mask
    x = (x + torch.flip(x, (-1,))) / 2
    x[0, 0, 1, 2] += 1e-14
    return x


def test_a_threshold_after_the_orientation_canonicalizer_sees_no_rounding() -> None:
    x = _near_a_pixel_line()
    out = orientation_canonicalize(x)
    assert 0 < abs(float(out.frame)) < 1e-12 and float(out.margin) > 0.1
    for k in range(1, 4):
        turned = orientation_canonicalize(torch.rot90(x, k, (-2, -1))).output
        assert torch.equal(turned, torch.rot90(out.output, k, (-2, -1))), k
    model = _PositiveFraction().double().eval()
    assert (
        certify(model, torch.rand(2, 1, 8, 8, dtype=torch.float64), "c4").verdict
        == Status.INVARIANT
    )
    report = verify(model, x, "c4")
    assert max(report.errors.values()) == 0.0


# ---------------------------------------------------------------- 2. hidden counters

_THRESHOLD = 2000


class _Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(1, 3)

    def bomb(self, x: torch.Tensor, calls: int) -> torch.Tensor:
        y = self.lin(x.mean(dim=(2, 3)))  # C4 / D4-invariant
        if calls > _THRESHOLD:  # a path no early call takes
            y = y + x[:, :, 0, :3].sum(1)
        return y


def _torch_class_attribute() -> nn.Module:
    nn.Linear._groupattn_test_calls = [0]  # type: ignore[attr-defined]

    class Net(_Body):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            nn.Linear._groupattn_test_calls[0] += 1  # type: ignore[attr-defined]
            return self.bomb(x, nn.Linear._groupattn_test_calls[0])  # type: ignore[attr-defined]

    return Net()


def _partial() -> nn.Module:
    def tick(state: dict[str, int]) -> int:
        state["n"] += 1
        return state["n"]

    class Net(_Body):
        def __init__(self) -> None:
            super().__init__()
            self.tick = functools.partial(tick, {"n": 0})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bomb(x, self.tick())

    return Net()


def _closure_on_a_child() -> nn.Module:
    class Net(_Body):
        def __init__(self) -> None:
            super().__init__()
            count = [0]

            def tick() -> int:
                count[0] += 1
                return count[0]

            self.lin.tick = tick  # type: ignore[assignment]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bomb(x, self.lin.tick())  # type: ignore[operator]

    return Net()


def _function_attribute() -> nn.Module:
    def counter() -> int:
        counter.n += 1  # type: ignore[attr-defined]
        return counter.n  # type: ignore[attr-defined]

    counter.n = 0  # type: ignore[attr-defined]

    class Net(_Body):
        def __init__(self) -> None:
            super().__init__()
            self.count = counter

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bomb(x, self.count())

    return Net()


def _range_iterator() -> nn.Module:
    class Net(_Body):
        def __init__(self) -> None:
            super().__init__()
            self.steps = iter(range(10**9))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bomb(x, next(self.steps))

    return Net()


def _array() -> nn.Module:
    class Net(_Body):
        def __init__(self) -> None:
            super().__init__()
            self.calls = array.array("q", [0])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls[0] += 1
            return self.bomb(x, self.calls[0])

    return Net()


def _module_in_sys_modules() -> nn.Module:
    module = types.ModuleType("_groupattn_test_hidden_state")
    module.n = 0  # type: ignore[attr-defined]
    sys.modules["groupattn_test_hidden_state"] = module

    class Net(_Body):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            state = sys.modules["groupattn_test_hidden_state"]
            state.n += 1  # type: ignore[attr-defined]
            return self.bomb(x, state.n)  # type: ignore[attr-defined]

    return Net()


@pytest.mark.parametrize(
    "build",
    [
        _torch_class_attribute,
        _partial,
        _closure_on_a_child,
        _function_attribute,
        _range_iterator,
        _array,
        _module_in_sys_modules,
    ],
)
def test_hidden_call_counters_are_seen(build: Callable[[], nn.Module]) -> None:
    try:
        cert = certify(build(), torch.rand(2, 1, 6, 6), "d4")
        assert cert.verdict == Status.UNVERIFIED
        assert "changes Python state" in (cert.reason or ""), cert.reason
    finally:
        if hasattr(nn.Linear, "_groupattn_test_calls"):
            del nn.Linear._groupattn_test_calls  # type: ignore[attr-defined]
        sys.modules.pop("groupattn_test_hidden_state", None)


def test_a_stored_pure_function_and_partial_are_not_state() -> None:
    class Net(_Body):
        def __init__(self) -> None:
            super().__init__()
            self.act = functools.partial(torch.clamp, min=0.0)
            self.scale = lambda t: 2.0 * t

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.scale(self.act(self.lin(x.mean(dim=(2, 3)))))

    assert certify(Net(), torch.rand(2, 1, 6, 6), "d4").verdict == Status.INVARIANT


# ---------------------------------------------------------------- 3. non-finite images


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_images_pass_through_without_a_crash(value: float) -> None:
    x = torch.rand(2, 1, 8, 8)
    x[0, 0, 3, 3] = value
    out = orientation_canonicalize(x)
    assert float(out.frame[0]) == 0.0 and out.frame[1].isfinite()
    assert torch.equal(out.output[1], orientation_canonicalize(x[1:]).output[0])
    for name in ("group_vit", "p4_vit"):
        model = create(name).eval()
        with torch.no_grad():
            logits = model(torch.nn.functional.pad(x, (12, 12, 12, 12)))
        assert logits.shape == (2, 10) and logits[1].isfinite().all()
    report = verify(create("group_vit").eval(), torch.nn.functional.pad(x, (12, 12, 12, 12)), "c4")
    assert report is not None
