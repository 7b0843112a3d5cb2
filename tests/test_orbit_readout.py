"""``OrbitPooledLinear``: an invariant read-out that keeps the relative orientation of channels."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn import DtypeError, GroupError, ShapeError
from groupattn.actions import InvariantField, LiftedField
from groupattn.contracts import Status, contract_of
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    PointGroup,
    TorusTranslations,
    p4,
    p4m,
)
from groupattn.nn import GroupGlobalPool, GroupLayerNorm, GroupMLP, GroupPooling, OrbitPooledLinear
from groupattn.testing import assert_equivariant

POINT_GROUPS = [CyclicGroup(1), CyclicGroup(2), CyclicGroup(4), DihedralGroup(2), DihedralGroup(4)]


def _naive(layer: OrbitPooledLinear, x: torch.Tensor) -> torch.Tensor:
    """The definition: the linear map on every turned copy of the pooled features, then the max."""
    pg = layer.point_group
    field = LiftedField(pg)
    pooled = x.amax(dim=(-2, -1)) if layer.spatial == "max" else x.mean(dim=(-2, -1))
    candidates = []
    for g in pg.elements():
        turned = pooled.index_select(2, field.group_axis_permutation(pg, g))  # (g·v)(k) = v(g⁻¹k)
        candidates.append(torch.einsum("bck,ock->bo", turned, layer.weight.to(x.dtype)))
    out = torch.stack(candidates, -1).amax(-1)
    return out if layer.bias is None else out + layer.bias.to(x.dtype)


@settings(max_examples=12)
@given(
    group_index=st.integers(0, len(POINT_GROUPS) - 1),
    batch=st.integers(1, 3),
    channels=st.integers(1, 4),
    out_dim=st.integers(1, 5),
    size=st.integers(1, 6),
    spatial=st.sampled_from(["max", "mean"]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_its_definition_and_is_exactly_invariant_under_every_element(
    group_index: int,
    batch: int,
    channels: int,
    out_dim: int,
    size: int,
    spatial: str,
    bias: bool,
    seed: int,
) -> None:
    pg = POINT_GROUPS[group_index]
    torch.manual_seed(seed)
    layer = OrbitPooledLinear(channels, out_dim, pg, spatial=spatial, bias=bias).double()
    x = torch.randn(batch, channels, pg.order(), size, size, dtype=torch.float64)
    torch.testing.assert_close(layer(x), _naive(layer, x), rtol=1e-12, atol=1e-12)
    # every element of H: with a spatial max the candidates are the same floats in another
    # order; a spatial mean sums the turned grid in another order (float64 tolerance)
    assert_equivariant(layer, x, pg, elements=pg.elements(), exact=spatial == "max")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("point_group", [CyclicGroup(4), DihedralGroup(4)], ids=repr)
def test_exact_under_p4_and_p4m_in_every_dtype(point_group: PointGroup, dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    layer = OrbitPooledLinear(3, 4, point_group).to(dtype)
    x = torch.randn(2, 3, point_group.order(), 6, 6).to(dtype)
    full = p4(6) if isinstance(point_group, CyclicGroup) else p4m(6)
    elements = [full.point(h) for h in point_group.elements()] + full.sample(6, seed=4)
    assert layer(x).dtype == dtype
    assert_equivariant(layer, x, point_group, elements=point_group.elements(), exact=True)
    assert_equivariant(layer, x, full, elements=elements, exact=True)


def test_keeps_the_relative_orientation_that_group_pooling_forgets() -> None:
    """Two channels responding at the same orientation, or a quarter turn apart: the
    per-channel max over the group axis cannot tell them apart, the orbit read-out can."""
    x_aligned = torch.zeros(1, 2, 4, 3, 3, dtype=torch.float64)
    x_aligned[0, 0, 0, 1, 1] = 1.0
    x_aligned[0, 1, 0, 1, 1] = 1.0
    x_turned = x_aligned.clone()
    x_turned[0, 1, 0, 1, 1] = 0.0
    x_turned[0, 1, 1, 1, 1] = 1.0
    pool = GroupGlobalPool("C4", "max", spatial="max")
    torch.testing.assert_close(pool(x_aligned), pool(x_turned), rtol=0, atol=0)
    layer = OrbitPooledLinear(2, 1, "C4", bias=False).double()
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[0, 0, 0] = 1.0
        layer.weight[0, 1, 0] = 1.0  # "both channels at the same orientation"
    assert layer(x_aligned).item() == 2.0
    assert layer(x_turned).item() == 1.0


def test_on_the_trivial_group_it_is_a_linear_layer_on_pooled_features() -> None:
    torch.manual_seed(2)
    layer = OrbitPooledLinear(5, 3, "C1").double()
    linear = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        linear.weight.copy_(layer.weight[:, :, 0])
        linear.bias.copy_(layer.bias)  # type: ignore[arg-type]
    x = torch.randn(4, 5, 1, 7, 7, dtype=torch.float64)
    torch.testing.assert_close(layer(x), linear(x.amax(dim=(2, 3, 4))), rtol=1e-12, atol=1e-12)


def test_shifted_and_turned_inputs_are_distinguished_only_up_to_the_group() -> None:
    """Negative: a reflection is not in C4, so the C4 read-out must tell a reflected input
    apart (with generic weights), while the D4 read-out must not."""
    torch.manual_seed(3)
    x = torch.randn(2, 3, 8, 5, 5, dtype=torch.float64)
    d4 = DihedralGroup(4)
    reflection = d4.make(0, reflection=True)
    moved = LiftedField(d4).act(d4, reflection, x)
    d4_layer = OrbitPooledLinear(3, 4, d4).double()
    torch.testing.assert_close(d4_layer(moved), d4_layer(x), rtol=0, atol=0)
    # the same features read as two C4 fields of 4 orientations each: the reflection
    # exchanges them, which no quarter turn does
    c4_layer = OrbitPooledLinear(3, 4, "C4").double()
    as_c4 = x.reshape(2, 3, 2, 4, 5, 5)[:, :, 0]
    moved_c4 = moved.reshape(2, 3, 2, 4, 5, 5)[:, :, 0]
    assert (c4_layer(moved_c4) - c4_layer(as_c4)).abs().max() > 1e-3


def test_gradients_reach_the_weight_and_bias() -> None:
    torch.manual_seed(4)
    layer = OrbitPooledLinear(3, 4, "D4")
    x = torch.randn(2, 3, 8, 4, 4, requires_grad=True)
    layer(x).sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    assert layer.bias is not None and layer.bias.grad is not None
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_contract() -> None:
    layer = OrbitPooledLinear(3, 4, "C4")
    for group in (CyclicGroup(4), CyclicGroup(2), p4(6), TorusTranslations(6, 6)):
        contract = contract_of(layer, group)
        assert contract.kind == Status.INVARIANT, (group, contract.describe())
        assert contract.output_type == InvariantField()
    # a reflection or an eighth turn is not an element of C4: nothing is promised
    for group in (DihedralGroup(4), p4m(6), CyclicGroup(8)):
        assert contract_of(layer, group).kind == Status.UNVERIFIED, group


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 0}, "expected dim as an int >= 1, got 0"),
        ({"dim": True}, "expected dim as an int >= 1, got True"),
        ({"out_dim": 0}, "expected out_dim as an int >= 1, got 0"),
        ({"out_dim": 2.0}, "expected out_dim as an int >= 1, got 2.0"),
        ({"spatial": "median"}, "expected spatial pooling 'mean' or 'max', got 'median'"),
        ({"point_group": "Q7"}, "OrbitPooledLinear"),
    ],
)
def test_bad_configuration_names_the_module(kwargs: dict, message: str) -> None:
    arguments = {"dim": 2, "out_dim": 3, "point_group": "C4", **kwargs}
    with pytest.raises(GroupError, match=message):
        OrbitPooledLinear(**arguments)


def test_bad_input_names_the_module() -> None:
    layer = OrbitPooledLinear(2, 3, "C4")
    with pytest.raises(DtypeError, match="OrbitPooledLinear: expected a floating-point input"):
        layer(torch.zeros(1, 2, 4, 3, 3, dtype=torch.int64))
    with pytest.raises(ShapeError, match=r"OrbitPooledLinear: expected a lifted field"):
        layer(torch.zeros(1, 2, 8, 3, 3))


def test_edge_inputs_are_refused_by_name() -> None:
    """Attack round 9: an empty grid, a weight/input dtype mismatch and a non-bool bias."""
    layer = OrbitPooledLinear(3, 2, "C4")
    for spatial in ("max", "mean"):
        with pytest.raises(
            ShapeError, match="OrbitPooledLinear: expected a lifted field over a non-empty"
        ):
            OrbitPooledLinear(3, 2, "C4", spatial=spatial)(torch.zeros(2, 3, 4, 0, 6))
    with pytest.raises(
        DtypeError,
        match=r"OrbitPooledLinear: expected an input of the weights' dtype torch\.float32",
    ):
        layer(torch.zeros(1, 3, 4, 2, 2, dtype=torch.float64))
    with pytest.raises(DtypeError, match=r"weights' dtype torch\.float64"):
        layer.double()(torch.zeros(1, 3, 4, 2, 2))
    with pytest.raises(GroupError, match="OrbitPooledLinear: expected bias as a bool, got 'no'"):
        OrbitPooledLinear(3, 2, "C4", bias="no")  # type: ignore[arg-type]
    # under autocast the weights follow the input's dtype (as the autocast ops do)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = OrbitPooledLinear(3, 2, "C4")(torch.randn(1, 3, 4, 2, 2).bfloat16())
    assert out.dtype == torch.bfloat16


def test_contract_refuses_another_input_type() -> None:
    """Attack round 9: asked about a lifted field of another point group of the same order,
    the contract promises nothing."""
    layer = OrbitPooledLinear(2, 3, "C4")
    other = contract_of(layer, CyclicGroup(2), LiftedField(DihedralGroup(2)))
    assert other.kind == Status.UNVERIFIED
    assert "expected input type" in (other.reason or "")
    assert contract_of(layer, CyclicGroup(2), LiftedField(CyclicGroup(4))).kind == Status.INVARIANT


@pytest.mark.parametrize(
    "layer",
    [
        lambda: GroupGlobalPool("C4"),
        lambda: GroupPooling("C4"),
        lambda: GroupLayerNorm(2, "C4"),
        lambda: GroupMLP(2, 4, "C4"),
        lambda: OrbitPooledLinear(2, 3, "C4"),
    ],
    ids=["GroupGlobalPool", "GroupPooling", "GroupLayerNorm", "GroupMLP", "OrbitPooledLinear"],
)
def test_lifted_layers_promise_nothing_for_another_lifted_type(layer: Any) -> None:
    """Attack round 9 (generalised): a C4 layer asked about the lifted field of D2 (also
    four elements, whose group axis a half turn moves differently) promises nothing; asked
    about its own lifted field it keeps its promise."""
    module = layer()
    other = contract_of(module, CyclicGroup(2), LiftedField(DihedralGroup(2)))
    assert other.kind == Status.UNVERIFIED, other.describe()
    assert "expected input type" in (other.reason or "")
    own = contract_of(module, CyclicGroup(2), LiftedField(CyclicGroup(4)))
    assert own.kind in (Status.EQUIVARIANT, Status.INVARIANT), own.describe()
