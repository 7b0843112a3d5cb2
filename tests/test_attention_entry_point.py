"""The one attention entry point: its implementations agree, ``auto`` chooses as documented, the switch.

Every forced implementation (``"chunked"``, ``"factorised"``) is compared with plain
SDPA (``"sdpa"``) on every layer it applies to: outputs and the gradients of the input
and of every parameter (so of queries, keys, values and bias through the projections
and the positional encodings), in float64 (1e-10) and float32 (1e-5, relative to the
largest entry). At the kernel level the gradients of query, key, value and bias are
compared directly, for every broadcast shape of the bias.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import groupattn.attention._kernel as kernel
from groupattn import ConfigurationError, GroupattnError
from groupattn.actions import GSet
from groupattn.attention import (
    AttentionPooling,
    GlobalSelfAttention,
    GroupSelfAttention,
    LiftingSelfAttention,
    OrbitalAttention,
    SpatialReductionAttention,
    WindowAttention,
    attend,
    attend_shared_query_windows,
    attention_implementation,
    choose_implementation,
    get_attention_implementation,
)
from groupattn.groups import PointGroup, RotoTranslationGroup, TorusTranslations, p4
from groupattn.testing import assert_equivariant

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}
SIDE = 5


def _close(
    ours: torch.Tensor,
    reference: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    floor: float = 1e-30,
) -> None:
    """Relative error (to the largest entry of ``reference``, at least ``floor``) within the
    dtype's tolerance. ``floor`` lets a gradient that is zero in exact arithmetic (a bias
    term that shifts every logit of a row: softmax ignores it) be compared with rounding."""
    ours, reference = ours.detach(), reference.detach()
    scale = max(float(reference.abs().max()), floor)
    error = float((ours - reference).abs().max()) / scale
    if not error <= TOLERANCE[dtype]:
        raise AssertionError(
            f"{what}: expected a relative error <= {TOLERANCE[dtype]} in {dtype}, got {error:.3g}"
        )


def _autograd_nodes(out: torch.Tensor) -> set[str]:
    """The names of every node of ``out``'s backward graph."""
    seen: set[int] = set()
    names: set[str] = set()
    stack = [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(type(node).__name__)
        stack.extend(parent for parent, _ in node.next_functions)
    return names


#: the chunked implementation's autograd functions: dense, and gathering halos (local layers)
_CHUNKED_NODES = ("AttendTrainableBias", "AttendHalos")


def _uses_chunked(out: torch.Tensor) -> bool:
    return any(node in name for name in _autograd_nodes(out) for node in _CHUNKED_NODES)


def _uses_sdpa_backward(out: torch.Tensor) -> bool:
    """SDPA's own backward (fused or the unfused math path's softmax)."""
    names = _autograd_nodes(out)
    return any("Attention" in n and not any(c in n for c in _CHUNKED_NODES) for n in names) or any(
        "Softmax" in n for n in names
    )


# ---------------------------------------------------------------- the layers


def _lifting(neighbourhood: int | None, query_position: bool = False) -> nn.Module:
    return LiftingSelfAttention(
        3,
        4,
        "C4",
        num_heads=2,
        neighbourhood=neighbourhood,
        encoding="table" if query_position else "continuous",
        grid=SIDE,
        query_position=query_position,
    )


def _group(neighbourhood: int | None, query_position: bool = False) -> nn.Module:
    return GroupSelfAttention(
        3,
        4,
        "C4",
        num_heads=2,
        neighbourhood=neighbourhood,
        encoding="table" if query_position else "continuous",
        grid=SIDE,
        query_position=query_position,
    )


#: name → (layer factory, input shape, implementations that apply besides "sdpa")
LAYERS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], tuple[str, ...]]] = {
    "lifting_global": (lambda: _lifting(None), (2, 3, SIDE, SIDE), ("chunked",)),
    "lifting_global_qpos": (lambda: _lifting(None, True), (2, 3, SIDE, SIDE), ("chunked",)),
    "lifting_local": (lambda: _lifting(3), (2, 3, SIDE, SIDE), ("chunked", "factorised")),
    "lifting_local_qpos": (lambda: _lifting(3, True), (2, 3, SIDE, SIDE), ("chunked",)),
    "group_global": (lambda: _group(None), (2, 3, 4, SIDE, SIDE), ("chunked",)),
    "group_local": (lambda: _group(3), (2, 3, 4, SIDE, SIDE), ("chunked",)),
    "group_local_qpos": (lambda: _group(3, True), (2, 3, 4, SIDE, SIDE), ("chunked",)),
    "global_circulant": (
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias="circulant", prefix=1),
        (2, 17, 8),
        ("chunked",),
    ),
    "global_no_bias": (
        lambda: GlobalSelfAttention(8, 2, (4, 4), bias=None),
        (2, 16, 8),
        ("chunked",),
    ),
    "window_clipped": (
        lambda: WindowAttention(8, 2, (4, 4), window_size=2, shift=1, bias="clipped"),
        (2, 16, 8),
        ("chunked",),
    ),
    "window_circulant": (
        lambda: WindowAttention(8, 2, (4, 4), window_size=2, bias="circulant"),
        (2, 16, 8),
        ("chunked",),
    ),
    "reduced": (
        lambda: SpatialReductionAttention(8, 2, (4, 4), reduction=2),
        (2, 16, 8),
        ("chunked",),
    ),
    "pooling": (
        lambda: AttentionPooling(8, 2, (4, 4), num_queries=2, prefix=1),
        (2, 17, 8),
        ("chunked",),
    ),
    "orbital": (
        lambda: OrbitalAttention(8, 2, GSet.grid(p4(4), 4, 4), bias_init_std=1.0),
        (2, 16, 8),
        ("chunked",),
    ),
}

CASES = [
    (name, implementation) for name, (_, _, paths) in LAYERS.items() for implementation in paths
]


def _build(name: str, dtype: torch.dtype, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The layer with every parameter O(1) (so a wrong bias or gradient would show) and an input."""
    factory, shape, _ = LAYERS[name]
    torch.manual_seed(seed)
    layer = factory().to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.5)
    x = torch.randn(shape, dtype=dtype)
    return layer, x


def _run(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output, and the gradients of the input and of every parameter, of ``sum(out · w)``."""
    layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = layer(x)
    weights = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).view(out.shape)
    (out * weights).sum().backward()
    grads = [x.grad] + [p.grad for p in layer.parameters()]
    return out.detach(), [
        torch.zeros(()) if g is None else g.detach().clone()
        for g in grads  # type: ignore[union-attr]
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize(("name", "implementation"), CASES)
def test_forced_implementation_matches_plain_sdpa(
    name: str, implementation: str, dtype: torch.dtype
) -> None:
    layer, x = _build(name, dtype)
    with attention_implementation("sdpa"):
        reference, reference_grads = _run(layer, x)
    with attention_implementation(implementation, chunk_elements=37):  # many chunks
        ours, grads = _run(layer, x)
    _close(ours, reference, dtype, f"{name} output ({implementation})")
    names = ["input"] + [n for n, _ in layer.named_parameters()]
    assert len(grads) == len(names)
    largest = max(float(g.abs().max()) for g in reference_grads)
    for what, a, b in zip(names, grads, reference_grads):
        _close(a, b, dtype, f"{name} gradient of {what} ({implementation})", 1e-2 * largest)
    with torch.no_grad(), attention_implementation(implementation):  # inference paths too
        _close(layer(x), reference, dtype, f"{name} inference output ({implementation})")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize(
    "bias_shape",
    [None, (2, 3, 7, 9), (1, 3, 7, 9), (3, 7, 9), (7, 9), (1, 1, 1, 9), (2, 1, 7, 1), (1, 3, 1, 1)],
    ids=str,
)
def test_chunked_kernel_gradients_of_query_key_value_and_bias(
    bias_shape: tuple[int, ...] | None, dtype: torch.dtype
) -> None:
    """``attend`` forced to "chunked" equals "sdpa" for every bias broadcast, in one chunk or many."""
    torch.manual_seed(1)
    q = torch.randn(2, 3, 7, 5, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 3, 9, 5, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 3, 9, 4, dtype=dtype, requires_grad=True)
    inputs = [q, k, v]
    bias = None
    if bias_shape is not None:
        bias = torch.randn(bias_shape, dtype=dtype, requires_grad=True)
        inputs.append(bias)
    weights = torch.randn(2, 3, 7, 4, dtype=dtype)

    def run(name: str, chunk: int | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        with attention_implementation(name, chunk_elements=chunk):
            out = attend(q, k, v, bias)
            assert _uses_chunked(out) == (name == "chunked")
        return out.detach(), torch.autograd.grad((out * weights).sum(), inputs)

    reference, expected = run("sdpa")
    # a bias constant along the keys has gradient 0 (softmax ignores a shift of a row's
    # logits): compared relative to the largest gradient, its rounding passes
    largest = max(float(g.abs().max()) for g in expected)
    for chunk in (None, 1, 20, 100):
        out, grads = run("chunked", chunk)
        _close(out, reference, dtype, f"output, chunks of {chunk}")
        for what, a, b in zip(("query", "key", "value", "bias"), grads, expected):
            assert a.shape == b.shape
            _close(
                a, b, dtype, f"gradient of {what}, bias {bias_shape}, chunks of {chunk}", largest
            )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_factorised_kernel_gradients_of_query_key_value_and_bias(dtype: torch.dtype) -> None:
    """The factorised kernel equals dense attention on each pixel's window through ``attend`` ("sdpa")."""
    torch.manual_seed(2)
    b, heads, d, g, k = 2, 2, 3, 4, 3
    q, key, v = (
        torch.randn(b, heads, d, SIDE, SIDE + 1, dtype=dtype, requires_grad=True) for _ in range(3)
    )
    bias = (2 * torch.randn(heads, g, k * k, dtype=dtype)).requires_grad_()
    assert choose_implementation(q, window_bias=bias) == "factorised"
    ours = attend_shared_query_windows(q, key, v, bias, k)
    assert ours is not None

    def windows(x: torch.Tensor) -> torch.Tensor:  # (B, heads, c, H, W) -> (B·N, heads, k², c)
        c, height, width = x.shape[2:]
        padded = torch.nn.functional.pad(
            x.reshape(b * heads, c, height, width), (1,) * 4, "circular"
        )
        unfolded = torch.nn.functional.unfold(padded, k).view(b, heads, c, k * k, -1)
        return unfolded.permute(0, 4, 1, 3, 2).reshape(-1, heads, k * k, c)

    queries = q.permute(0, 3, 4, 1, 2).reshape(-1, heads, 1, d).expand(-1, -1, g, -1)
    with attention_implementation("sdpa"):
        dense = attend(queries, windows(key), windows(v), bias[None])
    reference = dense.view(b, SIDE, SIDE + 1, heads, g, d).permute(0, 3, 4, 5, 1, 2)
    _close(ours, reference, dtype, "factorised output")
    weights = torch.randn_like(ours)
    grads = torch.autograd.grad((ours * weights).sum(), (q, key, v, bias))
    expected = torch.autograd.grad((reference * weights).sum(), (q, key, v, bias))
    for what, a, e in zip(("query", "key", "value", "bias"), grads, expected):
        _close(a, e, dtype, f"factorised gradient of {what}")


# ---------------------------------------------------------------- what auto chooses


def test_auto_chooses_as_documented() -> None:
    torch.manual_seed(3)
    q = torch.randn(2, 2, 6, 4)
    fixed = torch.randn(1, 2, 6, 6)
    trainable = fixed.clone().requires_grad_()
    assert get_attention_implementation() == "auto"
    assert choose_implementation(q) == "sdpa"  # no bias
    assert choose_implementation(q, fixed) == "sdpa"  # a bias without gradient
    assert choose_implementation(q, trainable) == "chunked"  # SDPA would take its math path
    assert choose_implementation(q, trainable, dropout=0.1) == "sdpa"  # chunked has no dropout
    with torch.no_grad():
        assert choose_implementation(q, trainable) == "sdpa"  # inference
    # a windows problem: factorised while the bias's spread fits the dtype
    table = torch.zeros(2, 4, 9)
    assert choose_implementation(q, window_bias=table) == "factorised"
    table[0, 0, 0] = 200.0  # spread 200 > 80 (float32): the dense path instead
    assert choose_implementation(q, window_bias=table) == "sdpa"
    assert choose_implementation(q, window_bias=table.requires_grad_()) == "chunked"
    assert choose_implementation(q.double(), window_bias=table.double()) == "factorised"  # < 700
    # every forced name is returned as it is where it applies
    for name in ("sdpa", "chunked"):
        with attention_implementation(name):
            assert choose_implementation(q, trainable) == name
            assert choose_implementation(q, window_bias=table) == name
    with attention_implementation("factorised"):
        assert choose_implementation(q.double(), window_bias=table.double()) == "factorised"


def test_auto_never_reads_values_it_would_have_to_fetch_from_a_device() -> None:
    """The spread check reads the bias: only on real CPU tensors. On another device
    (``meta`` stands in for an accelerator here) or a fake tensor, ``"auto"`` takes the
    dense path without looking; a forced ``"factorised"`` runs unchecked."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q = torch.randn(2, 2, 6, 4)
    table = torch.zeros(2, 4, 9)
    assert choose_implementation(q, window_bias=table) == "factorised"
    meta_q, meta_table = q.to("meta"), table.to("meta")
    assert choose_implementation(meta_q, window_bias=meta_table) == "sdpa"
    with attention_implementation("factorised"):
        assert choose_implementation(meta_q, window_bias=meta_table) == "factorised"
    with FakeTensorMode() as mode:
        fake_q, fake_table = mode.from_tensor(q), mode.from_tensor(table)
        assert choose_implementation(fake_q, window_bias=fake_table) == "sdpa"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("global_circulant", "chunked"),  # the trainable circulant bias: the fast path
        ("global_no_bias", "sdpa"),
        ("window_clipped", "chunked"),
        ("reduced", "sdpa"),
        ("pooling", "sdpa"),
        ("orbital", "chunked"),
        ("lifting_global", "chunked"),
        ("lifting_local", "factorised"),
        ("lifting_local_qpos", "chunked"),
        ("group_global", "chunked"),
        ("group_local", "chunked"),
    ],
)
def test_layers_route_through_the_documented_implementation(name: str, expected: str) -> None:
    """``auto`` in training (gradients on), read off the backward graph (inference: the
    kernel-level test above, where no bias needs a gradient and ``auto`` is SDPA)."""
    layer, x = _build(name, torch.float32)
    out = layer(x)
    if expected == "chunked":
        assert _uses_chunked(out)
    elif expected == "sdpa":
        assert not _uses_chunked(out) and _uses_sdpa_backward(out)
    else:  # factorised: neither SDPA nor the chunked kernel
        assert not _uses_chunked(out) and not _uses_sdpa_backward(out)


# ---------------------------------------------------------------- the switch


def test_switch_restores_state_even_on_exception() -> None:
    assert get_attention_implementation() == "auto"
    default_chunk = kernel._chunk_elements
    with attention_implementation("sdpa") as entered:
        assert entered == "sdpa" and get_attention_implementation() == "sdpa"
        with attention_implementation("chunked", chunk_elements=5):
            assert get_attention_implementation() == "chunked" and kernel._chunk_elements == 5
        assert get_attention_implementation() == "sdpa"
        assert kernel._chunk_elements == default_chunk
    assert get_attention_implementation() == "auto"
    with pytest.raises(RuntimeError, match="inside"):
        with attention_implementation("factorised", chunk_elements=3):
            raise RuntimeError("inside")
    assert get_attention_implementation() == "auto" and kernel._chunk_elements == default_chunk
    with pytest.raises(ConfigurationError):  # a refused forced path inside the block
        with attention_implementation("factorised"):
            _build("global_circulant", torch.float32)[0](torch.randn(1, 17, 8))
    assert get_attention_implementation() == "auto"
    try:  # a plain setter
        attention_implementation("chunked")
        assert get_attention_implementation() == "chunked"
        layer, x = _build("global_no_bias", torch.float32)
        assert _uses_chunked(layer(x))
    finally:
        attention_implementation("auto")
    assert get_attention_implementation() == "auto"


def test_switch_refuses_unknown_names_and_sizes() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"attention_implementation: expected one of 'auto', 'sdpa', 'chunked', 'factorised', got 'flash'",
    ):
        attention_implementation("flash")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(
            ConfigurationError, match="expected a positive integer chunk_elements or None"
        ):
            attention_implementation("chunked", chunk_elements=bad)  # type: ignore[arg-type]
    assert get_attention_implementation() == "auto"  # nothing was set


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("global_circulant", "GlobalSelfAttention"),
        ("window_clipped", "WindowAttention"),
        ("reduced", "SpatialReductionAttention"),
        ("pooling", "AttentionPooling"),
        ("orbital", "OrbitalAttention"),
        ("lifting_global", "LiftingSelfAttention"),
        ("lifting_local_qpos", "LiftingSelfAttention"),  # content × position: no factorised form
        ("group_global", "GroupSelfAttention"),
        ("group_local", "GroupSelfAttention"),
    ],
)
def test_forcing_factorised_where_it_cannot_apply_names_the_layer(name: str, module: str) -> None:
    layer, x = _build(name, torch.float32)
    with (
        pytest.raises(
            ConfigurationError,
            match=rf"^{module}: attention_implementation\('factorised'\) expected a shared-query windows "
            r"problem .* got a dense attention problem",
        ),
        attention_implementation("factorised"),
    ):
        layer(x)


def test_forced_paths_refuse_what_they_cannot_compute() -> None:
    torch.manual_seed(4)
    layer, x = _build("lifting_local", torch.float32)
    with torch.no_grad():  # a bias spreading beyond float32's safe range for the factorised kernel
        for p in layer.get_submodule("encoding").parameters():
            p.mul_(100.0)
    with (
        attention_implementation("factorised"),
        pytest.raises(
            ConfigurationError,
            match=r"^LiftingSelfAttention: .*'factorised'.* spread .* at most 80",
        ),
    ):
        layer(x)
    with torch.no_grad():  # auto falls back to the tiled path, as documented
        auto = layer(x)
        with attention_implementation("sdpa"):
            torch.testing.assert_close(auto, layer(x))
    q = torch.randn(1, 2, 4, 3)
    with (
        attention_implementation("chunked"),
        pytest.raises(
            ConfigurationError,
            match=r"^attend: attention_implementation\('chunked'\) expected dropout 0",
        ),
    ):
        attend(q, q, q, dropout=0.5)
    assert issubclass(ConfigurationError, GroupattnError)


# ---------------------------------------------------------------- equivariance on every path


def _group_elements(group: PointGroup | RotoTranslationGroup) -> list:
    """Every point-group element, and for p4 its rotations about the origin and samples."""
    if isinstance(group, PointGroup):
        return group.elements()
    pg = group.point_group
    return [group.point(h) for h in pg.elements()] + group.sample(3, seed=3)


EQUIVARIANT_CASES = [
    (name, implementation)
    for name in LAYERS
    if name.startswith(("lifting", "group"))
    for implementation in ("auto", "sdpa", *LAYERS[name][2])
]


@pytest.mark.parametrize(("name", "implementation"), EQUIVARIANT_CASES)
def test_lifting_and_group_layers_are_equivariant_on_every_path(
    name: str, implementation: str
) -> None:
    layer, x = _build(name, torch.float64)
    with attention_implementation(implementation):
        for group in (p4(SIDE), TorusTranslations(SIDE, SIDE)):
            elements = (
                _group_elements(group)
                if not isinstance(group, TorusTranslations)
                else group.sample(3, seed=1)
            )
            assert_equivariant(layer, x, group, elements=elements)


@pytest.mark.parametrize("implementation", ["auto", "sdpa", "chunked"])
def test_global_layer_is_translation_equivariant_on_every_path(implementation: str) -> None:
    layer, _ = _build("global_no_bias", torch.float64)
    circulant = GlobalSelfAttention(8, 2, (4, 4), bias="circulant").double()
    with torch.no_grad():
        for p in circulant.parameters():
            p.normal_(0.0, 0.5)
    x = torch.randn(2, 16, 8, dtype=torch.float64)
    with attention_implementation(implementation):
        for module in (layer, circulant):
            assert_equivariant(
                module,
                x,
                TorusTranslations(4, 4),
                elements=TorusTranslations(4, 4).sample(4, seed=2),
            )
