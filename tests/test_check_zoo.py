"""The checker's zoo: known-good and known-broken networks, each certified and verified.

Every entry states its expected verdict (and, for broken ones, the node that breaks
and a word of the reason); the test certifies it and checks the numerical verdict
agrees (certified networks verify to float64 tolerance, broken ones show an error well
above it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from groupattn.actions import LiftedField, TokenField
from groupattn.attention import GlobalSelfAttention, MeanPooling
from groupattn.canonical import AdaptivePolyphaseDownsample, PolyphaseAnchor, PolyphaseUnanchor
from groupattn.check import Status, certify, group_from_name
from groupattn.contracts import Contract, register_contract
from groupattn.groups import CyclicGroup, Group, TorusTranslations
from groupattn.nn import GroupPooling
from groupattn.positional import (
    AbsolutePositionalEncoding,
    ClippedRelativeBias,
    ConvPositionalEncoding,
)


def circ(cin: int, cout: int, k: int = 3) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, padding=k // 2, padding_mode="circular")


# ----------------------------------------------------------------------------- good networks


class ToTokens(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2).transpose(1, 2)


class TokenMHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 1)
        self.norm = nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.norm(self.embed(x).flatten(2).transpose(1, 2))
        t = t + self.attn(t, t, t)[0]
        return self.head(t.mean(dim=1))


class HandAttention(nn.Module):
    """Attention from torch pieces: rearranged heads, scaled_dot_product_attention."""

    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = rearrange(x, "b c h w -> b (h w) c")
        q, k, v = rearrange(self.qkv(t), "b n (three h d) -> three b h n d", three=3, h=self.heads)
        out = F.scaled_dot_product_attention(q, k, v)
        out = self.proj(rearrange(out, "b h n d -> b n (h d)"))
        return rearrange(out, "b (h w) c -> b c h w", h=x.shape[2])


class AnchoredStrided(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(2)
        self.conv = nn.Conv2d(3, 4, 2, stride=2)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(self.anchor(x).output)
        return self.head(y.mean(dim=(2, 3)))


class AnchoredResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(2)
        self.unanchor = PolyphaseUnanchor()
        self.f = nn.Sequential(nn.Conv2d(3, 3, 1), nn.GELU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, frame, _margin = self.anchor(x)
        return self.unanchor(self.f(y), frame) + x


class TwoBranchCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = circ(3, 2)
        self.b = nn.Conv2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x), torch.relu(self.b(x))], dim=1)


class SoftmaxPool(nn.Module):
    """Learned-query pooling written by hand: softmax over positions, weighted sum."""

    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(3, 1)
        self.value = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2)
        w = torch.softmax(self.score(t), dim=1)
        return (w * self.value(t)).sum(dim=1)


class LibraryTokens(nn.Module):
    def __init__(self, grid: tuple[int, int] = (8, 8)) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 8)
        self.peg = ConvPositionalEncoding(8, grid, padding_mode="circular")
        self.attn = GlobalSelfAttention(8, 2, grid, bias="circulant")
        self.pool = MeanPooling(grid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x.flatten(2).transpose(1, 2))
        t = self.peg(t)
        t = t + self.attn(t)
        return self.pool(t)


class ChannelArgmaxEmbed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 1)
        self.table = nn.Embedding(5, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = self.conv(x).argmax(dim=1)
        return self.table(idx).permute(0, 3, 1, 2)


class APSNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = AdaptivePolyphaseDownsample(2)
        self.conv = circ(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.down(x).output).amax(dim=(2, 3))


class AnchoredPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(2)
        self.pool = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.anchor(x).output).mean(dim=(2, 3))


def my_swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x) if x.is_floating_point() else x


@register_contract(my_swish)
def _swish_contract(fn: object, group: Group, input_type: object) -> Contract:
    return Contract.equivariant(input_type, input_type)


class UsesRegisteredFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = circ(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return my_swish(self.conv(x))


class DeclaresContract(nn.Module):
    """A custom block with its own ``contract`` (a leaf for the checker)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = circ(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x))

    def contract(self, group: Group, input_type: object = None) -> Contract:
        from groupattn.actions import GridField

        return Contract.equivariant(GridField(), GridField())


class LiftedPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(3, 3)
        self.pool = GroupPooling("C4")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mix(x.movedim(1, -1)).movedim(-1, 1)
        return self.pool(y)


class TorchEncoder(nn.Module):
    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 1)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2
        )
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        if self.causal:
            return self.encoder(
                t, mask=nn.Transformer.generate_square_subsequent_mask(64), is_causal=True
            )
        return self.encoder(t).mean(dim=1)


# ----------------------------------------------------------------------------- broken networks


class TokensAbsolute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 8)
        self.pos = AbsolutePositionalEncoding(8, (8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pos(self.embed(x.flatten(2).transpose(1, 2)))


class RawPositionParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 3, 8, 8))
        self.conv = circ(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x + self.pos)


class ArangeEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2)
        return t + self.table(torch.arange(64))


class ClippedBiasAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = GlobalSelfAttention(3, 1, (8, 8), bias="clipped")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x.flatten(2).transpose(1, 2))


class ClippedBiasByHand(nn.Module):
    """Scores plus a library bias module, composed from torch pieces."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(3, 9)
        self.bias = ClippedRelativeBias((8, 8), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) + self.bias()
        return torch.softmax(scores, dim=-1) @ v


class ResidualAcrossAnchor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(2)
        self.f = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(self.anchor(x).output)


class CatAcrossFrames(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.anchor(x).output], dim=1)


class WrongUnanchor(nn.Module):
    """Restores the frame of one anchoring on a tensor anchored by another."""

    def __init__(self) -> None:
        super().__init__()
        self.first = PolyphaseAnchor(2)
        self.second = PolyphaseAnchor(2)
        self.conv = circ(3, 3)
        self.unanchor = PolyphaseUnanchor()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frame = self.first(x).frame
        y = self.second(self.conv(x)).output
        return self.unanchor(y, frame)


class FlattenIntoChannels(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3 * 64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class GroupAxisLinear(nn.Module):
    """A channel-mixing linear applied over the point-group axis of a lifted field."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.movedim(2, -1)).movedim(-1, 2)


class CausalAttention(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2).unsqueeze(1)
        return F.scaled_dot_product_attention(t, t, t, is_causal=True)


class Crop(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, :4, :4].mean(dim=(2, 3))


class Noise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn(x.shape)


class OneAxisMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=2, keepdim=True)


def _randomized(module: nn.Module) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
    return module


@dataclass
class Case:
    name: str
    make: Callable[[], nn.Module]
    shape: tuple[int, ...]
    group: str | Callable[[], Group]
    verdict: Status
    node: str | None = None
    reason_word: str | None = None

    def build_group(self) -> Group:
        if isinstance(self.group, str):
            return group_from_name(self.group, self.shape)
        return self.group()


T8 = (2, 3, 8, 8)
EQ, INV, BROKEN = Status.EQUIVARIANT, Status.INVARIANT, Status.BROKEN

GOOD = [
    Case(
        "circular-convs",
        lambda: nn.Sequential(circ(3, 4), nn.ReLU(), circ(4, 3, 5)),
        T8,
        "translations",
        EQ,
    ),
    Case(
        "conv-pool-head",
        lambda: nn.Sequential(
            circ(3, 4), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
        ),
        T8,
        "translations",
        INV,
    ),
    Case(
        "pointwise-groupnorm",
        lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.GroupNorm(2, 4), nn.GELU()),
        T8,
        "translations",
        EQ,
    ),
    Case("tokens-mha", TokenMHA, T8, "translations", INV),
    Case("hand-attention", HandAttention, (2, 8, 8, 8), "translations", EQ),
    Case("anchored-strided-conv", AnchoredStrided, T8, "translations", INV),
    Case("anchored-residual", AnchoredResidual, T8, "translations", EQ),
    Case("two-branch-cat", TwoBranchCat, T8, "translations", EQ),
    Case("softmax-pool", SoftmaxPool, T8, "translations", INV),
    Case("library-tokens", LibraryTokens, T8, "translations", INV),
    Case("channel-argmax-embedding", ChannelArgmaxEmbed, T8, "translations", EQ),
    Case("aps-downsample", APSNet, T8, "translations", INV),
    Case("anchored-avgpool", AnchoredPool, T8, "translations", INV),
    Case("registered-function", UsesRegisteredFunction, T8, "translations", EQ),
    Case("declared-contract", DeclaresContract, T8, "translations", EQ),
    Case(
        "c4-pointwise-invariant",
        lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU(), nn.AdaptiveMaxPool2d(1)),
        T8,
        "c4",
        INV,
    ),
    Case("d4-pointwise", lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.Tanh()), T8, "d4", EQ),
    Case("p4-lifted-pool", LiftedPool, (2, 3, 4, 8, 8), "p4", EQ),
    Case("torch-transformer-encoder", TorchEncoder, T8, "translations", INV),
    Case(
        "strided-group",
        lambda: nn.Conv2d(3, 4, 2, stride=2),
        T8,
        lambda: TorusTranslations(4, 4, stride=2),
        EQ,
    ),
]

BAD = [
    Case(
        "absolute-positional-encoding",
        TokensAbsolute,
        T8,
        "translations",
        BROKEN,
        "pos",
        "absolute",
    ),
    Case(
        "raw-position-parameter",
        RawPositionParameter,
        T8,
        "translations",
        BROKEN,
        "add",
        "absolute positional",
    ),
    Case(
        "arange-embedding",
        ArangeEmbedding,
        T8,
        "translations",
        BROKEN,
        "add",
        "absolute positional",
    ),
    Case(
        "clipped-relative-bias", ClippedBiasAttention, T8, "translations", BROKEN, "attn", "clipped"
    ),
    Case(
        "clipped-bias-by-hand",
        ClippedBiasByHand,
        T8,
        "translations",
        BROKEN,
        "add",
        "fixed position-dependent",
    ),
    Case(
        "strided-conv-unanchored",
        lambda: nn.Sequential(nn.Conv2d(3, 4, 2, stride=2), nn.ReLU()),
        T8,
        "translations",
        BROKEN,
        "_0",
        "anchor",
    ),
    Case(
        "zero-padding",
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()),
        T8,
        "translations",
        BROKEN,
        "_0",
        "zeros padding",
    ),
    Case(
        "reflect-padding",
        lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
        T8,
        "translations",
        BROKEN,
        "_0",
        "reflect",
    ),
    Case("valid-conv", lambda: nn.Conv2d(3, 4, 3), T8, "translations", BROKEN, "_0", "shrinks"),
    Case(
        "residual-across-anchor",
        ResidualAcrossAnchor,
        T8,
        "translations",
        BROKEN,
        "add",
        "different frames",
    ),
    Case(
        "cat-across-frames", CatAcrossFrames, T8, "translations", BROKEN, "cat", "different frames"
    ),
    Case("wrong-unanchor", WrongUnanchor, T8, "translations", BROKEN, "unanchor", "restores"),
    Case(
        "flatten-into-channels", FlattenIntoChannels, T8, "translations", BROKEN, "fc", "flattened"
    ),
    Case(
        "group-axis-linear",
        GroupAxisLinear,
        (2, 3, 4, 8, 8),
        "p4",
        BROKEN,
        "fc",
        "point-group axis",
    ),
    Case(
        "causal-attention",
        CausalAttention,
        T8,
        "translations",
        BROKEN,
        "scaled_dot_product_attention",
        "causal",
    ),
    Case("crop", Crop, T8, "translations", BROKEN, "getitem", "keeps only"),
    Case("noise", Noise, T8, "translations", BROKEN, "randn", "random"),
    Case("conv3x3-under-c4", lambda: circ(3, 3), T8, "c4", BROKEN, "_0", "rotation"),
    Case(
        "one-axis-mean-under-c4",
        OneAxisMean,
        T8,
        "c4",
        BROKEN,
        "mean",
        "one of the two spatial axes",
    ),
    Case(
        "adaptive-pool-grid",
        lambda: nn.AdaptiveAvgPool2d(2),
        T8,
        "translations",
        BROKEN,
        "_0",
        "fixed",
    ),
    Case(
        "torch-encoder-causal-mask",
        lambda: TorchEncoder(causal=True),
        T8,
        "translations",
        BROKEN,
        "encoder",
        "fixed attention mask",
    ),
    Case(
        "layernorm-over-space",
        lambda: _randomized(nn.LayerNorm([3, 8, 8])),
        T8,
        "translations",
        BROKEN,
        "_0",
        "affine",
    ),
]


def _certify(case: Case):
    torch.manual_seed(0)
    model = case.make()
    x = torch.randn(*case.shape)
    return certify(model, x, case.build_group(), verify=True)


def test_zoo_sizes() -> None:
    assert len(GOOD) >= 15 and len(BAD) >= 15


@pytest.mark.parametrize("case", GOOD, ids=lambda c: c.name)
def test_good_networks_certify_and_verify(case: Case) -> None:
    cert = _certify(case)
    assert cert.verdict == case.verdict, cert.to_text()
    assert cert.first_break is None
    assert cert.verification is not None and cert.verification.equivariant, cert.summary()
    assert not cert.disagreements


#: Where the export-based checker reports each break (the module path, or the operation
#: when it runs in the model's own forward) and a word of its reason.
EXPECTED_BREAKS: dict[str, tuple[str, str]] = {
    "absolute-positional-encoding": ("pos", "position-dependent constant"),
    "raw-position-parameter": ("add", "position-dependent constant"),
    "arange-embedding": ("add", "position-dependent constant"),
    "clipped-relative-bias": ("attn", "position-dependent constant"),
    "clipped-bias-by-hand": ("add", "position-dependent constant"),
    "strided-conv-unanchored": ("0", "windows do not move"),
    "zero-padding": ("0", "windows do not move"),
    "reflect-padding": ("conv2d", "windows do not move"),
    "valid-conv": ("conv2d", "windows do not move"),
    "residual-across-anchor": ("add", "different frames"),
    "cat-across-frames": ("cat", "different frames"),
    "wrong-unanchor": ("unanchor", "restores"),
    "flatten-into-channels": ("fc", "not invariant under the way the group permutes"),
    "group-axis-linear": ("fc", "not invariant under the way the group permutes"),
    "causal-attention": ("scaled_dot_product_attention", "causal mask"),
    "crop": ("slice_1", "does not move with the input"),
    "conv3x3-under-c4": ("conv2d", "unconstrained convolution kernel"),
    "one-axis-mean-under-c4": ("mean", "exchanges the two spatial axes"),
    "adaptive-pool-grid": ("adaptive_avg_pool2d", "windows do not move"),
    "torch-encoder-causal-mask": ("encoder.layers.0.self_attn", "causal mask"),
    "layernorm-over-space": ("layer_norm", "position-dependent constant"),
}


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.name)
def test_broken_networks_are_rejected_at_the_right_node(case: Case) -> None:
    cert = _certify(case)
    if case.name == "noise":  # random numbers: never certified, and not a definite break
        assert cert.verdict == Status.UNVERIFIED and "random" in (cert.reason or ""), cert.to_text()
        return
    assert cert.verdict == BROKEN, cert.to_text()
    assert cert.first_break is not None
    node, word = EXPECTED_BREAKS[case.name]
    assert cert.first_break.node == node, cert.to_text()
    assert word in cert.first_break.reason, cert.first_break.reason
    assert cert.first_break.path[0] == next(r.name for r in cert.records if r.status == "input")
    assert cert.first_break.path[-1] == cert.first_break.operation
    # the numerical check confirms the break, far above float64 tolerance
    assert cert.verification is not None and cert.verification.max_error > 1e-6, cert.summary()


def test_lifted_input_type_is_inferred() -> None:
    cert = certify(LiftedPool(), torch.randn(1, 3, 4, 8, 8), "p4")
    assert cert.input_type == LiftedField(CyclicGroup(4))


def test_token_input() -> None:
    model = LibraryTokens()
    x = torch.randn(2, 64, 3)
    cert = certify(nn.Sequential(nn.Linear(3, 3)), x, TorusTranslations(8, 8), verify=True)
    assert cert.verdict == EQ and cert.input_type == TokenField((8, 8))
    assert cert.verification is not None and cert.verification.equivariant
    del model
