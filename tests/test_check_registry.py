"""Every registered model certifies; every baseline is rejected at the node that breaks.

Written generically over ``groupattn.models.list_models()``: the expected group and input
shape come from each ``ModelSpec``; the expected break is the node whose own contract
(asked directly, outside the checker) declares ``BREAKS`` with the same reason, and the
numerical check must confirm both verdicts.
"""

from __future__ import annotations

import pytest
import torch

from groupattn.check import Status, certify
from groupattn.contracts import contract_of, registered_contract
from groupattn.models import create, get_spec, list_models

MODELS = list_models()


def test_registry_is_not_empty() -> None:
    assert MODELS


@pytest.mark.parametrize("name", MODELS)
def test_equivariant_model_certifies(name: str) -> None:
    spec = get_spec(name)
    model = create(name)
    x = torch.randn(2, *spec.input_shape)
    cert = certify(model, x, spec.group, verify=True)
    with torch.no_grad():
        logits = model.eval()(x)
    # a classifier's scores must be invariant; a dense output equivariant
    expected = Status.INVARIANT if logits.dim() == 2 else Status.EQUIVARIANT
    assert cert.verdict == expected, cert.to_text()
    assert not cert.unverified and cert.first_break is None
    assert cert.verification is not None and cert.verification.equivariant, cert.summary()
    assert not cert.disagreements, cert.disagreements


@pytest.mark.parametrize("name", MODELS)
def test_baseline_is_rejected_at_the_breaking_node(name: str) -> None:
    spec = get_spec(name)
    model = create(name, equivariant=False)
    x = torch.randn(2, *spec.input_shape)
    cert = certify(model, x, spec.group, verify=True)
    assert cert.verdict == Status.BROKEN, cert.to_text()
    brk = cert.first_break
    assert brk is not None and brk.path[-1] == brk.operation
    assert brk.path[0] == next(r.name for r in cert.records if r.status == "input")
    # the break happens inside a module that declares it breaks equivariance (the module or an ancestor)
    parts = brk.node.split(".")
    declared = []
    for i in range(len(parts), 0, -1):
        try:
            module = model.get_submodule(".".join(parts[:i]))
        except AttributeError:
            continue
        # a declared contract, or one registered for a foreign class (escnn's modules)
        if callable(getattr(module, "contract", None)) or registered_contract(module) is not None:
            declared.append(contract_of(module, cert.group))
    assert any(c.kind == Status.BROKEN for c in declared), (brk, [c.describe() for c in declared])
    # nothing before it breaks, and the baseline really is broken
    names = [r.name for r in cert.records]
    assert all(r.status != "broken" for r in cert.records[: names.index(brk.operation)])
    assert cert.verification is not None and cert.verification.max_error > 1e-6, cert.summary()
