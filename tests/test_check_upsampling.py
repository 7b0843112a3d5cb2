"""The checker on nearest up-sampling joined to a skip connection (U-Nets, dense heads).

An up-sampled tensor repeats every coarse entry; its own map names one copy per entry,
the skip connection's map may name another. The pointwise rules match entries by the
source entry they copy (equal for every input), so ``x + up(pool(x))`` is certified —
for ``repeat_interleave``, ``F.interpolate(mode="nearest")`` and ``expand`` + ``reshape``
alike — while up-samplings that do not commute with the group are never certified and
are shown to break numerically.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupattn.check import Status, certify
from groupattn.testing import relative_error


def _repeat(z: torch.Tensor) -> torch.Tensor:
    return z.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)


def _interpolate(z: torch.Tensor) -> torch.Tensor:
    return F.interpolate(z, scale_factor=2, mode="nearest")


def _expand(z: torch.Tensor) -> torch.Tensor:
    b, c, h, w = z.shape
    return z[:, :, :, None, :, None].expand(b, c, h, 2, w, 2).reshape(b, c, 2 * h, 2 * w)


def _rolled(z: torch.Tensor) -> torch.Tensor:  # off by one fine pixel
    return torch.roll(_repeat(z), 1, -1)


def _uneven(z: torch.Tensor) -> torch.Tensor:  # rows 1, 2, 1, 2, … times
    repeats = torch.tensor([1, 2] * (z.shape[-1] // 2) + [1] * (z.shape[-1] % 2))
    out = z.repeat_interleave(repeats, dim=-1).repeat_interleave(repeats, dim=-2)
    return F.pad(out, (0, 2 * z.shape[-1] - out.shape[-1], 0, 2 * z.shape[-2] - out.shape[-2]))


def _shifted_cells(z: torch.Tensor) -> torch.Tensor:  # cells start one pixel in
    return torch.roll(_repeat(z), (1, 1), (-2, -1))


class _Skip(nn.Module):
    def __init__(
        self, upsample: Callable[[torch.Tensor], torch.Tensor], upsampled_first: bool = False
    ) -> None:
        super().__init__()
        self.upsample = upsample
        self.conv = nn.Conv2d(2, 2, 1)
        self.upsampled_first = upsampled_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        coarse = self.upsample(self.conv(F.avg_pool2d(x, 2)))  # 1×1: equivariant, coarse
        if self.upsampled_first:  # the operand order must not matter
            return torch.tanh(coarse + x) * x
        return torch.tanh(x + coarse) * x


def _error(model: nn.Module, x: torch.Tensor, group: str) -> float:
    model = model.double()
    x = x.double()
    flips = (False, True) if group == "d4" else (False,)
    with torch.no_grad():
        y = model(x)
        return max(
            relative_error(
                model(torch.rot90(torch.flip(x, (-1,)) if f else x, k, (-2, -1))),
                torch.rot90(torch.flip(y, (-1,)) if f else y, k, (-2, -1)),
            )
            for k in range(4)
            for f in flips
        )


@pytest.mark.parametrize("group", ["c4", "d4"])
@pytest.mark.parametrize("upsample", [_repeat, _interpolate, _expand], ids=lambda f: f.__name__)
@pytest.mark.parametrize("upsampled_first", [False, True], ids=["skip-first", "upsampled-first"])
def test_skip_connection_over_nearest_upsampling_is_certified(
    upsample: Callable[[torch.Tensor], torch.Tensor], group: str, upsampled_first: bool
) -> None:
    torch.manual_seed(0)
    model = _Skip(upsample, upsampled_first)
    x = torch.randn(2, 2, 8, 8)
    cert = certify(model, x, group, verify=True)
    assert cert.status == "certified" and cert.verdict == Status.EQUIVARIANT, cert.reason
    assert _error(model, x, group) < 1e-12


@pytest.mark.parametrize("upsample", [_rolled, _uneven, _shifted_cells], ids=lambda f: f.__name__)
def test_upsampling_that_does_not_commute_is_never_certified(
    upsample: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    torch.manual_seed(0)
    model = _Skip(upsample)
    x = torch.randn(2, 2, 8, 8)
    assert certify(model, x, "c4").status != "certified"
    assert _error(model, x, "c4") > 1e-3


class _UpsampledOutput(nn.Module):
    """The network's output is itself an up-sampled map (a dense head's last step)."""

    def __init__(self, shift: int = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.roll(_repeat(self.conv(F.avg_pool2d(x, 2))), self.shift, -1)


def test_an_upsampled_output_is_recognised_as_a_grid_field() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 2, 8, 8)
    cert = certify(_UpsampledOutput(), x, "d4", verify=True)
    assert cert.status == "certified" and cert.verdict == Status.EQUIVARIANT, cert.reason
    assert _error(_UpsampledOutput(), x, "d4") < 1e-12
    assert certify(_UpsampledOutput(shift=1), x, "d4").status != "certified"
    assert _error(_UpsampledOutput(shift=1), x, "d4") > 1e-3


class _Decoder(nn.Module):
    """A U-Net decoder step: up-sample, a non-linearity, concatenate with the skip, a
    convolution (D4-symmetric 3×3 kernel, circular padding) — or the same with the
    up-sampled path shifted by one pixel."""

    def __init__(self, shift: int = 0) -> None:
        super().__init__()
        self.down = nn.Conv2d(2, 4, 1)
        self.fuse = nn.Conv2d(6, 2, 1)
        self.shift = shift
        centre, edge, corner = torch.randn(3, 2, 2, 1, 1)  # exactly D4-symmetric 3×3 kernels
        pattern = torch.tensor([[2, 1, 2], [1, 0, 1], [2, 1, 2]])
        symmetric = torch.where(pattern == 0, centre, torch.where(pattern == 1, edge, corner))
        self.register_buffer("smooth", symmetric)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = F.interpolate(self.down(F.avg_pool2d(x, 2)), scale_factor=2, mode="nearest")
        up = torch.roll(torch.relu(up), self.shift, -1)
        z = self.fuse(torch.cat([x, up], 1))
        return F.conv2d(F.pad(z, (1, 1, 1, 1), mode="circular"), self.smooth)


def test_a_unet_decoder_is_certified_through_nonlinearity_concatenation_and_convolution() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 2, 8, 8)
    cert = certify(_Decoder(), x, "d4", verify=True)
    assert cert.status == "certified" and cert.verdict == Status.EQUIVARIANT, cert.reason
    assert _error(_Decoder(), x, "d4") < 1e-12
    torch.manual_seed(0)
    shifted = _Decoder(shift=1)
    assert certify(shifted, x, "d4").status != "certified"
    assert _error(shifted, x, "d4") > 1e-3
