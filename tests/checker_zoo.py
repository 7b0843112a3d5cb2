"""An adversarial catalogue of small networks for ``groupattn.check.certify``, and an
independent float64 oracle.

This module holds no tests (see ``test_check_zoo_adversarial.py``). Each entry of
:data:`ZOO` is a :class:`ZooCase`: a factory for a small network, the input shape, the
name of the group acting on the input and the *expected* answer:

* ``"certified"`` — the network **is** equivariant (or invariant) under the group, and a
  checker should be able to certify it;
* ``"not-certified"`` — the network is numerically broken: the checker must answer
  *broken* or *unverified*, never *equivariant* / *invariant*.

``klass`` names the class of false certificate the entry probes (:data:`CLASSES`), or
``"genuine-<topic>"`` for further equivariant networks. Every class has broken entries
and *near-misses*: equivariant networks that look like the broken ones (the square
pooling window next to the non-square one, an op over both spatial axes next to one
over a single axis, a harmless in-place op next to a harmful one, …).

The oracle (:func:`oracle_error`) is written with plain torch ops only (``torch.roll``,
``torch.rot90``, ``torch.flip``): it knows nothing about groupattn's groups, field types
or contracts. It runs a float64 copy of the network on ``g·x`` for every element ``g``
of the group (all 64 shifts of the 8×8 torus, all of C4 / D4, every rotation and
reflection combined with a few shifts for p4 / p4m) and returns the worst relative error
``‖f(g·x) − g·f(x)‖ / ‖g·f(x)‖`` over every output leaf. How ``g`` acts on an output is
decided by its shape (rank ≤ 2: invariant; rank 4 with the input's grid: like the input;
``(B, H·W, C)``: tokens of the input's grid) unless the case states ``output_action``.
"""

from __future__ import annotations

import contextlib
import math
import random
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import einops
import torch
import torch.nn.functional as F
from torch import nn

from groupattn.attention import (
    AttentionPooling,
    GlobalSelfAttention,
    LiftingSelfAttention,
    MeanPooling,
    SpatialReductionAttention,
    WindowAttention,
)
from groupattn.canonical import (
    AdaptivePolyphaseDownsample,
    Canonicalized,
    PolyphaseAnchor,
    PolyphaseUnanchor,
)
from groupattn.check import group_from_name
from groupattn.groups import Group
from groupattn.nn import (
    GroupBlock,
    GroupGlobalPool,
    GroupPooling,
    LiftingConvolution,
    PatchEmbedding,
    SymmetricConvStem,
    TransformerBlock,
)
from groupattn.positional import (
    AbsolutePositionalEncoding,
    CirculantRelativeBias,
    ClippedRelativeBias,
    ConvPositionalEncoding,
)

__all__ = [
    "CLASSES",
    "GROUP_NAMES",
    "ZOO",
    "Const",
    "Fn",
    "ZooCase",
    "act",
    "group_elements",
    "oracle_error",
    "output_actions",
]

#: The classes of false certificate found in the old checker.
CLASSES = (
    "per-axis",  # 1. rotation/reflection groups with ops along one spatial axis
    "argument-forms",  # 2. dims given as axis=, positionally, as lists; bias/weight args
    "data-dependent",  # 3. masks, index-producing functions
    "in-place",  # 4. in-place mutation (views, setitem, out=)
    "subclass",  # 5. subclasses of torch modules with their own forward
    "multi-output",  # 6. tuples, lists, dicts of outputs
    "bias-plus-parameter",  # 7. an invariant bias combined with a plain parameter
    "library-state",  # 8. library modules whose state or class changed
)

#: The group names ``certify`` accepts (``group_from_name``).
GROUP_NAMES = ("translations", "c4", "d4", "p4", "p4m")

T8 = (2, 3, 8, 8)
SIDE = 8


# ----------------------------------------------------------------------------- the catalogue type


@dataclass(frozen=True)
class ZooCase:
    """One network of the zoo.

    Attributes
    ----------
    name
        Unique, used in test ids and failure messages.
    klass
        One of :data:`CLASSES`, or ``"genuine-<topic>"``.
    build
        Factory of the (float32) network; called under a seed derived from ``name``.
    input_shape
        Shape of the example input (``(B, C, H, W)`` images).
    group_name
        One of :data:`GROUP_NAMES`.
    expected
        ``"certified"`` or ``"not-certified"``.
    output_action
        How the group acts on the output: ``None`` (decided by the output's shape),
        one of ``"invariant"``, ``"grid"``, ``"tokens"``, ``"lifted-c4"`` for every
        output leaf, or a tuple with one per leaf (in :func:`flatten_outputs` order).
    note
        Why the network is (not) equivariant.
    """

    name: str
    klass: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    group_name: str
    expected: str
    output_action: str | tuple[str, ...] | None = None
    note: str = ""

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode())

    @property
    def certified(self) -> bool:
        return self.expected == "certified"

    def make(self) -> nn.Module:
        """The network, float32, in evaluation mode, built under the case's seed."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = self.build()
        return model.eval()

    def example_input(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed + 1)
        return torch.randn(*self.input_shape, generator=gen, dtype=torch.float64).to(dtype)

    def group(self) -> Group:
        return group_from_name(self.group_name, self.input_shape)

    def __repr__(self) -> str:  # short ids in pytest output
        return f"ZooCase({self.name})"


# ----------------------------------------------------------------------------- building blocks


class Const:
    """Marks a tensor that :class:`Fn` registers as a buffer (not a parameter)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def _register(module: nn.Module, parts: dict[str, Any]) -> tuple[str, ...]:
    for name, part in parts.items():
        if isinstance(part, nn.Module):
            module.add_module(name, part)
        elif isinstance(part, Const):
            module.register_buffer(name, part.tensor)
        elif isinstance(part, torch.Tensor) and part.is_floating_point():
            module.register_parameter(name, nn.Parameter(part))
        elif isinstance(part, torch.Tensor):
            module.register_buffer(name, part)
        else:
            raise TypeError(f"Fn: cannot register {name}={part!r}")
    return tuple(parts)


class Fn(nn.Module):
    """``f(x, **parts)`` as a module; tensor parts become parameters (``Const``: buffers),
    module parts submodules."""

    def __init__(self, f: Callable[..., Any], /, **parts: Any) -> None:
        super().__init__()
        self.f = f
        self.part_names = _register(self, parts)

    def forward(self, x: torch.Tensor) -> Any:
        return self.f(x, **{n: getattr(self, n) for n in self.part_names})

    def extra_repr(self) -> str:
        return getattr(self.f, "__name__", "f")


class BiasTerm(nn.Module):
    """``f(**parts)``: a pairwise attention bias ``(1, N, N)`` or ``(N, N)``."""

    def __init__(self, f: Callable[..., torch.Tensor], /, **parts: Any) -> None:
        super().__init__()
        self.f = f
        self.part_names = _register(self, parts)

    def forward(self) -> torch.Tensor:
        return self.f(**{n: getattr(self, n) for n in self.part_names})

    def extra_repr(self) -> str:
        return getattr(self.f, "__name__", "f")


def circ(cin: int, cout: int, k: int = 3) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, padding=k // 2, padding_mode="circular")


def tokens(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(2).transpose(1, 2)


def untokens(t: torch.Tensor, side: int = SIDE) -> torch.Tensor:
    return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], side, side)


def randomized(module: nn.Module, std: float = 1.0) -> nn.Module:
    """Every parameter redrawn from N(0, std²) (so a broken part shows numerically)."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)
    return module


def seq(*mods: nn.Module) -> nn.Sequential:
    return nn.Sequential(*mods)


class SquareMean(nn.Module):
    """``x² `` averaged over the grid: a non-linear invariant read-out ``(B, C)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.square().mean(dim=(2, 3))


class TanhMeanHead(nn.Module):
    """Pointwise non-linearity, global mean, linear read-out (invariant if the body is)."""

    def __init__(self, c: int, out: int = 2) -> None:
        super().__init__()
        self.fc = nn.Linear(c, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.tanh(x).mean(dim=(2, 3)))


# ============================================================================ 1. per-axis ops


def softmax_last(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def normalize_last(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def gram_mean(x: torch.Tensor) -> torch.Tensor:
    return (x @ x.transpose(-1, -2)).mean((-2, -1))


def axial_attention(x: torch.Tensor) -> torch.Tensor:
    t = x.permute(0, 3, 2, 1)  # (B, W, H, C): attention along H inside every column
    return F.scaled_dot_product_attention(t, t, t).permute(0, 3, 2, 1)


def dilated_maxpool_w(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, 3, 1, (0, 1), (1, 2))  # a 6x6 output from anisotropic windows


def centre_rows(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(-1, keepdim=True)


def cumsum_w(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, dim=3)


def logsumexp_h(x: torch.Tensor) -> torch.Tensor:
    return x - x.logsumexp(-2, keepdim=True)


def std_h_mean_w(x: torch.Tensor) -> torch.Tensor:
    return x.std(-2).mean(-1)


def softmax_both_axes(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(2).softmax(-1).view_as(x)


def paired_softmax(x: torch.Tensor) -> torch.Tensor:
    return x.softmax(-1) + x.transpose(-1, -2).softmax(-1).transpose(-1, -2)


def normalize_spatial(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.flatten(2), dim=-1).view_as(x)


def gram_symmetric(x: torch.Tensor) -> torch.Tensor:
    return (x @ x.mT).mean((-2, -1)) + (x.mT @ x).mean((-2, -1))


def gram_trace(x: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(x @ x.transpose(-1, -2), dim1=-2, dim2=-1).sum(-1)


def axial_both(x: torch.Tensor) -> torch.Tensor:
    cols = x.permute(0, 3, 2, 1)  # attention along H
    rows = x.permute(0, 2, 3, 1)  # attention along W
    a = F.scaled_dot_product_attention(cols, cols, cols).permute(0, 3, 2, 1)
    b = F.scaled_dot_product_attention(rows, rows, rows).permute(0, 3, 1, 2)
    return a + b


def paired_maxpool(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, (3, 1), 1, (1, 0)) + F.max_pool2d(x, (1, 3), 1, (0, 1))


def centre_grid(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean((-1, -2), keepdim=True)


def circular_maxpool(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(F.pad(x, (1, 1, 1, 1), mode="circular"), 3, 1)


def paired_cumsum(x: torch.Tensor) -> torch.Tensor:
    # cumulative sums in all four directions along both axes: every rotation/reflection
    # maps the set of four onto itself
    return (
        x.cumsum(-1)
        + x.flip(-1).cumsum(-1).flip(-1)
        + x.cumsum(-2)
        + x.flip(-2).cumsum(-2).flip(-2)
    )


PER_AXIS = [
    # broken
    ZooCase("pa-softmax-last-c4", "per-axis", lambda: Fn(softmax_last), T8, "c4", "not-certified"),
    ZooCase(
        "pa-nn-softmax-dim-2-d4", "per-axis", lambda: nn.Softmax(dim=-2), T8, "d4", "not-certified"
    ),
    ZooCase(
        "pa-normalize-last-d4", "per-axis", lambda: Fn(normalize_last), T8, "d4", "not-certified"
    ),
    ZooCase(
        "pa-layernorm-8-p4",
        "per-axis",
        lambda: nn.LayerNorm(8, elementwise_affine=False),
        T8,
        "p4",
        "not-certified",
    ),
    ZooCase(
        "pa-gram-mean-c4",
        "per-axis",
        lambda: Fn(gram_mean),
        T8,
        "c4",
        "not-certified",
        note="sum of squared column sums: rotations turn columns into rows",
    ),
    ZooCase(
        "pa-axial-attention-p4", "per-axis", lambda: Fn(axial_attention), T8, "p4", "not-certified"
    ),
    ZooCase(
        "pa-maxpool-3x1-c4",
        "per-axis",
        lambda: nn.MaxPool2d((3, 1), 1, (1, 0)),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "pa-avgpool-1x2-c4",
        "per-axis",
        lambda: seq(nn.AvgPool2d((1, 2)), SquareMean()),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "pa-avgpool-1x2-raw-c4",
        "per-axis",
        lambda: nn.AvgPool2d((1, 2)),
        T8,
        "c4",
        "not-certified",
        note="an 8x4 output cannot rotate with the input",
    ),
    ZooCase(
        "pa-dilated-maxpool-c4",
        "per-axis",
        lambda: nn.MaxPool2d(3, 1, padding=(1, 0), dilation=(2, 1)),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "pa-dilated-maxpool-fn-c4",
        "per-axis",
        lambda: Fn(dilated_maxpool_w),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase("pa-centre-rows-p4m", "per-axis", lambda: Fn(centre_rows), T8, "p4m", "not-certified"),
    ZooCase("pa-cumsum-c4", "per-axis", lambda: Fn(cumsum_w), T8, "c4", "not-certified"),
    ZooCase("pa-logsumexp-h-c4", "per-axis", lambda: Fn(logsumexp_h), T8, "c4", "not-certified"),
    ZooCase(
        "pa-conv-1x3-p4",
        "per-axis",
        lambda: nn.Conv2d(3, 3, (1, 3), padding=(0, 1), padding_mode="circular"),
        T8,
        "p4",
        "not-certified",
    ),
    ZooCase("pa-std-h-mean-w-c4", "per-axis", lambda: Fn(std_h_mean_w), T8, "c4", "not-certified"),
    # near-misses
    ZooCase(
        "pa-ok-softmax-both-axes-c4",
        "per-axis",
        lambda: Fn(softmax_both_axes),
        T8,
        "c4",
        "certified",
    ),
    ZooCase(
        "pa-ok-paired-softmax-c4",
        "per-axis",
        lambda: Fn(paired_softmax),
        T8,
        "c4",
        "certified",
        note="softmax over W plus softmax over H: rotations swap the two terms",
    ),
    ZooCase(
        "pa-ok-paired-softmax-d4", "per-axis", lambda: Fn(paired_softmax), T8, "d4", "certified"
    ),
    ZooCase(
        "pa-ok-layernorm-8x8-p4",
        "per-axis",
        lambda: nn.LayerNorm([8, 8], elementwise_affine=False),
        T8,
        "p4",
        "certified",
    ),
    ZooCase(
        "pa-ok-normalize-spatial-d4",
        "per-axis",
        lambda: Fn(normalize_spatial),
        T8,
        "d4",
        "certified",
    ),
    ZooCase(
        "pa-ok-gram-symmetric-c4", "per-axis", lambda: Fn(gram_symmetric), T8, "c4", "certified"
    ),
    ZooCase(
        "pa-ok-gram-trace-d4",
        "per-axis",
        lambda: Fn(gram_trace),
        T8,
        "d4",
        "certified",
        note="the diagonal of x xᵀ sums to ‖x‖²",
    ),
    ZooCase("pa-ok-axial-both-p4", "per-axis", lambda: Fn(axial_both), T8, "p4", "certified"),
    ZooCase(
        "pa-ok-maxpool-3x3-c4", "per-axis", lambda: nn.MaxPool2d(3, 1, 1), T8, "c4", "certified"
    ),
    ZooCase(
        "pa-ok-avgpool-2-c4",
        "per-axis",
        lambda: seq(nn.AvgPool2d(2), SquareMean()),
        T8,
        "c4",
        "certified",
    ),
    ZooCase(
        "pa-ok-avgpool-2-raw-d4",
        "per-axis",
        lambda: nn.AvgPool2d(2),
        T8,
        "d4",
        "certified",
        note="2x2 cells of an 8x8 grid map onto cells under rotations about the centre",
    ),
    ZooCase(
        "pa-ok-dilated-maxpool-c4",
        "per-axis",
        lambda: nn.MaxPool2d(3, 1, padding=1, dilation=2),
        T8,
        "c4",
        "certified",
        note="a 6x6 output whose windows are centred symmetrically",
    ),
    ZooCase(
        "pa-ok-paired-maxpool-c4", "per-axis", lambda: Fn(paired_maxpool), T8, "c4", "certified"
    ),
    ZooCase("pa-ok-centre-grid-p4m", "per-axis", lambda: Fn(centre_grid), T8, "p4m", "certified"),
    ZooCase(
        "pa-ok-circular-maxpool-p4", "per-axis", lambda: Fn(circular_maxpool), T8, "p4", "certified"
    ),
    ZooCase("pa-ok-paired-cumsum-d4", "per-axis", lambda: Fn(paired_cumsum), T8, "d4", "certified"),
]


# ============================================================================ 2. argument forms


def mean_axis_flatten(x: torch.Tensor) -> torch.Tensor:
    return x.mean(axis=-1).flatten(1)


def amax_axis_flatten(x: torch.Tensor) -> torch.Tensor:
    return torch.amax(x, axis=-1).flatten(1)


def layer_norm_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (8,), None, bias)


def layer_norm_weight(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (8,), weight, None)


def sum_positional_keepdim(x: torch.Tensor) -> torch.Tensor:
    return x.exp() / torch.sum(x.exp(), -1, True)


def amax_positional(x: torch.Tensor) -> torch.Tensor:
    return x - x.amax(-1, True)


def softmax_positional_dim(x: torch.Tensor) -> torch.Tensor:
    return F.softmax(x, 3)


def normalize_positional(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, 2.0, 3)


def vector_norm_kw(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def var_mean_h(x: torch.Tensor) -> torch.Tensor:
    v, m = torch.var_mean(x, dim=-2, keepdim=True)
    return (x - m) / (v + 1).sqrt()


def mean_axis_keepdims(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(axis=-1, keepdims=True)


def layer_norm_kw(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, normalized_shape=[8])


def amax_dim_list(x: torch.Tensor) -> torch.Tensor:
    return x - torch.amax(x, dim=[-1], keepdim=True)


def roll_kw_c4(x: torch.Tensor) -> torch.Tensor:
    return torch.roll(x, shifts=1, dims=3)


def mean_dim_tuple1_flatten(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=(-1,)).flatten(1)


def einsum_reduce_w(x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bchw->bch", x).flatten(1)


def einops_reduce_w(x: torch.Tensor) -> torch.Tensor:
    return einops.reduce(x, "b c h w -> b (c h)", "mean")


def mean_axis_full(x: torch.Tensor) -> torch.Tensor:
    return x.mean(axis=(-2, -1))


def amax_axis_full(x: torch.Tensor) -> torch.Tensor:
    return torch.amax(x, axis=(2, 3))


def layer_norm_grid(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (8, 8))


def layer_norm_channels(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x.movedim(1, -1), (3,), weight, bias).movedim(-1, 1)


def layer_norm_constant_bias(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (8, 8), None, shift.expand(8, 8))


def softmax_positional_channel(x: torch.Tensor) -> torch.Tensor:
    return F.softmax(x, 1)


def normalize_positional_channel(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, 2.0, 1)


def sum_positional_keepdim_full(x: torch.Tensor) -> torch.Tensor:
    return x.exp() / torch.sum(x.exp(), (2, 3), True)


def einsum_reduce_full(x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bchw->bc", x)


def einops_reduce_full(x: torch.Tensor) -> torch.Tensor:
    return einops.reduce(x, "b c h w -> b c", "max")


def roll_kw_both(x: torch.Tensor) -> torch.Tensor:
    return torch.roll(x, shifts=(1, -2), dims=(-2, -1))


def centre_dim_list(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(dim=[-1, -2], keepdim=True)


def var_mean_grid(x: torch.Tensor) -> torch.Tensor:
    v, m = torch.var_mean(x, dim=(-2, -1), keepdim=True)
    return (x - m) / (v + 1).sqrt()


def amax_positional_full(x: torch.Tensor) -> torch.Tensor:
    return x - x.amax((-1, -2), True)


ARGUMENT_FORMS = [
    # broken
    ZooCase(
        "af-mean-axis-flatten-translations",
        "argument-forms",
        lambda: seq(Fn(mean_axis_flatten), nn.Linear(24, 4)),
        T8,
        "translations",
        "not-certified",
        note="axis=-1 is one axis, not a full reduction: shifts along H permute the 24 features",
    ),
    ZooCase(
        "af-amax-axis-flatten-translations",
        "argument-forms",
        lambda: seq(Fn(amax_axis_flatten), nn.Linear(24, 4)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "af-mean-axis-flatten-c4",
        "argument-forms",
        lambda: seq(Fn(mean_axis_flatten), nn.Linear(24, 4)),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-layer-norm-position-bias",
        "argument-forms",
        lambda: Fn(layer_norm_bias, bias=torch.randn(8)),
        T8,
        "translations",
        "not-certified",
        note="the 4th positional argument is a bias varying along W",
    ),
    ZooCase(
        "af-layer-norm-position-weight",
        "argument-forms",
        lambda: Fn(layer_norm_weight, weight=torch.randn(8)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "af-sum-positional-keepdim-c4",
        "argument-forms",
        lambda: Fn(sum_positional_keepdim),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-amax-positional-c4",
        "argument-forms",
        lambda: Fn(amax_positional),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-softmax-positional-dim-c4",
        "argument-forms",
        lambda: Fn(softmax_positional_dim),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-normalize-positional-d4",
        "argument-forms",
        lambda: Fn(normalize_positional),
        T8,
        "d4",
        "not-certified",
    ),
    ZooCase(
        "af-vector-norm-kw-c4",
        "argument-forms",
        lambda: Fn(vector_norm_kw),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-var-mean-h-c4", "argument-forms", lambda: Fn(var_mean_h), T8, "c4", "not-certified"
    ),
    ZooCase(
        "af-mean-axis-keepdims-c4",
        "argument-forms",
        lambda: Fn(mean_axis_keepdims),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-layer-norm-kw-c4",
        "argument-forms",
        lambda: Fn(layer_norm_kw),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "af-amax-dim-list-c4",
        "argument-forms",
        lambda: Fn(amax_dim_list),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase("af-roll-kw-c4", "argument-forms", lambda: Fn(roll_kw_c4), T8, "c4", "not-certified"),
    ZooCase(
        "af-mean-dim-tuple1-translations",
        "argument-forms",
        lambda: seq(Fn(mean_dim_tuple1_flatten), nn.Linear(24, 4)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "af-einsum-reduce-w-translations",
        "argument-forms",
        lambda: seq(Fn(einsum_reduce_w), nn.Linear(24, 4)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "af-einops-reduce-w-translations",
        "argument-forms",
        lambda: seq(Fn(einops_reduce_w), nn.Linear(24, 4)),
        T8,
        "translations",
        "not-certified",
    ),
    # near-misses
    ZooCase(
        "af-ok-mean-axis-full-c4",
        "argument-forms",
        lambda: seq(Fn(mean_axis_full), nn.Linear(3, 4)),
        T8,
        "c4",
        "certified",
    ),
    ZooCase(
        "af-ok-amax-axis-full-p4m",
        "argument-forms",
        lambda: seq(Fn(amax_axis_full), nn.Linear(3, 4)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-layer-norm-grid-p4m",
        "argument-forms",
        lambda: Fn(layer_norm_grid),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-layer-norm-channels-p4m",
        "argument-forms",
        lambda: Fn(layer_norm_channels, weight=torch.randn(3), bias=torch.randn(3)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-layer-norm-constant-bias-p4m",
        "argument-forms",
        lambda: Fn(layer_norm_constant_bias, shift=torch.randn(1)),
        T8,
        "p4m",
        "certified",
        note="a bias that is the same at every position",
    ),
    ZooCase(
        "af-ok-softmax-positional-channel-d4",
        "argument-forms",
        lambda: Fn(softmax_positional_channel),
        T8,
        "d4",
        "certified",
    ),
    ZooCase(
        "af-ok-normalize-positional-channel-p4m",
        "argument-forms",
        lambda: Fn(normalize_positional_channel),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-sum-positional-keepdim-full-c4",
        "argument-forms",
        lambda: Fn(sum_positional_keepdim_full),
        T8,
        "c4",
        "certified",
    ),
    ZooCase(
        "af-ok-einsum-reduce-full-p4m",
        "argument-forms",
        lambda: seq(Fn(einsum_reduce_full), nn.Linear(3, 4)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-einops-reduce-full-p4m",
        "argument-forms",
        lambda: seq(Fn(einops_reduce_full), nn.Linear(3, 4)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-roll-kw-translations",
        "argument-forms",
        lambda: Fn(roll_kw_both),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "af-ok-centre-dim-list-d4",
        "argument-forms",
        lambda: Fn(centre_dim_list),
        T8,
        "d4",
        "certified",
    ),
    ZooCase(
        "af-ok-var-mean-grid-p4m",
        "argument-forms",
        lambda: Fn(var_mean_grid),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "af-ok-amax-positional-full-c4",
        "argument-forms",
        lambda: Fn(amax_positional_full),
        T8,
        "c4",
        "certified",
    ),
]


# ============================================================================ 3. data-dependent and masking functions


def tril(x: torch.Tensor) -> torch.Tensor:
    return torch.tril(x)


def where_index_w(x: torch.Tensor) -> torch.Tensor:
    return x - torch.where(x > 0)[3].to(x.dtype).mean()


def triu1(x: torch.Tensor) -> torch.Tensor:
    return torch.triu(x, 1)


def where_index_h(x: torch.Tensor) -> torch.Tensor:
    return x - torch.where(x > 0)[2].to(x.dtype).mean()


def nonzero_index_w(x: torch.Tensor) -> torch.Tensor:
    return x * x.gt(0).nonzero()[:, -1].to(x.dtype).mean()


def argmax_flat_index(x: torch.Tensor) -> torch.Tensor:
    return x + x.flatten(2).argmax(-1).to(x.dtype)[..., None, None]


def argsort_w(x: torch.Tensor) -> torch.Tensor:
    return x.argsort(-1).to(x.dtype) * x


def topk_index_w(x: torch.Tensor) -> torch.Tensor:
    return x + x.topk(1, dim=-1).indices.to(x.dtype)


def eye_mask(x: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(torch.eye(8, dtype=torch.bool), 0.0)


def arange_mask(x: torch.Tensor) -> torch.Tensor:
    return x * (torch.arange(8) < 4)


def tril_ones_like(x: torch.Tensor) -> torch.Tensor:
    return x * torch.ones_like(x).tril()


def where_tril_fallback(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, torch.tril(x))


def cummax_w(x: torch.Tensor) -> torch.Tensor:
    return x.cummax(-1).values


def where_argmax_position(x: torch.Tensor) -> torch.Tensor:
    return x - torch.where(x == x.amax(dim=(2, 3), keepdim=True))[2].to(x.dtype).mean()


def leaky_where(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, 0.1 * x)


def masked_fill_data(x: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(x < 0, 0.0)


def where_index_channel(x: torch.Tensor) -> torch.Tensor:
    return x - torch.where(x > 0)[1].to(x.dtype).mean()


def where_index_batch(x: torch.Tensor) -> torch.Tensor:
    return x * torch.where(x > 0.5)[0].to(x.dtype).mean()


def threshold_mask(x: torch.Tensor) -> torch.Tensor:
    return x * (x > x.mean((2, 3), keepdim=True))


def sort_channels(x: torch.Tensor) -> torch.Tensor:
    return x.sort(dim=1).values


def sort_positions(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(2).sort(-1).values


def topk_values(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(2).topk(3, dim=-1).values


def tril_channel_matrix(x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bchw,dc->bdhw", x, torch.ones(3, 3).tril())


def tril_channel_gram(x: torch.Tensor) -> torch.Tensor:
    return torch.tril(torch.einsum("bchw,bdhw->bcd", x, x))


def positive_count(x: torch.Tensor) -> torch.Tensor:
    return x * x.gt(0).sum().to(x.dtype) / x.numel()


def clamp_to_mean(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, min=x.mean())


class ChannelArgmaxEmbed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 1)
        self.table = nn.Embedding(5, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.table(self.conv(x).argmax(dim=1)).permute(0, 3, 1, 2)


DATA_DEPENDENT = [
    # broken
    ZooCase(
        "dd-tril-translations",
        "data-dependent",
        lambda: Fn(tril),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-where-index-w-translations",
        "data-dependent",
        lambda: Fn(where_index_w),
        T8,
        "translations",
        "not-certified",
        note="the mean column index of the positive entries moves with shifts",
    ),
    ZooCase("dd-triu-c4", "data-dependent", lambda: Fn(triu1), T8, "c4", "not-certified"),
    ZooCase(
        "dd-where-index-h-c4",
        "data-dependent",
        lambda: Fn(where_index_h),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "dd-nonzero-index-translations",
        "data-dependent",
        lambda: Fn(nonzero_index_w),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-argmax-flat-index-translations",
        "data-dependent",
        lambda: Fn(argmax_flat_index),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-argsort-w-translations",
        "data-dependent",
        lambda: Fn(argsort_w),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-topk-index-translations",
        "data-dependent",
        lambda: Fn(topk_index_w),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase("dd-eye-mask-c4", "data-dependent", lambda: Fn(eye_mask), T8, "c4", "not-certified"),
    ZooCase(
        "dd-arange-mask-translations",
        "data-dependent",
        lambda: Fn(arange_mask),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-tril-ones-like-translations",
        "data-dependent",
        lambda: Fn(tril_ones_like),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-where-tril-fallback-translations",
        "data-dependent",
        lambda: Fn(where_tril_fallback),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-cummax-translations",
        "data-dependent",
        lambda: Fn(cummax_w),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "dd-where-argmax-position-c4",
        "data-dependent",
        lambda: Fn(where_argmax_position),
        T8,
        "c4",
        "not-certified",
    ),
    # near-misses
    ZooCase(
        "dd-ok-leaky-where-p4m", "data-dependent", lambda: Fn(leaky_where), T8, "p4m", "certified"
    ),
    ZooCase(
        "dd-ok-masked-fill-data-p4m",
        "data-dependent",
        lambda: Fn(masked_fill_data),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "dd-ok-where-index-channel-p4m",
        "data-dependent",
        lambda: Fn(where_index_channel),
        T8,
        "p4m",
        "certified",
        note="channel indices of the positive entries: a multiset no spatial permutation changes",
    ),
    ZooCase(
        "dd-ok-where-index-batch-translations",
        "data-dependent",
        lambda: Fn(where_index_batch),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "dd-ok-threshold-mask-p4m",
        "data-dependent",
        lambda: Fn(threshold_mask),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "dd-ok-sort-channels-p4m",
        "data-dependent",
        lambda: Fn(sort_channels),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "dd-ok-sort-positions-p4m",
        "data-dependent",
        lambda: Fn(sort_positions),
        T8,
        "p4m",
        "certified",
        output_action="invariant",
        note="the sorted values over all positions do not depend on the order of the positions",
    ),
    ZooCase(
        "dd-ok-topk-values-translations",
        "data-dependent",
        lambda: Fn(topk_values),
        T8,
        "translations",
        "certified",
        output_action="invariant",
    ),
    ZooCase(
        "dd-ok-tril-channel-matrix-p4m",
        "data-dependent",
        lambda: Fn(tril_channel_matrix),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "dd-ok-tril-channel-gram-p4m",
        "data-dependent",
        lambda: Fn(tril_channel_gram),
        T8,
        "p4m",
        "certified",
        output_action="invariant",
    ),
    ZooCase(
        "dd-ok-positive-count-p4m",
        "data-dependent",
        lambda: Fn(positive_count),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "dd-ok-clamp-to-mean-p4m",
        "data-dependent",
        lambda: Fn(clamp_to_mean),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "dd-ok-channel-argmax-embedding-p4m",
        "data-dependent",
        ChannelArgmaxEmbed,
        T8,
        "p4m",
        "certified",
    ),
]


# ============================================================================ 4. in-place mutation


def conv_add_pos_(x: torch.Tensor, conv: nn.Module, pos: torch.Tensor) -> torch.Tensor:
    y = conv(x)
    y.add_(pos)
    return y


def narrow_zero_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.narrow(-1, 0, 1).zero_()
    return y


def input_mul_mask_(x: torch.Tensor, conv: nn.Module, mask: torch.Tensor) -> torch.Tensor:
    x.mul_(mask)
    return conv(x)


def setitem_row(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[:, :, 0] = 0.0
    return y


def setitem_scale(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[..., :4] *= 2
    return y


def diagonal_fill_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.diagonal(dim1=-2, dim2=-1).fill_(0.0)
    return y


def select_copy_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.select(-1, 0).copy_(y.select(-1, 1))
    return y


def tril_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.tril_()
    return y


def out_cumsum(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    torch.cumsum(x, -1, out=out)
    return out


def iadd_pos(x: torch.Tensor, conv: nn.Module, pos: torch.Tensor) -> torch.Tensor:
    y = conv(x)
    y += pos
    return y


def masked_fill_eye_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.masked_fill_(torch.eye(8, dtype=torch.bool), 0.0)
    return y


def add_out_pos(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    torch.add(x, pos, out=y)
    return y


def transposed_view_add_(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.transpose(-1, -2).add_(pos)
    return y


def index_fill_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.index_fill_(-1, torch.tensor([0, 3]), 0.0)
    return y


def relu_add_rows_(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.relu_().add_(rows)
    return y


def clone_relu_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.relu_()
    return y


def conv_add_channel_(x: torch.Tensor, conv: nn.Module, shift: torch.Tensor) -> torch.Tensor:
    y = conv(x)
    y.add_(shift)
    return y


def mul_sub_mean_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.mul_(2).sub_(y.mean((2, 3), keepdim=True))
    return y


def setitem_channel(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[:, 0] = 0.0
    return y


def residual_iadd(x: torch.Tensor, conv: nn.Module) -> torch.Tensor:
    y = conv(x)
    y += x
    return y


def clamp_sigmoid_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.clamp_(min=-0.5)
    y.sigmoid_()
    return y


def input_mul_scalar_(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2.0)
    return x.relu()


def narrow_channel_zero_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.narrow(1, 0, 1).zero_()
    return y


def add_out_scalar(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    torch.add(x, 1.0, out=y)
    return y


def masked_fill_data_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.masked_fill_(y < 0, 0.0)
    return y


def add_invariant_(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.add_(x.mean((2, 3), keepdim=True))
    return y


IN_PLACE = [
    # broken
    ZooCase(
        "ip-conv-add-pos",
        "in-place",
        lambda: Fn(conv_add_pos_, conv=circ(3, 3), pos=torch.randn(1, 3, 8, 8)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ip-narrow-zero", "in-place", lambda: Fn(narrow_zero_), T8, "translations", "not-certified"
    ),
    ZooCase(
        "ip-input-mul-mask",
        "in-place",
        lambda: Fn(input_mul_mask_, conv=circ(3, 3), mask=Const(torch.rand(8, 8) + 0.5)),
        T8,
        "translations",
        "not-certified",
        note="the input itself is multiplied by a fixed mask",
    ),
    ZooCase(
        "ip-setitem-row", "in-place", lambda: Fn(setitem_row), T8, "translations", "not-certified"
    ),
    ZooCase(
        "ip-setitem-scale",
        "in-place",
        lambda: Fn(setitem_scale),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ip-diagonal-fill-c4", "in-place", lambda: Fn(diagonal_fill_), T8, "c4", "not-certified"
    ),
    ZooCase(
        "ip-select-copy", "in-place", lambda: Fn(select_copy_), T8, "translations", "not-certified"
    ),
    ZooCase("ip-tril", "in-place", lambda: Fn(tril_), T8, "translations", "not-certified"),
    ZooCase(
        "ip-out-cumsum", "in-place", lambda: Fn(out_cumsum), T8, "translations", "not-certified"
    ),
    ZooCase(
        "ip-iadd-pos",
        "in-place",
        lambda: Fn(iadd_pos, conv=circ(3, 3), pos=torch.randn(1, 3, 8, 8)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ip-masked-fill-eye",
        "in-place",
        lambda: Fn(masked_fill_eye_),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ip-add-out-pos",
        "in-place",
        lambda: Fn(add_out_pos, pos=torch.randn(8, 8)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ip-transposed-view-add",
        "in-place",
        lambda: Fn(transposed_view_add_, pos=torch.randn(8, 8)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ip-index-fill", "in-place", lambda: Fn(index_fill_), T8, "translations", "not-certified"
    ),
    ZooCase(
        "ip-relu-add-rows-c4",
        "in-place",
        lambda: Fn(relu_add_rows_, rows=torch.randn(8, 1)),
        T8,
        "c4",
        "not-certified",
    ),
    # near-misses
    ZooCase("ip-ok-clone-relu-p4m", "in-place", lambda: Fn(clone_relu_), T8, "p4m", "certified"),
    ZooCase(
        "ip-ok-conv-add-channel",
        "in-place",
        lambda: Fn(conv_add_channel_, conv=circ(3, 3), shift=torch.randn(3, 1, 1)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ip-ok-mul-sub-mean-p4m", "in-place", lambda: Fn(mul_sub_mean_), T8, "p4m", "certified"
    ),
    ZooCase(
        "ip-ok-setitem-channel-p4m", "in-place", lambda: Fn(setitem_channel), T8, "p4m", "certified"
    ),
    ZooCase(
        "ip-ok-residual-iadd",
        "in-place",
        lambda: Fn(residual_iadd, conv=circ(3, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ip-ok-clamp-sigmoid-p4m", "in-place", lambda: Fn(clamp_sigmoid_), T8, "p4m", "certified"
    ),
    ZooCase(
        "ip-ok-input-mul-scalar-p4m",
        "in-place",
        lambda: Fn(input_mul_scalar_),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "ip-ok-relu-inplace-module",
        "in-place",
        lambda: seq(circ(3, 4), nn.ReLU(inplace=True), circ(4, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ip-ok-narrow-channel-zero-p4m",
        "in-place",
        lambda: Fn(narrow_channel_zero_),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "ip-ok-add-out-scalar-p4m", "in-place", lambda: Fn(add_out_scalar), T8, "p4m", "certified"
    ),
    ZooCase(
        "ip-ok-masked-fill-data-p4m",
        "in-place",
        lambda: Fn(masked_fill_data_),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "ip-ok-add-invariant-p4m", "in-place", lambda: Fn(add_invariant_), T8, "p4m", "certified"
    ),
]


# ============================================================================ 5. subclasses of torch modules


class WSConvZeroPad(nn.Conv2d):
    """Weight-standardised conv whose own forward calls F.conv2d: drops padding_mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (w.std((1, 2, 3), keepdim=True) + 1e-5)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class WSConvCircular(nn.Conv2d):
    """Weight-standardised conv through ``_conv_forward`` (keeps circular padding)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (w.std((1, 2, 3), keepdim=True) + 1e-5)
        return self._conv_forward(x, w, self.bias)


class PosIdentity(nn.Identity):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 3, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos


class PlainIdentity(nn.Identity):
    """A subclass that changes nothing."""


class PosSequential(nn.Sequential):
    def __init__(self, *mods: nn.Module) -> None:
        super().__init__(*mods)
        self.pos = nn.Parameter(torch.randn(1, 3, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self:
            x = m(x)
        return x + self.pos


class ResidualSequential(nn.Sequential):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self:
            x = x + m(x)
        return x


class NamedSequential(nn.Sequential):
    """A subclass without its own forward."""


class CumReLU(nn.ReLU):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).cumsum(-1)


class LeakyReLUSub(nn.ReLU):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, 0.1)


class LastAxisSoftmax(nn.Softmax):
    """Built with dim=1 (channels), but its forward uses the last axis."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1)


class ChannelSoftmax(nn.Softmax):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, 1)


class RowMaxPool(nn.MaxPool2d):
    """Built square (3, 1, 1), pools a 3x1 window."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, (3, 1), 1, (1, 0))


class SquareMaxPool(nn.MaxPool2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class RowLayerNorm(nn.LayerNorm):
    """Built over channels, normalises each row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (8,))


class ChannelLayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


class PosLinear(nn.Linear):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout)
        self.pos = nn.Parameter(torch.randn(64, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.pos


class PosConv(nn.Conv2d):
    def __init__(self) -> None:
        super().__init__(3, 3, 3, padding=1, padding_mode="circular")
        self.pos = nn.Parameter(torch.randn(1, 3, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.pos


class GainConv(nn.Conv2d):
    def __init__(self) -> None:
        super().__init__(3, 3, 3, padding=1, padding_mode="circular")
        self.gain = nn.Parameter(torch.randn(3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.gain


class FixedMaskDropout(nn.Dropout):
    def __init__(self) -> None:
        super().__init__(0.5)
        self.register_buffer("mask", (torch.rand(8, 8) > 0.5).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask


class EvalDropout(nn.Dropout):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.p, self.training)


class CausalMHA(nn.MultiheadAttention):
    def forward(self, query, key, value, **kwargs):  # type: ignore[no-untyped-def, override]
        mask = torch.ones(64, 64, dtype=torch.bool).triu(1)
        return super().forward(query, key, value, attn_mask=mask, need_weights=False)


class NoWeightsMHA(nn.MultiheadAttention):
    def forward(self, query, key, value, **kwargs):  # type: ignore[no-untyped-def, override]
        return super().forward(query, key, value, need_weights=False)


class PixelMHA(nn.Module):
    """Pixels as tokens (no positions) through a multi-head attention module."""

    def __init__(self, attn: nn.Module, dim: int = 4) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, 1)
        self.attn = attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = tokens(self.embed(x))
        return untokens(self.attn(t, t, t)[0])


class CornerFlatten(nn.Flatten):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., 0, 0]


class TopHalfPool(nn.AdaptiveAvgPool2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., :4, :].mean((2, 3))


class PositionalGELU(nn.GELU):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x) * self.scale


class TokensThen(nn.Module):
    """Image → pixel tokens → ``inner`` → image."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return untokens(self.inner(tokens(x)))


SUBCLASS = [
    # broken
    ZooCase(
        "sc-wsconv-drops-circular",
        "subclass",
        lambda: WSConvZeroPad(3, 4, 3, padding=1, padding_mode="circular"),
        T8,
        "translations",
        "not-certified",
        note="F.conv2d pads with zeros whatever padding_mode says",
    ),
    ZooCase(
        "sc-identity-adds-position", "subclass", PosIdentity, T8, "translations", "not-certified"
    ),
    ZooCase(
        "sc-sequential-custom-forward",
        "subclass",
        lambda: PosSequential(circ(3, 3), nn.ReLU(), circ(3, 3)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase("sc-relu-cumsum", "subclass", CumReLU, T8, "translations", "not-certified"),
    ZooCase(
        "sc-softmax-last-axis-c4",
        "subclass",
        lambda: LastAxisSoftmax(dim=1),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "sc-maxpool-row-window-c4",
        "subclass",
        lambda: RowMaxPool(3, 1, 1),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase("sc-layernorm-rows-c4", "subclass", lambda: RowLayerNorm(3), T8, "c4", "not-certified"),
    ZooCase(
        "sc-linear-adds-position",
        "subclass",
        lambda: TokensThen(PosLinear(3, 3)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase("sc-conv-adds-position", "subclass", PosConv, T8, "translations", "not-certified"),
    ZooCase(
        "sc-dropout-fixed-mask", "subclass", FixedMaskDropout, T8, "translations", "not-certified"
    ),
    ZooCase(
        "sc-mha-causal-mask",
        "subclass",
        lambda: PixelMHA(CausalMHA(4, 2, batch_first=True)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "sc-flatten-corner",
        "subclass",
        lambda: seq(CornerFlatten(), nn.Linear(3, 2)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "sc-avgpool-top-half",
        "subclass",
        lambda: seq(TopHalfPool(1), nn.Linear(3, 2)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase("sc-gelu-positional-scale-c4", "subclass", PositionalGELU, T8, "c4", "not-certified"),
    # near-misses
    ZooCase(
        "sc-ok-wsconv-keeps-circular",
        "subclass",
        lambda: WSConvCircular(3, 4, 3, padding=1, padding_mode="circular"),
        T8,
        "translations",
        "certified",
    ),
    ZooCase("sc-ok-plain-identity-p4m", "subclass", PlainIdentity, T8, "p4m", "certified"),
    ZooCase(
        "sc-ok-sequential-residual",
        "subclass",
        lambda: ResidualSequential(circ(3, 3), nn.Tanh(), circ(3, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "sc-ok-sequential-no-forward",
        "subclass",
        lambda: NamedSequential(circ(3, 4), nn.ReLU(), circ(4, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase("sc-ok-relu-leaky-p4m", "subclass", LeakyReLUSub, T8, "p4m", "certified"),
    ZooCase("sc-ok-conv-channel-gain", "subclass", GainConv, T8, "translations", "certified"),
    ZooCase(
        "sc-ok-softmax-channels-p4m",
        "subclass",
        lambda: ChannelSoftmax(dim=-1),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "sc-ok-maxpool-square-c4", "subclass", lambda: SquareMaxPool(3, 1, 1), T8, "c4", "certified"
    ),
    ZooCase(
        "sc-ok-layernorm-channels-p4m",
        "subclass",
        lambda: randomized(ChannelLayerNorm(3)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "sc-ok-mha-no-weights-p4m",
        "subclass",
        lambda: PixelMHA(NoWeightsMHA(4, 2, batch_first=True)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase("sc-ok-dropout-eval-p4m", "subclass", lambda: EvalDropout(0.5), T8, "p4m", "certified"),
]


# ============================================================================ 6. multiple outputs


class Out(NamedTuple):
    pooled: torch.Tensor
    field: torch.Tensor


def mean_and_pos(x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.mean((2, 3)), x + pos


def dict_relu_cumsum(x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"a": x.relu(), "b": x.cumsum(-1)}


def list_tril(x: torch.Tensor) -> list[torch.Tensor]:
    return [x, torch.tril(x)]


def nested_pos(x: torch.Tensor, pos: torch.Tensor) -> Any:
    return x.mean((2, 3)), (x, x + pos)


def pair_softmax_last(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x, x.softmax(-1)


def three_middle_broken(x: torch.Tensor, conv: nn.Module) -> Any:
    return conv(x), x - x[..., :1, :1], x.amax((2, 3))


def invariant_then_flatten_head(x: torch.Tensor, head: nn.Module) -> Any:
    return x.amax((2, 3)), head(x.flatten(1))


class TokensAndAbsolute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.pos = randomized(AbsolutePositionalEncoding(4, (8, 8)))
        self.pool = MeanPooling((8, 8))

    def forward(self, x: torch.Tensor) -> Any:
        t = self.embed(tokens(x))
        return self.pool(t), self.pos(t)


def namedtuple_zero_pad(x: torch.Tensor, conv: nn.Module) -> Out:
    return Out(x.mean((2, 3)), conv(x))


def last_of_three_broken(x: torch.Tensor) -> Any:
    return x.amax((2, 3)), x.flatten(2).softmax(-1).view_as(x), F.normalize(x, dim=-1)


def dict_nested_list(x: torch.Tensor, pos: torch.Tensor) -> Any:
    return {"pooled": x.mean((2, 3)), "maps": [x.relu(), x * pos]}


def mean_and_conv(x: torch.Tensor, conv: nn.Module) -> Any:
    return x.mean((2, 3)), conv(x)


def dict_c4(x: torch.Tensor) -> Any:
    return {"a": x.relu(), "b": x.amax((2, 3))}


def list_p4m(x: torch.Tensor) -> Any:
    return [x.tanh(), x.flatten(2).softmax(-1).view_as(x)]


def nested_ok(x: torch.Tensor, conv: nn.Module) -> Any:
    return x.mean((2, 3)), (x, conv(x))


class TokensAndPooled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.attn = GlobalSelfAttention(4, 2, (8, 8), bias="circulant")
        self.pool = MeanPooling((8, 8))

    def forward(self, x: torch.Tensor) -> Any:
        t = self.embed(tokens(x))
        t = t + self.attn(t)
        return t, self.pool(t)


def namedtuple_ok(x: torch.Tensor, conv: nn.Module) -> Out:
    return Out(x.amax((2, 3)), conv(x))


def three_ok_c4(x: torch.Tensor) -> Any:
    return x.sigmoid(), paired_softmax(x), gram_symmetric(x)


def same_twice(x: torch.Tensor, conv: nn.Module) -> Any:
    y = conv(x)
    return y, y


MULTI_OUTPUT = [
    # broken
    ZooCase(
        "mo-mean-and-position",
        "multi-output",
        lambda: Fn(mean_and_pos, pos=torch.randn(1, 3, 8, 8)),
        T8,
        "translations",
        "not-certified",
        note="the first output is invariant; the second is not equivariant",
    ),
    ZooCase(
        "mo-dict-cumsum",
        "multi-output",
        lambda: Fn(dict_relu_cumsum),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "mo-list-tril", "multi-output", lambda: Fn(list_tril), T8, "translations", "not-certified"
    ),
    ZooCase(
        "mo-nested-position",
        "multi-output",
        lambda: Fn(nested_pos, pos=torch.randn(1, 3, 8, 8)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "mo-pair-softmax-last-c4",
        "multi-output",
        lambda: Fn(pair_softmax_last),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "mo-three-middle-broken",
        "multi-output",
        lambda: Fn(three_middle_broken, conv=circ(3, 3)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "mo-invariant-then-flatten-head",
        "multi-output",
        lambda: Fn(invariant_then_flatten_head, head=nn.Linear(192, 4)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "mo-tokens-and-absolute",
        "multi-output",
        TokensAndAbsolute,
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "mo-namedtuple-zero-pad",
        "multi-output",
        lambda: Fn(namedtuple_zero_pad, conv=nn.Conv2d(3, 3, 3, padding=1)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "mo-last-of-three-broken-c4",
        "multi-output",
        lambda: Fn(last_of_three_broken),
        T8,
        "c4",
        "not-certified",
    ),
    ZooCase(
        "mo-dict-nested-list",
        "multi-output",
        lambda: Fn(dict_nested_list, pos=torch.randn(8, 8)),
        T8,
        "translations",
        "not-certified",
    ),
    # near-misses
    ZooCase(
        "mo-ok-mean-and-conv",
        "multi-output",
        lambda: Fn(mean_and_conv, conv=circ(3, 4)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase("mo-ok-dict-c4", "multi-output", lambda: Fn(dict_c4), T8, "c4", "certified"),
    ZooCase("mo-ok-list-p4m", "multi-output", lambda: Fn(list_p4m), T8, "p4m", "certified"),
    ZooCase(
        "mo-ok-nested",
        "multi-output",
        lambda: Fn(nested_ok, conv=circ(3, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "mo-ok-tokens-and-pooled", "multi-output", TokensAndPooled, T8, "translations", "certified"
    ),
    ZooCase(
        "mo-ok-namedtuple",
        "multi-output",
        lambda: Fn(namedtuple_ok, conv=circ(3, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase("mo-ok-three-c4", "multi-output", lambda: Fn(three_ok_c4), T8, "c4", "certified"),
    ZooCase(
        "mo-ok-same-tensor-twice",
        "multi-output",
        lambda: Fn(same_twice, conv=circ(3, 3)),
        T8,
        "translations",
        "certified",
    ),
]


# ============================================================================ 7. invariant bias + plain parameter


class BiasedAttention(nn.Module):
    """Pixel tokens attend to each other: ``softmax(q kᵀ/√d + bias()) v`` (or SDPA with
    ``attn_mask=bias()``); no other positional input. Output: tokens ``(B, 64, dim)``."""

    def __init__(self, bias: nn.Module, dim: int = 4, sdpa: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(3, 3 * dim)
        self.bias = bias
        self.sdpa = sdpa
        self.scale = dim**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(tokens(x)).chunk(3, dim=-1)
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias())
        scores = q @ k.transpose(-1, -2) * self.scale + self.bias()
        return torch.softmax(scores, dim=-1) @ v


def circulant() -> CirculantRelativeBias:
    return randomized(CirculantRelativeBias((8, 8), 1))


def torus_offset_index(side: int = SIDE) -> torch.Tensor:
    """``index[i, j]`` = the circular offset ``(y_j − y_i, x_j − x_i) mod side``, flattened."""
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    dy = (ys[None, :] - ys[:, None]) % side
    dx = (xs[None, :] - xs[:, None]) % side
    return dy * side + dx


def b_circ_plus_table(circ: nn.Module, table: torch.Tensor) -> torch.Tensor:
    return circ() + table


def b_circ_times_table(circ: nn.Module, table: torch.Tensor) -> torch.Tensor:
    return circ() * table


def b_circ_plus_rolled_eye(circ: nn.Module, s: torch.Tensor) -> torch.Tensor:
    return circ() + s * torch.eye(64).roll(1, 0)


def b_circ_plus_clipped(circ: nn.Module, clipped: nn.Module) -> torch.Tensor:
    return circ() + clipped()


def b_circ_plus_sliced(circ: nn.Module, big: torch.Tensor) -> torch.Tensor:
    return circ() + big[:64, :64]


def b_circ_plus_lowrank(circ: nn.Module, pos: torch.Tensor) -> torch.Tensor:
    return circ() + pos @ pos.T


def b_circ_plus_key_bias(circ: nn.Module, keys: torch.Tensor) -> torch.Tensor:
    return circ() + keys[None, :]


def b_circ_t_plus_table_t(circ: nn.Module, table: torch.Tensor) -> torch.Tensor:
    return circ().transpose(-1, -2) + table.t()


def b_hand_circulant_plus_table(
    offsets: torch.Tensor, index: torch.Tensor, table: torch.Tensor
) -> torch.Tensor:
    return offsets[index] + table


def b_circ(circ: nn.Module) -> torch.Tensor:
    return circ()


def b_circ_plus_scalar(circ: nn.Module, s: torch.Tensor) -> torch.Tensor:
    return circ() + s


def b_circ_plus_eye(circ: nn.Module, s: torch.Tensor) -> torch.Tensor:
    return circ() + s * torch.eye(64)


def b_two_circ(circ: nn.Module, other: nn.Module) -> torch.Tensor:
    return circ() + other()


def b_circ_times_scalar(circ: nn.Module, s: torch.Tensor) -> torch.Tensor:
    return circ() * s


def b_circ_key_roll(circ: nn.Module) -> torch.Tensor:
    # roll the keys by a torus shift: bias[i, j - (0, 1)] still depends on j - i only
    return circ().reshape(1, 64, 8, 8).roll(1, -1).reshape(1, 64, 64)


def b_hand_circulant(offsets: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return offsets[index]


def b_circ_t(circ: nn.Module) -> torch.Tensor:
    return circ().transpose(-1, -2)


def _bias(
    f: Callable[..., torch.Tensor], sdpa: bool = False, **parts: Any
) -> Callable[[], nn.Module]:
    return lambda: BiasedAttention(
        BiasTerm(f, **{k: (v() if callable(v) else v) for k, v in parts.items()}), sdpa=sdpa
    )


class GSATokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.attn = GlobalSelfAttention(4, 2, (8, 8), bias="circulant")
        randomized(self.attn.bias)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(self.embed(tokens(x)))


BIAS_PLUS_PARAMETER = [
    # broken
    ZooCase(
        "bp-circulant-plus-table",
        "bias-plus-parameter",
        _bias(b_circ_plus_table, circ=circulant, table=lambda: torch.randn(64, 64)),
        T8,
        "translations",
        "not-certified",
        note="softmax(q kᵀ + (circulant_bias() + table)) v",
    ),
    ZooCase(
        "bp-circulant-times-table",
        "bias-plus-parameter",
        _bias(b_circ_times_table, circ=circulant, table=lambda: torch.randn(64, 64)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-sdpa-mask-circulant-plus-table",
        "bias-plus-parameter",
        _bias(b_circ_plus_table, sdpa=True, circ=circulant, table=lambda: torch.randn(64, 64)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-circulant-plus-rolled-eye",
        "bias-plus-parameter",
        _bias(b_circ_plus_rolled_eye, circ=circulant, s=lambda: torch.ones(1) * 3),
        T8,
        "translations",
        "not-certified",
        note="a shift by one flattened index is not a torus offset",
    ),
    ZooCase(
        "bp-circulant-plus-clipped",
        "bias-plus-parameter",
        _bias(
            b_circ_plus_clipped,
            circ=circulant,
            clipped=lambda: randomized(ClippedRelativeBias((8, 8), 1)),
        ),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-circulant-plus-sliced-table",
        "bias-plus-parameter",
        _bias(b_circ_plus_sliced, circ=circulant, big=lambda: torch.randn(80, 80)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-circulant-plus-low-rank",
        "bias-plus-parameter",
        _bias(b_circ_plus_lowrank, circ=circulant, pos=lambda: torch.randn(64, 2)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-circulant-plus-key-bias",
        "bias-plus-parameter",
        _bias(b_circ_plus_key_bias, circ=circulant, keys=lambda: torch.randn(64)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-circulant-t-plus-table-t",
        "bias-plus-parameter",
        _bias(b_circ_t_plus_table_t, circ=circulant, table=lambda: torch.randn(64, 64)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "bp-hand-circulant-plus-table",
        "bias-plus-parameter",
        _bias(
            b_hand_circulant_plus_table,
            offsets=lambda: torch.randn(64),
            index=lambda: Const(torus_offset_index()),
            table=lambda: torch.randn(64, 64),
        ),
        T8,
        "translations",
        "not-certified",
    ),
    # near-misses
    ZooCase(
        "bp-ok-circulant",
        "bias-plus-parameter",
        _bias(b_circ, circ=circulant),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-circulant-plus-scalar",
        "bias-plus-parameter",
        _bias(b_circ_plus_scalar, circ=circulant, s=lambda: torch.randn(1)),
        T8,
        "translations",
        "certified",
        note="a scalar parameter is the same for every pair",
    ),
    ZooCase(
        "bp-ok-circulant-plus-eye",
        "bias-plus-parameter",
        _bias(b_circ_plus_eye, circ=circulant, s=lambda: torch.ones(1) * 3),
        T8,
        "translations",
        "certified",
        note="the diagonal i = j is an orbital",
    ),
    ZooCase(
        "bp-ok-two-circulants",
        "bias-plus-parameter",
        _bias(b_two_circ, circ=circulant, other=circulant),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-circulant-times-scalar",
        "bias-plus-parameter",
        _bias(b_circ_times_scalar, circ=circulant, s=lambda: torch.randn(1)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-circulant-key-torus-roll",
        "bias-plus-parameter",
        _bias(b_circ_key_roll, circ=circulant),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-hand-circulant",
        "bias-plus-parameter",
        _bias(
            b_hand_circulant,
            offsets=lambda: torch.randn(64),
            index=lambda: Const(torus_offset_index()),
        ),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-sdpa-mask-circulant",
        "bias-plus-parameter",
        _bias(b_circ, sdpa=True, circ=circulant),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-circulant-transposed",
        "bias-plus-parameter",
        _bias(b_circ_t, circ=circulant),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "bp-ok-global-self-attention",
        "bias-plus-parameter",
        GSATokens,
        T8,
        "translations",
        "certified",
    ),
]


# ============================================================================ 8. library contracts and changed state


class IdentityAnchor(PolyphaseAnchor):
    """Claims to be a polyphase anchoring; returns its input unchanged (frame 0)."""

    def forward(self, x: torch.Tensor) -> Canonicalized:  # type: ignore[override]
        b = x.shape[0]
        return Canonicalized(x, torch.zeros(b, 2, dtype=torch.long), torch.ones(b, dtype=x.dtype))


class SubclassedAnchor(PolyphaseAnchor):
    """A subclass that changes nothing."""


class AnchoredStridedHead(nn.Module):
    """anchor → 2×2 stride-2 conv → tanh → global mean → linear (invariant if anchored)."""

    def __init__(self, anchor: nn.Module) -> None:
        super().__init__()
        self.anchor = anchor
        self.conv = nn.Conv2d(3, 4, 2, stride=2)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(self.anchor(x).output)
        return self.fc(torch.tanh(y).mean(dim=(2, 3)))


class TokenNet(nn.Module):
    """Image → pixel tokens (Linear 3→8) → ``body`` → tokens (or ``head``)."""

    def __init__(self, body: nn.Module, head: nn.Module | None = None, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(3, dim)
        self.body = body
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.body(self.embed(tokens(x)))
        return t if self.head is None else self.head(t)


def gsa(index: str | None = None, table: bool = True) -> GlobalSelfAttention:
    attn = GlobalSelfAttention(8, 2, (8, 8), bias="circulant")
    bias = attn.bias
    assert isinstance(bias, CirculantRelativeBias)
    if table:
        randomized(bias)
    with torch.no_grad():
        if index == "random":
            bias.orbital_index.copy_(
                torch.randint(0, bias.table.shape[1], bias.orbital_index.shape)
            )
        elif index == "rows-permuted":
            bias.orbital_index.copy_(bias.orbital_index[torch.randperm(64)])
    return attn


class PositionalGSA(GlobalSelfAttention):
    def __init__(self) -> None:
        super().__init__(8, 2, (8, 8), bias="circulant")
        self.pos = nn.Parameter(torch.randn(64, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.pos


class FirstTokenPooling(MeanPooling):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


class ClippedInDisguise(CirculantRelativeBias):
    """A 'circulant' bias whose forward returns a free (N, N) table."""

    def __init__(self) -> None:
        super().__init__((8, 8), 2)
        self.free = nn.Parameter(torch.randn(2, 64, 64))

    def forward(self) -> torch.Tensor:
        return self.free


def gsa_with_bias(bias: nn.Module) -> GlobalSelfAttention:
    return GlobalSelfAttention(8, 2, (8, 8), bias=bias)


def peg(padding_mode_after: str | None = None) -> ConvPositionalEncoding:
    enc = randomized(ConvPositionalEncoding(8, (8, 8)), 0.5)
    if padding_mode_after is not None:
        enc.conv.padding_mode = padding_mode_after  # type: ignore[assignment]
    return enc


class PatchNet(nn.Module):
    """Anchored patch embedding → tanh → mean pooling → linear; with ``swap_conv`` the
    embedding's 2×2 stride-2 convolution is replaced (after construction) by a
    zero-padded 3×3 stride-2 one."""

    def __init__(self, swap_conv: bool) -> None:
        super().__init__()
        self.embed = PatchEmbedding(3, 8, 2, (8, 8), anchored=True)
        if swap_conv:
            self.embed.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = MeanPooling((4, 4))
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.tanh(self.embed(x))))


def window_attention(anchored_after: bool) -> WindowAttention:
    attn = WindowAttention(8, 2, (8, 8), 4, anchored=True)
    attn.anchored = anchored_after
    return randomized(attn, 0.5)


def stem_with_free_kernel() -> SymmetricConvStem:
    stem = SymmetricConvStem(3, 4)
    stem.register_parameter("free", nn.Parameter(torch.randn(4, 3, 3, 3)))
    free = stem.free
    stem.kernel = lambda: free  # type: ignore[method-assign]
    return stem


class PositionalLifting(LiftingConvolution):
    def __init__(self) -> None:
        super().__init__(3, 4, 3, "C4")
        self.pos = nn.Parameter(torch.randn(1, 4, 1, 8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.pos


class AnchoredResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(2)
        self.unanchor = PolyphaseUnanchor()
        self.f = nn.Sequential(nn.Conv2d(3, 3, 2, stride=2), nn.GELU(), nn.Upsample(scale_factor=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, frame, _margin = self.anchor(x)
        return self.unanchor(self.f(y), frame) + x


class APSNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = AdaptivePolyphaseDownsample(2)
        self.conv = circ(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.down(x).output).amax(dim=(2, 3))


class LiftNet(nn.Module):
    def __init__(self, lift: nn.Module, pool: nn.Module, middle: nn.Module | None = None) -> None:
        super().__init__()
        self.lift = lift
        self.middle = middle if middle is not None else nn.Identity()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.middle(self.lift(x)))


LIBRARY_STATE = [
    # broken
    ZooCase(
        "ls-gsa-orbital-index-random",
        "library-state",
        lambda: TokenNet(gsa(index="random")),
        T8,
        "translations",
        "not-certified",
        note="GlobalSelfAttention's circulant bias with its orbital index buffer overwritten",
    ),
    ZooCase(
        "ls-gsa-orbital-index-rows-permuted",
        "library-state",
        lambda: TokenNet(gsa(index="rows-permuted")),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ls-gsa-bias-swapped-for-clipped",
        "library-state",
        lambda: TokenNet(gsa_with_bias(randomized(ClippedRelativeBias((8, 8), 2)))),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ls-gsa-circulant-subclass-free-table",
        "library-state",
        lambda: TokenNet(gsa_with_bias(ClippedInDisguise())),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ls-anchor-subclass-identity",
        "library-state",
        lambda: AnchoredStridedHead(IdentityAnchor(2)),
        T8,
        "translations",
        "not-certified",
        note="a PolyphaseAnchor subclass whose forward is the identity",
    ),
    ZooCase(
        "ls-peg-padding-mode-changed",
        "library-state",
        lambda: TokenNet(peg("zeros")),
        T8,
        "translations",
        "not-certified",
        note="ConvPositionalEncoding built circular, its conv switched to zero padding",
    ),
    ZooCase(
        "ls-patch-embedding-conv-swapped",
        "library-state",
        lambda: PatchNet(swap_conv=True),
        T8,
        "translations",
        "not-certified",
        note="PatchEmbedding's conv replaced by a zero-padded 3x3 one after construction",
    ),
    ZooCase(
        "ls-window-attention-unanchored",
        "library-state",
        lambda: TokenNet(window_attention(anchored_after=False)),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ls-mean-pooling-subclass-first-token",
        "library-state",
        lambda: TokenNet(nn.Identity(), seq(FirstTokenPooling((8, 8)), nn.Linear(8, 2))),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ls-gsa-subclass-adds-position",
        "library-state",
        lambda: TokenNet(PositionalGSA()),
        T8,
        "translations",
        "not-certified",
    ),
    ZooCase(
        "ls-stem-kernel-replaced-p4m",
        "library-state",
        stem_with_free_kernel,
        T8,
        "p4m",
        "not-certified",
        note="SymmetricConvStem whose kernel() now returns an unconstrained kernel",
    ),
    ZooCase(
        "ls-lifting-subclass-adds-position-p4",
        "library-state",
        lambda: LiftNet(PositionalLifting(), GroupPooling("C4")),
        T8,
        "p4",
        "not-certified",
    ),
    # near-misses
    ZooCase(
        "ls-ok-anchor-strided-conv-pool",
        "library-state",
        lambda: AnchoredStridedHead(PolyphaseAnchor(2)),
        T8,
        "translations",
        "certified",
        note="PolyphaseAnchor + stride-2 conv + global pooling",
    ),
    ZooCase(
        "ls-ok-gsa-untouched",
        "library-state",
        lambda: TokenNet(
            GlobalSelfAttention(8, 2, (8, 8)), seq(MeanPooling((8, 8)), nn.Linear(8, 2))
        ),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-gsa-table-redrawn",
        "library-state",
        lambda: TokenNet(gsa(table=True)),
        T8,
        "translations",
        "certified",
        note="a new table is still one value per orbital",
    ),
    ZooCase(
        "ls-ok-peg-circular",
        "library-state",
        lambda: TokenNet(peg()),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-patch-embedding-anchored",
        "library-state",
        lambda: PatchNet(swap_conv=False),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-window-attention-anchored",
        "library-state",
        lambda: TokenNet(window_attention(anchored_after=True)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-lifting-conv-pool-p4",
        "library-state",
        lambda: LiftNet(LiftingConvolution(3, 4, 3, "C4"), GroupPooling("C4")),
        T8,
        "p4",
        "certified",
    ),
    ZooCase(
        "ls-ok-lifting-conv-lifted-p4",
        "library-state",
        lambda: LiftingConvolution(3, 4, 3, "C4"),
        T8,
        "p4",
        "certified",
        output_action="lifted-c4",
    ),
    ZooCase(
        "ls-ok-symmetric-stem-p4m",
        "library-state",
        lambda: SymmetricConvStem(3, 4),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "ls-ok-lifting-attention-p4",
        "library-state",
        lambda: LiftNet(LiftingSelfAttention(3, 4, "C4", grid=8), GroupGlobalPool("C4")),
        T8,
        "p4",
        "certified",
    ),
    ZooCase("ls-ok-aps-downsample", "library-state", APSNet, T8, "translations", "certified"),
    ZooCase(
        "ls-ok-anchored-residual",
        "library-state",
        AnchoredResidual,
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-spatial-reduction",
        "library-state",
        lambda: TokenNet(randomized(SpatialReductionAttention(8, 2, (8, 8), 2), 0.5)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-attention-pooling",
        "library-state",
        lambda: TokenNet(nn.Identity(), AttentionPooling(8, 2, (8, 8))),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-anchor-subclass-unchanged",
        "library-state",
        lambda: AnchoredStridedHead(SubclassedAnchor(2)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "ls-ok-group-block-p4",
        "library-state",
        lambda: LiftNet(
            LiftingConvolution(3, 4, 3, "C4"),
            GroupGlobalPool("C4"),
            GroupBlock(4, "C4", grid=8, neighbourhood=3),
        ),
        T8,
        "p4",
        "certified",
    ),
]


# ============================================================================ genuine networks on other topics


class RotOrbit(nn.Module):
    """``Σ_g g⁻¹ f(g x)`` over C4 (or D4) for a plain zero-padded convolution ``f``."""

    def __init__(self, reflections: bool = False) -> None:
        super().__init__()
        self.f = nn.Conv2d(3, 3, 3, padding=1)
        self.reflections = reflections

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = sum(torch.rot90(self.f(torch.rot90(x, k, (2, 3))), -k, (2, 3)) for k in range(4))
        if self.reflections:
            xf = torch.flip(x, (3,))
            out = out + torch.flip(
                sum(torch.rot90(self.f(torch.rot90(xf, k, (2, 3))), -k, (2, 3)) for k in range(4)),
                (3,),
            )
        return out  # type: ignore[return-value]


def circular_pad_conv(x: torch.Tensor, conv: nn.Module) -> torch.Tensor:
    return conv(F.pad(x, (1, 1, 1, 1), mode="circular"))


def roll_translations(x: torch.Tensor) -> torch.Tensor:
    return torch.roll(x, 3, -1) + torch.roll(x, (1, 2), (2, 3))


class D4SymmetricConv(nn.Module):
    """A circular conv whose 3×3 kernel is averaged over D4 by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        ws = [torch.rot90(w, k, (2, 3)) for k in range(4)]
        ws += [torch.flip(v, (3,)) for v in ws]
        kernel = torch.stack(ws).mean(0)
        return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), kernel)


class PixelEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 4, 1)
        self.layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(tokens(self.embed(x)))


GENUINE = [
    ZooCase(
        "gen-rot90-orbit-sum-c4",
        "genuine-orbit-sum",
        lambda: RotOrbit(),
        T8,
        "c4",
        "certified",
        note="sum over k of rot90(f(rot90(x, k)), -k) with a plain zero-padded conv f",
    ),
    ZooCase(
        "gen-d4-orbit-sum-d4",
        "genuine-orbit-sum",
        lambda: RotOrbit(reflections=True),
        T8,
        "d4",
        "certified",
    ),
    ZooCase(
        "gen-roll-translations",
        "genuine-roll",
        lambda: Fn(roll_translations),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "gen-circular-pad-valid-conv",
        "genuine-padding",
        lambda: Fn(circular_pad_conv, conv=nn.Conv2d(3, 4, 3)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "gen-mha-pixels-p4m",
        "genuine-attention",
        lambda: PixelMHA(nn.MultiheadAttention(4, 2, batch_first=True)),
        T8,
        "p4m",
        "certified",
        note="nn.MultiheadAttention over the pixels without positions: every permutation",
    ),
    ZooCase(
        "gen-transformer-encoder-pixels-p4m",
        "genuine-attention",
        PixelEncoder,
        T8,
        "p4m",
        "certified",
    ),
    ZooCase("gen-d4-symmetric-kernel-p4m", "genuine-conv", D4SymmetricConv, T8, "p4m", "certified"),
    ZooCase(
        "gen-pointwise-mlp-p4m",
        "genuine-conv",
        lambda: seq(nn.Conv2d(3, 6, 1), nn.GroupNorm(2, 6), nn.GELU(), nn.Conv2d(6, 3, 1)),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "gen-batchnorm-eval-p4m",
        "genuine-conv",
        lambda: randomized(nn.BatchNorm2d(3), 0.5),
        T8,
        "p4m",
        "certified",
    ),
    ZooCase(
        "gen-circular-convnet-head",
        "genuine-conv",
        lambda: seq(circ(3, 4), nn.SiLU(), circ(4, 4, 5), TanhMeanHead(4)),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "gen-transformer-block-circulant",
        "genuine-library",
        lambda: TokenNet(TransformerBlock(8, GlobalSelfAttention(8, 2, (8, 8), bias="circulant"))),
        T8,
        "translations",
        "certified",
    ),
    ZooCase(
        "gen-sdpa-pixels-p4m",
        "genuine-attention",
        lambda: Fn(
            lambda x: untokens(F.scaled_dot_product_attention(tokens(x), tokens(x), tokens(x)))
        ),
        T8,
        "p4m",
        "certified",
    ),
]


ZOO: list[ZooCase] = (
    PER_AXIS
    + ARGUMENT_FORMS
    + DATA_DEPENDENT
    + IN_PLACE
    + SUBCLASS
    + MULTI_OUTPUT
    + BIAS_PLUS_PARAMETER
    + LIBRARY_STATE
    + GENUINE
)


# ============================================================================ the oracle


class Element(NamedTuple):
    """A group element as plain torch ops: ``roll(flip?(rot90(t, k)), (dy, dx))``."""

    k: int
    flip: bool
    dy: int
    dx: int


def group_elements(
    group_name: str, side: int = SIDE, exhaustive: bool = True, seed: int = 0
) -> list[Element]:
    """Elements the oracle checks.

    ``translations``: all ``side²`` shifts (or, ``exhaustive=False``, the generators and a
    seeded sample, 18 in all); ``c4`` / ``d4``: every element; ``p4`` / ``p4m``: every
    rotation (and reflection) combined with the shifts (0, 0), (1, 0), (0, 1) and a
    seeded random one.
    """
    rng = random.Random(seed)
    all_shifts = [(dy, dx) for dy in range(side) for dx in range(side)]
    if group_name == "translations":
        if exhaustive:
            shifts = all_shifts
        else:
            shifts = [(0, 1), (1, 0), *rng.sample(all_shifts, 16)]
        return [Element(0, False, dy, dx) for dy, dx in shifts]
    point = {"c4": 4, "d4": 8, "p4": 4, "p4m": 8}.get(group_name)
    if point is None:
        raise ValueError(f"oracle: unknown group {group_name!r}")
    rotations = [
        (k, flip) for flip in ((False, True) if point == 8 else (False,)) for k in range(4)
    ]
    if group_name in ("c4", "d4"):
        return [Element(k, flip, 0, 0) for k, flip in rotations]
    shifts = [(0, 0), (1, 0), (0, 1), (rng.randrange(1, side), rng.randrange(1, side))]
    return [Element(k, flip, dy, dx) for k, flip in rotations for dy, dx in shifts]


def _act_grid(t: torch.Tensor, g: Element, dims: tuple[int, int] = (-2, -1)) -> torch.Tensor:
    if g.k:
        t = torch.rot90(t, g.k, dims)
    if g.flip:
        t = torch.flip(t, (dims[1],))
    if g.dy or g.dx:
        t = torch.roll(t, (g.dy, g.dx), dims)
    return t


def act(t: torch.Tensor, g: Element, action: str) -> torch.Tensor:
    """``g·t`` for an output of the given action (``invariant``, ``grid``, ``tokens``, ``lifted-c4``)."""
    if action == "invariant":
        return t
    if action == "grid":
        return _act_grid(t, g)
    if action == "tokens":
        b, n, c = t.shape
        side = math.isqrt(n)
        grid = t.reshape(b, side, side, c)
        return _act_grid(grid, g, (1, 2)).reshape(b, n, c)
    if action == "lifted-c4":
        if g.flip or t.dim() != 5 or t.shape[2] != 4:
            raise ValueError(
                f"oracle: lifted-c4 acts on (B, C, 4, H, W) by rotations only, got {tuple(t.shape)}, {g}"
            )
        return torch.roll(_act_grid(t, g), g.k, 2) if g.k else _act_grid(t, g)
    raise ValueError(f"oracle: unknown output action {action!r}")


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """Every tensor leaf of a (nested) tuple / list / dict / named tuple output."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [leaf for key in out for leaf in flatten_outputs(out[key])]
    if isinstance(out, tuple | list):
        return [leaf for item in out for leaf in flatten_outputs(item)]
    raise TypeError(f"oracle: unexpected output leaf {type(out).__name__}")


def output_actions(
    leaves: Sequence[torch.Tensor],
    input_shape: Sequence[int],
    group_name: str,
    stated: str | tuple[str, ...] | None,
) -> list[str]:
    """The action on every output leaf: stated, or decided by its shape."""
    if isinstance(stated, str):
        return [stated] * len(leaves)
    if stated is not None:
        if len(stated) != len(leaves):
            raise ValueError(
                f"oracle: {len(stated)} output actions stated for {len(leaves)} outputs"
            )
        return list(stated)
    actions = []
    h, w = input_shape[-2], input_shape[-1]
    for leaf in leaves:
        shape = tuple(leaf.shape)
        if leaf.dim() <= 2:
            actions.append("invariant")
        elif leaf.dim() == 4 and shape[-2:] == (h, w):
            actions.append("grid")
        elif leaf.dim() == 4 and group_name in ("c4", "d4"):
            actions.append("grid")  # rotations about the centre act on any grid size
        elif leaf.dim() == 3 and shape[1] == h * w:
            actions.append("tokens")
        else:
            raise ValueError(f"oracle: state output_action for an output of shape {shape}")
    return actions


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def relative_error(got: torch.Tensor, want: torch.Tensor, floor: float = 0.0) -> float:
    """``‖got − want‖ / ‖want‖`` (the denominator at least ``floor·√n``); ``inf`` for a
    shape mismatch or a non-finite value."""
    if got.shape != want.shape:
        return math.inf
    got, want = got.to(torch.float64), want.to(torch.float64)
    if not (torch.isfinite(got).all() and torch.isfinite(want).all()):
        return math.inf
    diff = float(torch.linalg.vector_norm(got - want))
    scale = max(float(torch.linalg.vector_norm(want)), floor * math.sqrt(want.numel()))
    if scale == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / scale


def model_error(
    model: nn.Module,
    x: torch.Tensor,
    group_name: str,
    output_action: str | tuple[str, ...] | None = None,
    exhaustive: bool = True,
    floor: float = 0.0,
) -> float:
    """Worst ``‖f(g·x) − g·f(x)‖ / ‖g·f(x)‖`` over the oracle's elements and every output
    leaf, for a float64 model and input (the input is cloned for every call, so in-place
    ops on it do no harm). ``floor``: see :func:`relative_error`."""
    with torch.no_grad():
        leaves = flatten_outputs(model(x.clone()))
        actions = output_actions(leaves, tuple(x.shape), group_name, output_action)
        worst = 0.0
        for g in group_elements(group_name, x.shape[-1], exhaustive):
            moved = flatten_outputs(model(_act_grid(x, g).clone()))
            if len(moved) != len(leaves):
                return math.inf
            for got, leaf, action in zip(moved, leaves, actions):
                try:
                    want = act(leaf, g, action)
                except RuntimeError:
                    return math.inf
                worst = max(worst, relative_error(got, want, floor))
    return worst


def float64_model(case: ZooCase) -> nn.Module:
    return case.make().double().eval()


def oracle_error(case: ZooCase, exhaustive: bool = True) -> float:
    """The case's network in float64: the worst relative equivariance error over every
    element the oracle checks (see :func:`group_elements`) and every output leaf."""
    with torch.random.fork_rng(devices=[]), default_dtype(torch.float64):
        model = float64_model(case)
        x = case.example_input(torch.float64)
        return model_error(model, x, case.group_name, case.output_action, exhaustive)
