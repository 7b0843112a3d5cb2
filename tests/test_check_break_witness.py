"""A ``broken`` verdict needs a numerical witness; without one the network is ``unverified``.

The operator rules find where a value stops moving with the input. An equivariant
network can pass through such values and recombine them (a position-dependent factor
divided out again, queries rotated by their absolute position), so a break the rules
find is stated only when the numerical check shows an error, with the model's weights or
with seeded perturbed ones (a break for some weights is a break: a certificate holds for
every value of the weights).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from groupattn.check import Status, certify
from groupattn.check._checker import WITNESS_PERTURBATION, _perturbed_copy
from groupattn.positional import RotarySelfAttention

X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


class DividedOut(nn.Module):
    """Multiplies by an absolute position table and divides by it again: equivariant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", 1.0 + torch.arange(64.0).reshape(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu((x * self.table) / self.table)


class HiddenByZeroWeight(nn.Module):
    """Adds ``w · position`` with ``w = 0`` at initialisation: broken for every other ``w``."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.register_buffer("position", torch.arange(64.0).reshape(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight * self.position


class PlainlyBroken(nn.Module):
    """Adds a learned absolute position table: broken with its own weights."""

    def __init__(self) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(3, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.position


def test_a_break_the_numbers_do_not_show_is_unverified() -> None:
    cert = certify(DividedOut(), X, "translations")
    assert cert.verdict == Status.UNVERIFIED, cert.to_text()
    assert cert.first_break is None
    assert cert.reason is not None and "operator rules find a break at" in cert.reason
    assert "no element moves the output" in cert.reason
    assert any("operator rules" in why for _, why in cert.unverified)
    assert cert.exit_code != 0 and cert.status == "unverified"


def test_a_break_hidden_by_the_initial_weights_is_found_with_perturbed_ones() -> None:
    model = HiddenByZeroWeight()
    cert = certify(model, X, "translations")
    assert cert.verdict == Status.BROKEN, cert.to_text()
    assert cert.first_break is not None
    assert any("confirmed numerically with perturbed weights" in n for n in cert.notes)
    # the search never changes the user's model
    assert float(model.weight) == 0.0


def test_a_plain_break_is_confirmed_with_the_models_own_weights() -> None:
    cert = certify(PlainlyBroken(), X, "translations")
    assert cert.verdict == Status.BROKEN
    assert any("confirmed numerically with its weights" in n for n in cert.notes), cert.notes


@pytest.mark.parametrize("group", ["c4", "d4"])
def test_a_break_under_rotations_is_confirmed(group: str) -> None:
    cert = certify(PlainlyBroken(), X, group)
    assert cert.verdict == Status.BROKEN
    assert any("confirmed numerically" in n for n in cert.notes)


def test_torus_rope_inside_a_network_is_unverified_not_broken() -> None:
    torch.manual_seed(3)
    net = nn.Sequential(
        nn.Linear(8, 8), RotarySelfAttention(8, 2, (4, 4), "torus"), nn.Linear(8, 8)
    )
    cert = certify(net, torch.randn(2, 16, 8), "translations", verify=True)
    assert cert.verdict == Status.UNVERIFIED, cert.to_text()
    assert cert.verification is not None and cert.verification.equivariant


def test_a_witness_search_that_cannot_run_keeps_the_break_with_a_note() -> None:
    class ReturnsNoTensorLater(nn.Module):
        """Broken, and returns a tensor only in eval mode of the first call (the search fails)."""

        def __init__(self) -> None:
            super().__init__()
            self.position = nn.Parameter(torch.randn(3, 8, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.dtype == torch.float64:
                raise RuntimeError("this model refuses float64")
            return x + self.position

    cert = certify(ReturnsNoTensorLater(), X, "translations")
    assert cert.verdict == Status.BROKEN
    assert any("not confirmed numerically" in n and "refuses float64" in n for n in cert.notes)


def test_perturbed_copy_is_seeded_moves_every_floating_parameter_and_leaves_the_model() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    nn.init.zeros_(model[0].bias)
    before = [p.detach().clone() for p in model.parameters()]
    state = torch.random.get_rng_state()
    a, b = _perturbed_copy(model), _perturbed_copy(model)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is untouched
    for original, p, q in zip(before, a.parameters(), b.parameters()):
        assert torch.equal(p, q)  # seeded
        assert not torch.equal(p, original)  # zero-initialised and constant tensors move too
    for original, p in zip(before, model.parameters()):
        assert torch.equal(p, original)
    assert 0 < WITNESS_PERTURBATION <= 1
