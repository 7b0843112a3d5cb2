"""The ``groupattn train`` command."""

from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..groups import group_from_name
from ._data import TrainingData, load_training_data
from ._distributed import setup_distributed, teardown_distributed
from ._equivariance import EquivarianceCheck, check_classifier
from ._metrics import Evaluation, evaluate
from ._trainer import TrainConfig, train

__all__ = ["BuiltModel", "build_model", "register"]


@dataclass
class BuiltModel:
    """A model built from a ``--model`` argument.

    Attributes
    ----------
    model
        The module.
    label
        Display name, e.g. ``"vit (equivariant)"``.
    group
        The group name it should be invariant to (``None`` if unknown).
    """

    model: nn.Module
    label: str
    group: str | None


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_model_args(items: list[str] | None) -> dict[str, Any]:
    """``["depth=2", "dim=32"]`` → ``{"depth": 2, "dim": 32}`` (values parsed as JSON if they can be)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"groupattn train: expected --model-arg KEY=VALUE, got {item!r}")
        out[key] = _parse_value(value)
    return out


def build_model(
    spec: str, baseline: bool = False, seed: int = 0, group: str | None = None, **kwargs: Any
) -> BuiltModel:
    """Build the model named by ``--model``: a registry name or ``MODULE:FACTORY``.

    Parameters
    ----------
    spec
        A name from :func:`groupattn.models.list_models` (built with
        ``equivariant=not baseline``), or ``package.module:function`` returning a module.
    baseline
        Build the registry model's non-equivariant baseline.
    seed
        Seeds PyTorch before construction, so every rank builds identical weights.
    group
        The group to check against; defaults to the registry model's group.
    kwargs
        Passed to the registry's ``create`` or to the factory.
    """
    torch.manual_seed(seed)
    if ":" in spec:
        module_name, _, factory_name = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), factory_name)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"groupattn train: expected --model MODULE:FACTORY to exist, got {spec!r} ({error})") from error
        model = factory(**kwargs)
        if not isinstance(model, nn.Module):
            raise ValueError(f"groupattn train: expected {spec} to return a torch.nn.Module, got {type(model).__name__}")
        return BuiltModel(model, spec, group)
    from ..models import create, get_spec, list_models

    if spec not in list_models():
        raise ValueError(f"groupattn train: expected --model to be one of {list_models()} or MODULE:FACTORY, got {spec!r}")
    model = create(spec, equivariant=not baseline, **kwargs)
    label = f"{spec} ({'baseline' if baseline else 'equivariant'})"
    return BuiltModel(model, label, group or get_spec(spec).group)


def _format_summary(
    label: str, data: TrainingData, epochs: int, seconds: float, evaluation: Evaluation,
    check: EquivarianceCheck | None, max_shift: int,
) -> str:
    lines = [
        f"{label} on {data.name}: {data.train_images.shape[0]} train / {data.test_images.shape[0]} test "
        f"images, {epochs} epochs, {seconds:.1f} s",
        f"  test accuracy          {100 * evaluation.accuracy:6.2f}%",
        f"  shifted accuracy       {100 * evaluation.shifted_accuracy:6.2f}%   (random circular shifts up to ±{max_shift} px)",
        f"  shift consistency      {100 * evaluation.shift_consistency:6.2f}%",
        f"  rotated accuracy       {100 * evaluation.rotated_accuracy:6.2f}%   (mean over 0°, 90°, 180°, 270°)",
        f"  rotation consistency   {100 * evaluation.rotation_consistency:6.2f}%",
    ]
    if check is not None:
        lines.append(
            f"  equivariance error     {check.max_error:.2e}  (logits under {check.group}, "
            f"{check.num_elements} elements, worst {check.worst_element})"
        )
    return "\n".join(lines)


def _learning_rate(args: argparse.Namespace) -> float:
    """``--lr`` if given, else the registry model's recommended rate, else 5e-3."""
    if args.lr is not None:
        return float(args.lr)
    if ":" not in args.model:
        from ..models import get_spec, list_models

        if args.model in list_models():
            return get_spec(args.model).learning_rate
    return 5e-3


def _digits_canvas(model: str) -> int:
    """The canvas of the bundled digits for ``model``: its registry input side, else 32."""
    if ":" not in model:
        from ..models import get_spec, list_models

        if model in list_models():
            return int(get_spec(model).input_shape[-1])
    return 32


def _run(args: argparse.Namespace) -> int:
    context = setup_distributed(args.device)
    try:
        data = load_training_data(args.data, limit=args.limit, seed=args.seed, canvas=_digits_canvas(args.model))
        built = build_model(args.model, args.baseline, args.seed, args.group, **parse_model_args(args.model_arg))
        config = TrainConfig(
            epochs=args.epochs, batch_size=args.batch_size, lr=_learning_rate(args), seed=args.seed,
            device=args.device, checkpoint=args.checkpoint, resume=args.resume,
            progress=not args.no_progress,
        )
        if context.is_main:
            print(
                f"training {built.label}: {sum(p.numel() for p in built.model.parameters()):,} parameters, "
                f"{context.world_size} process(es) on {context.device}",
                flush=True,
            )
        result = train(built.model, data, config, context)
        if not context.is_main:
            return 0
        model = result.model
        evaluation = evaluate(model, data.test_images, data.test_labels, max_shift=args.max_shift, seed=args.seed)
        check = None
        if built.group is not None:
            group = group_from_name(built.group, data.input_shape)
            check = check_classifier(model, data.test_images[:4], group)
        print(_format_summary(built.label, data, len(result.history), result.seconds, evaluation, check, args.max_shift))
        if args.json:
            payload = {
                "model": built.label,
                "history": result.history,
                "evaluation": evaluation.as_dict(),
                "equivariance": None if check is None else check.__dict__,
            }
            with open(args.json, "w") as fh:
                json.dump(payload, fh, indent=2)
        return 0
    finally:
        teardown_distributed(context)


def register(subparsers: Any) -> None:
    """Add ``groupattn train`` to the command's subparsers."""
    p = subparsers.add_parser(
        "train",
        help="train a model on the digits or an image folder (also under torchrun)",
        description="Train a registry model (or MODULE:FACTORY) deterministically; run under "
        "`torchrun --nproc_per_node=N -m groupattn.cli train ...` for data-parallel training.",
    )
    p.add_argument("--model", required=True, help="registry name (see groupattn.models.list_models) or MODULE:FACTORY")
    p.add_argument("--baseline", action="store_true", help="train the registry model's non-equivariant baseline")
    p.add_argument("--model-arg", action="append", metavar="KEY=VALUE", help="keyword argument for the model (repeatable)")
    p.add_argument("--group", default=None, help="group for the final check (default: the registry model's group)")
    p.add_argument("--data", default="digits", help="'digits' or an ImageFolder-style directory")
    p.add_argument("--limit", type=int, default=None, help="use only this many training samples")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="global batch size (split across processes)")
    p.add_argument(
        "--lr", type=float, default=None,
        help="peak learning rate (AdamW, cosine schedule); default: the registry model's, else 5e-3",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--checkpoint", default=None, help="checkpoint file written after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--max-shift", type=int, default=8, help="largest random shift of the consistency metric")
    p.add_argument("--json", default=None, help="write the summary as JSON to this file")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=_run)
