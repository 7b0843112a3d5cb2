"""The test utilities themselves: equivariance_error, assert_equivariant, fixtures, strategies."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.actions import GridField, InvariantField, LiftedField, SetField, TokenField
from groupattn.contracts import Contract
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    GridTranslations,
    GroupError,
    TorusTranslations,
    p4,
    p4m,
)
from groupattn.testing import (
    EquivarianceReport,
    assert_equivariant,
    default_tolerance,
    equivariance_error,
    relative_error,
)
from groupattn.testing.strategies import finite_groups, group_elements, signals, spatial_groups

C4, D4 = CyclicGroup(4), DihedralGroup(4)


class PointwiseSquare(torch.nn.Module):
    """Equivariant to every spatial group: acts on each pixel alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x + 0.5 * x

    def contract(self, group, input_type=None) -> Contract:
        return Contract.equivariant(GridField(), GridField())


class GlobalMean(torch.nn.Module):
    """Invariant: the mean over space."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(-2, -1))

    def contract(self, group, input_type=None) -> Contract:
        return Contract.invariant(GridField())


class AbsolutePosition(torch.nn.Module):
    """Breaks every spatial symmetry: adds a non-symmetric positional ramp."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        ramp = torch.arange(h * w, dtype=x.dtype).reshape(h, w) / (h * w)
        return x + ramp

    def contract(self, group, input_type=None) -> Contract:
        return Contract.breaks(
            "absolute positional ramp is not translation-invariant", GridField(), GridField()
        )


class ShiftToMax(torch.nn.Module):
    """Canonicalizing under translations: rolls the largest pixel to the origin."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = int(x[0, 0].flatten().argmax())
        w = x.shape[-1]
        return torch.roll(x, shifts=(-(idx // w), -(idx % w)), dims=(-2, -1))

    def contract(self, group, input_type=None) -> Contract:
        return Contract.canonicalizing(GridField(), GridField())


def test_equivariance_error_reports_every_element(float_dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 6, 6, dtype=float_dtype)
    report = equivariance_error(PointwiseSquare(), x, D4)
    assert isinstance(report, EquivarianceReport)
    assert set(report.errors) == set(D4.elements())
    assert report.max_error == 0.0  # pure permutation of the same arithmetic
    assert report.dtype == float_dtype and report.contract is not None
    invariant = assert_equivariant(GlobalMean(), x, p4(6), exact=False)
    assert invariant.max_error <= default_tolerance(float_dtype)
    infinite = equivariance_error(PointwiseSquare(), x, GridTranslations())
    assert len(infinite.errors) == 8


def test_broken_function_fails_with_a_message_naming_the_worst_element(
    float_dtype: torch.dtype,
) -> None:
    x = torch.randn(1, 1, 5, 5, dtype=float_dtype)
    torus = TorusTranslations(5, 5)
    report = equivariance_error(AbsolutePosition(), x, torus)
    assert report.errors[torus.identity()] == 0.0
    assert report.max_error > 1e-2
    worst = report.worst_element
    assert worst is not None and report.errors[worst] == report.max_error
    with pytest.raises(
        AssertionError,
        match=rf"AbsolutePosition is not equivariant under T\(5x5\) in {float_dtype}: worst element T\(5x5\)\[\(\d, \d\)\] with relative error .* > tolerance",
    ) as info:
        assert_equivariant(AbsolutePosition(), x, torus)
    assert repr(worst) in str(info.value)
    assert "24 of 25 elements fail" in str(info.value)


def test_actions_are_applied_in_float64_and_inputs_cast_back(float_dtype: torch.dtype) -> None:
    seen: list[torch.dtype] = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.dtype)
        return x

    x = torch.randn(1, 2, 4, 4, dtype=float_dtype)
    report = equivariance_error(record, x, C4, input_type=GridField(), output_type=GridField())
    assert set(seen) == {float_dtype} and report.max_error == 0.0


def test_elements_subset_tolerance_and_exact() -> None:
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    report = equivariance_error(PointwiseSquare(), x, p4m(4), elements=[((1, 0), 0), ((0, 0), 5)])
    assert len(report.errors) == 2
    broken = equivariance_error(AbsolutePosition(), x, C4)
    assert_equivariant(AbsolutePosition(), x, C4, tolerance=broken.max_error * 1.01)
    with pytest.raises(AssertionError):
        assert_equivariant(AbsolutePosition(), x, C4, tolerance=broken.max_error * 0.99)
    with pytest.raises(AssertionError, match=r"tolerance 0\.0e\+00"):
        assert_equivariant(
            lambda t: t + 1e-13 * torch.rand_like(t),
            x,
            C4,
            exact=True,
            input_type=GridField(),
            output_type=GridField(),
        )


def test_up_to_frame_for_canonicalizing_contracts() -> None:
    x = torch.randn(1, 1, 5, 5, dtype=torch.float64)
    torus = TorusTranslations(5, 5)
    report = equivariance_error(ShiftToMax(), x, torus)
    assert report.max_error == 0.0  # equal to g'·f(x) for some g'
    strict = equivariance_error(ShiftToMax(), x, torus, up_to_frame=False)
    assert strict.max_error > 0.1
    with pytest.raises(GroupError, match="finite group to compare up to frame"):
        equivariance_error(ShiftToMax(), x, GridTranslations())


def test_missing_types_and_bad_outputs_raise() -> None:
    x = torch.randn(1, 1, 4, 4)
    with pytest.raises(
        GroupError, match="expected function to declare input and output field types for C4"
    ):
        equivariance_error(lambda t: t, x, C4)
    with pytest.raises(GroupError, match="expected the function to return a tensor, got str"):
        equivariance_error(lambda t: "no", x, C4, input_type=GridField(), output_type=GridField())
    with pytest.raises(
        GroupError, match=r"relative_error: expected equal shapes, got \(2,\) and \(3,\)"
    ):
        relative_error(torch.zeros(2), torch.zeros(3))


def test_relative_error_and_default_tolerance() -> None:
    assert relative_error(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])) == 0.0
    assert relative_error(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 2.0])) == pytest.approx(0.5)
    assert default_tolerance(torch.float64) == 1e-10
    assert default_tolerance(torch.float32) == 1e-5


def test_float_dtype_fixture_runs_both_precisions(
    float_dtype: torch.dtype, request: pytest.FixtureRequest
) -> None:
    assert float_dtype in (torch.float32, torch.float64)
    assert request.node.callspec.id in {"float32", "float64"}
    assert str(float_dtype).endswith(request.node.callspec.id)


@settings(max_examples=10)
@given(data=st.data())
def test_signals_strategy_shapes(data: st.DataObject) -> None:
    d4 = DihedralGroup(4)
    fields = [
        GridField(),
        LiftedField(d4),
        TokenField(grid=(3, 3), point_group=d4, prefix=1),
        SetField(5),
        InvariantField(),
    ]
    field = data.draw(st.sampled_from(fields))
    x = data.draw(signals(field, batch=2, channels=3, size=(2, 4), dtype=torch.float32))
    assert x.dtype == torch.float32 and x.shape[0] == 2
    if isinstance(field, GridField):
        assert (
            x.dim() == 4 and x.shape[1] == 3 and x.shape[2] == x.shape[3] and 2 <= x.shape[2] <= 4
        )
    elif isinstance(field, LiftedField):
        assert x.shape[1:3] == (3, 8)
    elif isinstance(field, TokenField):
        assert x.shape[1:] == (field.num_tokens, 3)
    elif isinstance(field, SetField):
        assert x.shape[1:] == (5, 3)
    else:
        assert x.shape == (2, 3)
    field.check(x)


@settings(max_examples=10)
@given(group=spatial_groups(4), data=st.data())
def test_spatial_groups_and_elements_strategies(group, data: st.DataObject) -> None:
    g = data.draw(group_elements(group))
    assert g.group == group
    x = data.draw(signals(GridField(), size=4))
    assert GridField().act(group, g, x).shape == x.shape
    assert isinstance(data.draw(finite_groups(max_order=8)).order(), int)


def test_signals_rejects_unknown_field_types() -> None:
    from groupattn.actions import FieldType

    class Custom(FieldType):
        pass

    @settings(max_examples=1)
    @given(signals(Custom()))
    def inner(x: torch.Tensor) -> None:
        pass

    with pytest.raises(TypeError, match="expected a built-in field type, got Custom"):
        inner()
