"""``verify``: every output, any finite group, ties and non-finite input told apart from errors."""

from __future__ import annotations

import random
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from torch import nn

from groupattn.actions import FieldType, GridField, InvariantField, SetField
from groupattn.canonical import polyphase_anchor, record_canonicalizations
from groupattn.check import (
    Certificate,
    DetailedVerificationReport,
    Status,
    VerificationBudgetError,
    attach_verification,
    certify,
    estimate_verification,
    verify,
)
from groupattn.groups import (
    CyclicGroup,
    DirectProduct,
    FiniteGroup,
    GroupElement,
    GroupError,
    PermutationGroup,
    SymmetricGroup,
    TorusTranslations,
)
from groupattn.nn import PatchEmbedding
from groupattn.testing import representative_elements
from groupattn.testing.strategies import group_elements


def circ(c: int) -> nn.Conv2d:
    return nn.Conv2d(c, c, 3, padding=1, padding_mode="circular")


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
T8 = TorusTranslations(8, 8)


# ---------------------------------------------------------------- all outputs
class TwoOutputs(nn.Module):
    """An invariant first output and an absolutely positioned second one."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = circ(3)
        self.pos = nn.Parameter(torch.randn(1, 3, 8, 8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(x)
        return x.mean((2, 3)), x + self.pos


class DictOutputs(TwoOutputs):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        x = self.conv(x)
        return {"logits": x.mean((2, 3)), "map": x + self.pos, "steps": 3}  # type: ignore[dict-item]


class GoodDict(TwoOutputs):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        x = self.conv(x)
        return {"logits": x.mean((2, 3)), "map": torch.relu(x)}


def test_every_output_is_checked_and_the_second_one_is_caught() -> None:
    torch.manual_seed(0)
    report = verify(TwoOutputs(), X, T8)
    assert isinstance(report, DetailedVerificationReport)
    by_path = {o.path: o for o in report.outputs}
    assert set(by_path) == {"[0]", "[1]"}
    assert by_path["[0]"].max_error < 1e-12
    assert by_path["[1]"].max_error > 1e-3 and report.max_error == by_path["[1]"].max_error
    assert report.refuted and not report.equivariant
    assert any(line.startswith("output[1]: max relative error") for line in report.lines())


def test_a_certificate_refuted_on_any_output_is_not_certified() -> None:
    torch.manual_seed(0)
    cert = certify(TwoOutputs(), X, T8, verify=True)
    assert not cert.certified
    if cert.disagreements:  # the checker certified it: the numbers demote it
        assert cert.verdict == Status.UNVERIFIED and "output[1]" in cert.disagreements[0]
    json = cert.to_json()
    assert json["verification"]["outputs"][1]["path"] == "[1]" and json["verification"]["refuted"]


def test_dict_outputs_are_reported_per_key() -> None:
    torch.manual_seed(0)
    report = verify(DictOutputs(), X, T8)
    by_path = {o.path: o for o in report.outputs}
    assert by_path["['logits']"].max_error < 1e-12
    assert by_path["['map']"].max_error > 1e-3
    assert (
        by_path["['steps']"].skipped is not None and "not a tensor" in by_path["['steps']"].skipped
    )
    good = verify(GoodDict(), X, T8)
    assert good.equivariant and not good.refuted and len(good.compared) == 2


def test_output_types_per_path_and_from_a_certificate_with_outputs() -> None:
    torch.manual_seed(0)
    model = TwoOutputs()
    # the second output is declared invariant: wrong, and measured so
    report = verify(model, X, T8, output_type={"[0]": InvariantField(), "[1]": InvariantField()})
    assert [o.source for o in report.outputs] == ["argument", "argument"]
    assert report.outputs[1].max_error > 1e-3

    @dataclass
    class Entry:
        path: str
        verdict: Status
        field_type: FieldType | None
        output_group: Any = None
        frame: str | None = None

    cert = Certificate(Status.EQUIVARIANT, T8, GridField())
    cert.outputs = [  # type: ignore[attr-defined]
        Entry("[0]", Status.INVARIANT, InvariantField()),
        Entry("[1]", Status.EQUIVARIANT, GridField()),
    ]
    attach_verification(cert, model, X, None)
    assert cert.verification is not None
    assert [o.source for o in cert.verification.outputs] == ["certificate", "certificate"]  # type: ignore[attr-defined]
    assert cert.verdict == Status.UNVERIFIED and not cert.certified
    assert "certified equivariant" in cert.disagreements[0] and "output[1]" in cert.disagreements[0]


# ---------------------------------------------------------------- any finite group
class DeepSets(nn.Module):
    """Permutation-equivariant on tokens (B, N, C)."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(c, c), nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.a(x) + self.b(x.mean(1, keepdim=True))
        return y, y.sum(1)


class PositionalSets(DeepSets):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.a(x) + torch.linspace(0, 1, x.shape[1])[None, :, None]
        return y, y.sum(1)


def test_symmetric_group_of_20_points_without_enumerating_it() -> None:
    torch.manual_seed(0)
    s20 = SymmetricGroup(20)
    x = torch.randn(2, 20, 4)
    start = time.perf_counter()
    good = verify(DeepSets(), x, s20, input_type=SetField(20))
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0, elapsed  # about 0.01 s
    assert good.equivariant and len(good.errors) == 6  # 2 generators + 4 samples
    assert [o.description.startswith("set") for o in good.outputs] == [True, False]
    bad = verify(PositionalSets(), x, s20, input_type=SetField(20))
    assert bad.refuted and bad.outputs[0].max_error > 1e-3 and bad.outputs[1].max_error < 1e-12
    assert s20._elements_cache is None  # never listed


def test_permutation_group_on_tokens_through_a_gset() -> None:
    torch.manual_seed(0)
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")
    x = torch.randn(3, 6, 4)
    report = verify(DeepSets(), x, hexagon, input_type=SetField(6))
    assert len(report.errors) == 12 and report.equivariant  # order 12 <= 16: every element
    assert verify(PositionalSets(), x, hexagon, input_type=SetField(6)).refuted


def test_product_group_through_a_gset_field() -> None:
    from groupattn import actions

    group = DirectProduct(CyclicGroup(4), CyclicGroup(2))
    cylinder = actions.GSet(
        group,
        8,
        lambda g: [
            2 * ((i + g.value[0]) % 4) + (k + g.value[1]) % 2 for i in range(4) for k in range(2)
        ],
    )
    field = actions.GSetField(cylinder)
    x = torch.randn(2, 8, 4)
    report = verify(DeepSets(), x, group, input_type=field)
    assert len(report.errors) == 8 and report.equivariant
    assert verify(PositionalSets(), x, group, input_type=field).refuted


class HugeCyclic(FiniteGroup):
    """A user's group: Z_n for a huge n. Listing its elements fails the test."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.name = f"Z{n}"

    def key(self) -> Hashable:
        return ("HugeCyclic", self.n)

    def _identity(self) -> int:
        return 0

    def _compose(self, a: int, b: int) -> int:
        return (a + b) % self.n

    def _inverse(self, a: int) -> int:
        return (-a) % self.n

    def _validate(self, value: Any) -> int:
        return int(value) % self.n

    def generators(self) -> list[GroupElement]:
        return [GroupElement(self, 1)]

    def _enumerate(self) -> list[Any]:
        raise AssertionError(f"{self.name} must never be enumerated")


@dataclass(frozen=True)
class RollTokens(FieldType):
    """A user's field type: Z_n acts on N | n tokens by cyclic shifts."""

    num_tokens: int = 10

    def act(self, group: Any, g: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.roll(x, int(group.element(g).value) % self.num_tokens, dims=1)

    def check(self, x: torch.Tensor, module: str = "RollTokens") -> None:
        if x.dim() != 3 or x.shape[1] != self.num_tokens:
            raise GroupError(f"{module}: expected (B, {self.num_tokens}, C), got {tuple(x.shape)}")


class CircularMix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3, padding=1, padding_mode="circular")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


def test_a_users_finite_group_subclass_is_never_enumerated() -> None:
    torch.manual_seed(0)
    group = HugeCyclic(10**6)
    elements = representative_elements(group)
    assert elements[0] == group.generators()[0] and len(elements) >= 4
    x = torch.randn(2, 10, 4)
    report = verify(CircularMix(), x, group, input_type=RollTokens(10))
    assert report.equivariant and report.outputs[0].source == "guess"
    broken = nn.Sequential(nn.Conv1d(10, 10, 1))  # mixes the token axis
    assert verify(broken, x, group, input_type=RollTokens(10)).refuted


@settings(max_examples=25, deadline=None)
@given(st_data=group_elements(HugeCyclic(10**9)))
def test_strategies_draw_elements_of_large_groups_without_enumerating(
    st_data: GroupElement,
) -> None:
    assert 0 <= st_data.value < 10**9


@settings(max_examples=10, deadline=None)
@given(g=group_elements(SymmetricGroup(20)))
def test_strategies_draw_permutations_of_s20(g: GroupElement) -> None:
    assert sorted(g.value) == list(range(20))


# ---------------------------------------------------------------- ties and non-finite input
def _patch_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(PatchEmbedding(1, 4, 2, (4, 4)), nn.Linear(4, 4))


def test_ties_inside_patch_embedding_are_reported() -> None:
    report = verify(_patch_net(), torch.ones(2, 1, 4, 4), TorusTranslations(4, 4))
    assert len(report.ties) == 1 and report.ties[0].startswith(
        "0"
    )  # located in the embedding (module "0")
    assert "tied sample(s) over all evaluations" in report.ties[0]
    assert set(report.excused) == {0, 1} and "canonicalizer tie in 0" in report.excused[0]
    assert not report.conclusive and not report.refuted


class InlineAnchoredEmbedding(nn.Module):
    """Anchors with the function, inside its forward, and returns only tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(polyphase_anchor(x, 2).output).flatten(2).transpose(1, 2)


def test_ties_of_an_anchoring_hidden_inside_a_module_are_reported() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(InlineAnchoredEmbedding(), nn.Linear(4, 4))
    from groupattn.actions import TokenField

    report = verify(
        model,
        _tied_image(),
        TorusTranslations(4, 4),
        output_type=TokenField((2, 2)),
        output_group=TorusTranslations(2, 2),
        up_to_frame=True,
    )
    assert report.ties == ["0 (InlineAnchoredEmbedding): 17 tied sample(s) over all evaluations"]
    assert set(report.excused) == {0} and report.max_error > 1e-3 and not report.refuted


def _tied_image() -> torch.Tensor:
    """Sample 0: two polyphase components with equal norms but different content."""
    a = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    x = torch.zeros(2, 1, 4, 4)
    x[0, 0, 0::2, 0::2], x[0, 0, 0::2, 1::2] = a, a.T
    x[1] = torch.randn(1, 4, 4, generator=torch.Generator().manual_seed(1))
    return x


def test_a_tie_that_changes_the_output_is_excused_not_a_disagreement() -> None:
    x = _tied_image()
    report = verify(_patch_net(), x, TorusTranslations(4, 4))
    assert report.max_error > 1e-3  # the tied sample really changes frame
    assert not report.refuted and report.max_clean_error < 1e-10 and set(report.excused) == {0}
    cert = certify(_patch_net(), x, TorusTranslations(4, 4), verify=True)
    assert not cert.disagreements
    if cert.verdict == Status.EQUIVARIANT:
        assert any("fails only on samples with a canonicalizer tie" in n for n in cert.notes)


def test_non_finite_input_is_reported_as_such() -> None:
    x = torch.randn(2, 1, 4, 4)
    x[1, 0, 0, 0] = float("nan")
    report = verify(_patch_net(), x, TorusTranslations(4, 4))
    assert report.non_finite[0].startswith("the input contains NaN/inf in sample(s) [1]")
    assert any("non-finite scores: the input contains NaN/inf" in m for m in report.non_finite)
    assert report.excused == {1: "the input contains NaN/inf"}
    assert (
        report.conclusive and not report.refuted and report.max_error == report.max_error
    )  # not NaN
    cert = certify(_patch_net(), x, TorusTranslations(4, 4), verify=True)
    assert not cert.disagreements
    assert any("the input contains NaN/inf" in n for n in cert.notes)


def test_infinite_scores_tie_and_nan_scores_are_non_finite() -> None:
    with record_canonicalizations() as rec:
        polyphase_anchor(torch.full((1, 1, 4, 4), float("inf")), 2)
        nan = torch.randn(1, 1, 4, 4)
        nan[0, 0, 1, 1] = float("nan")
        polyphase_anchor(nan, 2)
        polyphase_anchor(torch.randn(1, 1, 4, 4), 2)
    inf_tie, nan_scores, clean = rec.events
    assert inf_tie.num_tied == 1 and inf_tie.num_non_finite == 0
    assert nan_scores.num_non_finite == 1 and nan_scores.num_tied == 0
    assert clean.num_tied == 0 and clean.num_non_finite == 0


def test_recording_is_off_outside_a_block_and_nests() -> None:
    polyphase_anchor(torch.ones(1, 1, 4, 4), 2)  # no recorder: nothing to report to
    with record_canonicalizations() as outer, record_canonicalizations() as inner:
        polyphase_anchor(torch.ones(1, 1, 4, 4), 2)
    assert len(outer) == len(inner) == 1 and outer.events[0].num_tied == 1


# ---------------------------------------------------------------- cost
def test_verification_budget_is_estimated_and_enforced() -> None:
    torch.manual_seed(0)
    cost = estimate_verification(circ(3), X, T8)
    assert cost.elements == len(representative_elements(T8)) and cost.total_s > 0
    with pytest.raises(VerificationBudgetError, match="over the budget"):
        verify(circ(3), X, T8, budget_s=1e-12)
    assert verify(circ(3), X, T8, budget_s=60).equivariant


def test_representative_elements_never_enumerate_large_groups() -> None:
    s20 = SymmetricGroup(20)
    chosen = representative_elements(s20, samples=8)
    assert chosen[:2] == s20.generators() and len(chosen) == 10
    assert all(sorted(g.value) == list(range(20)) for g in chosen)
    assert len(representative_elements(CyclicGroup(8))) == 8
    rng_state = random.getstate()
    representative_elements(HugeCyclic(10**12), samples=3)
    assert random.getstate() == rng_state  # seeded privately
