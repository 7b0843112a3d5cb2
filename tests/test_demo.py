"""``groupattn demo --quick``: the table, its JSON and its plot.

The consistency assertions hold for untrained models too: an exactly shift-invariant
model predicts the same class for every shift, and a p4-invariant one for every quarter
turn, whatever its weights — so the quick run (one short epoch) can assert them.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from groupattn.cli import main
from groupattn.training._demo import DemoSettings, format_table

EXPECTED_KEYS = {
    "model",
    "variant",
    "label",
    "group",
    "accuracy",
    "shifted_accuracy",
    "shift_consistency",
    "rotated_accuracy",
    "rotation_consistency",
    "accuracy_by_shift",
    "accuracy_by_rotation",
    "equivariance_error",
    "equivariance_group",
    "verdict",
    "verdict_detail",
    "parameters",
    "train_seconds",
    "train_cpu_seconds",
    "train_size",
    "epochs",
    "predicted_classes",
}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    out = tmp_path_factory.mktemp("demo")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(
            [
                "demo",
                "--quick",
                "--no-progress",
                "--json",
                str(out / "demo.json"),
                "--plot",
                str(out / "demo.png"),
            ]
        )
    assert code == 0
    return json.loads((out / "demo.json").read_text()), buffer.getvalue(), out / "demo.png"


def test_demo_json_structure(demo_run: tuple[dict, str, Path]) -> None:
    results, _, _ = demo_run
    assert results["settings"] == json.loads(json.dumps(DemoSettings.quick().__dict__))
    rows = results["rows"]
    assert [(r["model"], r["variant"]) for r in rows] == [
        ("vit", "baseline"),
        ("vit", "equivariant"),
        ("group_vit", "baseline"),
        ("group_vit", "equivariant"),
    ]
    for row in rows:
        assert set(row) == EXPECTED_KEYS
        for key in (
            "accuracy",
            "shifted_accuracy",
            "shift_consistency",
            "rotated_accuracy",
            "rotation_consistency",
        ):
            assert 0.0 <= row[key] <= 1.0
        assert set(row["accuracy_by_rotation"]) == {"0", "90", "180", "270"}
        assert set(row["accuracy_by_shift"]) == {"0", "8"}
        assert 1 <= row["predicted_classes"] <= 10
    assert all(row["train_size"] == 64 and row["epochs"] == 1 for row in rows)
    assert results["train_size"] == 1348 and results["test_size"] == 16


def test_equivariant_models_are_consistent_and_certified(demo_run: tuple[dict, str, Path]) -> None:
    rows = {(r["model"], r["variant"]): r for r in demo_run[0]["rows"]}
    for name, group in (("vit", "translations"), ("group_vit", "c4")):
        equivariant, baseline = rows[(name, "equivariant")], rows[(name, "baseline")]
        assert equivariant["group"] == baseline["group"] == group
        assert equivariant["equivariance_error"] <= 1e-10  # float64 check: rounding only
        assert equivariant["verdict"] in ("invariant", "equivariant")
        assert baseline["equivariance_error"] > 1e-8
        assert baseline["verdict"] == "broken" and baseline["verdict_detail"].startswith(
            "first break at"
        )
    assert rows[("vit", "equivariant")]["shift_consistency"] == 1.0
    assert rows[("group_vit", "equivariant")]["rotation_consistency"] == 1.0
    c4 = rows[("group_vit", "equivariant")]["accuracy_by_rotation"]
    assert len(set(c4.values())) == 1  # identical predictions in all four orientations


def test_demo_prints_one_table(demo_run: tuple[dict, str, Path]) -> None:
    results, stdout, _ = demo_run
    table = format_table(results)
    assert table in stdout
    header = table.splitlines()[0]
    for column in (
        "training",
        "clean acc",
        "shifted acc",
        "shift cons",
        "rotated acc",
        "rot cons",
        "max equiv err",
        "checker",
    ):
        assert column in header
    assert len(table.splitlines()) == 2 + len(results["rows"])
    markdown = format_table(results, markdown=True)
    assert markdown.startswith("| model |") and markdown.count("\n") == 1 + len(results["rows"])


def test_demo_writes_a_png(demo_run: tuple[dict, str, Path]) -> None:
    png = demo_run[2]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_demo_rejects_unknown_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick", "--models", "no_such_model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("groupattn demo: error: expected models from")
