"""The surface a user touches: one-line errors before work, exit codes, output fit for logs, resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from groupattn import __version__
from groupattn._command_line import json_text
from groupattn.cli import main

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def constant_model(**_: object) -> nn.Module:
    """A classifier that predicts class 0 for every input (for the constant-prediction warning)."""

    class Constant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bias = nn.Parameter(
                torch.tensor([5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bias.expand(x.shape[0], 10) + 0.0 * x.mean()

    return Constant()


def failing_model(**_: object) -> nn.Module:
    """A factory whose model crashes in its forward pass (a runtime error, not a user error)."""

    class Failing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ZeroDivisionError("the model divided by zero")

    return Failing()


def _run(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    return subprocess.run(
        [sys.executable, "-m", "groupattn", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def test_version_and_python_dash_m() -> None:
    result = _run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"groupattn {__version__}"
    result = _run("groups")
    assert result.returncode == 0 and "p4m" in result.stdout


# ---------------------------------------------------------------- 1. one line, the documented code, before work
USER_ERRORS = {
    "unknown-group": (["train", "--model", "vit", "--group", "nope"], "--group"),
    "group-not-on-the-grid": (
        ["train", "--model", "vit", "--group", "c8", "--limit", "8"],
        "--group",
    ),
    "group-not-on-the-grid-check": (["check", "--model", "vit", "--group", "c5"], "--group"),
    "json-folder-missing": (
        ["train", "--model", "vit", "--json", "/nonexistent/x.json"],
        "/nonexistent",
    ),
    "lr-inf": (["train", "--model", "vit", "--lr", "inf"], "--lr"),
    "lr-nan": (["train", "--model", "vit", "--lr", "nan"], "--lr"),
    "lr-negative": (["train", "--model", "vit", "--lr", "-1"], "--lr"),
    "unknown-model": (["train", "--model", "nope"], "--model"),
    "factory-missing": (["train", "--model", "no_such_module_xyz:make"], "no_such_module_xyz"),
    "model-arg-malformed": (["train", "--model", "vit", "--model-arg", "depth"], "KEY=VALUE"),
    "model-arg-rejected": (
        ["train", "--model", "vit", "--model-arg", "no_such_argument=3"],
        "no_such_argument",
    ),
    "limit-zero": (["train", "--model", "vit", "--limit", "0"], "--limit"),
    "epochs-negative": (["train", "--model", "vit", "--epochs", "-1"], "--epochs"),
    "batch-zero": (["train", "--model", "vit", "--batch-size", "0"], "--batch-size"),
    "threads-zero": (["train", "--model", "vit", "--threads", "0"], "--threads"),
    "max-memory-junk": (["train", "--model", "vit", "--max-memory", "lots"], "--max-memory"),
    "resume-without-checkpoint": (["train", "--model", "vit", "--resume"], "--checkpoint"),
    "data-missing": (
        ["train", "--model", "vit", "--data", "/nonexistent/folder"],
        "/nonexistent/folder",
    ),
    "demo-unknown-model": (["demo", "--models", "nope"], "nope"),
    "demo-json-folder-missing": (
        ["demo", "--quick", "--json", "/nonexistent/x.json"],
        "/nonexistent",
    ),
    "check-json-folder-missing": (
        ["check", "--model", "vit", "--json", "/nonexistent/c.json"],
        "/nonexistent",
    ),
    "check-unknown-group": (["check", "--model", "vit", "--group", "nope"], "--group"),
}
if not torch.cuda.is_available():
    USER_ERRORS["cuda-absent"] = (["train", "--model", "vit", "--device", "cuda"], "cuda")


@pytest.mark.parametrize("name", sorted(USER_ERRORS))
def test_user_errors_are_one_line_with_code_2_before_any_work(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, mentioned = USER_ERRORS[name]
    started = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusals (types, choices)
        code = int(exit_.code or 0)
    seconds = time.perf_counter() - started
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (code, captured.err)
    assert len(lines) == 1 and "error:" in lines[0] and mentioned in lines[0], lines
    assert "Traceback" not in captured.err
    assert (
        "epoch 1/" not in captured.out + captured.err and "training " not in captured.out
    )  # nothing was trained
    assert seconds < 10, seconds


def test_a_crash_is_one_line_with_code_1_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    argv = ["train", "--model", "test_cli_surface:failing_model", "--epochs", "1", "--limit", "8"]
    result = _run(*argv)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "runtime error: ZeroDivisionError: the model divided by zero" in lines[0]
    )
    assert "--debug" in lines[0]
    result = _run(*argv, "--debug")
    assert (
        result.returncode == 1
        and "Traceback" in result.stderr
        and "ZeroDivisionError" in result.stderr
    )


def test_check_exit_codes_are_distinct_from_a_crash() -> None:
    result = _run("check", "--model", "vit", "--baseline", "--no-verify")
    assert result.returncode == 3  # broken, not 1
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- 2. output fit for logs
def test_the_demo_piped_to_a_file_writes_no_progress_bars(tmp_path: Path) -> None:
    result = _run("demo", "--quick", "--json", str(tmp_path / "demo.json"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("\r") < 100
    assert "epoch 1/1: loss" in result.stderr  # a line per epoch instead
    from test_json_schemas import validate

    validate("demo", tmp_path / "demo.json")


def test_the_check_table_is_not_cut_when_piped() -> None:
    result = _run("check", "--model", "swin", "--no-verify")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert "PatchEmbedding" in result.stdout or "patch_embed" in result.stdout


def _refuse_constant(text: str) -> None:
    raise ValueError(f"invalid JSON constant {text}")


def test_json_never_holds_nan_or_infinity() -> None:
    text = json_text(
        {"loss": float("nan"), "history": [{"loss": 1.0}, {"loss": float("inf")}], "ok": 2}
    )
    data = json.loads(text, parse_constant=_refuse_constant)
    assert data["loss"] is None and data["history"][1]["loss"] is None and data["ok"] == 2
    assert data["nonfinite"] == ["loss", "history[1].loss"]
    assert "nonfinite" not in json.loads(json_text({"a": 1.0}))


def test_train_that_diverges_writes_valid_json_and_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    argv = [
        "train",
        "--model",
        "vit",
        "--epochs",
        "1",
        "--limit",
        "64",
        "--batch-size",
        "16",
        "--lr",
        "1e30",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    from test_json_schemas import validate

    data = validate("train", out)
    assert data["history"][0]["loss"] is None and "history[0].loss" in data["nonfinite"]
    printed = capsys.readouterr().out
    assert "diverged" in printed


def test_train_warns_on_constant_predictions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    argv = [
        "train",
        "--model",
        "test_cli_surface:constant_model",
        "--group",
        "translations",
        "--epochs",
        "1",
        "--limit",
        "32",
        "--lr",
        "1e-9",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "(meaningless: one class for every input)" in printed
    assert "predicts one class for every test image" in printed
    assert json.loads(out.read_text())["constant_prediction"] is True


def test_limit_does_what_its_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--model", "vit", "--epochs", "0", "--limit", "30"]) == 0
    assert "30 train / 10 test images" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "a third as many test images" in " ".join(capsys.readouterr().out.split())


def test_threads_option_sets_torch_threads(capsys: pytest.CaptureFixture[str]) -> None:
    before = torch.get_num_threads()
    try:
        assert (
            main(["train", "--model", "vit", "--epochs", "0", "--limit", "8", "--threads", "1"])
            == 0
        )
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- 3. resume that cannot mislead
def test_resume_says_what_it_does_and_refuses_another_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "run.pt"
    base = [
        "train",
        "--model",
        "vit",
        "--limit",
        "32",
        "--batch-size",
        "16",
        "--checkpoint",
        str(ckpt),
    ]
    assert main([*base, "--epochs", "1", "--resume"]) == 0
    assert f"no checkpoint at {ckpt}: starting fresh" in capsys.readouterr().out
    assert main([*base, "--epochs", "2", "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"resuming from {ckpt}: 1 of 2 epochs done" in out and "stretched" in out
    for changed, named in (
        (["--lr", "0.5"], "lr:"),
        (["--seed", "3"], "seed:"),
        (["--model-arg", "depth=1"], "depth"),
        (["--baseline"], "baseline"),
        (["--augment"], "augment"),
    ):
        assert main([*base, "--epochs", "2", "--resume", *changed]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "written by another run" in err[0] and named in err[0], err
    assert (
        main(
            [
                "train",
                "--model",
                "vit",
                "--limit",
                "64",
                "--batch-size",
                "16",
                "--checkpoint",
                str(ckpt),
                "--epochs",
                "2",
                "--resume",
            ]
        )
        == 2
    )
    assert "identity.limit: checkpoint 32, now 64" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]  # no temporary left behind


def test_resume_from_a_corrupt_checkpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "run.pt"
    ckpt.write_bytes(b"PK\x03\x04 truncated")
    assert (
        main(
            [
                "train",
                "--model",
                "vit",
                "--limit",
                "8",
                "--epochs",
                "1",
                "--checkpoint",
                str(ckpt),
                "--resume",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.pt" in err[0] and "truncated or foreign" in err[0]
