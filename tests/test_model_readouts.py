"""The group models' read-out: ``readout="orbit"`` (default) and ``"pool"``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from groupattn import ConfigurationError
from groupattn.check import Status, certify
from groupattn.groups import CyclicGroup
from groupattn.models import create
from groupattn.nn import GroupGlobalPool, OrbitPooledLinear

#: registry name → (options that keep the model small, input shape, group to certify)
MODELS: dict[str, tuple[dict[str, Any], tuple[int, ...], str]] = {
    "group_vit": ({"image_size": 16, "dim": 8}, (1, 16, 16), "c4"),
    "p4_vit": ({"image_size": 16, "dim": 8}, (1, 16, 16), "p4"),
    "group_swin": (
        {"image_size": 16, "dim": 8, "depths": (1, 1), "window_size": 2},
        (1, 16, 16),
        "c4",
    ),
    "p4_swin": (
        {"image_size": 16, "dim": 8, "depths": (1, 1), "window_size": 2},
        (1, 16, 16),
        "p4",
    ),
    "gsa": ({"dim": 4, "depth": 1, "stem_channels": 4}, (1, 28, 28), "p4"),
}


@pytest.mark.parametrize("readout", ["orbit", "pool"])
@pytest.mark.parametrize("name", list(MODELS))
def test_both_readouts_are_certified_and_verified(name: str, readout: str) -> None:
    options, shape, group = MODELS[name]
    torch.manual_seed(0)
    model = create(name, readout=readout, **options)
    head = OrbitPooledLinear if readout == "orbit" else torch.nn.Linear
    assert isinstance(model.head, head)
    assert isinstance(model.pool, torch.nn.Identity if readout == "orbit" else GroupGlobalPool)
    x = torch.randn(2, *shape)
    cert = certify(model, x, group, verify=True)
    assert cert.verdict == Status.INVARIANT, cert.to_text()
    assert cert.verification is not None and cert.verification.equivariant


@pytest.mark.parametrize("name", list(MODELS))
def test_the_baseline_reads_out_the_same_either_way(name: str) -> None:
    """On the baseline's trivial group the orbit read-out is a linear layer on the pooled
    features, with the same initial weights: one function, one training run."""
    options, shape, _ = MODELS[name]
    torch.manual_seed(1)
    orbit = create(name, equivariant=False, **options)
    torch.manual_seed(1)
    pool = create(name, equivariant=False, readout="pool", **options)
    x = torch.randn(3, *shape)
    with torch.no_grad():
        assert torch.equal(orbit(x), pool(x))


@pytest.mark.parametrize("name", list(MODELS))
def test_an_unknown_readout_names_the_model(name: str) -> None:
    options, _, _ = MODELS[name]
    with pytest.raises(ConfigurationError, match="expected readout 'orbit' or 'pool', got 'mean'"):
        create(name, readout="mean", **options)


class _OneOrientation(torch.nn.Module):
    """A head that reads one orientation of one pixel: not invariant."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x[:, :, 0, 0, 0])


class _OrbitSubclass(OrbitPooledLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bck,ock->bo", x[..., 0, 0], self.weight)


@pytest.mark.parametrize("name", ["group_vit", "group_swin"])
def test_a_replaced_head_is_not_taken_on_trust(name: str) -> None:
    """Attack round 9: after ``model.head = ...`` the model's contract promises nothing
    (a subclass of OrbitPooledLinear included), and certify finds the break."""
    options, shape, group = MODELS[name]
    torch.manual_seed(3)
    model = create(name, **options).eval()
    dim = model.head.dim
    x = torch.randn(2, *shape)
    for head in (_OneOrientation(dim), _OrbitSubclass(dim, 10, "C4")):
        model.head = head
        contract = model.contract(CyclicGroup(4))
        assert contract.kind == Status.UNVERIFIED, contract.describe()
        assert "not the model's OrbitPooledLinear read-out" in (contract.reason or "")
        assert certify(model, x, group, verify=True).verdict == Status.BROKEN
