"""Every example runs (quick mode) and shows what it claims."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"


def _run(name: str) -> Any:
    """Load ``examples/<name>.py`` as a module and call its ``main(["--quick"])``."""
    module = runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"example_{name}")
    return module["main"](["--quick"])


def test_every_example_is_tested() -> None:
    tested = {
        "quickstart",
        "custom_group",
        "vit_digits",
        "gsa_rotated_digits",
        "checker_catches_broken",
        "set_transformer",
        "graph_attention",
        "hexagonal_grid",
        "periodic_sequence",
        "product_group",
        "value_stream",
        "dense_group_swin",
    }
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


def test_quickstart_runs_as_a_script() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verdict: invariant" in done.stdout
    assert "verdict: broken" in done.stdout and "first break: patch_embed" in done.stdout
    assert "model(shifted image) == model(image): True" in done.stdout


def test_quickstart_numbers() -> None:
    errors = _run("quickstart")
    assert errors["equivariant ViT"] <= 1e-10
    assert errors["baseline ViT"] > 1e-4


def test_custom_group(capsys: pytest.CaptureFixture[str]) -> None:
    errors = _run("custom_group")
    assert errors["orbital"] <= 1e-10
    assert errors["per_pair"] > 1e-3
    assert "orbitals (4)" in capsys.readouterr().out


def _split(errors: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(invariant-bias errors, pairwise / plain baseline errors)."""
    broken = {k: v for k, v in errors.items() if k.endswith(("pairwise", "plain"))}
    return {k: v for k, v in errors.items() if k not in broken}, broken


def test_set_transformer(capsys: pytest.CaptureFixture[str]) -> None:
    good, broken = _split(_run("set_transformer"))
    assert set(good) == {"S10", "S10 pooled", "S50", "S50 pooled"}
    assert max(good.values()) <= 1e-10 and min(broken.values()) > 1e-3
    assert capsys.readouterr().out.count("2 orbitals on pairs") == 2


def test_graph_attention(capsys: pytest.CaptureFixture[str]) -> None:
    good, broken = _split(_run("graph_attention"))
    assert len(good) == 4 and len(broken) == 2
    assert max(good.values()) <= 1e-10 and min(broken.values()) > 1e-3
    out = capsys.readouterr().out
    assert (
        "|Aut| = 120, 3 orbitals" in out
        and "over all 120 automorphisms" in out
        and "|Aut| = 8" in out
    )


def test_hexagonal_grid(capsys: pytest.CaptureFixture[str]) -> None:
    good, broken = _split(_run("hexagonal_grid"))
    assert set(good) == {"C6 7 cells", "D6 7 cells", "C6 19 cells", "D6 19 cells"}
    assert max(good.values()) <= 1e-10 and min(broken.values()) > 1e-3
    out = capsys.readouterr().out
    assert "C6 on  7 cells: order  6" in out and "D6 on 19 cells: order 12" in out


def test_periodic_sequence() -> None:
    errors = _run("periodic_sequence")
    assert errors["orbital"] <= 1e-10 and errors["pairwise"] > 1e-3
    assert errors["same_as_circulant"] == 1.0


def test_product_group(capsys: pytest.CaptureFixture[str]) -> None:
    errors = _run("product_group")
    assert errors["orbital"] <= 1e-10 and errors["pairwise"] > 1e-3
    assert "20 orbitals on pairs" in capsys.readouterr().out


def test_value_stream() -> None:
    good, broken = _split(_run("value_stream"))
    assert set(good) == {"C6 orientations", "D6 directions"}
    assert max(good.values()) <= 1e-10 and min(broken.values()) > 1e-3


def test_checker_catches_broken(capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = _run("checker_catches_broken")
    assert verdicts == {
        "conv positional encoding": "invariant",
        "absolute positional encoding": "broken",
        "residual across an anchoring": "broken",
    }
    out = capsys.readouterr().out
    assert "first break: position" in out and "position-dependent constant" in out
    assert "different frames" in out


def test_vit_digits() -> None:
    results = _run("vit_digits")
    equivariant, baseline = results["shift-equivariant ViT"], results["baseline ViT"]
    assert equivariant["shift_consistency"] == 1.0
    assert equivariant["equivariance_error"] <= 1e-10
    assert baseline["equivariance_error"] > 1e-4


def test_gsa_rotated_digits() -> None:
    results = _run("gsa_rotated_digits")
    (baseline_name, baseline), (name, equivariant) = results.items()
    assert "baseline" in baseline_name and "p4" in name
    assert equivariant["rotation_consistency"] == 1.0
    assert equivariant["equivariance_error"] <= 1e-10
    assert baseline["equivariance_error"] > 1e-8


def test_dense_group_swin() -> None:
    results = _run("dense_group_swin")
    (name, equivariant), (baseline_name, baseline) = results.items()
    assert "D4" in name and "baseline" in baseline_name
    assert equivariant["equivariance_error"] <= 1e-10
    assert equivariant["certified"] == 1.0
    assert baseline["equivariance_error"] > 1e-4
    assert baseline["certified"] == 0.0
