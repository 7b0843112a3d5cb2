"""Local attention by tiles: keys and values gathered into halos inside the kernel.

``attend_halos(q, k_tokens, v_tokens, halo, bias)`` must be ``attend`` over the gathered
halos, values and gradients (queries, key and value tokens, bias) — halos that overlap,
repeat tokens, and hold fully masked rows — on every implementation; and on the chunked
(training) path it must keep the tokens for the backward pass, not the halos.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.attention import GroupSelfAttention, attend, attention_implementation
from groupattn.attention._kernel import attend_halos


def _gathered(tokens: torch.Tensor, halo: torch.Tensor) -> torch.Tensor:
    """Reference gather: ``(B, N, G, heads, d)`` → ``(B·T, heads, S·G, d)``, written plainly."""
    b, _, g, heads, d = tokens.shape
    t, s = halo.shape
    picked = tokens[:, halo]  # (B, T, S, G, heads, d)
    return picked.permute(0, 1, 4, 2, 3, 5).reshape(b * t, heads, s * g, d)


@st.composite
def _problems(draw: Any) -> dict[str, Any]:
    b = draw(st.integers(1, 3))
    n = draw(st.integers(1, 9))
    t = draw(st.integers(1, 4))
    s = draw(st.integers(1, 6))
    g = draw(st.sampled_from([1, 2, 4]))
    heads = draw(st.integers(1, 3))
    d = draw(st.integers(1, 4))
    q_len = draw(st.integers(1, 5))
    bias_kind = draw(st.sampled_from(["none", "shared", "per_tile", "per_head_only"]))
    masked = draw(st.sampled_from(["no", "some", "a_whole_row"]))
    chunk = draw(st.sampled_from([None, 1, 7, 64]))
    seed = draw(st.integers(0, 2**16))
    return {
        "b": b,
        "n": n,
        "t": t,
        "s": s,
        "g": g,
        "heads": heads,
        "d": d,
        "q_len": q_len,
        "bias_kind": bias_kind,
        "masked": masked,
        "chunk": chunk,
        "seed": seed,
    }


def _build(p: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(p["seed"])
    b, n, t, s, g, heads, d = (p[k] for k in ("b", "n", "t", "s", "g", "heads", "d"))
    kw: dict[str, Any] = {"dtype": torch.float64, "generator": gen}
    q = torch.randn(b * t, heads, p["q_len"], d, **kw).requires_grad_()
    k = torch.randn(b, n, g, heads, d, **kw).requires_grad_()
    v = torch.randn(b, n, g, heads, d, **kw).requires_grad_()
    halo = torch.randint(0, n, (t, s), generator=gen)  # overlapping, repeated tokens
    keys = s * g
    shape = {
        "none": None,
        "shared": (1, heads, p["q_len"], keys),
        "per_tile": (b * t, heads, p["q_len"], keys),
        "per_head_only": (1, heads, 1, 1),
    }[p["bias_kind"]]
    bias = None if shape is None else torch.randn(shape, **kw)
    if p["masked"] != "no":
        if bias is None or bias.shape[-1] == 1:
            bias = torch.zeros(1, heads, p["q_len"], keys, dtype=torch.float64)
        else:
            bias = bias.clone()
        drop = torch.rand(bias.shape, generator=gen) < 0.3
        if p["masked"] == "a_whole_row":
            drop[..., 0, :] = True
        bias = bias.masked_fill(drop, float("-inf"))
    if bias is not None:
        bias.requires_grad_()
    return q, k, v, halo, bias  # type: ignore[return-value]


@settings(max_examples=60)
@given(_problems())
def test_values_and_gradients_equal_attend_over_the_gathered_halos(p: dict[str, Any]) -> None:
    q, k, v, halo, bias = _build(p)
    inputs = [x for x in (q, k, v, bias) if x is not None]
    weights = torch.randn((*q.shape[:-1], p["d"]), dtype=torch.float64)

    def run(fn: Any, name: str) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        with attention_implementation(name, chunk_elements=p["chunk"]):
            out = fn()
        grads = torch.autograd.grad((out * weights).sum(), inputs, allow_unused=True)
        return out.detach(), tuple(
            torch.zeros_like(x) if gr is None else gr for gr, x in zip(grads, inputs)
        )

    # the reference: the dense chunked kernel (itself tested against SDPA) on plain gathers
    expected = run(lambda: attend(q, _gathered(k, halo), _gathered(v, halo), bias), "chunked")
    for name in ("chunked", "sdpa", "auto"):
        if name != "chunked" and p["masked"] == "a_whole_row":
            continue  # SDPA's math path gives NaN for a row with no key; the fused kernel 0
        out, grads = run(lambda: attend_halos(q, k, v, halo, bias), name)
        torch.testing.assert_close(out, expected[0], rtol=1e-10, atol=1e-12)
        for what, got, want in zip(("query", "key", "value", "bias"), grads, expected[1]):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11, msg=f"{name}: d{what}")


@pytest.mark.parametrize("chunk", [None, 1, 30])
def test_a_row_with_no_key_gives_zeros_and_no_gradient(chunk: int | None) -> None:
    """A query whose every halo key is masked (-inf) has no softmax: the fused kernel
    outputs zeros there and passes no gradient; softmax alone would give NaN everywhere."""
    torch.manual_seed(0)
    q = torch.randn(2, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 5, 2, 2, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 5, 2, 2, 4, dtype=torch.float64, requires_grad=True)
    halo = torch.tensor([[0, 1, 2], [2, 3, 4]])
    bias = torch.zeros(1, 2, 3, 6, dtype=torch.float64)
    bias[:, :, 1] = float("-inf")  # query 1 sees no key
    bias.requires_grad_()
    with attention_implementation("chunked", chunk_elements=chunk):
        out = attend_halos(q, k, v, halo, bias)
    out.sum().backward()
    assert torch.all(out[:, :, 1] == 0)
    for grad in (q.grad, k.grad, v.grad, bias.grad):
        assert grad is not None and bool(torch.isfinite(grad).all())
    assert q.grad is not None and torch.all(q.grad[:, :, 1] == 0)
    expected = attend(q.detach(), _gathered(k, halo), _gathered(v, halo), bias.detach())
    torch.testing.assert_close(out.detach(), expected.detach(), rtol=1e-12, atol=1e-12)


def test_the_chunked_path_saves_tokens_not_halos() -> None:
    """The halos hold every token about four times (5 × 5 windows by 4 × 4 tiles): the
    backward pass must not keep them alive between the forward and backward passes."""
    torch.manual_seed(0)
    layer = GroupSelfAttention(8, 8, "C4", num_heads=2, head_dim=4, neighbourhood=5)
    x = torch.randn(2, 8, 4, 12, 12)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    tokens = 2 * 12 * 12 * 4 * 2 * 4  # B · N · G · heads · d: one of q, k, v
    halo_elements = 2 * 9 * 2 * 64 * 4 * 4  # B·tiles · heads · halo·G · d (4 × 4 tiles)
    assert max(saved) < halo_elements, (max(saved), halo_elements)
    assert tokens in saved
    out.sum().backward()
    assert layer.qkv.weight.grad is not None


@pytest.mark.parametrize("point_group", ["C4", "C8"])  # C8: planar offsets, a zero token
def test_group_local_layer_is_the_same_on_every_implementation(point_group: str) -> None:
    torch.manual_seed(0)
    layer = GroupSelfAttention(6, 6, point_group, num_heads=2, head_dim=3, neighbourhood=3).double()
    order = 4 if point_group == "C4" else 8
    x = torch.randn(2, 6, order, 7, 7, dtype=torch.float64, requires_grad=True)
    results = {}
    for name in ("sdpa", "chunked"):
        with attention_implementation(name, chunk_elements=64):
            layer.zero_grad()
            x.grad = None
            y = layer(x)
            (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        assert x.grad is not None
        results[name] = [y.detach(), x.grad.clone()] + [
            p.grad.clone() for p in layer.parameters() if p.grad is not None
        ]
    for got, want in zip(results["chunked"], results["sdpa"]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def _second_order(layer: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor | None]:
    (grad_x,) = torch.autograd.grad(layer(x).pow(2).sum(), x, create_graph=True)
    return list(
        torch.autograd.grad(grad_x.pow(2).sum(), list(layer.parameters()), allow_unused=True)
    )


@pytest.mark.parametrize("kind", ["group_local", "lifting_local_qpos", "lifting_local", "global"])
def test_second_order_gradients_are_refused_on_the_custom_backward_passes(kind: str) -> None:
    """A gradient penalty differentiates the backward pass. The chunked and factorised
    backward passes are written by hand and have no derivative: taking one raises, naming
    the layer — PyTorch's ``once_differentiable`` let ``autograd.grad(..., inputs=...)``
    silently drop their terms. Under ``"sdpa"`` the same call gives every parameter a
    gradient."""
    from groupattn import ConfigurationError
    from groupattn.attention import GlobalSelfAttention, LiftingSelfAttention

    torch.manual_seed(0)
    layer: torch.nn.Module
    if kind == "group_local":
        layer = GroupSelfAttention(2, 2, "C4", num_heads=1, neighbourhood=3)
        x = torch.randn(2, 2, 4, 3, 3)
        name, implementation = "GroupSelfAttention", "chunked"
    elif kind.startswith("lifting"):
        layer = LiftingSelfAttention(
            2, 2, "C4", num_heads=1, neighbourhood=3, query_position=kind.endswith("qpos")
        )
        x = torch.randn(2, 2, 3, 3)
        name = "LiftingSelfAttention"
        implementation = "chunked" if kind.endswith("qpos") else "factorised"
    else:
        layer = GlobalSelfAttention(4, 2, (3, 3), bias="circulant")
        x = torch.randn(2, 9, 4)
        name, implementation = "GlobalSelfAttention", "chunked"
    layer = layer.double()
    x = x.double().requires_grad_()
    with pytest.raises(ConfigurationError, match=f"{name}: the '{implementation}' attention"):
        _second_order(layer, x)
    with attention_implementation("sdpa"):
        grads = _second_order(layer, x)
    assert sum(g is not None for g in grads) >= 2


def test_bf16_training_gradients_are_as_accurate_as_sdpas() -> None:
    """Under bf16 autocast the chunked backward computes in float32 and sums the bias
    gradient over its chunks in float32: the positional encoding's gradients stay as close
    to the float32 ones as SDPA's own (accumulating in bf16 they were up to 5× further)."""
    torch.manual_seed(0)
    layer = GroupSelfAttention(
        dim=4, out_dim=4, point_group="C4", num_heads=2, neighbourhood=5, encoding_hidden=8
    )
    torch.manual_seed(3)
    x = torch.randn(4, 4, 4, 12, 12)
    weights = torch.randn(4, 4, 4, 12, 12, generator=torch.Generator().manual_seed(5))

    def grads(implementation: str, bf16: bool) -> dict[str, torch.Tensor]:
        layer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            with attention_implementation(implementation):
                out = layer(x)
        (out.float() * weights).sum().backward()
        return {
            n: p.grad.clone()
            for n, p in layer.named_parameters()
            if p.grad is not None and n.startswith("encoding")
        }

    reference = grads("sdpa", False)
    sdpa, chunked = grads("sdpa", True), grads("chunked", True)
    checked = 0
    for name, want in reference.items():
        if float(want.norm()) < 1e-3 * max(float(w.norm()) for w in reference.values()):
            continue  # a gradient that is ~0 exactly (softmax ignores a shift of a row)
        sdpa_error = float((sdpa[name] - want).norm() / want.norm())
        chunked_error = float((chunked[name] - want).norm() / want.norm())
        assert chunked_error <= max(2.5 * sdpa_error, 0.01), (name, chunked_error, sdpa_error)
        checked += 1
    assert checked >= 3
