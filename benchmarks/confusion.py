"""Which classes an invariant model confuses that its baseline does not.

Run: ``.venv/bin/python benchmarks/confusion.py --model group_vit --data mnist`` (about 8
minutes on one thread). Trains the registry model and its baseline exactly as
``benchmarks/results.py`` does (same data, seed, epochs, learning rate), then counts the
confusion matrix of each on the clean test set and the errors between the pairs of
digits that a quarter or half turn makes alike (6 ↔ 9, 4 ↔ 7, 2 ↔ 7, 3 ↔ 6 …): an exactly
rotation-invariant classifier cannot use the orientation that separates them on upright
digits. Writes ``--out`` (JSON) with both matrices.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from groupattn._atomic import write_atomic
from groupattn.models import get_spec
from groupattn.training import TrainConfig, load_training_data, train
from groupattn.training._command import build_model, data_canvas, data_model_kwargs


def confusion(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``(10, 10)`` counts: row = true class, column = predicted class."""
    model.eval()
    with torch.no_grad():
        predicted = torch.cat(
            [model(images[i : i + 256]).argmax(-1) for i in range(0, len(images), 256)]
        )
    matrix = torch.zeros(10, 10, dtype=torch.long)
    matrix.index_put_((labels, predicted), torch.ones_like(labels), accumulate=True)
    return matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="group_vit")
    parser.add_argument("--data", default="mnist")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    record: dict[str, object] = {"model": args.model, "data": args.data, "epochs": args.epochs}
    matrices = {}
    for baseline in (False, True):
        data = load_training_data(
            args.data, seed=args.seed, canvas=data_canvas(args.data, [args.model])
        )
        built = build_model(
            args.model, baseline, args.seed, None, **data_model_kwargs(args.model, data, {})
        )
        config = TrainConfig(
            epochs=args.epochs,
            batch_size=32,
            seed=args.seed,
            progress=False,
            **get_spec(args.model).training_settings(),
        )
        model = train(built.model, data, config).model
        matrix = confusion(model, data.test_images, data.test_labels)
        variant = "baseline" if baseline else "equivariant"
        matrices[variant] = matrix
        record[variant] = {
            "accuracy": float(matrix.diag().sum() / matrix.sum()),
            "errors": int(matrix.sum() - matrix.diag().sum()),
            "confusion": matrix.tolist(),
        }
    extra = (matrices["equivariant"] - matrices["baseline"]).clamp(min=0)
    extra.fill_diagonal_(0)
    pairs = sorted(
        ((int(extra[a, b] + extra[b, a]), a, b) for a in range(10) for b in range(a + 1, 10)),
        reverse=True,
    )
    record["extra_errors_by_pair"] = [
        {"pair": f"{a}<->{b}", "extra_errors": n} for n, a, b in pairs if n > 0
    ]
    for variant in ("equivariant", "baseline"):
        entry = record[variant]
        assert isinstance(entry, dict)
        print(f"{variant}: accuracy {100 * entry['accuracy']:.1f} %, {entry['errors']} errors")
    print("errors the equivariant model makes beyond the baseline's, by pair of classes:")
    for n, a, b in pairs[:8]:
        print(f"  {a} <-> {b}: {n}")
    if args.out:
        write_atomic(args.out, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
