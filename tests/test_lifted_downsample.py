"""Anchored (polyphase) down-sampling of lifted fields keeps p4 / p4m equivariance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GridField, InvariantField
from groupattn.check import Status, certify
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    GroupError,
    RotoTranslationGroup,
    TorusTranslations,
    p4,
    p4m,
)
from groupattn.nn import (
    GroupBlock,
    GroupGlobalPool,
    LiftedAvgPool,
    LiftedPolyphaseDownsample,
    LiftingConvolution,
)
from groupattn.testing import assert_equivariant, equivariance_error


def _network(point_group: str, pool: torch.nn.Module) -> torch.nn.Sequential:
    """Lift → group block → stride-2 down-sampling → group block → invariant pooling."""
    return torch.nn.Sequential(
        LiftingConvolution(1, 4, 3, point_group),
        GroupBlock(4, point_group, num_heads=1, neighbourhood=3),
        pool,
        GroupBlock(4, point_group, num_heads=1, neighbourhood=3),
        GroupGlobalPool(point_group, "max", "max"),
    )


@settings(max_examples=10)
@given(
    point_group=st.sampled_from(["C4", "D4"]),
    side=st.sampled_from([4, 6, 8]),
    channels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_downsample_is_equivariant_up_to_a_coarse_frame(
    point_group: str, side: int, channels: int, seed: int
) -> None:
    torch.manual_seed(seed)
    down = LiftedPolyphaseDownsample(point_group, 2, image_size=(side, side))
    order = down.point_group.order()
    x = torch.randn(2, channels, order, side, side, dtype=torch.float64)
    # every element of the point group (about the centre), and roto-translations of the torus
    assert_equivariant(down, x, down.point_group, exact=True)
    full = p4(side) if point_group == "C4" else p4m(side)
    assert_equivariant(
        down,
        x,
        full,
        elements=[*full.sample(4, seed=seed), full.translation((1, side - 1))],
        exact=True,
    )
    assert_equivariant(
        down, x, TorusTranslations(side, side), elements=[(1, 0), (0, 1), (1, 1)], exact=True
    )


@pytest.mark.parametrize(("point_group", "group"), [("C4", p4(8)), ("D4", p4m(8))])
def test_network_with_anchored_downsampling_is_exactly_invariant(
    point_group: str, group: RotoTranslationGroup
) -> None:
    torch.manual_seed(0)
    network = _network(point_group, LiftedPolyphaseDownsample(point_group, 2)).double().eval()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    pg = group.point_group
    elements = (
        [group.point(h) for h in pg.elements()]
        + group.sample(6, seed=1)
        + [group.translation((1, 0))]
    )
    assert_equivariant(
        network, x, group, elements=elements, input_type=GridField(), output_type=InvariantField()
    )
    certificate = certify(network.float(), x.float(), group, verify=True)
    assert certificate.verdict == Status.INVARIANT
    without_head = certify(torch.nn.Sequential(*list(network)[:-1]), x.float(), group)
    # without the invariant head the output moves only up to the frame the down-sampling chose
    assert without_head.verdict == Status.UNVERIFIED and "left in frame" in (
        without_head.reason or ""
    )
    assert without_head.outputs[0].frame is not None


def test_strided_average_pooling_breaks_where_anchoring_does_not() -> None:
    """The same network with plain stride-2 pooling is not translation-invariant, and the checker says so."""
    torch.manual_seed(0)
    network = _network("C4", LiftedAvgPool("C4", 2)).double().eval()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    report = equivariance_error(
        network,
        x,
        p4(8),
        elements=[p4(8).translation((1, 0))],
        input_type=GridField(),
        output_type=InvariantField(),
    )
    assert report.max_error > 1e-3
    certificate = certify(network.float(), x.float(), p4(8))
    assert certificate.verdict == Status.BROKEN
    assert certificate.first_break is not None
    assert type(network.get_submodule(certificate.first_break.node)).__name__ == "LiftedAvgPool"


def test_downsample_contracts_and_errors() -> None:
    down = LiftedPolyphaseDownsample("D4", 2)
    torus = down.contract(TorusTranslations(8, 8))
    assert torus.kind == Status.CANONICALIZING and torus.output_group == TorusTranslations(4, 4)
    rotations = down.contract(p4m(8))
    assert rotations.kind == Status.CANONICALIZING and rotations.output_group == p4m(4)
    assert down.contract(p4(8)).output_group == p4(4)  # a subgroup acts through D4
    assert (
        down.contract(CyclicGroup(4)).kind == Status.UNVERIFIED
    )  # a bare point group carries no grid size
    sized = LiftedPolyphaseDownsample("C4", 2, image_size=(8, 8))
    assert sized.contract(CyclicGroup(4)).output_group == p4(4)
    assert sized.contract(DihedralGroup(4)).kind == Status.UNVERIFIED  # reflections are not in C4
    with pytest.raises(
        GroupError, match="LiftedPolyphaseDownsample: expected a point group acting exactly"
    ):
        LiftedPolyphaseDownsample("C8")
    with pytest.raises(
        GroupError, match=r"LiftedPolyphaseDownsample: expected a lifted field \(B, C, \|C4\|=4"
    ):
        sized(torch.zeros(1, 2, 8, 8, 8))
    with pytest.raises(
        GroupError,
        match="LiftedPolyphaseDownsample: expected a grid divisible by stride 2, got 6x5",
    ):
        sized(torch.zeros(1, 2, 4, 6, 5))
