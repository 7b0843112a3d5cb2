"""The checker does not trust a canonicalizer that would round its scores (#18).

``ArgmaxCanonicalizer(fixed_precision=False)`` scores its candidates in the input's dtype:
two candidates whose exact scores differ can round to a tie there, which the lowest index
then breaks — a choice that does not move with the input. Its contract promises nothing
then, so [`certify`][groupattn.check.certify] reports a network containing it *unverified*,
naming the canonicalizer and ``fixed_precision``; with the default
``fixed_precision=True`` (scores in float64) the same network is certified.
"""

from __future__ import annotations

import torch
from torch import nn

from groupattn.actions import GridField
from groupattn.canonical import ArgmaxCanonicalizer
from groupattn.check import Status, certify
from groupattn.contracts import contract_of
from groupattn.groups import CyclicGroup


class _Oriented(nn.Module):
    """Canonical orientation (C4) by a corner pixel, a pointwise layer, pooling, a linear head."""

    def __init__(self, fixed_precision: bool) -> None:
        super().__init__()
        self.canon = ArgmaxCanonicalizer(CyclicGroup(4), _corner, fixed_precision=fixed_precision)
        self.mix = nn.Conv2d(1, 4, 1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mix(self.canon(x).output)).mean(dim=(2, 3)))


def _corner(x: torch.Tensor) -> torch.Tensor:
    """``(B,)`` score: the top-right pixel of ``(B, 1, H, W)``."""
    return x[:, 0, 0, -1]


def test_fixed_precision_canonicalizer_certifies() -> None:
    torch.manual_seed(0)
    cert = certify(_Oriented(fixed_precision=True), torch.randn(2, 1, 6, 6), "c4")
    if cert.status != "certified" or cert.verdict != Status.INVARIANT:
        raise AssertionError(
            f"expected an invariance certificate, got {cert.status}: {cert.reason}"
        )


def test_rounding_canonicalizer_is_unverified_with_the_reason() -> None:
    torch.manual_seed(0)
    cert = certify(_Oriented(fixed_precision=False), torch.randn(2, 1, 6, 6), "c4")
    if cert.status != "unverified" or cert.verdict.certified:
        raise AssertionError(
            f"a canonicalizer scoring in the input's dtype was trusted: {cert.status}"
        )
    reasons = [why for _node, why in cert.unverified] + [cert.reason or ""]
    if not any("ArgmaxCanonicalizer" in why and "fixed_precision=False" in why for why in reasons):
        raise AssertionError(
            f"the reason names neither the canonicalizer nor fixed_precision: {reasons}"
        )


def test_contract_states_why() -> None:
    group = CyclicGroup(4)
    trusted = contract_of(ArgmaxCanonicalizer(group, _corner), group, GridField())
    rounding = contract_of(
        ArgmaxCanonicalizer(group, _corner, fixed_precision=False), group, GridField()
    )
    if trusted.kind != Status.CANONICALIZING:
        raise AssertionError(f"fixed_precision=True: {trusted.describe()}")
    if rounding.kind != Status.UNVERIFIED or "fixed_precision=True" not in (rounding.reason or ""):
        raise AssertionError(f"fixed_precision=False: {rounding.describe()}")
