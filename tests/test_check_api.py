"""The checker's API: renderings, group names, errors, fallbacks, verify, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from groupattn.actions import GridField, TokenField
from groupattn.canonical import PolyphaseAnchor
from groupattn.check import (
    Atom,
    Certificate,
    LayoutField,
    Status,
    attach_verification,
    certify,
    default_input_type,
    group_from_name,
    verify,
)
from groupattn.cli import main
from groupattn.contracts import Contract, contract_of, register_contract
from groupattn.groups import (
    CyclicGroup,
    DihedralGroup,
    Group,
    GroupError,
    TorusTranslations,
    p4,
    p4m,
)


def circ(c: int) -> nn.Conv2d:
    return nn.Conv2d(c, c, 3, padding=1, padding_mode="circular")


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = circ(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
            return self.conv(x)
        return x


class LiesAboutItself(nn.Module):
    """Declares equivariance but adds a fixed ramp: the checker must report the disagreement."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.linspace(0, 1, x.shape[-1])

    def contract(self, group: Group, input_type: object = None) -> Contract:
        return Contract.equivariant(GridField(), GridField())


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class Opaque(nn.Module):
    """No contract, and its body uses an operation the checker does not know."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft2(x).real


class WindowSplit(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], x.shape[1], 2, 4, 2, 4).sum(dim=(3, 5))


def broken_factory() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.ReLU())


def untraceable_factory() -> nn.Module:
    return Untraceable()


X = torch.randn(2, 3, 8, 8)


def test_group_from_name() -> None:
    assert group_from_name("translations", (2, 3, 8, 6)) == TorusTranslations(8, 6)
    assert group_from_name("c4", (3, 8, 8)) == CyclicGroup(4)
    assert group_from_name("d4", (3, 8, 8)) == DihedralGroup(4)
    assert group_from_name("p4", (1, 3, 8, 8)) == p4(8)
    assert group_from_name("P4M", (1, 3, 8, 8)) == p4m(8)
    with pytest.raises(GroupError, match="expected one of"):
        group_from_name("so3", (1, 3, 8, 8))
    with pytest.raises(GroupError, match="square grid"):
        group_from_name("p4", (1, 3, 8, 6))
    with pytest.raises(GroupError, match=r"ending in \(H, W\)"):
        group_from_name("c4", (8,))


def test_default_input_types_and_errors() -> None:
    g = TorusTranslations(8, 8)
    assert default_input_type(X, g) == GridField()
    assert default_input_type(torch.randn(2, 64, 3), g) == TokenField((8, 8))
    with pytest.raises(GroupError, match="square number of tokens"):
        default_input_type(torch.randn(2, 10, 3), g)
    with pytest.raises(GroupError, match="point group"):
        default_input_type(torch.randn(2, 3, 4, 8, 8), g)
    with pytest.raises(GroupError, match="rank 2 to 5"):
        default_input_type(torch.randn(2), g)
    with pytest.raises(GroupError, match="certify: expected tokens"):
        certify(circ(3), torch.randn(2, 60, 3), g, input_type=TokenField((8, 8)))


def test_renderings(tmp_path: Path) -> None:
    cert = certify(broken_factory(), X, "translations", verify=True)
    text = cert.to_text()
    assert "broken" in text and "windows do not move onto windows" in text and "path:" in text
    data = cert.to_json()
    assert data["verdict"] == "broken" and data["first_break"]["node"] == "0"
    assert data["first_break"]["operation"] == "conv2d"
    assert data["max_error"] > 1e-6 and json.loads(cert.to_json_string())["verdict"] == "broken"
    dot = cert.to_dot()
    assert dot.startswith("digraph") and '-> "conv2d"' in dot
    for suffix in ("dot", "png", "svg"):
        out = cert.save_graph(tmp_path / f"graph.{suffix}")
        assert out.exists() and out.stat().st_size > 100
    with pytest.raises(ValueError, match=r"expected a \.dot"):
        cert.save_graph(tmp_path / "graph.txt")
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(cert.to_rich())
    assert "windows do not move" in console.export_text()
    assert cert.exit_code == 3 and cert.status == "broken"


def test_untraceable_model_is_unverified_with_a_plain_reason() -> None:
    cert = certify(Untraceable(), X, "translations")
    assert cert.verdict == Status.UNVERIFIED and cert.exit_code == 4
    assert cert.reason is not None and "torch.export cannot trace" in cert.reason


def test_untraceable_child_makes_the_whole_unverified() -> None:
    # the checker proves nothing about a graph it could not trace, not even the parts before
    cert = certify(nn.Sequential(circ(3), Untraceable()), X, "translations")
    assert cert.verdict == Status.UNVERIFIED
    assert any("torch.export cannot trace" in why for _, why in cert.unverified)


def test_unknown_operation_is_unverified() -> None:
    cert = certify(nn.Sequential(circ(3), Opaque()), X, "translations", verify=True)
    assert cert.verdict == Status.UNVERIFIED
    assert any("fft2" in why for _, why in cert.unverified)


def test_untracked_split_of_a_spatial_axis_is_unverified() -> None:
    # summing 4x4 blocks: shifts by one pixel move entries across blocks
    cert = certify(WindowSplit(), X, "translations")
    assert not cert.certified
    assert (
        cert.first_break is not None
        and "moves entries between those and other dims" in cert.first_break.reason
    )


def test_user_contract_by_decorator() -> None:
    assert certify(nn.Sequential(circ(3), Swish()), X, "translations").verdict == Status.EQUIVARIANT

    class Registered(Opaque):  # its body (an FFT) cannot be verified
        pass

    @register_contract(Registered)
    def _(module: nn.Module, group: Group, input_type: object) -> Contract:
        return Contract.breaks("Registered: deliberately declared broken", input_type, input_type)

    cert = certify(nn.Sequential(circ(3), Registered()), X, "translations")
    assert cert.verdict == Status.BROKEN and cert.first_break is not None
    assert "Registered: deliberately declared broken" in cert.first_break.reason
    assert any("declared contracts" in note for note in cert.notes)

    # a body that verifies is checked by its body, whatever is registered
    class Declared(Swish):
        pass

    register_contract(Declared)(lambda m, g, t: Contract.breaks("never consulted", t, t))
    assert (
        certify(nn.Sequential(circ(3), Declared()), X, "translations").verdict == Status.EQUIVARIANT
    )


def test_lying_contract_is_reported_as_a_checker_defect() -> None:
    model = nn.Sequential(circ(3), LiesAboutItself())
    cert = certify(model, X, "translations", verify=True)
    assert not cert.certified  # the checker sees through the lie, or the numbers refute it
    if cert.disagreements:
        assert (
            cert.verdict == Status.UNVERIFIED and "defect of the checker" in cert.disagreements[0]
        )
    # a checker that believed the contract: refuted numerically, never left certified
    believed = Certificate(
        Status.EQUIVARIANT, TorusTranslations(8, 8), GridField(), output_type=GridField()
    )
    attach_verification(believed, model, X, None)
    assert believed.verdict == Status.UNVERIFIED and not believed.certified
    assert believed.disagreements and "defect of the checker" in believed.disagreements[0]
    assert "certified equivariant" in believed.disagreements[0]
    assert believed.reason is not None and "refutes the certificate" in believed.reason


def test_no_contracts_are_registered_on_import() -> None:
    # the checker proves torch modules from their operators; importing it changes no answer
    g = TorusTranslations(8, 8)
    import groupattn.check  # noqa: F401

    assert contract_of(nn.LayerNorm(4), g).kind.value == "unverified"
    assert contract_of(circ(3), g, GridField()).kind.value == "unverified"
    strided = certify(
        nn.Conv2d(3, 3, 2, stride=2), torch.randn(2, 3, 8, 8), TorusTranslations(4, 4, stride=2)
    )
    assert strided.verdict == Status.EQUIVARIANT and strided.output_group == TorusTranslations(4, 4)
    assert (
        certify(nn.Conv2d(3, 3, 3, padding=1, padding_mode="circular"), X, CyclicGroup(4)).verdict
        == Status.BROKEN
    )


def test_verify_canonicalizer_up_to_frame_and_ties() -> None:
    anchor = PolyphaseAnchor(2)
    report = verify(anchor, X, TorusTranslations(8, 8))
    assert report.up_to_frame and report.equivariant and not report.ties
    # a constant image ties every phase: margin 0, flagged
    tied = verify(anchor, torch.ones(2, 3, 8, 8), TorusTranslations(8, 8))
    assert (
        tied.ties
        and tied.ties[0].startswith("PolyphaseAnchor: ")
        and "tied sample(s)" in tied.ties[0]
    )
    # every element of C4 is tested by default
    assert len(verify(nn.Conv2d(3, 3, 1), X, "c4").errors) == 4


def test_layout_field_acts_like_the_library_fields() -> None:
    g = TorusTranslations(8, 8)
    layout = ((Atom("B", 2),), (Atom("C", 3),), (Atom("Y", 8),), (Atom("X", 8),))
    field = LayoutField(layout)
    for e in g.sample(3, seed=1):
        assert torch.equal(field.act(g, e, X), GridField().act(g, e, X))
    with pytest.raises(GroupError, match=r"expected a tensor of shape"):
        field.act(g, g.identity(), torch.randn(2, 3, 4, 4))


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # codes: 0 certified, 1 runtime error, 2 usage error, 3 broken, 4 unverified, 5 disagreement
    out = tmp_path / "cert.json"
    assert (
        main(
            [
                "check",
                "--model",
                "vit",
                "--verify",
                "--json",
                str(out),
                "--graph",
                str(tmp_path / "g.dot"),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["verdict"] in ("equivariant", "invariant") and data["first_break"] is None
    assert data["unverified"] == [] and data["max_error"] <= 1e-10
    assert data["status"] == "certified" and data["exit_code"] == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert main(["check", "--model", "vit", "--baseline", "--no-verify", "--json", str(out)]) == 3
    assert json.loads(out.read_text())["first_break"]["node"]
    shape = ["--input-shape", "2,3,8,8", "--group", "translations"]
    assert main(["check", "test_check_api:broken_factory", *shape]) == 3
    assert main(["check", "torch.nn:Identity", *shape]) == 0
    assert main(["check", "test_check_api:untraceable_factory", *shape]) == 4
    assert (
        main(["check", "test_check_api:broken_factory", "--input-shape", "2,x", "--group", "c4"])
        == 2
    )
    assert main(["check", "test_check_api:broken_factory", "--input-shape", "2,3,8,8"]) == 2
    assert main(["check", "no_such_module:factory", *shape]) == 2
    assert main(["check", "--model", "no-such-model"]) == 2
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert "--group is required" in err and "MODULE:FACTORY" in err


class FunctionalDropout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x.mean(dim=(2, 3)), 0.5)


class BakedNoise(nn.Module):
    """torch.fx evaluates ``torch.empty(2, 3).normal_()`` once and stores it as a constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3)) + torch.empty(2, 3).normal_()


class AttentionDropout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2).unsqueeze(1)
        return torch.nn.functional.scaled_dot_product_attention(t, t, t, dropout_p=0.2)


@pytest.mark.parametrize(
    ("model", "node", "word"),
    [
        (FunctionalDropout(), "dropout", "random mask"),
        (BakedNoise(), "output", "differs between two evaluations"),
        (AttentionDropout(), "scaled_dot_product_attention", "random mask"),
    ],
    ids=["functional-dropout", "baked-noise", "attention-dropout"],
)
def test_randomness_is_never_certified(model: nn.Module, node: str, word: str) -> None:
    cert = certify(model, X, "translations", verify=True)
    assert cert.verdict == Status.UNVERIFIED, cert.to_text()
    assert "random" in (cert.reason or "")


class PositionDependentChannels(nn.Module):
    """``out[b, y, x] = in[b, y, y, x]``: the channel read depends on the row."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("index", torch.arange(8), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.index, self.index, :]


class RestoreAfterStride(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from groupattn.canonical import PolyphaseUnanchor

        self.anchor = PolyphaseAnchor(2)
        self.unanchor = PolyphaseUnanchor()
        self.conv = nn.Conv2d(8, 8, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, frame, _ = self.anchor(x)
        return self.unanchor(self.conv(y), frame)


@pytest.mark.parametrize(
    ("model", "word"),
    [
        (PositionDependentChannels(), "depending on the position"),
        (RestoreAfterStride(), "changed since then"),
    ],
    ids=["position-dependent-gather", "restore-after-stride"],
)
def test_unsound_looking_compositions_are_not_certified(model: nn.Module, word: str) -> None:
    cert = certify(model, torch.randn(2, 8, 8, 8), "translations")
    assert not cert.certified, cert.to_text()


def test_single_library_layers_are_checked_by_their_contract() -> None:
    from groupattn.attention import GlobalSelfAttention

    tokens = torch.randn(2, 64, 8)
    # attention layers are proved through their bodies (the orbital tables included)
    good = certify(GlobalSelfAttention(8, 2, (8, 8)), tokens, "translations", verify=True)
    assert good.verdict == Status.EQUIVARIANT
    assert good.verification is not None and good.verification.equivariant
    bad = certify(
        GlobalSelfAttention(8, 2, (8, 8), bias="clipped"), tokens, "translations", verify=True
    )
    assert bad.verdict == Status.BROKEN and bad.first_break is not None
    assert "position-dependent constant" in bad.first_break.reason
    assert bad.verification is not None and not bad.verification.equivariant
    # a canonicalizer alone: its output moves only up to a data-chosen shift — not a certificate
    anchored = certify(PolyphaseAnchor(2), X, "translations")
    assert anchored.verdict == Status.UNVERIFIED and "left in frame F1" in (anchored.reason or "")
    assert anchored.outputs[0].frame is not None
