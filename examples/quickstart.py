"""Quickstart: build an equivariant model, certify it, verify it.

1. build the shift-equivariant ViT and its ordinary baseline from the model registry;
2. certify both with the checker (a verdict from the declared contracts of the parts,
   before any training) — the baseline's first break is named, with the reason;
3. verify both numerically: shift the input, compare the logits.

Run: ``python examples/quickstart.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch

from groupattn.check import certify, verify
from groupattn.groups import TorusTranslations
from groupattn.models import create, get_spec


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="test fewer shifts")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    spec = get_spec("vit")
    print(f"{spec.name}: {spec.description} (group: {spec.group})")
    model = create("vit")  # equivariant=True is the default
    baseline = create("vit", equivariant=False)
    x = torch.rand(2, *spec.input_shape)  # a batch of two 1x32x32 images
    group = TorusTranslations(32, 32)  # every circular shift of a 32x32 image
    shifts = (
        [(1, 0), (0, 3), (7, 13)]
        if args.quick
        else [(1, 0), (0, 1), (3, 5), (7, 13), (16, 16), (31, 2)]
    )

    errors: dict[str, float] = {}
    for name, network in [("equivariant ViT", model), ("baseline ViT", baseline)]:
        certificate = certify(network, x, group)
        print(f"\n== {name}")
        print(certificate.summary())
        report = verify(network, x, group, shifts)
        errors[name] = report.max_error
        print(
            f"measured: max relative change of the logits under {len(shifts)} shifts = {report.max_error:.1e}"
        )

    # by hand: a circular shift of the input leaves the equivariant model's logits unchanged
    shifted = torch.roll(x, shifts=(5, -3), dims=(-2, -1))
    with torch.no_grad():
        model.eval()
        same = torch.allclose(model(shifted), model(x), rtol=1e-5, atol=1e-6)
    print(f"\nmodel(shifted image) == model(image): {same}")
    return errors


if __name__ == "__main__":
    main()
