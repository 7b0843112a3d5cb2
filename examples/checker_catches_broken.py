"""The checker catches a broken model and names the culprit.

Three small classifiers are built from the library's parts:

1. a shift-invariant one: anchored patch embedding, convolutional positional
   encoding, attention with a circulant bias, mean pooling;
2. the same with an *absolute* positional encoding — a classic mistake: the checker
   reports the encoding as the first break, with the reason;
3. a residual connection across an anchoring, ``x + f(anchor(x))`` — the two operands
   live in different frames, and the checker names the addition.

Each verdict is confirmed numerically with :func:`groupattn.check.verify`.

Run: ``python examples/checker_catches_broken.py [--quick]``
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from groupattn.attention import GlobalSelfAttention, MeanPooling
from groupattn.canonical import PolyphaseAnchor
from groupattn.check import certify, verify
from groupattn.groups import TorusTranslations
from groupattn.nn import PatchEmbedding
from groupattn.positional import AbsolutePositionalEncoding, ConvPositionalEncoding


class TinyClassifier(nn.Module):
    """Patch embedding → positional encoding → attention → mean pooling → linear head."""

    def __init__(self, positional: str = "conv", dim: int = 16, size: int = 16) -> None:
        super().__init__()
        self.embed = PatchEmbedding(1, dim, patch_size=4, image_size=(size, size), anchored=True)
        grid = self.embed.grid
        if positional == "absolute":
            self.position: nn.Module = AbsolutePositionalEncoding(dim, grid)
        else:
            self.position = ConvPositionalEncoding(dim, grid)
        self.attention = GlobalSelfAttention(dim, num_heads=2, grid=grid, bias="circulant")
        self.pool = MeanPooling(grid)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.position(self.embed(x))
        tokens = tokens + self.attention(tokens)
        return self.head(self.pool(tokens))


class FrameMixing(nn.Module):
    """``relu(x + f(anchor(x)))``: adds a tensor in the anchoring's frame to one in the input's frame.

    (Without the ReLU, mean pooling would average the misalignment away.)
    """

    def __init__(self) -> None:
        super().__init__()
        self.anchor = PolyphaseAnchor(stride=4)
        self.conv = nn.Conv2d(1, 1, 3, padding=1, padding_mode="circular")
        self.head = nn.Linear(1, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        anchored = self.anchor(x).output
        mixed = torch.relu(x + self.conv(anchored))
        return self.head(mixed.mean(dim=(-2, -1)))


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer group elements in the numerical check"
    )
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    x = torch.rand(2, 1, 16, 16)
    group = TorusTranslations(16, 16)
    elements = [(1, 0), (0, 3), (5, 7)] if args.quick else None
    verdicts: dict[str, str] = {}
    for name, model in [
        ("conv positional encoding", TinyClassifier("conv")),
        ("absolute positional encoding", TinyClassifier("absolute")),
        ("residual across an anchoring", FrameMixing()),
    ]:
        certificate = certify(model, x, group)
        report = verify(model, x, group, elements)
        verdicts[name] = certificate.verdict.value
        print(f"== {name}: {certificate.verdict.value}; measured max error {report.max_error:.1e}")
        if certificate.first_break is not None:
            info = certificate.first_break
            print(f"   first break: {info.node} ({info.target})")
            print(f"   reason:      {info.reason}")
            print(f"   path:        {' -> '.join(info.path)}")
        # the checker is sound: it never certifies what the numbers show is broken
        assert certificate.certified == (report.max_error <= 1e-10), name
    return verdicts


if __name__ == "__main__":
    main()
