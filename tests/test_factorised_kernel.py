"""The factorised local kernel (``attend_shared_query_windows``): its custom backward against
``torch.autograd.gradcheck`` and a dense per-window softmax, in every supported dtype, on an
empty batch and under ``torch.compile``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from groupattn.attention import attend_shared_query_windows


def _inputs(
    b: int,
    heads: int,
    d: int,
    d_v: int,
    height: int,
    width: int,
    g: int,
    k: int,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    bias_scale: float = 2.0,
) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int, scale: float = 1.0) -> torch.Tensor:
        x = scale * torch.randn(*shape, generator=generator, dtype=torch.float64)
        return x.to(dtype).requires_grad_()

    return (
        draw(b, heads, d, height, width),
        draw(b, heads, d, height, width),
        draw(b, heads, d_v, height, width),
        draw(heads, g, k * k, scale=bias_scale),
    )


def _dense_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    k: int,
    circular: bool,
) -> torch.Tensor:
    """``softmax_δ(q_i · k_{i+δ} / √d + bias[e, g, δ]) v_{i+δ}`` on each pixel's unfolded window,
    ``(B, heads, G, d_v, H, W)``; outside the grid (zero padding) keys and values are zero."""
    b, heads, d, height, width = query.shape
    r = k // 2

    def windows(x: torch.Tensor) -> torch.Tensor:  # (B, heads, c, H, W) -> (B, heads, H·W, k², c)
        c = x.shape[2]
        padded = F.pad(
            x.reshape(b * heads, c, height, width),
            (r, r, r, r),
            mode="circular" if circular else "constant",
        )
        unfolded = F.unfold(padded, k).view(b, heads, c, k * k, height * width)
        return unfolded.permute(0, 1, 4, 3, 2)

    q = query.flatten(3).transpose(2, 3)  # (B, heads, N, d)
    logits = torch.einsum("bend,bentd->bent", q, windows(key)) / math.sqrt(d)
    logits = logits[:, :, None] + bias[None, :, :, None]  # (B, heads, G, N, k²)
    probs = torch.softmax(logits, dim=-1)
    out = torch.einsum("bognt,bontc->bogcn", probs, windows(value))
    return out.reshape(b, heads, bias.shape[1], value.shape[2], height, width)


# ---------------------------------------------------------------- gradcheck (float64)

GRADCHECK_CASES = [
    # (k, height, width, g, d, d_v, circular)
    (1, 3, 4, 1, 2, 3, True),
    (1, 3, 4, 4, 2, 1, False),
    (3, 3, 5, 4, 2, 3, True),
    (3, 4, 3, 8, 3, 2, False),
    (3, 5, 4, 1, 1, 2, True),
    (5, 5, 6, 4, 2, 3, True),
    (5, 6, 5, 8, 3, 1, False),
    (5, 5, 5, 1, 2, 2, False),
]


@pytest.mark.parametrize(("k", "height", "width", "g", "d", "d_v", "circular"), GRADCHECK_CASES)
def test_gradcheck(
    k: int, height: int, width: int, g: int, d: int, d_v: int, circular: bool
) -> None:
    inputs = _inputs(2, 2, d, d_v, height, width, g, k, seed=k * 100 + g)

    def fn(*args: torch.Tensor) -> torch.Tensor:
        out = attend_shared_query_windows(*args, k, circular)
        assert out is not None
        return out

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)
    torch.testing.assert_close(
        fn(*inputs), _dense_reference(*inputs, k, circular), rtol=1e-12, atol=1e-12
    )


def test_gradcheck_full_jacobian() -> None:
    """One case with the whole Jacobian (not only random projections)."""
    for circular in (True, False):
        inputs = _inputs(1, 2, 2, 3, 4, 5, 4, 3, seed=7)
        assert torch.autograd.gradcheck(
            lambda *args: attend_shared_query_windows(*args, 3, circular),  # noqa: B023
            inputs,
        )


# ---------------------------------------------------------------- every dtype vs dense

TOLERANCES = {  # (output, gradient relative to the largest) per dtype
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (2e-2, 3e-2),
    torch.float16: (3e-3, 5e-3),
}


@pytest.mark.parametrize("dtype", list(TOLERANCES), ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("circular", [True, False], ids=["circular", "zeros"])
@pytest.mark.parametrize("k", [3, 5])
def test_matches_dense_reference(dtype: torch.dtype, circular: bool, k: int) -> None:
    """Output and gradients in each dtype against the dense softmax in float64 (of the same,
    rounded, inputs); outputs and gradients keep the inputs' dtype."""
    # float16's factorised normaliser takes a bias spreading by at most 9 within a window
    inputs = _inputs(2, 3, 4, 5, 7, 6, 4, k, dtype=dtype, seed=k, bias_scale=0.8)
    out = attend_shared_query_windows(*inputs, k, circular)
    assert out is not None
    assert out.dtype == dtype and out.shape == (2, 3, 4, 5, 7, 6)
    exact = [x.detach().double().requires_grad_() for x in inputs]
    reference = _dense_reference(*exact, k, circular)
    out_tol, grad_tol = TOLERANCES[dtype]
    scale = float(reference.detach().abs().max())
    assert float((out.double() - reference.detach()).abs().max()) <= out_tol * scale
    weights = torch.randn(
        out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    grads = torch.autograd.grad((out.double() * weights).sum(), inputs)
    expected = torch.autograd.grad((reference * weights).sum(), exact)
    for what, a, e in zip(("query", "key", "value", "bias"), grads, expected):
        assert a.dtype == dtype and a.shape == e.shape, what
        error = float((a.double() - e).abs().max())
        assert error <= grad_tol * float(e.abs().max()), f"{what}: {error}"


def test_inference_path_equals_training_path() -> None:
    """Without gradients the same kernel runs without saving anything: same values, and the
    result is a view of a contiguous ``(heads, d_v, G, B, H, W)`` tensor (the layer's channel
    projection reads it without a copy)."""
    inputs = _inputs(2, 3, 4, 5, 7, 6, 4, 5, dtype=torch.float32)
    trained = attend_shared_query_windows(*inputs, 5, False)
    with torch.no_grad():
        inferred = attend_shared_query_windows(*inputs, 5, False)
    assert trained is not None and inferred is not None
    torch.testing.assert_close(inferred, trained.detach(), rtol=0, atol=0)
    assert inferred.permute(1, 3, 2, 0, 4, 5).is_contiguous()


@pytest.mark.parametrize(("heads", "d", "d_v"), [(5, 8, 8), (9, 3, 3), (3, 20, 4), (7, 4, 9)])
def test_head_groups(heads: int, d: int, d_v: int) -> None:
    """Heads are processed in groups of about 32 channels (the last group may be smaller):
    every grouping gives the dense values and gradients, with and without gradients."""
    inputs = _inputs(2, heads, d, d_v, 5, 6, 4, 3, seed=heads)
    for circular in (True, False):
        out = attend_shared_query_windows(*inputs, 3, circular)
        assert out is not None
        reference = _dense_reference(*inputs, 3, circular)
        torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)
        weights = torch.randn(out.shape, dtype=torch.float64)
        grads = torch.autograd.grad((out * weights).sum(), inputs)
        expected = torch.autograd.grad((reference * weights).sum(), inputs)
        torch.testing.assert_close(grads, expected, rtol=1e-10, atol=1e-12)
        with torch.no_grad():
            torch.testing.assert_close(
                attend_shared_query_windows(*inputs, 3, circular), reference.detach()
            )


# ---------------------------------------------------------------- edge cases


@pytest.mark.parametrize("circular", [True, False])
def test_empty_batch(circular: bool) -> None:
    inputs = _inputs(0, 2, 3, 4, 5, 5, 4, 3)
    out = attend_shared_query_windows(*inputs, 3, circular)
    assert out is not None and out.shape == (0, 2, 4, 4, 5, 5)
    grads = torch.autograd.grad(out.sum(), inputs)
    assert [tuple(g.shape) for g in grads] == [tuple(x.shape) for x in inputs]
    assert float(grads[3].abs().sum()) == 0.0  # no pixel, no bias gradient
    with torch.no_grad():
        assert attend_shared_query_windows(*inputs, 3, circular).shape == out.shape  # type: ignore[union-attr]


def test_partial_requires_grad() -> None:
    """Only some inputs require a gradient (a fixed bias, a frozen query)."""
    q, k, v, bias = _inputs(1, 2, 3, 2, 5, 5, 4, 3)
    out = attend_shared_query_windows(q.detach(), k, v, bias.detach(), 3)
    assert out is not None
    gk, gv = torch.autograd.grad(out.square().sum(), (k, v))
    full = attend_shared_query_windows(q, k, v, bias, 3)
    assert full is not None
    ek, ev = torch.autograd.grad(full.square().sum(), (k, v))
    torch.testing.assert_close((gk, gv), (ek, ev))


def test_double_backward_raises_clearly() -> None:
    """Second derivatives are not implemented: asking for one (a backward pass that builds
    a graph) raises, naming the caller — never a silent zero or a dropped term."""
    from groupattn import ConfigurationError

    q, k, v, bias = _inputs(1, 1, 2, 2, 3, 3, 2, 3)
    out = attend_shared_query_windows(q, k, v, bias, 3, module="MyLayer")
    assert out is not None
    with pytest.raises(ConfigurationError, match="MyLayer: the 'factorised' attention"):
        torch.autograd.grad(out.square().sum(), (q,), create_graph=True)


# ---------------------------------------------------------------- torch.compile


def test_compiles_fullgraph() -> None:
    """Forward and backward under ``torch.compile(fullgraph=True)`` (``aot_eager``: Dynamo and
    AOT autograd, no code generation) give the eager values. Five heads of 8 channels: two
    groups of heads, the second smaller (see ``test_head_groups``)."""
    inputs = _inputs(1, 5, 8, 6, 5, 6, 4, 3, dtype=torch.float32)

    def step(*args: torch.Tensor) -> torch.Tensor:
        out = attend_shared_query_windows(*args, 3, True)
        assert out is not None
        return out

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    out = compiled(*inputs)
    expected = step(*inputs)
    torch.testing.assert_close(out, expected)
    weights = torch.randn(out.shape)
    grads = torch.autograd.grad((out * weights).sum(), inputs)
    expected_grads = torch.autograd.grad((expected * weights).sum(), inputs)
    torch.testing.assert_close(grads, expected_grads)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), expected.detach())
