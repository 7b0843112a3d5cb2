"""The factorised local kernel of lifting attention and the lifting convolution."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from groupattn.attention import (
    LiftingSelfAttention,
    attend,
    attend_shared_query_windows,
    attention_implementation,
)
from groupattn.contracts import Status
from groupattn.groups import CyclicGroup, DihedralGroup, GroupError, TorusTranslations, p4, p4m
from groupattn.nn import LiftingConvolution
from groupattn.testing import assert_equivariant


def _windows_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    k: int,
    circular: bool,
) -> torch.Tensor:
    """Per-pixel attention through :func:`attend`: one problem per pixel, ``G`` queries, ``k²`` keys."""
    b, heads, d, height, width = query.shape
    g = bias.shape[1]
    r = k // 2
    mode = "circular" if circular else "constant"

    def windows(x: torch.Tensor) -> torch.Tensor:  # (B, heads, c, H, W) -> (B·N, heads, k², c)
        c = x.shape[2]
        padded = F.pad(x.reshape(b * heads, c, height, width), (r, r, r, r), mode=mode)
        unfolded = F.unfold(padded, k).view(b, heads, c, k * k, height * width)
        return unfolded.permute(0, 4, 1, 3, 2).reshape(b * height * width, heads, k * k, c)

    q = query.permute(0, 3, 4, 1, 2).reshape(b * height * width, heads, 1, d).expand(-1, -1, g, -1)
    out = attend(q, windows(key), windows(value), bias[None])  # (B·N, heads, G, d_v)
    return out.view(b, height, width, heads, g, -1).permute(0, 3, 4, 5, 1, 2)


@settings(max_examples=12)
@given(
    k=st.sampled_from([1, 3, 5]),
    side=st.integers(5, 7),
    heads=st.integers(1, 3),
    d=st.integers(1, 4),
    g=st.sampled_from([1, 2, 4, 8]),
    circular=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_factorised_kernel_equals_per_pixel_attention(
    k: int, side: int, heads: int, d: int, g: int, circular: bool, seed: int
) -> None:
    torch.manual_seed(seed)
    shape = (2, heads, d, side, side + 1)
    q, key, v = (torch.randn(shape, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = (3 * torch.randn(heads, g, k * k, dtype=torch.float64)).requires_grad_()
    ours = attend_shared_query_windows(q, key, v, bias, k, circular)
    assert ours is not None
    reference = _windows_reference(q, key, v, bias, k, circular)
    torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(ours)
    grads = torch.autograd.grad((ours * weights).sum(), (q, key, v, bias))
    expected = torch.autograd.grad((reference * weights).sum(), (q, key, v, bias))
    for a, b in zip(grads, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # the inference path (offset-by-offset accumulation) agrees too
        torch.testing.assert_close(
            attend_shared_query_windows(q, key, v, bias, k, circular), reference.detach()
        )


def test_factorised_kernel_declines_a_bias_that_could_underflow() -> None:
    q = torch.randn(1, 1, 2, 5, 5)
    bias = torch.zeros(1, 4, 9)
    bias[0, 0, 0] = 200.0  # spread 200 > the float32 limit
    assert attend_shared_query_windows(q, q, q, bias, 3) is None
    assert (
        attend_shared_query_windows(q.double(), q.double(), q.double(), bias.double(), 3)
        is not None
    )
    with pytest.raises(
        ValueError, match=r"attend_shared_query_windows: expected bias \(heads=1, G, k²=9\)"
    ):
        attend_shared_query_windows(q, q, q, torch.zeros(1, 4, 8), 3)
    with pytest.raises(ValueError, match="expected query, key"):
        attend_shared_query_windows(q, q[:, :, :1], q, bias, 3)
    for k in (0, 4, 7):
        with pytest.raises(
            ValueError, match=f"expected an odd neighbourhood 1 <= k <= the grid side 5, got {k}"
        ):
            attend_shared_query_windows(q, q, q, torch.zeros(1, 4, k * k), k)


@pytest.mark.parametrize("point_group", ["C1", "C4", "D4", "C8"])
@pytest.mark.parametrize("neighbourhood", [3, 5])
def test_lifting_layer_paths_agree(point_group: str, neighbourhood: int) -> None:
    """The factorised path of a local lifting layer equals its tiled path through ``attend``."""
    torch.manual_seed(0)
    layer = LiftingSelfAttention(
        3, 6, point_group, num_heads=2, neighbourhood=neighbourhood
    ).double()
    for p in layer.encoding.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        layer.zero_grad()
        out = layer(x)
        out.sin().sum().backward()
        return out.detach(), [p.grad.clone() for p in layer.parameters()]  # type: ignore[union-attr]

    with attention_implementation("factorised"):
        factorised, factorised_grads = run()
    with attention_implementation("sdpa"):  # the tiled path (plain SDPA)
        tiled, tiled_grads = run()
    torch.testing.assert_close(factorised, tiled, rtol=1e-12, atol=1e-12)
    for a, b in zip(factorised_grads, tiled_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("point_group", ["C1", "C4", "D4", "C8"])  # C8: zero padding
@pytest.mark.parametrize("in_channels", [1, 2])
@pytest.mark.parametrize("biases", ["both", "none", "projection only"])
def test_input_space_path_equals_the_head_width_computation(
    point_group: str, in_channels: int, biases: str
) -> None:
    """Heads wider than the input (``C_in + 1 < d``): the layer attends over ``[x; 1]`` and
    folds the value and output projections; the same function and gradients as the tiled
    path, for circular and zero padding, with and without the projections' biases."""
    from unittest import mock

    torch.manual_seed(1)
    layer = LiftingSelfAttention(
        in_channels, 12, point_group, num_heads=2, neighbourhood=3
    ).double()
    for p in layer.encoding.parameters():
        torch.nn.init.normal_(p)
    if biases != "both":
        old = layer.qkv
        layer.qkv = torch.nn.Linear(in_channels, old.out_features, bias=False).double()
        layer.qkv.weight.data.copy_(old.weight.data)
    if biases == "none":
        old = layer.proj
        layer.proj = torch.nn.Linear(old.in_features, old.out_features, bias=False).double()
        layer.proj.weight.data.copy_(old.weight.data)
    x = torch.randn(2, in_channels, 7, 7, dtype=torch.float64, requires_grad=True)

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        layer.zero_grad()
        x.grad = None
        out = layer(x)
        out.sin().sum().backward()
        grads = [p.grad.clone() for p in layer.parameters() if p.grad is not None]
        return out.detach(), [*grads, x.grad.clone()]  # type: ignore[union-attr]

    spy = mock.patch.object(
        LiftingSelfAttention,
        "_attend_in_input_space",
        autospec=True,
        side_effect=LiftingSelfAttention._attend_in_input_space,
    )
    with attention_implementation("factorised"), spy as called:
        ours, our_grads = run()
    assert called.call_count == 1  # the input-space path ran
    with attention_implementation("sdpa"):  # the tiled path over the heads' width
        tiled, tiled_grads = run()
    torch.testing.assert_close(ours, tiled, rtol=1e-11, atol=1e-12)
    assert len(our_grads) == len(tiled_grads)
    for a, b in zip(our_grads, tiled_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_input_space_path_only_where_it_pays_and_for_plain_projections() -> None:
    """Heads no wider than ``C_in + 1``, or a projection with a hook, keep the head-width
    kernel (same results); the float32 forward agrees with float64 to float32 rounding."""
    from unittest import mock

    torch.manual_seed(2)
    narrow = LiftingSelfAttention(3, 8, "C4", num_heads=2, neighbourhood=3)  # d = 4 = C_in + 1
    hooked = LiftingSelfAttention(1, 12, "C4", num_heads=2, neighbourhood=3)
    hooked.proj.register_forward_hook(lambda module, args, out: out)
    wide = LiftingSelfAttention(1, 40, "C4", num_heads=2, neighbourhood=5)
    spy = mock.patch.object(
        LiftingSelfAttention,
        "_attend_in_input_space",
        autospec=True,
        side_effect=LiftingSelfAttention._attend_in_input_space,
    )
    with spy as called, torch.no_grad():
        narrow(torch.randn(2, 3, 8, 8))
        hooked(torch.randn(2, 1, 8, 8))
        assert called.call_count == 0
        x = torch.randn(2, 1, 12, 12)
        single = wide(x)
        assert called.call_count == 1
        double = wide.double()(x.double())
    torch.testing.assert_close(single.double(), double, rtol=1e-4, atol=1e-5)


def test_projections_without_bias_on_the_head_width_factorised_path() -> None:
    """A plain projection without bias (heads no wider than the input, so the head-width
    factorised kernel) used to index the missing bias (attack round 8)."""
    torch.manual_seed(3)
    layer = LiftingSelfAttention(3, 8, "C4", num_heads=2, head_dim=2, neighbourhood=3).double()
    for p in layer.encoding.parameters():
        torch.nn.init.normal_(p)
    old = layer.proj
    layer.proj = torch.nn.Linear(old.in_features, old.out_features, bias=False).double()
    layer.proj.weight.data.copy_(old.weight.data)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    with attention_implementation("factorised"):
        ours = layer(x)
    with attention_implementation("sdpa"):
        tiled = layer(x)
    torch.testing.assert_close(ours, tiled, rtol=1e-11, atol=1e-12)


# ---------------------------------------------------------------- lifting convolution


@pytest.mark.parametrize("point_group", [CyclicGroup(4), DihedralGroup(4)])
@pytest.mark.parametrize("kernel_size", [1, 3, 5])
def test_lifting_convolution_is_equivariant(
    point_group: CyclicGroup | DihedralGroup, kernel_size: int
) -> None:
    torch.manual_seed(kernel_size)
    conv = LiftingConvolution(2, 3, kernel_size, point_group).double()
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    assert_equivariant(conv, x, point_group, elements=point_group.elements())
    full = p4m(8) if isinstance(point_group, DihedralGroup) else p4(8)
    assert conv.contract(full).kind == Status.EQUIVARIANT
    assert_equivariant(conv, x, full, elements=[*full.sample(4, seed=2), full.translation((3, 6))])
    assert_equivariant(conv, x, TorusTranslations(8, 8), elements=[(1, 2), (7, 3)])


def test_lifting_convolution_slices_are_rotated_kernels() -> None:
    """Slice ``h`` is the circular convolution with the kernel rotated by ``h``; C1 is a plain convolution."""
    torch.manual_seed(0)
    conv = LiftingConvolution(1, 2, 3, "C4").double()
    x = torch.randn(1, 1, 6, 6, dtype=torch.float64)
    out = conv(x)
    padded = F.pad(x, (1, 1, 1, 1), mode="circular")
    for h in range(4):  # a quarter turn of the kernel per slice (rot90 convention of the C4 action)
        kernel = torch.rot90(conv.weight, h, dims=(-2, -1))
        torch.testing.assert_close(out[:, :, h], F.conv2d(padded, kernel, conv.bias))
    plain = LiftingConvolution(1, 2, 3, "C1").double()
    torch.testing.assert_close(plain(x)[:, :, 0], F.conv2d(padded, plain.weight, plain.bias))


def test_lifting_convolution_contracts_and_errors() -> None:
    conv = LiftingConvolution(1, 2, 3, "C4")
    assert conv.contract(DihedralGroup(4)).kind == Status.BROKEN
    assert "only rotated by C4" in (conv.contract(p4m(8)).reason or "")
    with pytest.raises(
        GroupError, match="LiftingConvolution: expected a point group acting exactly on the grid"
    ):
        LiftingConvolution(1, 2, 3, "C8")
    with pytest.raises(
        GroupError, match="LiftingConvolution: expected an odd kernel size >= 1, got 4"
    ):
        LiftingConvolution(1, 2, 4, "C4")
    with pytest.raises(GroupError, match="LiftingConvolution: expected positive channel widths"):
        LiftingConvolution(0, 2, 3, "C4")
    with pytest.raises(
        GroupError, match=r"LiftingConvolution: expected an image batch \(B, C=1, H, W\)"
    ):
        conv(torch.zeros(1, 2, 6, 6))
    with pytest.raises(
        GroupError, match="LiftingConvolution: expected a square grid for C4, got 6x8"
    ):
        conv(torch.zeros(1, 1, 6, 8))
    with pytest.raises(GroupError, match="at least 3x3, got 2x2"):
        conv(torch.zeros(1, 1, 2, 2))


@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
@pytest.mark.parametrize("layer_name", ["lifting_local", "group_local", "lifting_global"])
def test_layers_compile_without_graph_breaks(layer_name: str) -> None:
    """``torch.compile(fullgraph=True)`` traces the layers in training and in inference
    (no data-dependent branches, no strided ``out=`` writes, no cache lookups while tracing)."""
    from groupattn.attention import GroupSelfAttention

    torch.manual_seed(0)
    if layer_name == "group_local":
        layer: torch.nn.Module = GroupSelfAttention(2, 4, "C4", num_heads=2, neighbourhood=3)
        x = torch.randn(2, 2, 4, 6, 6)
    else:
        neighbourhood = 3 if layer_name == "lifting_local" else None
        layer = LiftingSelfAttention(2, 4, "C4", num_heads=2, neighbourhood=neighbourhood)
        x = torch.randn(2, 2, 6, 6)
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), layer(x))
    layer.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x))
