"""The results page's sweep (``benchmarks/results.py``): records, resumption, the page."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_script", ROOT / "benchmarks/results.py")
    if spec is None or spec.loader is None:
        raise ImportError("benchmarks/results.py is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_script"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, Path]:
    script = _script()
    out = tmp_path_factory.mktemp("runs")
    code = script.main(
        [
            "run",
            "--data",
            "digits",
            "--models",
            "vit",
            "--epochs",
            "2",
            "--limit",
            "48",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return script, out


def test_each_run_is_recorded_with_its_learning_curve_and_protocols(
    sweep: tuple[ModuleType, Path],
) -> None:
    _, out = sweep
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert {r["baseline"] for r in records} == {True, False}
    for record in records:
        assert record["train_images"] == 48 and record["test_images"] == 16
        assert [h["epoch"] for h in record["history"]] == [1.0, 2.0]
        assert all(0.0 <= h["test_accuracy"] <= 1.0 for h in record["history"])
        # the last point of the curve is the final clean accuracy: same weights, same images
        assert record["history"][-1]["test_accuracy"] == pytest.approx(
            record["evaluation"]["accuracy"], abs=1e-6
        )
        assert set(record["evaluation"]["robustness"]) == {
            "rotation",
            "circular_shift",
            "crop_shift",
        }
        assert record["command"].startswith("groupattn train --model vit")
        assert "--limit 48" in record["command"]
    shifted = {r["baseline"]: r["evaluation"]["robustness"]["circular_shift"] for r in records}
    assert shifted[False]["consistency"] == 1.0  # anchored ViT: exactly shift-invariant


def test_a_recorded_run_is_not_trained_again(sweep: tuple[ModuleType, Path]) -> None:
    script, out = sweep
    path = next(out.glob("*--equivariant--*.json"))
    record = json.loads(path.read_text())
    record["train_cpu_seconds"] = 12345.0
    path.write_text(json.dumps(record))
    again = script.run_one(out, "digits", "vit", False, 0, 2, 48)
    assert again["train_cpu_seconds"] == 12345.0


def test_the_page_tabulates_every_run_and_plots_the_curves(
    sweep: tuple[ModuleType, Path], tmp_path: Path
) -> None:
    script, out = sweep
    page, assets = tmp_path / "results.md", tmp_path / "assets"
    script.write_page(out, page, assets)
    text = page.read_text()
    assert "## digits" in text
    assert "| vit | baseline |" in text and "| vit | equivariant |" in text
    # the params column: each variant's recorded parameter count
    for record in (json.loads(p.read_text()) for p in out.glob("*.json")):
        variant = "baseline" if record["baseline"] else "equivariant"
        assert f"| vit | {variant} | 2 | 0 | {record['parameters']:,} |" in text
    assert "groupattn train --model vit --baseline --data digits" in text
    assert (assets / "results_digits.png").stat().st_size > 1000


def test_unknown_models_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = _script()
    assert script.main(["run", "--models", "nope", "--out", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err
