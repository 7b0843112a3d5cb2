"""Equivariance for any backbone (#13, item 3): frame averaging and canonicalization.

A plain CNN, the plain ViT of the registry and (when torchvision is importable) a
ResNet-18 are wrapped both ways; on every element of C4 and of D4, in float64, the
wrapped logits are invariant to 1e-10 (relative) while the bare backbone's move by more
than 1e-3. The checker certifies the full-group wrappers, and never a sampled frame or
the bare backbone.

The checker traces ``FrameAveraging`` through its body: with one backbone call per group
element (``chunk=1``, the default) the orbit-average relations prove it, whatever the
backbone does with its batch; a batched call is never certified (exact only for a
backbone that treats samples independently, which nothing checks). A learned
canonicalizer's scorer is a user network: unverified. Regressions of an attack round
(batch-mixing backbones and scorers, partial candidates declared invariant) are at the
end.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupattn import ConfigurationError, ShapeError
from groupattn.actions import GridField
from groupattn.canonical import ArgmaxCanonicalizer, record_canonicalizations
from groupattn.check import Status, certify
from groupattn.contracts import contract_of
from groupattn.groups import CyclicGroup, DihedralGroup, FiniteGroup, TorusTranslations
from groupattn.models import create
from groupattn.nn import Canonicalized, FrameAveraging, LearnedCanonicalizer, norm_score
from groupattn.testing import relative_error

C2, C4, D4 = CyclicGroup(2), CyclicGroup(4), DihedralGroup(4)
EXACT = 1e-10
BREAKS = 1e-3


def _cnn(classes: int = 5) -> nn.Module:
    """A plain CNN for ``(B, 1, 32, 32)`` images (or any square size ≥ 4)."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32, classes),
    )


def _vit() -> nn.Module:
    return create("vit", equivariant=False)


def _resnet() -> nn.Module:  # pragma: no cover - only where torchvision is installed
    import torchvision  # type: ignore[import-not-found,import-untyped,unused-ignore]

    model = torchvision.models.resnet18(num_classes=5)
    model.conv1 = nn.Conv2d(1, 64, 7, stride=2, padding=3, bias=False)
    return model


def _timm_vit() -> nn.Module:  # pragma: no cover - only where timm is installed
    import timm  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=5,
        img_size=32,
        patch_size=4,
        in_chans=1,
        depth=2,
    )


BACKBONES: dict[str, Callable[[], nn.Module]] = {"cnn": _cnn, "vit": _vit}
if importlib.util.find_spec("torchvision") is not None:  # pragma: no cover
    BACKBONES["resnet18"] = _resnet
if importlib.util.find_spec("timm") is not None:  # pragma: no cover
    BACKBONES["timm_vit"] = _timm_vit


def _scorer() -> nn.Module:
    """A small learned score for ``(N, 1, 32, 32)``: one scalar per candidate."""
    return nn.Sequential(nn.Conv2d(1, 2, 5, stride=4), nn.Tanh(), nn.Flatten(), nn.Linear(98, 1))


def _wrap(kind: str, backbone: nn.Module, group: FiniteGroup) -> nn.Module:
    if kind == "bare":
        return backbone
    if kind == "frame-averaging":
        return FrameAveraging(backbone, group)
    if kind == "canonicalized":
        canon = ArgmaxCanonicalizer(group, norm_score(1), output_group=CyclicGroup(1))
        return Canonicalized(backbone, canon)
    return Canonicalized(backbone, LearnedCanonicalizer(group, _scorer()))


def _relative_errors(model: nn.Module, x: torch.Tensor, group: FiniteGroup) -> list[float]:
    """``‖f(g·x) − f(x)‖ / ‖f(x)‖`` for every element ``g`` of ``group``."""
    field = GridField()
    with torch.no_grad():
        y = model(x)
        return [
            float((model(field.act(group, g, x)) - y).norm() / y.norm()) for g in group.elements()
        ]


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(3, 1, 32, 32, generator=generator, dtype=torch.float64)


# ------------------------------------------------------------------ exact invariance
@pytest.mark.parametrize("group", [C4, D4], ids=["C4", "D4"])
@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_wrapped_backbones_are_invariant_and_the_bare_one_is_not(
    images: torch.Tensor, name: str, group: FiniteGroup
) -> None:
    torch.manual_seed(0)
    backbone = BACKBONES[name]().double().eval()
    bare = _relative_errors(backbone, images, group)
    assert max(bare) > BREAKS, f"the bare {name} is already invariant: {bare}"
    for kind in ("frame-averaging", "canonicalized", "learned"):
        torch.manual_seed(1)
        model = _wrap(kind, backbone, group).double().eval()
        with record_canonicalizations() as recorder:
            errors = _relative_errors(model, images, group)
        ties = sum(int(event.tied.sum()) for event in recorder)
        assert ties == 0, f"{kind}: random inputs tied ({ties} samples)"
        assert len(errors) == group.order()
        assert max(errors) <= EXACT, f"{name} {kind} under {group.name}: {errors}"


def test_invariance_convention_is_g_inverse_on_the_input() -> None:
    """``f(x) = mean_g φ(g⁻¹·x)`` — and the equivariant form ``mean_g g·φ(g⁻¹·x)``."""
    torch.manual_seed(0)
    x = torch.randn(2, 1, 6, 6, dtype=torch.float64)
    field = GridField()
    backbone = nn.Conv2d(1, 2, 3, padding=1).double()
    # A frame of one non-identity element makes the convention visible.
    g = C4.element(1)
    single = FrameAveraging(backbone, C4, elements=[g])
    torch.testing.assert_close(single(x), backbone(field.act(C4, g.inverse(), x)).flatten(0, 0))
    equi = FrameAveraging(backbone, C4, output="equivariant", elements=[g])
    torch.testing.assert_close(equi(x), field.act(C4, g, backbone(field.act(C4, g.inverse(), x))))
    full = FrameAveraging(backbone, D4, output="equivariant")
    for h in D4.elements():
        torch.testing.assert_close(
            full(field.act(D4, h, x)), field.act(D4, h, full(x)), rtol=0, atol=1e-12
        )


def test_chunks_give_the_same_average() -> None:
    torch.manual_seed(0)
    backbone = _cnn().double().eval()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    whole = FrameAveraging(backbone, D4)(x)
    for chunk in (1, 3, 8, 100):
        torch.testing.assert_close(FrameAveraging(backbone, D4, chunk=chunk)(x), whole)


def test_sampled_frame_is_approximate_and_says_so() -> None:
    torch.manual_seed(0)
    backbone = _cnn().double().eval()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    sampled = FrameAveraging(backbone, D4, elements=D4.sample(3, seed=0))
    k = len(sampled.elements)
    contract = contract_of(sampled, D4)
    assert contract.kind == Status.UNVERIFIED
    assert contract.reason is not None
    assert f"averages over {k} of 8 elements: approximate" in contract.reason
    assert not sampled.exact and FrameAveraging(backbone, D4).exact
    assert max(_relative_errors(sampled, x, D4)) > BREAKS


def test_subgroup_frame_is_exact_under_that_subgroup() -> None:
    """A frame that is a subgroup (the rotations by 0° and 180° of C4) is exact under C2."""
    torch.manual_seed(0)
    half = FrameAveraging(_cnn().double(), C4, elements=[0, 2])
    assert contract_of(half, C2).kind == Status.INVARIANT
    assert contract_of(half, C4).kind == Status.UNVERIFIED
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    assert max(_relative_errors(half, x, C2)) <= EXACT


# ------------------------------------------------------------------ the checker
@pytest.mark.parametrize("chunk", [None, 1], ids=["batched", "per-element"])
def test_certify_full_group_frame_averaging(chunk: int | None) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 1, 8, 8)
    for group, acting in ((C4, "c4"), (C4, "c2"), (D4, "d4"), (D4, "c4")):
        model = FrameAveraging(_cnn(), group, chunk=chunk)
        cert = certify(model, x, acting)
        if chunk == 1:
            assert cert.status == "certified", f"{group.name} under {acting}: {cert.reason}"
            assert cert.verdict == Status.INVARIANT
        else:  # one batched call: sound only for per-sample backbones, which is not checked
            assert cert.status != "certified"
    # A C4 average is not D4-invariant: never certified.
    assert certify(FrameAveraging(_cnn(), C4, chunk=chunk), x, "d4").status != "certified"


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_certify_every_wrapped_backbone(name: str) -> None:
    """Per-element frame averaging and norm-score canonicalization of every backbone
    (torchvision's ResNet-18 and timm's ViT included where installed) are certified
    invariant under D4 (the batched average is not: per-sample evaluation is not checked);
    the bare backbone is not certified."""
    torch.manual_seed(0)
    x = torch.randn(2, 1, 32, 32)
    backbone = BACKBONES[name]().eval()
    bare = certify(backbone, x, "d4")
    assert bare.status != "certified", bare.reason
    averaged = certify(FrameAveraging(backbone, D4, chunk=1), x, "d4")
    assert averaged.status == "certified" and averaged.verdict == Status.INVARIANT, averaged.reason
    assert certify(FrameAveraging(backbone, D4, chunk=None), x, "d4").status != "certified"
    canon = ArgmaxCanonicalizer(D4, norm_score(1), output_group=CyclicGroup(1))
    canonicalized = certify(Canonicalized(backbone, canon), x, "d4")
    assert canonicalized.status == "certified", canonicalized.reason
    assert canonicalized.verdict == Status.INVARIANT


class _NormedAttention(nn.Module):
    """A backbone with what torchvision's and timm's models use: a strided convolution,
    a batch norm (one ATen call with three outputs), attention whose q, k, v come from
    ``unbind`` (another operator with several outputs), a layer norm and GELU; optionally
    dropout that stays random in ``eval`` mode, or uninitialised memory."""

    def __init__(self, dropout: float = 0.0, garbage: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 7, stride=2, padding=3, bias=False)
        self.norm = nn.BatchNorm2d(8)
        self.qkv = nn.Linear(8, 24)
        self.layer_norm = nn.LayerNorm(8)
        self.dropout = dropout
        self.head = nn.Linear(8, 3)
        self.garbage = garbage

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.relu(self.norm(self.conv(x))).flatten(2).transpose(1, 2)  # (B, N, 8)
        if self.garbage:  # uninitialised memory: no function of the input
            z = z + torch.empty_like(z)
        q, k, v = self.qkv(z).reshape(z.shape[0], z.shape[1], 3, 8).permute(2, 0, 1, 3).unbind(0)
        z = self.layer_norm(z + F.scaled_dot_product_attention(q, k, v))
        z = F.dropout(F.gelu(z), self.dropout, training=True)  # random in eval mode too
        return self.head(z.mean(1))


def test_frame_averaging_is_certified_through_operators_without_rules() -> None:
    """The copies of the backbone are related entry for entry (the same deterministic
    computation on equal operands), whatever the backbone's operators; never for a
    random operator, nor for uninitialised memory."""
    torch.manual_seed(0)
    x = torch.randn(2, 1, 16, 16)
    model = FrameAveraging(_NormedAttention().eval(), D4, chunk=1)
    cert = certify(model, x, "d4")
    assert cert.status == "certified" and cert.verdict == Status.INVARIANT, cert.reason
    torch.manual_seed(0)
    for broken in (
        FrameAveraging(_NormedAttention(dropout=0.5).eval(), D4, chunk=1),
        FrameAveraging(_NormedAttention(garbage=True).eval(), D4, chunk=1),
    ):
        assert certify(broken, x, "d4").status != "certified"


def test_certify_equivariant_frame_averaging() -> None:
    torch.manual_seed(0)
    unet = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))
    model = FrameAveraging(unet, D4, output="equivariant")
    cert = certify(model, torch.randn(2, 1, 6, 6), "d4")
    assert cert.status == "certified" and cert.verdict == Status.EQUIVARIANT, cert.reason


def test_certify_sampled_frames_and_bare_backbones() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 1, 8, 8)
    sampled = certify(FrameAveraging(_cnn(), C4, elements=[0, 1, 3]), x, "c4")
    assert sampled.status != "certified", sampled.reason
    assert "approximate" in (
        contract_of(FrameAveraging(_cnn(), C4, elements=[0, 1, 3]), C4).reason or ""
    )
    # Traced through its body (no leaf), a sampled frame is not certified either.
    body = certify(FrameAveraging(_cnn(), C4, elements=[0, 1, 3], chunk=1), x, "c4")
    assert body.status != "certified"
    for backbone, data in ((_cnn(), x), (_vit(), torch.randn(2, 1, 32, 32))):
        bare = certify(backbone, data, "c4")
        assert bare.status in ("broken", "unverified") and not bare.verdict.certified


def test_certify_canonicalized() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 1, 8, 8)
    for group, name in ((C4, "c4"), (D4, "d4")):
        for kind in ("canonicalized", "learned"):
            scorer_free = kind == "canonicalized"
            canon: nn.Module = (
                ArgmaxCanonicalizer(group, norm_score(1), output_group=CyclicGroup(1))
                if scorer_free
                else LearnedCanonicalizer(
                    group, nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(72, 1))
                )
            )
            cert = certify(Canonicalized(_cnn(), canon), x, name)
            if scorer_free:
                assert cert.status == "certified" and cert.verdict == Status.INVARIANT, cert.reason
            else:  # a user's scorer is not checked for per-sample evaluation
                assert cert.status != "certified", cert.reason
    rounding = LearnedCanonicalizer(
        C4, nn.Sequential(nn.Flatten(), nn.Linear(64, 1)), fixed_precision=False
    )
    model = Canonicalized(_cnn(), rounding)
    assert contract_of(model, C4).kind == Status.UNVERIFIED
    assert certify(model, x, "c4").status != "certified"


def test_frame_averaging_refuses_a_group_that_does_not_act() -> None:
    """C4 does not map a 6×8 image onto itself: refused when called and by certify."""
    model = FrameAveraging(_cnn(), C4)
    with pytest.raises(ShapeError, match=r"expected a square grid for a 90° rotation, got 6x8"):
        model(torch.randn(2, 1, 6, 8))
    with pytest.raises(ShapeError):
        FrameAveraging(_cnn(), TorusTranslations(4, 4))(torch.randn(2, 1, 6, 6))
    with pytest.raises(ShapeError, match=r"expected a square grid for c4, got 6x8"):
        certify(model, torch.randn(2, 1, 6, 8), "c4")


# ------------------------------------------------------------------ contracts and errors
def test_contracts() -> None:
    fa = FrameAveraging(_cnn(), D4)
    assert contract_of(fa, D4).kind == Status.INVARIANT
    assert contract_of(fa, C4).kind == Status.INVARIANT
    assert contract_of(fa, C2).kind == Status.INVARIANT
    other = contract_of(fa, TorusTranslations(4, 4))
    assert other.kind == Status.UNVERIFIED and "got T(4x4)" in (other.reason or "").replace(
        "×", "x"
    )
    equi = FrameAveraging(nn.Conv2d(1, 1, 3, padding=1), C4, output="equivariant")
    assert contract_of(equi, C4).kind == Status.EQUIVARIANT
    assert contract_of(equi, D4).kind == Status.UNVERIFIED  # C4 ⊉ D4
    canon = Canonicalized(_cnn(), ArgmaxCanonicalizer(C4, norm_score(1), output_group=C4))
    assert contract_of(canon, C4).kind == Status.UNVERIFIED
    assert "output_group=CyclicGroup(1)" in (contract_of(canon, C4).reason or "")
    learned = LearnedCanonicalizer(C4, _scorer())
    assert contract_of(learned, C4).kind == Status.UNVERIFIED
    assert "per-sample" in (contract_of(learned, C4).reason or "")
    assert contract_of(FrameAveraging(_cnn(), D4, chunk=None), D4).kind == Status.UNVERIFIED


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: FrameAveraging("cnn", C4), r"FrameAveraging: expected an nn.Module as backbone, got str"),  # type: ignore[arg-type]
        (lambda: FrameAveraging(_cnn(), object()), r"FrameAveraging: expected a finite group, got"),  # type: ignore[arg-type]
        (lambda: FrameAveraging(_cnn(), C4, output="mean"), r"FrameAveraging: expected output 'invariant' or 'equivariant', got 'mean'"),
        (lambda: FrameAveraging(_cnn(), C4, chunk=0), r"FrameAveraging: expected chunk a positive int or None, got 0"),
        (lambda: FrameAveraging(_cnn(), C4, elements=[]), r"FrameAveraging: expected at least one element, got none"),
        (lambda: FrameAveraging(_cnn(), C4, output_type=GridField()), r"FrameAveraging: expected no output_type \(or an invariant one\)"),
        (lambda: Canonicalized(_cnn(), nn.Identity()), r"Canonicalized: expected a canonicalizer module with a contract .*, got Identity"),
        (lambda: Canonicalized(None, nn.Identity()), r"Canonicalized: expected an nn.Module as backbone, got NoneType"),  # type: ignore[arg-type]
        (lambda: LearnedCanonicalizer(C4, lambda z: z.sum()), r"LearnedCanonicalizer: expected an nn.Module as scorer, got function"),  # type: ignore[arg-type]
        (lambda: LearnedCanonicalizer("C4", _scorer()), r"LearnedCanonicalizer: expected a finite group, got"),  # type: ignore[arg-type]
        (lambda: norm_score(0), r"norm_score: expected channels a positive int, got 0"),
        (lambda: norm_score(1, kernel_size=2), r"norm_score: expected kernel_size an odd positive int, got 2"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_class_expected_and_got(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()


def test_bad_inputs() -> None:
    with pytest.raises(ShapeError, match=r"FrameAveraging: expected an image batch"):
        FrameAveraging(_cnn(), C4)(torch.randn(1, 8, 8))
    backbone_without_batch = FrameAveraging(nn.Flatten(0), C4)
    with pytest.raises(ShapeError, match=r"FrameAveraging: expected the backbone to keep"):
        backbone_without_batch(torch.randn(2, 1, 4, 4))
    with pytest.raises(ConfigurationError, match=r"backbone to return a tensor, got tuple"):
        FrameAveraging(_Pair(), C4)(torch.randn(2, 1, 4, 4))
    with pytest.raises(ShapeError, match=r"norm_score: expected an image batch \(B, C=2"):
        norm_score(2)(torch.randn(2, 1, 4, 4))


class _Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x


# ------------------------------------------------------------------ training
@pytest.mark.parametrize("kind", ["frame-averaging", "canonicalized", "learned"])
def test_a_training_step_changes_the_backbone(kind: str) -> None:
    torch.manual_seed(0)
    backbone = _cnn()
    model = _wrap(kind, backbone, D4)
    before = [p.detach().clone() for p in backbone.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, labels = torch.randn(4, 1, 32, 32), torch.tensor([0, 1, 2, 3])
    loss = nn.functional.cross_entropy(model(x), labels)
    if kind == "learned":
        canon = model.canonicalizer
        assert isinstance(canon, LearnedCanonicalizer)
        loss = loss + 0.1 * canon.prior_loss(x)
    loss.backward()
    optimizer.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, backbone.parameters(), strict=True))
    if kind == "learned":
        assert isinstance(model, Canonicalized)
        grads = [p.grad for p in model.canonicalizer.parameters()]
        assert all(g is not None and g.abs().sum() > 0 for g in grads), (
            "the prior trains the scorer"
        )


def test_learned_scores_and_prior() -> None:
    torch.manual_seed(0)
    canon = LearnedCanonicalizer(D4, _scorer()).double()
    x = torch.randn(3, 1, 32, 32, dtype=torch.float64)
    scores = canon.scores(x)
    assert scores.shape == (3, 8)
    out = canon(x)
    assert torch.equal(out.frame, scores.argmax(dim=1))
    assert torch.equal(
        out.output[1], GridField().act(D4, canon.candidates[int(out.frame[1])], x)[1]
    )
    assert canon.prior_loss(x).dim() == 0
    assert len(list(canon.parameters())) == len(list(canon.scorer.parameters()))


def test_a_stochastic_or_chunk_coupled_backbone_in_training_mode_is_not_certified() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 1, 8, 8)
    dropout = nn.Sequential(_cnn(), nn.Dropout(0.5))
    model = FrameAveraging(dropout, C4)
    assert contract_of(model, C4).kind == Status.UNVERIFIED
    assert x.shape == (2, 1, 8, 8)
    model.eval()
    assert contract_of(model, C4).kind == Status.INVARIANT
    normed = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Flatten())
    chunked = FrameAveraging(normed, C4, chunk=1)
    assert contract_of(chunked, C4).kind == Status.UNVERIFIED  # statistics per call
    assert contract_of(chunked.eval(), C4).kind == Status.INVARIANT


class _CumulativeOverBatch(nn.Module):
    """Mixes the samples of its batch: a running sum over the batch axis."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1).cumsum(0))


class _PositionScore(nn.Module):
    """Scores a sample by its place in the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))[:, 0] * torch.arange(x.shape[0], dtype=x.dtype)


def _moves(model: nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return max(relative_error(model(torch.rot90(x, k, (-2, -1))), model(x)) for k in (1, 2, 3))


def test_attack_batch_mixing_backbones_are_never_certified_when_they_break() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    for chunk in (None, 2):
        model = FrameAveraging(_CumulativeOverBatch(), C4, chunk=chunk).double()
        assert _moves(model, x) > 1e-3
        assert certify(model, x, "c4").status != "certified"
    exact = FrameAveraging(_CumulativeOverBatch(), C4).double()  # one call per element
    assert _moves(exact, x) < 1e-10
    assert certify(exact, x, "c4").status == "certified"


def test_attack_a_scorer_that_reads_the_batch_is_never_certified() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 1, 8, 8)
    model = Canonicalized(_cnn(), LearnedCanonicalizer(C4, _PositionScore()))
    assert certify(model, x, "c4").status != "certified"


@pytest.mark.parametrize("group", [C4, D4], ids=["C4", "D4"])
def test_attack_partial_candidates_cannot_declare_invariance(group: FiniteGroup) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 1, 8, 8)
    rotations = [g for g in group.elements()][:2]
    canon = ArgmaxCanonicalizer(
        group, norm_score(1), candidates=rotations, output_group=CyclicGroup(1)
    )
    assert contract_of(canon, group).kind == Status.UNVERIFIED
    name = "c4" if group == C4 else "d4"
    assert certify(Canonicalized(_cnn(), canon), x, name).status != "certified"
    assert certify(canon, x, name).status != "certified"


@pytest.mark.parametrize("group", [C4, D4], ids=["C4", "D4"])
def test_bf16_canonicalized_is_bit_exact_and_frame_averaging_within_rounding(
    group: FiniteGroup,
) -> None:
    """In bf16 the canonical input is the same bit-exact rotation of the input (scores in
    float64), so the logits are identical; frame averaging sums the same terms in another
    order, so it moves by rounding only."""
    torch.manual_seed(0)
    x = torch.randn(3, 1, 8, 8).bfloat16()
    canonical = Canonicalized(
        _cnn(), ArgmaxCanonicalizer(group, norm_score(1), output_group=CyclicGroup(1))
    ).bfloat16()
    averaged = FrameAveraging(_cnn(), group).bfloat16()
    with torch.no_grad():
        reference = canonical(x)
        averaged_reference = averaged(x)
        for g in group.elements():
            moved = GridField().act(group, g, x)
            assert torch.equal(canonical(moved), reference)
            assert relative_error(averaged(moved), averaged_reference) < 2e-2
