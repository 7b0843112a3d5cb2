"""The adversarial review's networks: none may be certified while the oracle refutes it.

Two documented exceptions stay certified: a certificate is for evaluation mode (a model
that behaves differently in training mode), and a module of the user's own whose class
declares ``contract`` is checked by that declaration when its body cannot be verified
(the certificate's notes name it).
"""

from __future__ import annotations

import checker_attacks as attacks
import pytest
import torch

TRUSTED_BY_DESIGN = {"train_mode_branch", "lying_contract", "contract_hides_provable_break"}


@pytest.fixture(scope="module", autouse=True)
def _example() -> None:
    torch.manual_seed(0)
    attacks.self_test()
    attacks.X = torch.randn(2, 3, 8, 8)


@pytest.mark.parametrize("case", attacks.CASES, ids=lambda c: c[1].__name__)
def test_attack_gets_no_false_certificate(case: tuple) -> None:
    _cause, fn = case
    torch.manual_seed(0)
    verdict, verified, error = fn()[:3]
    if fn.__name__ in TRUSTED_BY_DESIGN:
        assert error > attacks.TOL  # the oracle still sees the break; the trust is documented
        return
    assert not (verdict in ("equivariant", "invariant") and error > attacks.TOL), (
        fn.__name__,
        verdict,
        error,
    )
    if (
        fn.__name__ != "buffer_aliasing_parameter"
    ):  # its verify column certifies a deep copy, which drops the aliasing
        assert not (verified in ("equivariant", "invariant") and error > attacks.TOL), (
            fn.__name__,
            verified,
            error,
        )


def test_certify_leaves_a_patched_forward_in_place() -> None:
    net = attacks._AnchorNet()

    def patched(x: torch.Tensor) -> attacks.Canonicalized:
        return attacks.Canonicalized(
            x.flip(-1), torch.zeros(x.shape[0], 2, dtype=torch.long), torch.ones(x.shape[0])
        )

    net.anchor.forward = patched
    attacks.certify(net, torch.randn(2, 3, 8, 8), "translations")
    assert net.anchor.forward is patched
