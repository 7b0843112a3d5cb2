"""The JSON the three commands write follows the schemas on the reference page."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from torch import nn

from groupattn.cli import main

SCHEMAS = Path(__file__).resolve().parents[1] / "groupattn" / "schemas"


def schema(name: str) -> dict[str, object]:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())  # type: ignore[no-any-return]


def validate(name: str, path: Path) -> dict[str, object]:
    """Validate the file at ``path`` against ``name``'s schema, refusing NaN and infinity."""

    def refuse(text: str) -> None:
        raise ValueError(f"invalid JSON constant {text}")

    data = json.loads(path.read_text(), parse_constant=refuse)
    jsonschema.validate(data, schema(name), cls=jsonschema.Draft202012Validator)
    return data  # type: ignore[no-any-return]


def crashing_model() -> nn.Module:
    """A model whose forward pass raises (a runtime error of ``check``)."""

    class Crashing(nn.Module):
        def forward(self, x: object) -> object:
            raise RuntimeError("boom")

    return Crashing()


@pytest.mark.parametrize("name", ["check", "train", "demo"])
def test_schemas_are_valid_json_schema(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema(name))


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--model", "vit"], "certified"),
        (["--model", "vit", "--no-verify"], "certified"),
        (["--model", "vit", "--baseline"], "broken"),
        (
            [
                "--model",
                "test_json_schemas:crashing_model",
                "--group",
                "translations",
                "--input-shape",
                "1,1,8,8",
            ],
            "runtime_error",
        ),
    ],
    ids=["certified", "no-verify", "broken", "crash"],
)
def test_check_output_follows_its_schema(tmp_path: Path, argv: list[str], status: str) -> None:
    out = tmp_path / "cert.json"
    main(["check", *argv, "--json", str(out)])
    assert validate("check", out)["status"] == status


def test_train_output_follows_its_schema(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    assert (
        main(["train", "--model", "vit", "--epochs", "1", "--limit", "32", "--json", str(out)]) == 0
    )
    data = validate("train", out)
    assert data["history"] and data["equivariance"] is not None


def test_the_schemas_reject_what_they_should() -> None:
    bad_train = {
        "model": "m",
        "data": "d",
        "resumed_from": None,
        "history": [{"epoch": 1, "loss": "NaN", "train_accuracy": 0.5}],
        "evaluation": {},
        "constant_prediction": False,
        "equivariance": None,
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_train, schema("train"), cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError, match="'error' is a required property"):
        jsonschema.validate(
            {"status": "runtime_error", "exit_code": 1},
            schema("check"),
            cls=jsonschema.Draft202012Validator,
        )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"status": "certified", "exit_code": 0},
            schema("check"),
            cls=jsonschema.Draft202012Validator,
        )
