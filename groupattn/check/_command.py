"""``groupattn check``: certify (and optionally verify) a registered model or a factory.

Exit code 0 when certified equivariant or invariant, 1 when broken, 2 when unverified
or on a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

import torch

from ..groups import GROUP_NAMES, group_from_name

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand to the ``groupattn`` parser."""
    p = subparsers.add_parser(
        "check",
        help="certify a network from its parts' contracts (exit 0 certified, 1 broken, 2 unverified)",
        description=__doc__,
    )
    p.add_argument("factory", nargs="?", help="MODULE:FACTORY, a function returning the model (no arguments)")
    p.add_argument("--model", help="a registered model name (groupattn.models.list_models())")
    p.add_argument("--baseline", action="store_true", help="check the model's non-equivariant baseline")
    p.add_argument("--input-shape", help="B,C,H,W (default for --model: 2 and the model's input shape)")
    p.add_argument("--group", choices=GROUP_NAMES, help="the acting group (default for --model: the model's)")
    p.add_argument("--verify", action="store_true", help="also measure equivariance numerically in float64")
    p.add_argument("--json", metavar="FILE", help="write the certificate as JSON")
    p.add_argument("--graph", metavar="FILE", help="write the graph (.dot, .png, .svg or .pdf)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random example input")
    p.set_defaults(func=run)


def _usage(message: str) -> int:
    print(f"groupattn check: error: {message}", file=sys.stderr)
    return 2


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.replace("x", ",").split(",") if s.strip())
    except ValueError as err:
        raise ValueError(f"expected --input-shape as B,C,H,W integers, got {text!r}") from err
    if len(shape) < 2 or any(s < 1 for s in shape):
        raise ValueError(f"expected --input-shape as B,C,H,W positive integers, got {text!r}")
    return shape


def run(args: argparse.Namespace) -> int:
    """Run ``groupattn check`` with parsed arguments; returns the exit code."""
    from ._certify import certify

    if bool(args.model) == bool(args.factory):
        return _usage("give exactly one of --model NAME or MODULE:FACTORY")
    group_name = args.group
    shape: tuple[int, ...] | None = None
    try:
        if args.input_shape:
            shape = _parse_shape(args.input_shape)
        if args.model:
            from ..models import create, get_spec

            try:
                spec = get_spec(args.model)
            except KeyError as err:
                return _usage(str(err).strip('"'))
            model = create(args.model, equivariant=not args.baseline)
            shape = shape or (2, *spec.input_shape)
            group_name = group_name or spec.group
        else:
            if args.baseline:
                return _usage("--baseline applies to --model only")
            module_name, _, attr = args.factory.partition(":")
            if not module_name or not attr:
                return _usage(f"expected MODULE:FACTORY, got {args.factory!r}")
            try:
                factory = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as err:
                return _usage(f"cannot import {args.factory!r}: {err}")
            model = factory()
        if shape is None:
            return _usage("--input-shape is required with MODULE:FACTORY")
        if group_name is None:
            return _usage("--group is required with MODULE:FACTORY")
        group = group_from_name(group_name, shape)
    except ValueError as err:
        return _usage(str(err))
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(*shape, generator=generator)
    try:
        cert = certify(model, x, group, verify=args.verify)
    except ValueError as err:
        return _usage(str(err))
    try:
        from rich.console import Console

        Console().print(cert.to_rich())
        print(cert.summary())
    except ImportError:  # pragma: no cover
        print(cert.to_text())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(cert.to_json(), fh, indent=2)
    if args.graph:
        try:
            cert.save_graph(args.graph)
        except ValueError as err:
            return _usage(str(err))
    return cert.exit_code
