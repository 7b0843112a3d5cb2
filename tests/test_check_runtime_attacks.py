"""Regressions from the attack round on this release's checker features.

A red-team helper with only the public docs built networks that the checker certified
although they are not equivariant. Each was confirmed numerically; each is refused now:

* behaviour the trace cannot see — a counter in a mutable attribute, a module global, a
  class attribute or a hook's closure; Python's global random generator; a branch on the
  input's values, strides or dtype that agrees with the trace on the example input; a
  branch on the batch size;
* escnn modules whose index buffers were edited after construction (the contract read the
  declared types only), ``certify(..., verify=True)`` crashing when the float64 check
  cannot run, and ``certify`` silently rebuilding a tampered escnn filter of the hybrid.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from groupattn.check import Status, certify

X = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))


class _Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16 * 16, 3)

    @staticmethod
    def invariant(x: torch.Tensor) -> torch.Tensor:
        return x.pow(2).mean((-1, -2)).repeat(1, 3)

    def broken(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))


class DictCounter(_Base):
    def __init__(self) -> None:
        super().__init__()
        self.state = {"calls": 0}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.state["calls"] += 1
        return self.invariant(x) if self.state["calls"] <= 200 else self.broken(x)


CALLS = [0]


class GlobalCounter(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS[0] += 1
        return self.invariant(x) if CALLS[0] <= 200 else self.broken(x)


class ClassCounter(_Base):
    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return self.invariant(x) if type(self).calls <= 200 else self.broken(x)


class GatedOnValues(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting() or float(x.abs().max()) <= 1.0:
            return self.invariant(x)
        return self.broken(x)


class BatchSizeBranch(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.invariant(x) if x.shape[0] == 2 else self.broken(x)


class ContiguityBranch(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.invariant(x) if x.is_contiguous() else self.broken(x.reshape(x.shape[0], -1))


class PythonRandom(_Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if random.random() < 0.05:
            return self.broken(x)
        return self.invariant(x)


@pytest.mark.parametrize(
    ("make", "phrase"),
    [
        (DictCounter, "changes Python state"),
        (GlobalCounter, "changes Python state"),
        (ClassCounter, "changes Python state"),
        (PythonRandom, "changes Python state"),
        (GatedOnValues, "takes another path for other inputs"),
        (ContiguityBranch, "takes another path for other inputs"),
        (BatchSizeBranch, "on its first sample alone"),
    ],
)
def test_behaviour_the_trace_cannot_see_is_not_certified(make: Any, phrase: str) -> None:
    torch.manual_seed(0)
    random.seed(1)
    cert = certify(make(), X, "p4")
    assert cert.verdict == Status.UNVERIFIED, cert.to_text()
    assert phrase in (cert.reason or ""), cert.reason


def test_a_stateful_hook_on_a_certified_registry_model_is_not_certified() -> None:
    from groupattn.models import create

    torch.manual_seed(0)
    model = create("p4_vit", image_size=16).eval()
    state = {"calls": 0}

    def hook(module: nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        state["calls"] += 1
        (x,) = args
        if state["calls"] > 100:  # an absolute ramp after 100 calls
            x = x + 0.5 * torch.arange(x.shape[-1], dtype=x.dtype)
        return (x,)

    model.register_forward_pre_hook(hook)
    cert = certify(model, X, "p4")
    assert cert.verdict == Status.UNVERIFIED and "hook" in (cert.reason or ""), cert.to_text()


def test_stateless_models_and_caches_filled_on_the_first_call_still_certify() -> None:
    class Cached(nn.Module):
        table: ClassVar[dict[int, torch.Tensor]] = {}

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[-1] not in self.table:  # filled once, then read
                self.table[x.shape[-1]] = torch.ones(())
            return x.pow(2).mean((-1, -2)) * self.table[x.shape[-1]]

    cert = certify(Cached(), X, "p4")
    assert cert.verdict == Status.INVARIANT, cert.to_text()


# ----------------------------------------------------------------------------- escnn

escnn = pytest.importorskip("escnn")


def _escnn_pooling_net() -> nn.Module:
    from escnn import gspaces
    from escnn import nn as enn

    from groupattn.interop import (
        escnn_compatibility,
        exact_steerable,
        exportable,
        refresh_filters,
        register_escnn_contracts,
    )

    register_escnn_contracts()
    space = gspaces.rot2dOnR2(4)
    image = enn.FieldType(space, [space.trivial_repr])
    hidden = enn.FieldType(space, [space.regular_repr, space.trivial_repr, space.regular_repr])

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            with escnn_compatibility():
                self.seq = enn.SequentialModule(
                    enn.R2Conv(image, hidden, 3, padding=1, recompute=True),
                    enn.ReLU(hidden),
                    enn.GroupPooling(hidden),
                )
            exportable(exact_steerable(self.seq))
            self.seq.eval()
            refresh_filters(self.seq)
            self.image = image

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.seq(enn.GeometricTensor(x, self.image)).tensor.amax((-1, -2))

    return Net().eval()


def test_escnn_pooling_with_edited_index_buffers_is_not_certified() -> None:
    net = _escnn_pooling_net()
    x = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(1))
    assert certify(net, x, "c4").verdict == Status.INVARIANT
    pool = list(net.seq.children())[2]
    name, buffer = next(
        (n, b) for n, b in pool.named_buffers() if not b.is_floating_point() and b.numel() == 8
    )
    with torch.no_grad():
        buffer.copy_(torch.tensor([1, 2, 3, 5, 0, 6, 7, 8]))  # pools across two fields
    cert = certify(net, x, "c4")
    assert cert.verdict == Status.UNVERIFIED, cert.to_text()
    from groupattn.contracts import contract_of
    from groupattn.groups import CyclicGroup

    contract = contract_of(pool, CyclicGroup(4))
    assert contract.kind == Status.UNVERIFIED
    assert "index buffers do not match" in (contract.reason or ""), (name, contract.reason)


def test_verify_that_cannot_run_in_float64_runs_in_float32() -> None:
    net = _escnn_pooling_net()
    x = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(1))
    cert = certify(net, x, "c4", verify=True)
    assert cert.verdict == Status.INVARIANT
    # the check runs in the model's own float32 instead, with its tolerance
    assert any("numerical check ran in torch.float32" in n for n in cert.notes), cert.notes


def test_certify_leaves_a_tampered_escnn_hybrid_filter_as_it_is() -> None:
    from groupattn.interop import refresh_filters
    from groupattn.models import create

    torch.manual_seed(0)
    model = create("escnn_hybrid")
    model.eval()
    refresh_filters(model)
    conv = next(m for m in model.modules() if type(m).__name__ == "R2Conv")
    with torch.no_grad():
        conv.filter[:, :, 0, 1] += 0.5
    before = conv.filter.detach().clone()
    cert = certify(model, torch.rand(2, 1, 12, 12), "c4")
    assert cert.verdict != Status.INVARIANT, cert.to_text()
    assert torch.equal(conv.filter, before)  # the user's model is not repaired behind their back
