"""``GroupConvolution``: the lifted-to-lifted layer of a p4 / p4m group CNN, exact for every element."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from groupattn import ConfigurationError, GroupError, ShapeError
from groupattn.actions import LiftedField
from groupattn.check import Status, certify
from groupattn.contracts import contract_of
from groupattn.groups import CyclicGroup, DihedralGroup, RotoTranslationGroup, p4, p4m
from groupattn.nn import GroupConvolution, LiftingConvolution

GROUPS = {
    "C4": CyclicGroup(4),
    "D4": DihedralGroup(4),
    "C2": CyclicGroup(2),
    "D1": DihedralGroup(1),
}


@pytest.mark.parametrize("name", sorted(GROUPS))
@given(
    side=st.integers(5, 8),
    kernel=st.sampled_from([1, 3]),
    dilation=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_equivariant_for_every_element_of_the_roto_translation_group(
    name: str, side: int, kernel: int, dilation: int, seed: int
) -> None:
    point = GROUPS[name]
    torch.manual_seed(seed)
    layer = GroupConvolution(2, 3, kernel, point, dilation=dilation).double()
    with torch.no_grad():
        layer.bias.normal_()
    group = RotoTranslationGroup(point, side)
    field = LiftedField(point)
    x = torch.randn(2, 2, point.order(), side, side, dtype=torch.float64)
    y = layer(x)
    elements = [group.point(h) for h in point.elements()] + [
        group.element(((1, side - 2), h.value)) for h in point.elements()
    ]
    for g in elements:
        torch.testing.assert_close(
            layer(field.act(group, g, x)), field.act(group, g, y), rtol=1e-12, atol=1e-12
        )


def test_c1_is_a_plain_circular_convolution() -> None:
    torch.manual_seed(0)
    layer = GroupConvolution(3, 4, 3, "C1", dilation=2).double()
    x = torch.randn(2, 3, 1, 7, 7, dtype=torch.float64)
    expected = F.conv2d(
        F.pad(x[:, :, 0], (2, 2, 2, 2), mode="circular"),
        layer.weight[:, :, 0],
        layer.bias,
        dilation=2,
    )
    torch.testing.assert_close(layer(x)[:, :, 0], expected)


def test_orientations_are_mixed_by_a_learned_kernel() -> None:
    """Unlike a per-slice map, slice h of the output reads every input slice."""
    torch.manual_seed(1)
    layer = GroupConvolution(1, 1, 1, "C4").double()
    x = torch.zeros(1, 1, 4, 5, 5, dtype=torch.float64)
    x[0, 0, 2] = 1.0  # only input slice 2 is non-zero
    y = layer(x) - layer.bias.view(1, -1, 1, 1, 1)
    assert all(float(y[0, 0, h].abs().max()) > 0 for h in range(4))


@pytest.mark.parametrize(("point", "group"), [("C4", p4(9)), ("D4", p4m(9))])
def test_certified_through_its_body(point: str, group: RotoTranslationGroup) -> None:
    torch.manual_seed(2)
    layer = GroupConvolution(2, 3, 3, point, dilation=2)
    x = torch.randn(2, 2, group.point_group.order(), 9, 9)
    cert = certify(layer, x, group, verify=True)
    assert cert.verdict == Status.EQUIVARIANT, cert.to_text()
    assert cert.verification is not None and cert.verification.equivariant


def test_a_dilated_kernel_on_a_small_torus_is_unverified_not_broken() -> None:
    """Known incompleteness: a dilated 3×3 kernel on a 6×6 torus (receptive field 5 of 6)
    is not followed by the convolution rule; it is exact (the numbers say so), so the
    verdict is unverified — never broken, never a certificate."""
    torch.manual_seed(2)
    layer = GroupConvolution(2, 3, 3, "C4", dilation=2)
    cert = certify(layer, torch.randn(2, 2, 4, 6, 6), p4(6), verify=True)
    assert cert.verdict in (Status.EQUIVARIANT, Status.UNVERIFIED), cert.to_text()
    assert cert.verification is not None and cert.verification.equivariant


def test_contract_breaks_for_a_larger_point_group() -> None:
    layer = GroupConvolution(2, 3, 3, "C4")
    contract = contract_of(layer, p4m(6))
    assert contract.kind == Status.BROKEN and "not D4-equivariant" in (contract.reason or "")
    assert contract_of(layer, p4(6)).kind == Status.EQUIVARIANT


def test_a_lifting_then_group_convolution_network_is_certified() -> None:
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        LiftingConvolution(1, 4, 3, "C4"),
        torch.nn.GELU(),
        GroupConvolution(4, 4, 3, "C4", dilation=2),
    )
    cert = certify(net, torch.randn(2, 1, 8, 8), p4(8), verify=True)
    assert cert.verdict == Status.EQUIVARIANT, cert.to_text()


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: GroupConvolution(2, 3, 2, "C4"),
            ConfigurationError,
            "expected an odd kernel size, got 2",
        ),
        (
            lambda: GroupConvolution(0, 3, 3, "C4"),
            ConfigurationError,
            "expected in_channels as an int >= 1, got 0",
        ),
        (
            lambda: GroupConvolution(2, 3, 3, "C4", dilation=0),
            ConfigurationError,
            "expected dilation",
        ),
        (
            lambda: GroupConvolution(2, 3, 3, "C8"),
            GroupError,
            "expected a point group acting exactly on the grid",
        ),
    ],
)
def test_bad_configuration_names_the_module(make: object, error: type, message: str) -> None:
    with pytest.raises(error, match=f"GroupConvolution: {message}"):
        make()  # type: ignore[operator]


def test_bad_inputs_name_the_module_and_the_shapes() -> None:
    layer = GroupConvolution(2, 3, 3, "C4", dilation=2)
    with pytest.raises(
        ShapeError,
        match=r"GroupConvolution: expected a lifted field \(B, C=2, \|C4\|=4, H, W\), got \(1, 2, 8, 6, 6\)",
    ):
        layer(torch.randn(1, 2, 8, 6, 6))
    with pytest.raises(ShapeError, match="expected a square grid for C4, got 6x7"):
        layer(torch.randn(1, 2, 4, 6, 7))
    with pytest.raises(ShapeError, match="expected a grid of at least 2x2"):
        layer(torch.randn(1, 2, 4, 1, 1))
    # a window wider than the grid wraps around the torus: still exact
    small = GroupConvolution(2, 3, 3, "C4", dilation=4).double()
    x = torch.randn(1, 2, 4, 4, 4, dtype=torch.float64)
    field = LiftedField(CyclicGroup(4))
    for g in CyclicGroup(4).elements():
        torch.testing.assert_close(
            small(field.act(CyclicGroup(4), g, x)), field.act(CyclicGroup(4), g, small(x))
        )
