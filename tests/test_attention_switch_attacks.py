"""Regressions from an attack on the attention switch, the chunked backward and ``certify``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from groupattn.attention import (
    GlobalSelfAttention,
    attend,
    attention_implementation,
    get_attention_implementation,
)
from groupattn.check import certify
from groupattn.contracts import Status
from groupattn.groups import TorusTranslations


@pytest.fixture(autouse=True)
def _default_switch() -> Iterator[None]:
    attention_implementation("auto")
    yield
    attention_implementation("auto")


def _masked_row_problem() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 4, 4, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    bias[0, 1, 2, :] = -torch.inf  # every key of one query row masked
    bias[1, 0, :, 3] = -torch.inf  # one key masked for every query
    return q, k, v, bias


@pytest.mark.parametrize("implementation", ["sdpa", "chunked"])
def test_fully_masked_rows_give_the_same_finite_gradients_on_every_path(
    implementation: str,
) -> None:
    results = {}
    for name in ("sdpa", implementation):
        q, k, v, bias = (t.clone().requires_grad_(True) for t in _masked_row_problem())
        with attention_implementation(name, chunk_elements=8):
            out = attend(q, k, v, bias)
        out.square().sum().backward()
        results[name] = (out.detach(), q.grad, k.grad, v.grad, bias.grad)
    for reference, got in zip(results["sdpa"], results[implementation]):
        assert got is not None and reference is not None
        assert torch.isfinite(got[torch.isfinite(reference)]).all()
        finite = torch.isfinite(reference)
        torch.testing.assert_close(got[finite], reference[finite], rtol=1e-10, atol=1e-12)
    assert not torch.isnan(results[implementation][2]).any()  # key gradient


def test_blocks_left_out_of_order_do_not_leak_their_setting() -> None:
    def job(name: str) -> Iterator[None]:
        with attention_implementation(name):
            yield
            yield

    a, b = job("sdpa"), job("chunked")
    next(a)
    next(b)
    assert get_attention_implementation() == "chunked"
    list(a)  # the outer block leaves first: the inner one is still active
    assert get_attention_implementation() == "chunked"
    list(b)
    assert get_attention_implementation() == "auto"


def test_blocks_exited_by_hand_in_the_wrong_order_restore_the_plain_setting() -> None:
    outer, inner = attention_implementation("sdpa"), attention_implementation("chunked")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert get_attention_implementation() == "chunked"
    inner.__exit__(None, None, None)
    assert get_attention_implementation() == "auto"


def test_one_manager_can_be_entered_again() -> None:
    manager = attention_implementation("sdpa")
    with manager:
        assert get_attention_implementation() == "sdpa"
    assert get_attention_implementation() == "auto"
    with manager:
        assert get_attention_implementation() == "sdpa"
    assert get_attention_implementation() == "auto"


def test_nested_blocks_and_plain_calls() -> None:
    with attention_implementation("sdpa"):
        with attention_implementation("chunked"):
            assert get_attention_implementation() == "chunked"
        assert get_attention_implementation() == "sdpa"  # the outer block's own setting
        attention_implementation("chunked")  # a plain call inside a block: until it is left
        assert get_attention_implementation() == "chunked"
    assert get_attention_implementation() == "auto"
    attention_implementation("sdpa")  # a plain call outside blocks: until the next call
    with attention_implementation("chunked"):
        pass
    assert get_attention_implementation() == "sdpa"


def test_the_block_restores_even_when_it_raises() -> None:
    with pytest.raises(RuntimeError), attention_implementation("chunked"):
        raise RuntimeError("inside")
    assert get_attention_implementation() == "auto"


def test_an_empty_example_input_is_never_certified() -> None:
    layer = GlobalSelfAttention(8, 2, (4, 4))
    for verify in (False, True):
        cert = certify(layer, torch.randn(0, 16, 8), TorusTranslations(4, 4), verify=verify)
        assert cert.status == Status.UNVERIFIED
        assert "at least one element" in (cert.reason or "")
    assert str(certify(layer, torch.randn(1, 16, 8), TorusTranslations(4, 4)).status) == "certified"
