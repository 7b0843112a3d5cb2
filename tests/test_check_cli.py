"""``groupattn check``: verification by default, one exit code per outcome, usage errors before work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from groupattn.actions import GridField, SetField
from groupattn.check._command import DEFAULT_VERIFY_BUDGET_S, EXIT_CODES, MAX_INPUT_ELEMENTS
from groupattn.cli import main
from groupattn.contracts import Contract
from groupattn.groups import Group, SymmetricGroup, TorusTranslations

HERE = Path(__file__).parent
SHAPE = ["--input-shape", "2,3,8,8", "--group", "translations"]
BUILT: list[str] = []


def circ(c: int) -> nn.Conv2d:
    return nn.Conv2d(c, c, 3, padding=1, padding_mode="circular")


class MeanPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class LiesAboutItself(nn.Module):
    """Declares equivariance but adds a fixed ramp."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.linspace(0, 1, x.shape[-1])

    def contract(self, group: Group, input_type: object = None) -> Contract:
        return Contract.equivariant(GridField(), GridField())


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = circ(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.conv(x)
        return x


class Crashes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom in forward")


class DeepSets(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x.mean(1, keepdim=True))


def good_factory() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(circ(3), MeanPool())


def broken_factory() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.ReLU())


def untraceable_factory() -> nn.Module:
    return Untraceable()


def lying_factory() -> nn.Module:
    return nn.Sequential(circ(3), LiesAboutItself())


def crashing_factory() -> nn.Module:
    return Crashes()


def raising_factory() -> nn.Module:
    raise ValueError("the factory itself fails")


def not_a_module() -> int:
    return 3


def deep_sets() -> nn.Module:
    torch.manual_seed(0)
    return DeepSets()


def patch_embedding() -> nn.Module:
    from groupattn.nn import PatchEmbedding

    return PatchEmbedding(3, 4, 2, (8, 8))


def exploding_factory() -> nn.Module:
    BUILT.append("exploding_factory")
    raise AssertionError("a usage error must be detected before the model is built")


def torus_with_type() -> tuple[Group, GridField]:
    return TorusTranslations(8, 8), GridField()


def torus() -> Group:
    return TorusTranslations(8, 8)


def s6_on_tokens() -> tuple[Group, SetField]:
    return SymmetricGroup(6), SetField(6)


def group_raises() -> Group:
    raise RuntimeError("no group today")


def group_wrong_type() -> Any:
    return "c4"


def _check(*argv: str) -> int:
    return main(["check", *argv])


@pytest.fixture
def defective_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checker with a defect: it certifies ``LiesAboutItself`` from its (false) contract."""
    import groupattn.check._certify as certify_module
    from groupattn.check import Status

    real = certify_module.certify

    def certify(model: nn.Module, x: torch.Tensor, group: Any, **kwargs: Any) -> Any:
        cert = real(model, x, group, **kwargs)
        if any(isinstance(m, LiesAboutItself) for m in model.modules()):
            cert.verdict, cert.output_type, cert.output_group = (
                Status.EQUIVARIANT,
                GridField(),
                None,
            )
            cert.first_break, cert.reason, cert.outputs = None, None, []
        return cert

    monkeypatch.setattr(certify_module, "certify", certify)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# ---------------------------------------------------------------- the outcomes
@pytest.mark.parametrize(
    ("factory", "status"),
    [
        ("good_factory", "certified"),
        ("broken_factory", "broken"),
        ("untraceable_factory", "unverified"),
        ("lying_factory", "disagreement"),
    ],
)
def test_each_outcome_has_its_exit_code_in_text_and_json(
    factory: str,
    status: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    defective_checker: None,
) -> None:
    out = tmp_path / "cert.json"
    code = _check(f"test_check_cli:{factory}", *SHAPE, "--json", str(out))
    assert code == EXIT_CODES[status]
    data = _json(out)
    assert data["status"] == status and data["exit_code"] == code and data["verified"] is True
    assert "outputs" in data["verification"]
    text = capsys.readouterr().out
    assert f"status: {status} (exit {code})" in text
    if status == "disagreement":
        assert data["verdict"] == "unverified" and data["disagreements"]
        assert "DISAGREEMENT" in text and "verdict: unverified" in text
    if status == "certified":
        assert data["max_error"] <= 1e-10


def test_no_verify_skips_the_numerical_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], defective_checker: None
) -> None:
    out = tmp_path / "cert.json"
    assert (
        _check("test_check_cli:lying_factory", *SHAPE, "--no-verify", "--json", str(out))
        == EXIT_CODES["certified"]
    )
    data = _json(out)
    assert data["verified"] is False and "verification" not in data
    assert "numerical check: skipped (--no-verify)" in capsys.readouterr().out
    assert _check("test_check_cli:good_factory", *SHAPE, "--verify") == 0  # still accepted


def test_a_crash_is_a_runtime_error_never_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cert.json"
    for factory, words in (
        ("crashing_factory", "RuntimeError: boom in forward"),
        ("raising_factory", "ValueError"),
    ):
        capsys.readouterr()
        code = _check(f"test_check_cli:{factory}", *SHAPE, "--json", str(out))
        assert code == EXIT_CODES["runtime_error"] != EXIT_CODES["broken"]
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and words in err
        assert _json(out) == {
            "status": "runtime_error",
            "exit_code": 1,
            "error": _json(out)["error"],
        }
    assert _check("test_check_cli:crashing_factory", *SHAPE, "--traceback") == 1
    assert "Traceback" in capsys.readouterr().err


def test_group_factory_pairs_give_the_input_type(tmp_path: Path) -> None:
    out = tmp_path / "cert.json"
    shape = ["--input-shape", "2,3,8,8"]
    assert (
        _check("test_check_cli:good_factory", *shape, "--group", "test_check_cli:torus_with_type")
        == 0
    )
    assert _check("test_check_cli:good_factory", *shape, "--group", "test_check_cli:torus") == 0
    # a G-set of tokens: the numerical check runs over S_6 whatever the checker can say
    code = _check(
        "test_check_cli:deep_sets",
        "--input-shape",
        "2,6,4",
        "--group",
        "test_check_cli:s6_on_tokens",
        "--json",
        str(out),
    )
    data = _json(out)
    assert (
        code in (EXIT_CODES["certified"], EXIT_CODES["unverified"])
        and data["status"] != "disagreement"
    )
    assert data["input_type"].startswith("set(B,6,C)")
    assert data["verification"]["equivariant"] and data["verification"]["elements_tested"] == 6


# ---------------------------------------------------------------- usage errors, before any work
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--group", "so3"], "--group: expected one of"),
        (["--group", "no_such_module_xyz:make"], "cannot import 'no_such_module_xyz'"),
        (["--group", "test_check_cli:no_such_attr"], "has no attribute 'no_such_attr'"),
        (["--group", "test_check_cli:group_raises"], "raised RuntimeError: no group today"),
        (
            ["--group", "test_check_cli:group_wrong_type"],
            "to return a Group or a (Group, FieldType) pair, got str",
        ),
        (["--group", "test_check_cli:s6_on_tokens"], "does not fit the group's input"),
        (["--group", "p4", "--input-shape", "2,3,8,6"], "square grid"),
        (["--input-shape", "2,x"], "expected --input-shape"),
        (["--input-shape", "0,3,8,8"], "positive integers"),
        (["--input-shape", "1000,1000,1000,1000"], f"at most {MAX_INPUT_ELEMENTS:,} elements"),
        (["--json", "/no/such/folder/cert.json"], "does not exist"),
        (["--json", "."], "it is a folder"),
        (["--graph", "graph.txt"], "expected --graph to end in"),
        (["--verify-budget", "0"], "--verify-budget"),
        (["--baseline"], "--baseline applies to a registry model only"),
    ],
)
def test_usage_errors_are_one_line_before_any_work(
    argv: list[str],
    words: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    BUILT.clear()
    defaults = {"--input-shape": "2,3,8,8", "--group": "translations"}
    for key, value in defaults.items():
        if key not in argv:
            argv = [*argv, key, value]
    assert _check("test_check_cli:exploding_factory", *argv) == EXIT_CODES["usage_error"]
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and err.startswith("groupattn check: error: ")
        and "Traceback" not in err
    )
    assert words in err, err
    assert BUILT == []


def test_model_usage_errors_never_build_the_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import groupattn.models as models

    def fail(*args: Any, **kwargs: Any) -> nn.Module:
        raise AssertionError("the model must not be built")

    monkeypatch.setattr(models, "create", fail)
    usage = EXIT_CODES["usage_error"]
    assert _check("--model", "no-such-model") == usage
    assert _check("--model", "vit", "--group", "so3") == usage
    assert _check("--model", "vit", "--input-shape", "9999,3,999,999") == usage
    assert _check("--model", "vit", "--input-shape", "2,3,32,32") == usage  # vit reads 1x32x32
    assert _check("--model", "vit", "--json", "/no/such/folder/x.json") == usage
    assert _check("--model", "vit", "test_check_cli:good_factory") == usage
    assert _check() == usage
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 7 and all(line.startswith("groupattn check: error: ") for line in err)
    assert "expected --input-shape B,1,32,32 for --model vit" in err[3]


def test_a_model_rejecting_the_input_shape_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _check(
        "test_check_cli:patch_embedding", "--input-shape", "2,3,6,6", "--group", "translations"
    )
    assert code == EXIT_CODES["usage_error"]
    err = capsys.readouterr().err
    assert (
        "the model rejects --input-shape 2,3,6,6" in err
        and "PatchEmbedding" in err
        and err.count("\n") == 1
    )


def test_unwritable_json_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import groupattn._atomic as atomic

    locked = tmp_path / "locked"
    locked.mkdir()
    real_create = atomic._create_temporary

    def refuse_in_locked(folder: Path, name: str) -> tuple[int, Path | None]:
        # what a read-only folder does for any user but root (root may write anywhere)
        if Path(folder) == locked:
            raise PermissionError(13, "Permission denied")
        return real_create(folder, name)

    monkeypatch.setattr(atomic, "_create_temporary", refuse_in_locked)
    BUILT.clear()
    code = _check("test_check_cli:exploding_factory", *SHAPE, "--json", str(locked / "cert.json"))
    assert code == EXIT_CODES["usage_error"] and BUILT == []
    err = capsys.readouterr().err
    assert "cannot create a file in the folder" in err and err.count("\n") == 1


def test_an_expensive_numerical_check_is_refused_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        _check("test_check_cli:good_factory", *SHAPE, "--verify-budget", "1e-9")
        == EXIT_CODES["usage_error"]
    )
    err = capsys.readouterr().err
    assert "over --verify-budget" in err and "--no-verify" in err and err.count("\n") == 1
    assert DEFAULT_VERIFY_BUDGET_S > 0


def test_argparse_errors_are_one_line_with_the_usage_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        _check("--no-such-flag")
    assert info.value.code == EXIT_CODES["usage_error"]
    assert capsys.readouterr().err.count("\n") == 1


def test_exit_codes_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _check("--help")
    assert info.value.code == 0
    help_text = capsys.readouterr().out
    page = (HERE.parent / "docs" / "tutorials" / "checker.md").read_text()
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)
    for status, code in EXIT_CODES.items():
        assert f"  {code}  {status}" in help_text
        assert f"| {code} | `{status}` |" in page


def test_exit_codes_as_a_process() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    broken = subprocess.run(
        [
            sys.executable,
            "-m",
            "groupattn.cli",
            "check",
            "test_check_cli:broken_factory",
            *SHAPE,
            "--no-verify",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert broken.returncode == EXIT_CODES["broken"], broken.stderr[-2000:]
    assert "status: broken (exit 3)" in broken.stdout
